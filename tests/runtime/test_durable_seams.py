"""The seams durable-execution engines build on: a tool runner every call goes through, an injectable clock
and id factory, events in call order, and `ModelError.retryable`."""

from __future__ import annotations

import itertools
from datetime import datetime, timezone
from typing import Any

import anyio
import pytest

from agentloop import (
    Agent,
    AuthenticationError,
    BadRequestError,
    BadResponseError,
    ModelConnectionError,
    ModelTimeoutError,
    RateLimitError,
    ServerError,
    ToolExecuted,
    ToolExecution,
    ToolExecutionRequest,
    tool,
)
from agentloop.testing import ScriptedChatModel
from tests.runtime_helpers import calls

ran: list[str] = []


@tool
async def fetch(key: str) -> str:
    """Async tool."""
    ran.append(f"fetch:{key}")
    return f"value of {key}"


@tool
def compute(n: int) -> int:
    """Sync tool (worker thread)."""
    ran.append(f"compute:{n}")
    return n * n


def two_calls() -> ScriptedChatModel:
    return ScriptedChatModel([calls(("fetch", {"key": "a"}), ("compute", {"n": 7})), "done"])


@pytest.mark.parametrize("mode", ["chat", "stream"])
async def test_every_call_async_and_sync_goes_through_the_tool_runner(mode: str) -> None:
    ran.clear()
    seen: list[str] = []

    async def runner(request: ToolExecutionRequest, run: Any) -> ToolExecution:
        seen.append(request.name)
        record: ToolExecution = await run()
        return record

    agent = Agent(two_calls(), tools=[fetch, compute], tool_runner=runner)
    if mode == "chat":
        result = await agent.chat("go")
    else:
        stream = agent.stream("go")
        _ = [t async for t in stream]
        result = stream.result
    assert sorted(seen) == ["compute", "fetch"]
    assert sorted(ran) == ["compute:7", "fetch:a"]
    assert [e.result for e in result.tool_executions] == ["value of a", "49"]


async def test_a_runner_that_replays_a_recorded_record_runs_nothing() -> None:
    ran.clear()
    recorded: dict[str, ToolExecution] = {}

    async def recording(request: ToolExecutionRequest, run: Any) -> ToolExecution:
        record: ToolExecution = await run()
        recorded[request.name] = record
        return record

    first = await Agent(two_calls(), tools=[fetch, compute], tool_runner=recording).chat("go")
    ran.clear()

    async def replaying(request: ToolExecutionRequest, run: Any) -> ToolExecution:
        return recorded[request.name]

    again = await Agent(two_calls(), tools=[fetch, compute], tool_runner=replaying).chat("go")
    assert ran == []
    assert again.tool_executions == first.tool_executions


async def test_clock_and_id_factory_make_records_deterministic() -> None:
    ticks = itertools.count()

    def clock() -> datetime:
        return datetime(2026, 1, 1, tzinfo=timezone.utc).replace(microsecond=next(ticks))

    ids = iter(["inv-1", "inv-2"])
    model = ScriptedChatModel([calls(("fetch", {"key": "a"}, "")), "done"])  # no call id: a fresh one
    agent = Agent(model, tools=[fetch], clock=clock, id_factory=lambda: next(ids))
    result = await agent.chat("go")
    assert result.invocation_id == "inv-1"
    (execution,) = result.tool_executions
    assert execution.started_at == datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert execution.finished_at == datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=timezone.utc)
    assert execution.request.id == "call_inv-1_1_0"


async def test_ordered_events_report_tool_executed_in_call_order() -> None:
    second_done: list[anyio.Event] = []

    @tool
    async def first() -> str:
        """Finishes after `second`."""
        await second_done[-1].wait()
        return "first"

    @tool
    async def second() -> str:
        """Finishes at once."""
        second_done[-1].set()
        return "second"

    def model() -> ScriptedChatModel:
        return ScriptedChatModel([calls(("first", {}), ("second", {})), "done"])

    async def executed(agent: Agent) -> list[int]:
        second_done.append(anyio.Event())
        events = [e async for e in agent.stream("go").events() if isinstance(e, ToolExecuted)]
        return [e.index for e in events]

    assert await executed(Agent(model(), tools=[first, second])) == [1, 0]  # completion order
    assert await executed(Agent(model(), tools=[first, second], ordered_events=True)) == [0, 1]


def test_model_errors_say_whether_a_retry_may_succeed() -> None:
    for retryable in (RateLimitError, ServerError, ModelTimeoutError, ModelConnectionError):
        assert retryable("x").retryable is True
    for final in (BadRequestError, AuthenticationError, BadResponseError):
        assert final("x").retryable is False
