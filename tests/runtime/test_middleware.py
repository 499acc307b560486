"""The seam: middleware around model calls, tool calls and invocations, and the built-ins.

Every test runs on asyncio and trio (tests/conftest.py), through `chat()` and, where it matters, `stream()`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from agentloop import (
    Agent,
    AiMessage,
    BeforeToolExecution,
    ChatRequest,
    ChatResponse,
    IllegalConfigurationError,
    InvocationCall,
    MessageWindowChatMemory,
    Middleware,
    ModelCall,
    ModelRetry,
    SystemMessage,
    ToolCall,
    ToolChoice,
    ToolExecuted,
    ToolExecution,
    ToolExecutionRequest,
    ToolRetrying,
    UserMessage,
    tool,
)
from agentloop._values._events import PartialResponse
from agentloop.middleware import (
    GuardrailTripped,
    InputGuardrail,
    OutputGuardrail,
    ToolRetry,
    UsageLimitExceeded,
    UsageLimits,
)
from agentloop.models import ModelEvent, ResponseComplete, TextDelta, ToolCallComplete
from agentloop.testing import ScriptedChatModel
from tests.runtime_helpers import assert_valid_for_provider, calls


class Recorder(Middleware):
    """Logs each hook it passes, under its name."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    async def wrap_invocation(self, call: InvocationCall, call_next: Any) -> Any:
        self.log.append(f"{self.name}:invocation")
        return await call_next(call)

    async def wrap_model_call(self, call: ModelCall, call_next: Any) -> ChatResponse:
        self.log.append(f"{self.name}:model{call.round}")
        return await call_next(call)

    async def wrap_tool_call(self, call: ToolCall, call_next: Any) -> ToolExecution:
        self.log.append(f"{self.name}:tool:{call.request.name}")
        return await call_next(call)


@tool
def add(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b


async def invoke(agent: Agent, message: str, streaming: bool, **options: Any) -> Any:
    """`chat()`, or `stream()` consumed to its end: the Result either way."""
    if not streaming:
        return await agent.chat(message, **options)
    async with agent.stream(message, **options) as stream:
        async for _ in stream:
            pass
        return stream.result


async def memory_of(agent: Agent, memory_id: Any = "m") -> list[Any]:
    memory = agent._memory_for(memory_id)
    assert memory is not None
    return await memory.messages()


@pytest.mark.parametrize("streaming", [False, True])
async def test_hooks_run_outermost_first_agent_then_call(streaming: bool) -> None:
    log: list[str] = []
    model = ScriptedChatModel([calls(("add", {"a": 1, "b": 2})), "3."])
    agent = Agent(model, tools=[add], middleware=[Recorder("outer", log), Recorder("inner", log)])
    extra = [Recorder("call", log)]
    if streaming:
        async with agent.stream("1+2?", middleware=extra) as stream:
            text = "".join([piece async for piece in stream])
        assert text == "3."
    else:
        assert (await agent.chat("1+2?", middleware=extra)).content == "3."
    assert log == [
        "outer:invocation", "inner:invocation", "call:invocation",
        "outer:model0", "inner:model0", "call:model0",
        "outer:tool:add", "inner:tool:add", "call:tool:add",
        "outer:model1", "inner:model1", "call:model1",
    ]  # fmt: skip


async def test_text_deltas_reach_the_consumer_one_by_one_through_middleware() -> None:
    plain = Agent(ScriptedChatModel(["one two three four"]))
    wrapped = Agent(ScriptedChatModel(["one two three four"]), middleware=[Recorder("r", [])])
    async with plain.stream("go") as stream:
        expected = [piece async for piece in stream]
    async with wrapped.stream("go") as stream:
        got = [piece async for piece in stream]
    assert got == expected and len(got) == 4


class Cache(Middleware):
    """Answers from a cache without calling the model."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    async def wrap_model_call(self, call: ModelCall, call_next: Any) -> ChatResponse:
        return ChatResponse(AiMessage(self.answer))


async def test_a_short_circuited_model_call_streams_as_one_delta() -> None:
    model = ScriptedChatModel([])  # any call would fail: the script is empty
    agent = Agent(model, middleware=[Cache("from the cache")], memory=MessageWindowChatMemory.provider(10))
    async with agent.stream("hi", memory_id="m") as stream:
        events = [event async for event in stream.events()]
    assert [e.text for e in events if isinstance(e, PartialResponse)] == ["from the cache"]
    assert await memory_of(agent) == [UserMessage("hi"), AiMessage("from the cache")]
    assert (await agent.chat("again", memory_id="m")).content == "from the cache"


class Redact(Middleware):
    """Changes the call: every request gets one more system message; tool arguments are rewritten."""

    async def wrap_model_call(self, call: ModelCall, call_next: Any) -> ChatResponse:
        messages = (SystemMessage("Never say secrets."), *call.request.messages)
        return await call_next(
            call.replace(request=call.request.__class__(messages, call.request.tool_specifications))
        )

    async def wrap_tool_call(self, call: ToolCall, call_next: Any) -> ToolExecution:
        request = call.request.__class__(call.request.id, call.request.name, '{"a": 40, "b": 2}')
        return await call_next(call.replace(request=request))


async def test_a_middleware_may_change_the_call() -> None:
    seen: list[Any] = []

    def answer(request: Any) -> Any:
        seen.append(request.messages[0])
        return calls(("add", {"a": 1, "b": 1})) if len(seen) == 1 else "done"

    agent = Agent(ScriptedChatModel([answer, answer]), tools=[add], middleware=[Redact()])
    result = await agent.chat("add")
    assert seen == [SystemMessage("Never say secrets.")] * 2
    assert result.tool_executions[0].result == "42"


class Barrier:
    def __init__(self, n: int) -> None:
        self.n = n
        self.arrived = 0
        self.event = anyio.Event()

    async def wait(self) -> None:
        self.arrived += 1
        if self.arrived == self.n:
            self.event.set()
        await self.event.wait()


@pytest.mark.parametrize("streaming", [False, True])
async def test_one_responses_tool_calls_stay_concurrent_through_middleware(streaming: bool) -> None:
    barrier = Barrier(3)

    @tool
    async def meet(name: str) -> str:
        """Waits until all three calls arrived: only concurrent calls can finish."""
        await barrier.wait()
        return f"met {name}"

    response = calls(("meet", {"name": "a"}), ("meet", {"name": "b"}), ("meet", {"name": "c"}))
    agent = Agent(ScriptedChatModel([response, "all met"]), tools=[meet], middleware=[Recorder("r", [])])
    with anyio.fail_after(10):
        result = await invoke(agent, "meet", streaming)
    assert [e.result for e in result.tool_executions] == ["met a", "met b", "met c"]


class WaitsForTheTool:
    """A model whose stream ends only once the tool it asked for has started: only an eager start lets the
    invocation finish."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.calls = 0

    async def chat(self, request: ChatRequest) -> ChatResponse:
        raise AssertionError("streamed only")

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        self.calls += 1
        if self.calls > 1:
            yield TextDelta("3")
            yield ResponseComplete(ChatResponse(AiMessage("3")))
            return
        call = ToolExecutionRequest("c1", "starts", "{}")
        yield ToolCallComplete(0, call)
        with anyio.fail_after(5):
            await self.started.wait()
        yield ResponseComplete(ChatResponse(AiMessage(None, [call])))


class Watching(Recorder):
    """A recorder that declares it never changes a response: tool calls may start while the model streams."""

    allows_eager_tools = True


async def test_tool_calls_start_while_the_response_streams_through_middleware() -> None:
    model = WaitsForTheTool()

    @tool
    async def starts() -> str:
        """Tells the model it started."""
        model.started.set()
        return "started"

    agent = Agent(model, tools=[starts], middleware=[Watching("r", [])])
    async with agent.stream("go") as stream:
        text = "".join([piece async for piece in stream])
    assert text == "3" and stream.result.tool_executions[0].result == "started"


async def test_bad_middleware_is_a_configuration_error() -> None:
    with pytest.raises(IllegalConfigurationError, match=r"is not an agentloop\.Middleware"):
        Agent(ScriptedChatModel([]), middleware=[object()])  # type: ignore[list-item]
    agent = Agent(ScriptedChatModel(["x"]))
    with pytest.raises(IllegalConfigurationError, match="middleware must be a list"):
        await agent.chat("hi", middleware="nope")  # type: ignore[arg-type]


# -- UsageLimits -----------------------------------------------------------------------------------------


async def test_usage_limits_stop_at_the_request_limit_with_no_half_round() -> None:
    model = ScriptedChatModel([calls(("add", {"a": 1, "b": 2})), "never"])
    memory = MessageWindowChatMemory.provider(20)
    agent = Agent(model, tools=[add], memory=memory, middleware=[UsageLimits(max_requests=1)])
    with pytest.raises(UsageLimitExceeded, match=r"max_requests=1 exceeded.*request #2") as info:
        await agent.chat("1+2?", memory_id="m")
    assert (info.value.limit, info.value.value, info.value.used) == ("max_requests", 1, 2)
    stored = await memory_of(agent)
    assert_valid_for_provider(stored)
    assert len(stored) == 3  # the whole first round (question, call, result); nothing of the second
    assert model.remaining == 1  # the second request was never made


@pytest.mark.parametrize("streaming", [False, True])
async def test_usage_limits_stop_before_a_tool_call_past_the_limit(streaming: bool) -> None:
    ran: list[int] = []

    @tool
    def record(n: int) -> int:
        """Records n."""
        ran.append(n)
        return n

    two = calls(("record", {"n": 1}), ("record", {"n": 2}))
    agent = Agent(
        ScriptedChatModel([two, "done"]),
        tools=[record],
        memory=MessageWindowChatMemory.provider(20),
        middleware=[UsageLimits(max_tool_calls=1)],
        max_concurrent_tools=1,
    )
    with pytest.raises(UsageLimitExceeded, match="max_tool_calls=1") as info:
        await invoke(agent, "go", streaming, memory_id="m")
    assert info.value.used == 2 and len(ran) <= 1
    assert await memory_of(agent) == []  # the round was not committed


async def test_usage_limits_on_tokens_and_per_invocation_counts() -> None:
    limits = UsageLimits(max_total_tokens=10_000, max_output_tokens=3)
    agent = Agent(ScriptedChatModel(["short", "a much longer answer than three tokens"]), middleware=[limits])
    assert (await agent.chat("one")).content == "short"  # counts start afresh per invocation
    with pytest.raises(UsageLimitExceeded, match="max_output_tokens=3") as info:
        await agent.chat("two")
    assert info.value.used > 3
    with pytest.raises(IllegalConfigurationError, match="max_requests"):
        UsageLimits(max_requests=-1)


# -- guardrails ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [False, True])
async def test_an_input_guardrail_stops_before_anything_runs(streaming: bool) -> None:
    model = ScriptedChatModel(["never"])

    async def mentions_password(text: str) -> str | None:
        return "asks for a password" if "password" in text else None

    guard = InputGuardrail(mentions_password)
    agent = Agent(model, memory=MessageWindowChatMemory.provider(10), middleware=[guard])
    with pytest.raises(GuardrailTripped, match=r"mentions_password.*asks for a password") as info:
        await invoke(agent, "what is the admin password?", streaming, memory_id="m")
    assert (info.value.guardrail, info.value.value) == ("mentions_password", "asks for a password")
    assert model.remaining == 1 and await memory_of(agent) == []
    assert (await agent.chat("hello", memory_id="m")).content == "never"


async def test_an_output_guardrail_keeps_the_answer_out_of_memory() -> None:
    agent = Agent(
        ScriptedChatModel(["Hi.", "The secret is 42."]),
        memory=MessageWindowChatMemory.provider(10),
        middleware=[OutputGuardrail(lambda text: "secret" in text, name="no-secrets")],
    )
    await agent.chat("hello", memory_id="m")
    with pytest.raises(GuardrailTripped, match="'no-secrets' tripped on the model's answer"):
        await agent.chat("tell me", memory_id="m")
    assert await memory_of(agent) == [UserMessage("hello"), AiMessage("Hi.")]


@pytest.mark.parametrize(
    ("hold", "seen"),
    [
        ("answer", ""),
        ("sentence", "Hello there. Fine day."),  # each sentence once the text up to it passed
        (16, "Hello there. Fine day. The admin password"),  # released in pieces of 16 characters or more
        (None, "Hello there. Fine day. The admin password is hunter2."),
    ],
)
async def test_a_streamed_answer_is_held_until_the_output_guardrail_checked_it(hold: Any, seen: str) -> None:
    """The consumer never receives text the guardrail blocks (hold=None: the old way, it may)."""
    answer = "Hello there. Fine day. The admin password is hunter2. Bye."
    agent = Agent(
        ScriptedChatModel([answer, "Hi. All fine."]),
        memory=MessageWindowChatMemory.provider(10),
        middleware=[OutputGuardrail(lambda text: "hunter2" in text, name="no-secrets", hold=hold)],
    )
    received: list[str] = []

    async def consume() -> None:
        async with agent.stream("password?", memory_id="m") as stream:
            async for piece in stream:
                received.append(piece)

    with pytest.raises(GuardrailTripped, match="no-secrets"):
        await consume()
    text = "".join(received)
    if hold is None:
        assert "hunter2" in text
    else:
        assert text == seen and "hunter2" not in text
    assert await memory_of(agent) == []
    async with agent.stream("hi", memory_id="m") as stream:  # an answer that passes streams whole
        assert "".join([piece async for piece in stream]) == "Hi. All fine."
    with pytest.raises(IllegalConfigurationError, match="hold="):
        OutputGuardrail(bool, hold="paragraph")


class City(BaseModel):
    name: str


async def test_an_output_guardrail_sees_a_structured_output_call() -> None:
    answer = AiMessage(None, [calls(("final_result", {"name": "Atlantis"})).tool_execution_requests[0]])
    agent = Agent(
        ScriptedChatModel([answer]),
        output_type=City,
        middleware=[OutputGuardrail(lambda text: "Atlantis" in text, name="real-places")],
    )
    with pytest.raises(GuardrailTripped, match="output call 'final_result'"):
        await agent.chat("a city")


async def test_an_output_guardrail_checks_output_calls_by_what_they_are_not_by_name() -> None:
    """A function tool whose name starts like the output tool's is a function call: not checked."""

    @tool("Looks up a stored final result")
    def final_result_lookup(key: str) -> str:
        return "Atlantis is a myth"

    lookup = calls(("final_result_lookup", {"key": "Atlantis"})).tool_execution_requests[0]
    output = calls(("final_result", {"name": "Paris"})).tool_execution_requests[0]
    seen: list[str] = []

    def real_places(text: str) -> bool:
        seen.append(text)
        return "Atlantis" in text

    agent = Agent(
        ScriptedChatModel([AiMessage(None, [lookup]), AiMessage(None, [output])]),
        tools=[final_result_lookup],
        output_type=City,
        middleware=[OutputGuardrail(real_places, name="real-places")],
    )
    assert (await agent.chat("a city")).output == City(name="Paris")
    assert seen == [output.arguments]  # the lookup's arguments were never taken for an output
    renamed = Agent(  # another output tool name: still known by what it is
        ScriptedChatModel(
            [AiMessage(None, [calls(("answer", {"name": "Atlantis"})).tool_execution_requests[0]])]
        ),
        output_type=City,
        output_tool_name="answer",
        middleware=[OutputGuardrail(real_places, name="real-places")],
    )
    with pytest.raises(GuardrailTripped, match="output call 'answer'"):
        await renamed.chat("a city")


# -- ToolRetry -------------------------------------------------------------------------------------------


def retrying_agent(attempts: list[int]) -> Agent:
    """An agent whose model calls `flaky` once; `flaky` fails twice (noting each attempt), then works."""

    @tool
    def flaky() -> str:
        """Fails twice, then works."""
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("try again")
        return "ok"

    model = ScriptedChatModel([calls(("flaky", {})), "done"])
    return Agent(model, tools=[flaky], middleware=[ToolRetry(wait=0)])


async def test_tool_retry_runs_a_failed_call_again() -> None:
    attempts: list[int] = []
    agent = retrying_agent(attempts)
    result = await agent.chat("go")
    assert result.tool_executions[0].result == "ok" and len(attempts) == 3


async def test_a_retried_call_is_started_once_and_its_attempts_are_events_of_their_own() -> None:
    attempts: list[int] = []
    agent = retrying_agent(attempts)
    started: list[BeforeToolExecution] = []
    retried: list[ToolRetrying] = []
    async with agent.stream("go") as stream:
        stream.before_tool_execution(started.append).on_tool_retrying(retried.append)
        events = [event async for event in stream.events()]
    kinds = [
        type(e).__name__ for e in events if isinstance(e, (BeforeToolExecution, ToolRetrying, ToolExecuted))
    ]
    assert kinds == ["BeforeToolExecution", "ToolRetrying", "ToolRetrying", "ToolExecuted"]
    assert [(r.index, r.round, r.attempt) for r in retried] == [(0, 1, 2), (0, 1, 3)]
    assert len(started) == 1 and started[0].request == retried[0].request


async def test_tool_retry_gives_up_and_leaves_model_retry_and_bad_arguments_alone() -> None:
    attempts: list[str] = []

    @tool
    def broken(kind: str) -> str:
        """Always fails."""
        attempts.append(kind)
        if kind == "model":
            raise ModelRetry("ask differently")
        raise ValueError("broken")

    response = calls(("broken", {"kind": "value"}), ("broken", {"kind": "model"}), ("broken", {"kind": 5}))
    agent = Agent(
        ScriptedChatModel([response, "done"]),
        tools=[broken],
        middleware=[ToolRetry(max_attempts=2, on=ValueError, wait=0)],
    )
    result = await agent.chat("go")
    assert sorted(attempts) == ["model", "value", "value"]  # bad arguments never ran
    assert [e.has_failed for e in result.tool_executions] == [True, True, True]
    with pytest.raises(IllegalConfigurationError, match="max_attempts"):
        ToolRetry(max_attempts=0)


# -- the built-in features on the seam, outside the user's middleware --------------------------------------


@tool(requires_approval=True)
def wipe(path: str) -> str:
    """Deletes a file."""
    return f"wiped {path}"


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_denied_or_waiting_call_never_reaches_user_middleware(streaming: bool) -> None:
    script = [calls(("add", {"a": 1, "b": 2}), ("wipe", {"path": "/x"})), "done."]
    log: list[str] = []
    denying = Agent(
        ScriptedChatModel(script),
        tools=[add, wipe],
        approval_handler=lambda request: False,
        middleware=[Recorder("user", log)],
    )
    result = await invoke(denying, "go", streaming)
    assert result.content == "done."
    assert [e.request.name for e in result.tool_executions] == ["add", "wipe"]
    assert result.tool_executions[1].has_failed  # denied: its error result, without running
    assert [entry for entry in log if ":tool:" in entry] == ["user:tool:add"]

    log.clear()
    pausing = Agent(
        ScriptedChatModel(script),
        tools=[add, wipe],
        memory=MessageWindowChatMemory.provider(),
        middleware=[Recorder("user", log)],
    )
    paused = await invoke(pausing, "go", streaming, memory_id="m")
    assert paused.pending is not None and [r.tool_name for r in paused.pending.requests] == ["wipe"]
    assert [entry for entry in log if ":tool:" in entry] == ["user:tool:add"]  # the waiting call: not seen
    log.clear()
    resumed = await pausing.resume(paused.pending, {paused.pending.requests[0].call_id: True})
    assert resumed.content == "done."
    # The resumed round: the call that had finished is kept (not run, not seen again), the approved one runs
    # through the user's middleware.
    assert [entry for entry in log if ":tool:" in entry] == ["user:tool:wipe"]
    assert [e.result for e in resumed.tool_executions] == ["3", "wiped /x"]


async def test_user_model_middleware_sees_the_request_as_structured_output_shaped_it() -> None:
    seen: list[ChatRequest] = []

    class Look(Middleware):
        async def wrap_model_call(self, call: ModelCall, call_next: Any) -> ChatResponse:
            seen.append(call.request)
            return await call_next(call)

    answer = AiMessage(None, [calls(("final_result", {"name": "Paris"})).tool_execution_requests[0]])
    agent = Agent(ScriptedChatModel([answer]), output_type=City, middleware=[Look()])
    result = await agent.chat("a city")
    assert result.output == City(name="Paris")
    assert [r.tool_choice for r in seen] == [ToolChoice.REQUIRED]
    assert [t.name for t in seen[0].tool_specifications] == ["final_result"]


async def test_without_features_or_middleware_the_seam_has_no_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent with no middleware, no approval rule or gated tool and no structured output pays for no
    chain at all (one attribute test per model call and per tool call)."""
    import agentloop._api._agent as agent_module

    seams: list[Any] = []
    original = agent_module.run_invocation

    async def spy(inv: Any, emit: Any) -> Any:
        seams.append(inv.seam)
        return await original(inv, emit)

    monkeypatch.setattr(agent_module, "run_invocation", spy)
    agent = Agent(ScriptedChatModel([calls(("add", {"a": 1, "b": 2})), "3."]), tools=[add])
    assert (await agent.chat("1+2?")).content == "3."
    gated = Agent(ScriptedChatModel(["ok"]), tools=[add, wipe], approval_handler=lambda request: True)
    assert (await gated.chat("hello")).content == "ok"
    plain, with_gate = seams
    assert (plain.model, plain.tool, plain.features_tool, plain.invocation) == (None, None, None, None)
    assert with_gate.features_tool is not None and with_gate.model is None and with_gate.tool is None
