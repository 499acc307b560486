"""examples/multi_worker.py over real HTTP: two uvicorn workers on one real Redis, one conversation
alternating between them, then concurrent requests on it (the example asserts the stored history)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .store_servers import require_redis

ROOT = Path(__file__).resolve().parent.parent


def test_one_conversation_alternates_between_two_workers() -> None:
    require_redis()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("REDIS_URL", None)  # the example starts its own redis-server
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "multi_worker.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "agent: Your name is Ada." in lines[2]  # said to the other worker
    assert lines[0].split()[1] != lines[1].split()[1]  # two different worker processes answered
    assert lines[-1] == "history: 34 messages, every exchange whole and in order"
