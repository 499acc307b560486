"""TokenStream: tokens and typed events of every round, callbacks, eager tools, backpressure, cancellation."""

from __future__ import annotations

import gc
from typing import Any

import anyio
import pytest

from agentloop import (
    Agent,
    AgentLoopError,
    AiMessage,
    BeforeToolExecution,
    ChatRequest,
    ChatResponse,
    CompleteResponse,
    FinishReason,
    IntermediateResponse,
    MessageWindowChatMemory,
    PartialResponse,
    PartialToolCall,
    ToolExecuted,
    ToolExecution,
    ToolRoundsExceededError,
    tool,
)
from agentloop._runtime._stream import BUFFER_SIZE, TEXT_BUFFER_SIZE
from agentloop.models import ResponseComplete, TextDelta
from agentloop.testing import ScriptedChatModel
from tests.runtime_helpers import assert_valid_for_provider, calls


@tool
async def slow(n: int, delay: float) -> int:
    """Sleeps `delay` seconds, then returns `n`."""
    await anyio.sleep(delay)
    return n


def two_round_model(**kwargs: Any) -> ScriptedChatModel:
    return ScriptedChatModel(
        [
            calls(("slow", {"n": 1, "delay": 0.05}), ("slow", {"n": 2, "delay": 0.0}), text="Let me check. "),
            "Both are done: 1 and 2.",
        ],
        **kwargs,
    )


async def test_tokens_of_every_round_and_the_result() -> None:
    stream = Agent(two_round_model(), tools=[slow]).stream("go")
    tokens = [token async for token in stream]
    assert len(tokens) > 5
    assert "".join(tokens) == "Let me check. Both are done: 1 and 2."
    assert stream.result.content == "Both are done: 1 and 2."
    assert [e.result for e in stream.result.tool_executions] == ["1", "2"]


@pytest.mark.parametrize("mode", ["chat", "tokens", "events"])
async def test_a_finished_invocation_is_freed_without_the_garbage_collector(mode: str) -> None:
    """No reference cycle per invocation: a server streaming many requests frees each one at once instead of
    leaving it to (and paying for) the cyclic garbage collector."""
    agent = Agent(two_round_model(), tools=[slow])
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        if mode == "chat":
            result = await agent.chat("go")
        else:
            stream = agent.stream("go")
            items = [item async for item in (stream if mode == "tokens" else stream.events())]
            result = stream.result
            del stream, items
        assert result.content == "Both are done: 1 and 2."
        del result
        gc.collect()
        ours = [o for o in gc.garbage if type(o).__module__.startswith("agentloop")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert not ours, f"left to the garbage collector: {sorted({type(o).__qualname__ for o in ours})}"


async def test_events_order_and_content() -> None:
    events = [event async for event in Agent(two_round_model(), tools=[slow]).stream("go").events()]
    kinds = [type(e).__name__ for e in events]
    assert kinds[-1] == "CompleteResponse"
    assert kinds.count("IntermediateResponse") == 1
    assert kinds.count("BeforeToolExecution") == 2
    executed = [e for e in events if isinstance(e, ToolExecuted)]
    assert [e.index for e in executed] == [1, 0]  # completion order: the 0 s call finishes first
    assert all(e.round == 1 for e in executed)
    # Every event of round 1's tools precedes the first text of the next model call.
    first_round1_text = next(
        i for i, e in enumerate(events) if isinstance(e, PartialResponse) and e.round == 1
    )
    assert max(i for i, e in enumerate(events) if isinstance(e, ToolExecuted)) < first_round1_text
    # A call's pieces precede its BeforeToolExecution.
    for before in (e for e in events if isinstance(e, BeforeToolExecution)):
        position = events.index(before)
        pieces = [
            i for i, e in enumerate(events) if isinstance(e, PartialToolCall) and e.index == before.index
        ]
        assert pieces and max(pieces) < position
    complete = events[-1]
    assert isinstance(complete, CompleteResponse)
    assert complete.result.content == "Both are done: 1 and 2."
    assert complete.token_usage == complete.result.token_usage


async def test_callbacks_and_events_agree() -> None:
    seen: dict[str, list[Any]] = {
        k: [] for k in ["text", "call", "intermediate", "before", "executed", "complete"]
    }

    async def on_executed(execution: ToolExecution) -> None:  # async callbacks work too
        seen["executed"].append(execution.index)

    result = await (
        Agent(two_round_model(), tools=[slow])
        .stream("go")
        .on_partial_response(seen["text"].append)
        .on_partial_tool_call(lambda e: seen["call"].append(e.index))
        .on_intermediate_response(seen["intermediate"].append)
        .before_tool_execution(lambda e: seen["before"].append(e.index))
        .on_tool_executed(on_executed)
        .on_complete_response(seen["complete"].append)
        .start()
    )
    events = [event async for event in Agent(two_round_model(), tools=[slow]).stream("go").events()]
    assert result is not None
    assert "".join(seen["text"]) == "".join(e.text for e in events if isinstance(e, PartialResponse))
    assert seen["call"] == [e.index for e in events if isinstance(e, PartialToolCall)]
    assert len(seen["intermediate"]) == sum(isinstance(e, IntermediateResponse) for e in events)
    assert sorted(seen["before"]) == sorted(e.index for e in events if isinstance(e, BeforeToolExecution))
    assert seen["executed"] == [e.index for e in events if isinstance(e, ToolExecuted)]
    assert seen["complete"] == [result.final_response]


async def test_callback_error_goes_to_on_error_or_propagates() -> None:
    def boom(text: str) -> None:
        raise ValueError("callback failed")

    errors: list[BaseException] = []
    agent = Agent(ScriptedChatModel(["hello world"]), memory=MessageWindowChatMemory(10))
    outcome = await agent.stream("hi").on_partial_response(boom).on_error(errors.append).start()
    assert outcome is None
    assert [str(e) for e in errors] == ["callback failed"]
    assert await agent.memory.messages() == []  # type: ignore[union-attr]

    agent = Agent(ScriptedChatModel(["hello world"]))
    with pytest.raises(ValueError, match="callback failed"):
        await agent.stream("hi").on_partial_response(boom).start()

    ignored = (
        await Agent(ScriptedChatModel(["x"])).stream("hi").on_partial_response(boom).ignore_errors().start()
    )
    assert ignored is None


async def test_stream_is_consumed_once_and_result_needs_the_end() -> None:
    stream = Agent(ScriptedChatModel(["a b c"])).stream("hi")
    with pytest.raises(AgentLoopError, match="not finished"):
        _ = stream.result
    assert [t async for t in stream]
    with pytest.raises(AgentLoopError, match="already consumed"):
        stream.events()
    with pytest.raises(AgentLoopError, match="already consumed"):
        await stream.start()


async def test_round_limit_is_the_same_in_stream_mode() -> None:
    @tool
    def ping() -> str:
        return "pong"

    agent = Agent(ScriptedChatModel([calls(("ping", {}))] * 3), tools=[ping], max_tool_rounds=2)
    with pytest.raises(ToolRoundsExceededError, match="max_tool_rounds=2"):
        async for _ in agent.stream("loop"):
            pass
    chat_agent = Agent(ScriptedChatModel([calls(("ping", {}))] * 3), tools=[ping], max_tool_rounds=2)
    with pytest.raises(ToolRoundsExceededError, match="max_tool_rounds=2"):
        await chat_agent.chat("loop")


async def test_eager_tools_start_while_the_model_still_streams() -> None:
    # The model streams slowly (20 ms per event); the first call is complete long before the response ends.
    text = "Now I will wait for the tools to finish their work, which takes a while to stream out."
    script = [calls(("slow", {"n": 1, "delay": 0.3}), ("slow", {"n": 2, "delay": 0.0}), text=None), text]

    async def run(eager: bool) -> tuple[float, list[Any]]:
        model = ScriptedChatModel(script, delay=0.02)
        agent = Agent(model, tools=[slow], eager_tools=eager)
        start = anyio.current_time()
        events = [e async for e in agent.stream("go").events()]
        return anyio.current_time() - start, events

    eager_time, eager_events = await run(True)
    lazy_time, _ = await run(False)
    intermediate = next(i for i, e in enumerate(eager_events) if isinstance(e, IntermediateResponse))
    first_before = next(i for i, e in enumerate(eager_events) if isinstance(e, BeforeToolExecution))
    assert first_before < intermediate  # the first call started before the response was complete
    assert eager_time < lazy_time - 0.04  # the overlap shows in the wall time


async def test_eager_tools_never_run_twice_or_get_skipped() -> None:
    runs: list[int] = []

    @tool
    def record(n: int) -> int:
        runs.append(n)
        return n

    model = ScriptedChatModel([calls(*[("record", {"n": i}) for i in range(5)]), "done"])
    result = await Agent(model, tools=[record]).stream("go").start()
    assert result is not None
    assert sorted(runs) == [0, 1, 2, 3, 4]
    assert [e.index for e in result.tool_executions] == [0, 1, 2, 3, 4]


class NoCompleteEvents:
    """A provider that never reports complete calls: only deltas and the final response."""

    def __init__(self, inner: ScriptedChatModel) -> None:
        self.inner = inner

    async def chat(self, request: ChatRequest) -> ChatResponse:
        return await self.inner.chat(request)

    async def stream(self, request: ChatRequest) -> Any:
        async for event in self.inner.stream(request):
            if type(event).__name__ != "ToolCallComplete":
                yield event


async def test_calls_run_when_the_provider_never_reports_them_complete() -> None:
    model = NoCompleteEvents(ScriptedChatModel([calls(("slow", {"n": 7, "delay": 0})), "seven"]))
    stream = Agent(model, tools=[slow]).stream("go")
    assert "".join([t async for t in stream]) == "seven"
    assert [e.result for e in stream.result.tool_executions] == ["7"]


class CountingModel:
    """Streams `total` one-token deltas, counting how many it produced."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.produced = 0

    async def chat(self, request: ChatRequest) -> ChatResponse:
        raise NotImplementedError

    async def stream(self, request: ChatRequest) -> Any:
        for _ in range(self.total):
            self.produced += 1
            yield TextDelta("x")
        yield ResponseComplete(ChatResponse(AiMessage("x" * self.total), finish_reason=FinishReason.STOP))


async def test_backpressure_a_slow_consumer_stalls_the_model() -> None:
    model = CountingModel(10_000)
    stream = Agent(model).stream("go")
    iterator = aiter(stream)
    await anext(iterator)
    for _ in range(50):  # give the producer every chance to run ahead
        await anyio.sleep(0)
    # The bounded buffer for text alone (what waits and the batch the consumer took), the token the
    # consumer has and the one the model has in hand.
    assert model.produced <= 2 * TEXT_BUFFER_SIZE + 2
    await stream.aclose()
    assert stream.done


async def test_backpressure_on_events_a_slow_consumer_stalls_the_model_sooner() -> None:
    model = CountingModel(10_000)
    stream = Agent(model).stream("go")
    iterator = aiter(stream.events())
    await anext(iterator)
    for _ in range(50):
        await anyio.sleep(0)
    # Typed events queue at most 2 * BUFFER_SIZE (each is an object the consumer may hold on to).
    assert model.produced <= 2 * BUFFER_SIZE + 2
    await stream.aclose()
    assert stream.done


async def test_a_full_buffer_holds_many_tools_at_once_and_loses_no_event() -> None:
    """100 tools finish together while the consumer is slow: they all wait for room in the bounded buffer,
    and every one of their events arrives, once."""
    model = ScriptedChatModel([calls(*[("slow", {"n": i, "delay": 0}) for i in range(100)]), "done"])
    stream = Agent(model, tools=[slow]).stream("go")
    seen: list[tuple[str, int]] = []
    with anyio.fail_after(10):  # a lost wake-up would hang here
        async for event in stream.events():
            if isinstance(event, (BeforeToolExecution, ToolExecuted)):
                seen.append((type(event).__name__, event.index))
            for _ in range(3):  # a slow consumer: the tools fill the buffer and wait
                await anyio.sleep(0)
    assert sorted(seen) == sorted(
        [("BeforeToolExecution", i) for i in range(100)] + [("ToolExecuted", i) for i in range(100)]
    )
    assert [e.result for e in stream.result.tool_executions] == [str(i) for i in range(100)]
    assert stream.result.content == "done"


class HangingModel:
    """Streams a few tokens, then hangs until cancelled (records that it was closed)."""

    def __init__(self) -> None:
        self.closed = anyio.Event()

    async def chat(self, request: ChatRequest) -> ChatResponse:
        await anyio.sleep_forever()
        raise AssertionError

    async def stream(self, request: ChatRequest) -> Any:
        try:
            yield TextDelta("one ")
            yield TextDelta("two ")
            await anyio.sleep_forever()
        finally:
            self.closed.set()


async def test_breaking_out_cancels_the_model_stream() -> None:
    model = HangingModel()
    memory = MessageWindowChatMemory(10)
    stream = Agent(model, memory=memory).stream("hi")
    async for token in stream:
        assert token == "one "
        break
    gc.collect()
    with anyio.fail_after(2):
        await model.closed.wait()
    assert await memory.messages() == []


async def test_aclose_cancels_running_tools_and_leaves_memory_valid() -> None:
    cancelled = anyio.Event()
    started = anyio.Event()

    @tool
    async def forever() -> str:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        return "never"

    memory = MessageWindowChatMemory(10)
    await memory.add([*(await _previous_exchange())])
    agent = Agent(ScriptedChatModel([calls(("forever", {}))]), tools=[forever], memory=memory)
    async with agent.stream("hi") as stream:
        events = stream.events()
        async for event in events:
            if isinstance(event, BeforeToolExecution):
                break
        with anyio.fail_after(2):
            await started.wait()
    assert cancelled.is_set()
    assert stream.done
    messages = await memory.messages()
    assert_valid_for_provider(messages)
    assert messages == await _previous_exchange()


async def _previous_exchange() -> list[Any]:
    from agentloop import UserMessage

    return [UserMessage("earlier"), AiMessage("earlier answer")]


async def test_cancelling_the_consumer_cancels_everything() -> None:
    model = HangingModel()
    agent = Agent(model)
    with anyio.move_on_after(0.1):
        async for _ in agent.stream("hi"):
            pass
    assert model.closed.is_set()  # closed before the cancellation finished propagating


async def test_next_invocation_on_the_memory_id_works_after_a_cancelled_one() -> None:
    memory = MessageWindowChatMemory.provider(10)
    model = HangingModel()
    agent = Agent(model, memory=memory)
    with anyio.move_on_after(0.05):
        await agent.chat("hi", memory_id="u")
    agent.model = ScriptedChatModel(["hello again"])
    result = await agent.chat("hi again", memory_id="u")
    assert result.content == "hello again"
    assert len(await memory("u").messages()) == 2
