"""examples/serve_workers.py over real HTTP: an A2A agent on two uvicorn workers sharing one real Redis,
called with a2a-sdk's client; the conversation goes on across workers and the model-call limit holds
across them (the example asserts both)."""

from __future__ import annotations

from tests.store_servers import run_redis_example


def test_an_a2a_agent_on_two_workers_shares_memory_and_limits() -> None:
    lines = run_redis_example("serve_workers.py")
    assert lines[0].startswith("worker A: Message 1 of this conversation")
    assert lines[1].startswith("worker B: Message 2 of this conversation")
    assert lines[0].split("(worker ")[1] != lines[1].split("(worker ")[1]  # two worker processes answered
    assert lines[2] == "12 concurrent conversations on 2 workers: at most 2 model calls ran at once"
