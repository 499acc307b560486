"""Edges of `stream.cancel()` / `stream.steer()` that tests/features/run_control/test_run_control.py leaves
out: a stream consumed
by callbacks (`start()`), a cancel before the stream starts, an immediate cancel after an after-round one, and
steering with something that is not a user message; asyncio and trio."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentloop import (
    Agent,
    AiMessage,
    FinishReason,
    MessageWindowChatMemory,
    UserMessage,
    tool,
)
from agentloop.testing import FunctionChatModel
from tests.runtime_helpers import assert_valid_for_provider, calls

pytestmark = pytest.mark.anyio


class Gate:
    """A tool that waits until the test lets it go, and records that its cleanup ran."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.release = anyio.Event()
        self.cleaned = 0

        @tool
        async def slow(city: str) -> str:
            """Looks the city up, slowly."""
            try:
                self.entered.set()
                await self.release.wait()
                return f"sunny in {city}"
            finally:
                self.cleaned += 1

        self.tool = slow


def tool_then_answer(messages: list[Any], tools: Any) -> AiMessage:
    """Asks for the slow tool after each user message, answers after each tool result."""
    last = messages[-1]
    if isinstance(last, UserMessage):
        return calls(("slow", {"city": "Paris"}, f"call_{len(messages)}"))
    return AiMessage(f"answered after {len(messages)} messages")


def agent_for(gate: Gate, fn: Any = tool_then_answer) -> Agent[str]:
    return Agent(FunctionChatModel(fn), tools=[gate.tool], memory=MessageWindowChatMemory.provider(50))


async def stored(agent: Agent[Any], memory_id: str) -> list[Any]:
    memory = agent._memory_for(memory_id)
    assert memory is not None
    return await memory.messages()


async def run_stream(stream: Any, *, iterate: bool) -> Any:
    if iterate:
        async for _ in stream:
            pass
        return stream.result
    return await stream.start()


@pytest.mark.parametrize("iterate", [True, False], ids=["async-for", "callbacks"])
async def test_cancel_at_once_commits_nothing_of_the_round_and_runs_cleanup(iterate: bool) -> None:
    gate = Gate()
    agent = agent_for(gate)
    stream = agent.stream("weather?", memory_id="m")
    async with anyio.create_task_group() as tg:

        async def canceller() -> None:
            await gate.entered.wait()
            await stream.cancel(reason="user pressed stop")

        tg.start_soon(canceller)
        result = await run_stream(stream, iterate=iterate)
    assert result.finish_reason is FinishReason.CANCELLED
    assert result.cancel_reason == "user pressed stop"
    assert result.content is None and result.output is None
    assert result.messages == ()
    assert gate.cleaned == 1
    assert await stored(agent, "m") == []  # the user message waits for its first round: none committed
    gate.release.set()
    follow = await agent.chat("again?", memory_id="m")
    assert follow.finish_reason is FinishReason.STOP
    messages = await stored(agent, "m")
    assert_valid_for_provider(messages)
    assert [m.text for m in messages if isinstance(m, UserMessage)] == ["again?"]


async def test_an_immediate_cancel_overrides_an_after_round_one() -> None:
    gate = Gate()
    agent = agent_for(gate)
    stream = agent.stream("weather?", memory_id="m")
    async with anyio.create_task_group() as tg:

        async def canceller() -> None:
            await gate.entered.wait()
            await stream.cancel(after_round=True, reason="first")
            await stream.cancel(reason="now")

        tg.start_soon(canceller)
        result = await run_stream(stream, iterate=True)
    assert (result.finish_reason, result.cancel_reason) == (FinishReason.CANCELLED, "now")
    assert await stored(agent, "m") == []


async def test_cancel_before_the_stream_starts_ends_it_at_once() -> None:
    gate = Gate()
    agent = agent_for(gate)
    stream = agent.stream("weather?", memory_id="m")
    await stream.cancel()
    result = await run_stream(stream, iterate=True)
    assert result.finish_reason is FinishReason.CANCELLED and result.cancel_reason is None
    assert not gate.entered.is_set() and result.tool_executions == []
    assert await stored(agent, "m") == []
    assert result.final_response is not None and result.final_response.finish_reason is FinishReason.CANCELLED


async def test_steer_takes_only_text_or_a_user_message() -> None:
    agent = Agent(FunctionChatModel(lambda messages, tools: "done"))
    stream = agent.stream("hi")
    with pytest.raises(TypeError, match="UserMessage"):
        await stream.steer(AiMessage("not mine"))  # type: ignore[arg-type]
    await stream.aclose()
