"""The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in tests/mcp_conformance)
against agentloop: its client scenarios drive `MCPToolset` (tests/mcp_conformance_client.py, on asyncio and
on trio), its server scenarios test `python -m agentloop.mcp serve tests.mcp_conformance_server:server`.

tests/mcp_conformance/expected.json says which scenarios pass: each run must match it (a scenario that
starts passing is a change to record there and in docs/mcp.md), and the passes must meet its targets.
The suite runs on the Node 22 of tests/node (shared with the web UI client tests); `.ci/run` installs both.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ui_clients import node_clients

ROOT = Path(__file__).resolve().parents[2]
SUITE_DIR = ROOT / "tests" / "mcp_conformance"
CLI = SUITE_DIR / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
EXPECTED = json.loads((SUITE_DIR / "expected.json").read_text())
CLIENT = ROOT / "tests" / "mcp_conformance_client.py"
SERVER_OBJECT = "tests.mcp_conformance_server:server"
BACKENDS = ("asyncio", "trio")


def suite() -> list[str]:
    """`node <conformance CLI>`, with the pinned suite installed (`npm ci` once if it is not)."""
    node = node_clients()
    with open(SUITE_DIR / "package.json") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one `npm ci` at a time
        if not CLI.exists():
            npm = shutil.which("npm")
            if npm is None:
                pytest.fail("npm is not installed: apt-get install -y nodejs npm (as .ci/run does)")
            subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=SUITE_DIR,
                check=True,
                timeout=600,
            )
    return [str(node), str(CLI)]


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def verdict(done: subprocess.CompletedProcess[str], scenario: str) -> str:
    """ "pass" or "fail", as the suite judged; an error before the suite judged anything fails the test."""
    output = done.stdout + done.stderr
    assert "Test Results" in output or "Checks:" in output, (
        f"the conformance suite did not run scenario {scenario} ({done.returncode}):\n{output[-3000:]}"
    )
    return "pass" if done.returncode == 0 else "fail"


def check(kind: str, scenario: str, result: str, output: str) -> None:
    expected = EXPECTED[kind][scenario]
    assert result == expected, (
        f"{kind} scenario {scenario}: expected {expected}, got {result} (update "
        f"tests/mcp_conformance/expected.json and docs/mcp.md if this is progress)\n{output[-4000:]}"
    )


# -- client scenarios: MCPToolset -------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scenario", sorted(EXPECTED["client"]))
def test_client_scenario(scenario: str, backend: str) -> None:
    env = environment()
    env["AGENTLOOP_ANYIO_BACKEND"] = backend
    command = f"{sys.executable} {CLIENT}"
    done = subprocess.run(
        [*suite(), "client", "--command", command, "--scenario", scenario, "--timeout", "60000"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    check("client", scenario, verdict(done, scenario), done.stdout + done.stderr)


def listed(kind: str) -> set[str]:
    """The suite's scenarios of one kind ("client" or "server"), from `conformance list`."""
    text = subprocess.run(
        [*suite(), "list"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    server, _, client = text.partition("Client scenarios")
    return {
        line.strip()[2:].split(" ")[0]
        for line in (client if kind == "client" else server).splitlines()
        if line.strip().startswith("- ")
    }


def test_the_client_table_lists_every_scenario_of_the_suite_and_meets_the_target() -> None:
    assert listed("client") == set(EXPECTED["client"])
    passing = sum(result == "pass" for result in EXPECTED["client"].values())
    assert passing >= EXPECTED["targets"]["client"]


# -- server scenarios: python -m agentloop.mcp serve ------------------------------------------------------


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    """`python -m agentloop.mcp serve` of the conformance server, on a free port of 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "agentloop.mcp", "serve", SERVER_OBJECT, "--http", f"127.0.0.1:{port}"]
    process = subprocess.Popen(command, cwd=ROOT, env=environment())
    try:
        deadline = time.monotonic() + 30
        while True:  # a child process: nothing to wait on but its port
            assert process.poll() is None, "the conformance server exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the conformance server did not listen within 30 s"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


SERVER_SCENARIOS = sorted(EXPECTED["server"]) or [
    pytest.param("", marks=pytest.mark.skip(reason="no server table yet (tests/mcp_conformance_server.py)"))
]


@pytest.mark.parametrize("scenario", SERVER_SCENARIOS)
def test_server_scenario(scenario: str, served: str) -> None:
    done = subprocess.run(
        [*suite(), "server", "--url", served, "--scenario", scenario],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    check("server", scenario, verdict(done, scenario), done.stdout + done.stderr)


def test_the_server_table_meets_the_target() -> None:
    if not EXPECTED["server"]:
        pytest.skip("no server table yet: the server scenarios land with tests/mcp_conformance_server.py")
    assert listed("server") == set(EXPECTED["server"])
    passing = sum(result == "pass" for result in EXPECTED["server"].values())
    assert passing >= EXPECTED["targets"]["server"]
