"""A real redis-server for the store tests: started on 127.0.0.1 on a free port, stopped after.

Missing redis-server: the tests skip locally with how to install it, and fail in CI (CI=true).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

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
