"""Reliability, round 2: the loop's guarantees at its edges, on both backends.

* every call of a response yields exactly one execution record, whatever the tool raised (only a
  cancellation of the invocation itself, `KeyboardInterrupt` and `SystemExit` propagate);
* a call starts early only when its arguments are provably whole (interleaved OpenAI deltas);
* a response cut by the output token limit inside a tool call ends the invocation with a clear error and
  stores nothing;
* `aclose()` from another task stops a stream driven by `start()` and waits for the tools' cleanup;
* an agent used as a tool does not share one memory across its callers.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from agentloop import (
    Agent,
    AiMessage,
    ApprovalRequired,
    ChatResponse,
    Denied,
    FinishReason,
    MessageWindowChatMemory,
    ResponseTruncatedError,
    ToolExecuted,
    ToolExecutionRequest,
    UserMessage,
    execute_tool_calls,
    tool,
)
from agentloop.models import OpenAIChatModel
from agentloop.testing import FakeOpenAIServer, ScriptedChatModel
from agentloop.testing._fake_server import Reply, encode_sse
from tests.runtime_helpers import assert_valid_for_provider, calls


async def answer(agent: Agent, message: str, *, streamed: bool) -> Any:
    """One invocation through `stream()` (read to its end) or `chat()`; its Result."""
    if not streamed:
        return await agent.chat(message)
    stream = agent.stream(message)
    async for _ in stream:
        pass
    return stream.result


class ToolsOwnError(BaseException):
    """A BaseException a library might raise out of a tool (not a cancellation of anything)."""


def _raising(error: BaseException) -> Any:
    @tool(name="fails")
    async def fails(x: int) -> int:
        raise error

    return fails


@tool
async def echo(x: int) -> int:
    """Returns x."""
    return x


@pytest.mark.parametrize("mode", ["chat", "stream"])
@pytest.mark.parametrize("error", [asyncio.CancelledError("from a library"), ToolsOwnError("odd")])
async def test_a_tool_raising_a_base_exception_is_that_calls_failure(mode: str, error: BaseException) -> None:
    model = ScriptedChatModel([calls(("fails", {"x": 1}), ("echo", {"x": 2})), "done"])
    memory = MessageWindowChatMemory(50)
    agent = Agent(model, tools=[_raising(error), echo], memory=memory)
    if mode == "chat":
        result = await agent.chat("go")
    else:
        stream = agent.stream("go")
        assert "".join([t async for t in stream]) == "done"
        result = stream.result
    assert result.content == "done"
    assert [e.request.name for e in result.tool_executions] == ["fails", "echo"]
    failed, ok = result.tool_executions
    assert failed.has_failed and failed.is_error
    assert type(error).__name__ in failed.result
    assert ok.result == "2" and not ok.has_failed
    messages = await memory.messages()
    assert_valid_for_provider(messages)
    assert len(messages) == 5  # user, calls, two results, answer
    # The model saw both results on the second request: the conversation stayed valid.
    assert_valid_for_provider(list(model.requests[1].messages))


async def test_a_sync_tool_raising_cancelled_error_in_its_thread_is_a_failure() -> None:
    @tool
    def blocking(x: int) -> int:
        """Raises CancelledError from a worker thread."""
        raise asyncio.CancelledError("worker")

    records = await execute_tool_calls(
        [ToolExecutionRequest("a", "blocking", '{"x": 1}'), ToolExecutionRequest("b", "echo", '{"x": 3}')],
        [blocking, echo],
    )
    assert len(records) == 2
    assert records[0].has_failed and "CancelledError" in records[0].result
    assert records[1].result == "3"


_EXITING_SCRIPT = """
import sys, anyio
from agentloop import Agent, MessageWindowChatMemory, tool
from agentloop.testing import ScriptedChatModel
from tests.runtime_helpers import calls

@tool
async def fails(x: int) -> int:
    sys.exit(3)

@tool
async def echo(x: int) -> int:
    return x

memory = MessageWindowChatMemory(50)

async def main(mode):
    agent = Agent(ScriptedChatModel([calls(("fails", {"x": 1}), ("echo", {"x": 2})), "done"]),
                  tools=[fails, echo], memory=memory)
    try:
        if mode == "chat":
            await agent.chat("go")
        else:
            async for _ in agent.stream("go"):
                pass
    finally:
        print("stored", len(await memory.messages()), flush=True)

anyio.run(main, sys.argv[2], backend=sys.argv[1])
"""


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("mode", ["chat", "stream"])
def test_system_exit_from_a_tool_exits_the_program_as_python_does(backend: str, mode: str) -> None:
    """`sys.exit()` in a tool is not a tool failure: the program exits with its code, on both backends, with
    no internal error of the event loop and nothing of the round stored (asyncio may log the task it stopped,
    as it does for any task that raises SystemExit)."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", _EXITING_SCRIPT, backend, mode],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert done.returncode == 3, done.stderr
    assert "stored 0" in done.stdout
    assert "TrioInternalError" not in done.stderr


async def test_a_real_cancellation_inside_a_tool_still_cancels_the_invocation() -> None:
    started = anyio.Event()
    cleaned = []

    @tool
    async def slow(x: int) -> int:
        """Waits forever."""
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cleaned.append(x)
        return x  # pragma: no cover

    memory = MessageWindowChatMemory(50)
    agent = Agent(ScriptedChatModel([calls(("slow", {"x": 1})), "never"]), tools=[slow], memory=memory)
    async with anyio.create_task_group() as tg:
        tg.start_soon(agent.chat, "go")
        await started.wait()
        tg.cancel_scope.cancel()
    assert cleaned == [1]
    assert await memory.messages() == []


# -- interleaved tool-call deltas --------------------------------------------------------------------------


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return encode_sse(body)


def _call_piece(index: int, arguments: str, call_id: str | None = None, name: str | None = None) -> bytes:
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id is not None:
        call["id"], call["type"], call["function"]["name"] = call_id, "function", name
    return _chunk({"tool_calls": [call]})


async def test_interleaved_openai_tool_call_deltas_run_each_call_with_its_own_arguments() -> None:
    seen: list[tuple[str, str]] = []

    @tool
    async def weather(city: str, unit: str) -> str:
        """Weather of a city."""
        seen.append((city, unit))
        return f"{city}: 20 {unit}"

    interleaved = Reply.sse(
        [
            _chunk({"role": "assistant", "content": None}),
            _call_piece(0, "", "call_a", "weather"),
            _call_piece(1, "", "call_b", "weather"),  # call 1 starts while call 0 has no arguments yet
            _call_piece(0, '{"city": "Par'),
            _call_piece(1, '{"city": "Tok'),
            _call_piece(0, 'is", "unit": "C"}'),
            _call_piece(1, 'yo", "unit": "F"}'),
            _chunk({}, "tool_calls"),
            b"data: [DONE]\n\n",
        ]
    )
    async with FakeOpenAIServer([interleaved, "Both done."]) as server:
        model = OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key="test")
        stream = Agent(model, tools=[weather]).stream("weather?")
        assert "".join([t async for t in stream]) == "Both done."
        await model.aclose()
    assert sorted(seen) == [("Paris", "C"), ("Tokyo", "F")]
    assert [e.result for e in stream.result.tool_executions] == ["Paris: 20 C", "Tokyo: 20 F"]


# -- a response cut by the output token limit ---------------------------------------------------------------


@pytest.mark.parametrize("mode", ["chat", "stream"])
async def test_a_tool_call_cut_by_max_tokens_is_a_clear_error_and_nothing_is_stored(mode: str) -> None:
    ran: list[int] = []

    @tool
    async def book(x: int, note: str) -> str:
        """Books."""
        ran.append(x)
        return "booked"

    cut = AiMessage(
        tool_execution_requests=[
            ToolExecutionRequest("call_1", "book", '{"x": 1, "note": "ok"}'),
            ToolExecutionRequest("call_2", "book", '{"x": 2, "note": "a very long no'),
        ]
    )
    async with FakeOpenAIServer([ChatResponse(cut, finish_reason=FinishReason.LENGTH), "fine"]) as server:
        model = OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key="test", max_retries=0)
        memory = MessageWindowChatMemory(50)
        agent = Agent(model, tools=[book], memory=memory)

        with pytest.raises(ResponseTruncatedError) as caught:
            await answer(agent, "book two", streamed=mode == "stream")
        assert "output token limit" in str(caught.value) and "max_tokens" in str(caught.value)
        assert "#1 'book'" in str(caught.value)
        assert await memory.messages() == []
        # The conversation goes on: the next request is valid (the fake server checks it).
        assert await agent.ask("again") == "fine"
        await model.aclose()
    assert 2 not in ran


# -- aclose() of a stream driven by start() --------------------------------------------------------------


async def test_aclose_from_another_task_stops_a_started_stream_and_waits_for_cleanup() -> None:
    started = anyio.Event()
    cleaned: list[str] = []

    @tool
    async def slow(x: int) -> int:
        """Waits until cancelled."""
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.01)  # cleanup that takes a moment
            cleaned.append("slow")
        return x  # pragma: no cover

    memory = MessageWindowChatMemory(50)
    agent = Agent(ScriptedChatModel([calls(("slow", {"x": 1})), "never"]), tools=[slow], memory=memory)
    stream = agent.stream("go")
    outcome: list[Any] = []

    async def run() -> None:
        outcome.append(await stream.start())

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await started.wait()
        await stream.aclose()
        assert cleaned == ["slow"]  # aclose() returned only after the tool's cleanup
    assert outcome == [None]
    assert stream.done
    assert await memory.messages() == []


async def test_aclose_from_a_callback_of_the_stream_stops_it() -> None:
    model = ScriptedChatModel(["one two three four five six"])
    stream = Agent(model).stream("go")
    pieces: list[str] = []

    async def on_text(text: str) -> None:
        pieces.append(text)
        if len(pieces) == 2:
            await stream.aclose()

    assert await stream.on_partial_response(on_text).start() is None
    assert len(pieces) == 2


# -- agents as tools ----------------------------------------------------------------------------------------


def _sub_agent_model() -> ScriptedChatModel:
    return ScriptedChatModel([lambda request: f"sub saw {len(request.messages)} messages"] * 10)


async def test_an_agent_tool_does_not_share_memory_between_callers() -> None:
    sub_model = _sub_agent_model()
    sub = Agent(sub_model, name="helper", memory=MessageWindowChatMemory.provider(50))

    def parent_model() -> ScriptedChatModel:
        return ScriptedChatModel([calls(("helper", {"request": "secret of alice"})), "ok"])

    outer = Agent(parent_model(), tools=[sub], memory=MessageWindowChatMemory.provider(50))
    await outer.chat("hi", memory_id="alice")
    outer.model = parent_model()
    await outer.chat("hi", memory_id="bob")
    first, second = sub_model.requests
    assert [type(m) for m in second.messages] == [UserMessage]  # bob's call saw nothing of alice's
    assert "secret" not in msgspec.json.encode(list(second.messages[:-1])).decode()
    assert len(first.messages) == len(second.messages) == 1


async def test_an_agent_tool_can_keep_a_sub_conversation_per_caller_memory_id() -> None:
    sub_model = _sub_agent_model()
    sub = Agent(sub_model, name="helper", memory=MessageWindowChatMemory.provider(50))
    tool_ = sub.as_tool(memory_id=lambda ctx: f"{ctx.memory_id}/helper")

    def parent_model() -> ScriptedChatModel:
        return ScriptedChatModel([calls(("helper", {"request": "hello"})), "ok"])

    outer = Agent(parent_model(), tools=[tool_], memory=MessageWindowChatMemory.provider(50))
    for user in ("alice", "bob", "alice"):
        outer.model = parent_model()
        await outer.chat("hi", memory_id=user)
    counts = [len(r.messages) for r in sub_model.requests]
    assert counts == [1, 1, 3]  # alice's second call sees her first exchange, bob's saw none of hers


# -- found by review: siblings of the rules above ----------------------------------------------------------


@pytest.mark.parametrize("streamed", [True, False])
async def test_a_call_cut_before_its_arguments_is_refused_not_run_with_defaults(streamed: bool) -> None:
    """An OpenAI response cut by the token limit right after a call's name: its empty arguments are not
    `{}` (a call without parameters), so the call does not run with its defaults."""
    ran: list[str] = []

    @tool
    async def purge_cache(region: str = "ALL") -> str:
        """Purges the cache of a region (all regions by default)."""
        ran.append(region)
        return "purged"

    call = {"index": 0, "id": "c0", "type": "function", "function": {"name": "purge_cache", "arguments": ""}}
    if streamed:
        reply = Reply.sse(
            [
                _chunk({"role": "assistant", "tool_calls": [call]}),
                _chunk({}, "length"),
                b"data: [DONE]\n\n",
            ]
        )
    else:
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        completion = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4o-mini",
            "choices": [{"index": 0, "message": message, "finish_reason": "length"}],
        }
        reply = Reply.json(completion)
    async with FakeOpenAIServer([reply]) as server:
        model = OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key="test", max_retries=0)
        memory = MessageWindowChatMemory(50)
        agent = Agent(model, tools=[purge_cache], memory=memory)

        with pytest.raises(ResponseTruncatedError, match="0 characters of arguments"):
            await answer(agent, "purge eu", streamed=streamed)
        await model.aclose()
    assert ran == []
    assert await memory.messages() == []


async def test_aclose_before_a_stream_started_means_it_never_runs() -> None:
    model = ScriptedChatModel(["never"])
    started = Agent(model).stream("go")
    await started.aclose()
    assert await started.start() is None
    iterated = Agent(model).stream("go")
    await iterated.aclose()
    assert [t async for t in iterated] == []
    assert model.requests == []


async def test_ordered_events_report_each_call_once_across_a_pause_and_its_resume() -> None:
    @tool
    async def lookup(q: str) -> str:
        """Looks up."""
        return "found " + q

    @tool(requires_approval=True)
    async def pay(n: int) -> str:
        """Pays."""
        return "paid"

    response = calls(("lookup", {"q": "a"}, "c0"), ("pay", {"n": 1}, "c1"), ("lookup", {"q": "b"}, "c2"))
    for ordered in (False, True):
        agent = Agent(ScriptedChatModel([response, "ok"]), tools=[lookup, pay], ordered_events=ordered)
        paused = [e async for e in agent.stream("go").events()]
        pending = next(e for e in paused if isinstance(e, ApprovalRequired)).pending
        resumed = [e async for e in agent.resume_stream(pending, {"c1": True}).events()]

        def reported(events: list[Any]) -> list[str | None]:
            return [e.execution.request.id for e in events if isinstance(e, ToolExecuted)]

        assert sorted(reported(paused) + reported(resumed)) == ["c0", "c1", "c2"]
        assert reported(resumed) == ["c1"]
        if ordered:
            assert reported(paused) == ["c0", "c2"]


async def test_denied_calls_take_their_times_from_the_agents_clock() -> None:
    fixed = datetime(2000, 1, 1, tzinfo=timezone.utc)

    @tool(requires_approval=True)
    async def pay(n: int) -> str:
        """Pays."""
        return "paid"

    agent = Agent(
        ScriptedChatModel([calls(("pay", {"n": 1})), "done"]),
        tools=[pay],
        clock=lambda: fixed,
        approval_handler=lambda request: Denied("no"),
    )
    (denied,) = (await agent.chat("go")).tool_executions
    assert denied.is_error and denied.started_at == denied.finished_at == fixed
