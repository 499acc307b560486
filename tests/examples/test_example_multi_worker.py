"""examples/multi_worker.py over real HTTP: two uvicorn workers on one real Redis, one conversation
alternating between them, then concurrent requests on it (the example asserts the stored history)."""

from __future__ import annotations

from tests.store_servers import run_redis_example


def test_one_conversation_alternates_between_two_workers() -> None:
    lines = run_redis_example("multi_worker.py")
    assert "agent: Your name is Ada." in lines[2]  # said to the other worker
    assert lines[0].split()[1] != lines[1].split()[1]  # two different worker processes answered
    assert lines[-1] == "history: 34 messages, every exchange whole and in order"
