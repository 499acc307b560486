"""`agent.cancel()` reaches an invocation of a real agent running in another process (a worker talking to a
fake OpenAI server over 127.0.0.1) through a shared SQLiteRunControl or RedisRunControl (a real
redis-server); the worker's chat() ends CANCELLED and its next invocation on the memory id works."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import Agent
from agentloop.control import SQLiteRunControl
from agentloop.testing import ScriptedChatModel
from tests.store_servers import redis_server

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_agent_cancel_reaches_an_agent_running_in_another_process(
    kind: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = str(tmp_path / "shared.db") if kind == "sqlite" else request.getfixturevalue("redis_url")
    worker = Path(__file__).with_name("agent_control_worker.py")
    process = subprocess.Popen(
        [sys.executable, str(worker), kind, where, backend],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    try:
        assert process.stdout is not None
        ready = json.loads(process.stdout.readline())
        invocation_id = ready["ready"]

        async def cancel() -> list[bool]:
            from agentloop.control import RedisRunControl

            control: Any = SQLiteRunControl(where) if kind == "sqlite" else RedisRunControl(where)
            agent = Agent(ScriptedChatModel([]), control=control)
            try:
                elsewhere = await agent.cancel(invocation_id="not-running")
                stopped = await agent.cancel(memory_id="erin", reason="pressed Stop")
                return [elsewhere, stopped]
            finally:
                control.close()

        assert anyio.run(cancel, backend=backend) == [False, True]
        first = json.loads(process.stdout.readline())
        assert first == {"finish": "cancelled", "reason": "pressed Stop", "content": None}
        second = json.loads(process.stdout.readline())
        assert second == {"finish": "stop", "reason": None, "content": "The next answer."}
        assert process.wait(20) == 0
        assert invocation_id
    finally:
        process.kill()
        process.wait()
