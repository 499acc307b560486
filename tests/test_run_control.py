"""`stream.cancel()` and `stream.steer()`: a running invocation stopped or handed a message, streamed and not
consumed by iteration or callbacks, with memory (in-memory store), on asyncio and trio."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentloop import (
    Agent,
    AiMessage,
    FinishReason,
    MessageWindowChatMemory,
    RunFinishedError,
    ToolExecutionResultMessage,
    UserMessage,
    tool,
)
from agentloop.testing import FunctionChatModel

from .runtime_helpers import assert_valid_for_provider, calls

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


async def test_cancel_after_round_commits_the_round_in_flight_then_ends() -> None:
    gate = Gate()
    agent = agent_for(gate)
    stream = agent.stream("weather?", memory_id="m")
    async with anyio.create_task_group() as tg:

        async def canceller() -> None:
            await gate.entered.wait()
            await stream.cancel(after_round=True, reason="enough")
            gate.release.set()

        tg.start_soon(canceller)
        result = await run_stream(stream, iterate=True)
    assert result.finish_reason is FinishReason.CANCELLED
    assert result.cancel_reason == "enough"
    assert [e.result for e in result.tool_executions] == ["sunny in Paris"]
    messages = await stored(agent, "m")
    assert messages == list(result.messages)
    assert [type(m).__name__ for m in messages] == ["UserMessage", "AiMessage", "ToolExecutionResultMessage"]
    assert len(agent.model.requests) == 1  # type: ignore[attr-defined]
    follow = await agent.chat("and now?", memory_id="m")
    assert follow.content is not None
    assert_valid_for_provider(await stored(agent, "m"))


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


async def test_steer_reaches_the_next_model_call_committed_in_order() -> None:
    gate = Gate()
    agent = agent_for(gate)
    stream = agent.stream("weather?", memory_id="m")
    async with anyio.create_task_group() as tg:

        async def steerer() -> None:
            await gate.entered.wait()
            await stream.steer("in Celsius please")
            gate.release.set()

        tg.start_soon(steerer)
        result = await run_stream(stream, iterate=False)
    assert result.finish_reason is FinishReason.STOP
    second = agent.model.requests[1].messages  # type: ignore[attr-defined]
    assert isinstance(second[-2], ToolExecutionResultMessage)
    assert second[-1] == UserMessage("in Celsius please")
    messages = await stored(agent, "m")
    assert messages == list(result.messages)
    kinds = [type(m).__name__ for m in messages]
    assert kinds[:3] == ["UserMessage", "AiMessage", "ToolExecutionResultMessage"]
    assert messages[3] == UserMessage("in Celsius please")
    assert_valid_for_provider(messages)


async def test_steer_while_the_answer_streams_calls_the_model_once_more() -> None:
    started = anyio.Event()
    release = anyio.Event()

    async def answer(messages: list[Any], tools: Any) -> str:
        if len(messages) == 1:
            started.set()
            await release.wait()
            return "first answer"
        return f"answer to {messages[-1].text}"

    agent = Agent(FunctionChatModel(answer), memory=MessageWindowChatMemory.provider(50))
    stream = agent.stream("hello", memory_id="m")
    async with anyio.create_task_group() as tg:

        async def steerer() -> None:
            await started.wait()
            await stream.steer(UserMessage("one more thing"))
            release.set()

        tg.start_soon(steerer)
        text = "".join([piece async for piece in stream])
    result = stream.result
    assert result.content == "answer to one more thing"
    assert "first answer" in text and "answer to one more thing" in text
    assert [m.text for m in await stored(agent, "m")] == [
        "hello",
        "first answer",
        "one more thing",
        "answer to one more thing",
    ]
    assert [r.text for r in result.intermediate_responses] == ["first answer"]


async def test_finished_stream_cancel_is_a_no_op_and_steer_raises() -> None:
    agent = Agent(FunctionChatModel(lambda messages, tools: "done"))
    stream = agent.stream("hi")
    result = await run_stream(stream, iterate=True)
    await stream.cancel()
    assert stream.result is result and result.finish_reason is FinishReason.STOP
    with pytest.raises(RunFinishedError, match="has finished"):
        await stream.steer("too late")


async def test_steer_takes_only_text_or_a_user_message() -> None:
    agent = Agent(FunctionChatModel(lambda messages, tools: "done"))
    stream = agent.stream("hi")
    with pytest.raises(TypeError, match="UserMessage"):
        await stream.steer(AiMessage("not mine"))  # type: ignore[arg-type]
    await stream.aclose()
