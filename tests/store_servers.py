"""A real redis-server for the store tests: started on 127.0.0.1 on a free port, stopped after.

Missing redis-server: the tests skip locally with how to install it, and fail in CI (CI=true).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

INSTALL = "install it with: apt-get install -y redis-server (and pip install 'agentloop-runtime[redis]')"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def require_redis() -> str:
    """The redis-server binary, after checking the redis client is importable."""
    binary = shutil.which("redis-server")
    try:
        import redis  # noqa: F401
    except ImportError:
        binary = None
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"redis-server or the redis client is missing in CI; {INSTALL}")
        pytest.skip(f"redis-server or the redis client is missing; {INSTALL}")
    return binary


@contextmanager
def redis_server() -> Iterator[str]:
    """Runs a throwaway redis-server; yields its URL."""
    binary = require_redis()
    port = free_port()
    with tempfile.TemporaryDirectory() as directory:
        process = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=directory,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("redis-server did not start") from None
                    time.sleep(0.02)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            process.terminate()
            process.wait(10)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


def postgres_bin() -> Path | None:
    """The folder of PostgreSQL's server binaries (initdb, pg_ctl), or None when it is not installed."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    return versions[-1] if versions else None


@contextmanager
def postgres_server(bindir: Path, database: str) -> Iterator[str]:
    """A throwaway PostgreSQL cluster on 127.0.0.1 (initdb / pg_ctl in a temp dir, run as the postgres user
    when we are root); yields the URL of `database` on it, and removes the cluster afterwards."""
    root = Path(tempfile.mkdtemp(prefix="agentloop-pg-"))
    data = root / "data"
    user = [] if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--"]
    if user:
        shutil.chown(root, "postgres")
    port = free_port()
    subprocess.run(
        [*user, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            *user,
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            f"-p {port} -k {root} -h 127.0.0.1",
            "-w",
            "start",
            "-l",
            str(root / "log"),
        ],
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/{database}"
    finally:
        subprocess.run(
            [*user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], capture_output=True
        )
        shutil.rmtree(root, ignore_errors=True)


def run_redis_example(name: str) -> list[str]:
    """Runs examples/<name> (which starts its own redis-server) in a fresh interpreter; its output lines.
    Fails with the example's stderr when it exits non-zero."""
    require_redis()
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("REDIS_URL", None)  # the example starts its own redis-server
    done = subprocess.run(
        [sys.executable, str(root / "examples" / name)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()
