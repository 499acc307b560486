"""The seam's three plain hooks, on asyncio and trio, `chat()` and `stream()`:

- `before_tool_call` sees every call in the model's call order before the call's task starts (eagerly while
  the model streams, too), whether it then runs or is denied, whatever order the calls finish in;
- `halt` gives a scope the invocation runs in: cancelling it from another task ends the invocation at once
  with a CANCELLED Result, nothing of the round in flight stored, the memory valid for the next one;
- `on_result` sees the Result last and what it returns is what the caller, `stream.result` and the
  `CompleteResponse` event get; anything but a Result is refused with an error naming the hook;
- the agent's `tool_runner` is the innermost `wrap_tool_call`: every middleware runs around it;
- a middleware's `id_factory` and `clock` attributes give the invocation its id and its records' times (the
  outermost wins; a resumed round keeps its id), and a wrong kind of value is refused naming the attribute;
- what goes wrong is refused cleanly: a halt without a usable scope, one that cannot be entered (run
  control's scope is not left open in the caller's task), a runner with the removed `reserve()`;
- `on_result` sees the background tasks the run started; an agent's middleware replaced by an equal one is
  the one used.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import Any

import anyio
import pytest

from agentloop import (
    Agent,
    CallContext,
    CompleteResponse,
    FinishReason,
    IllegalConfigurationError,
    MessageWindowChatMemory,
    Middleware,
    Result,
    ToolCall,
    ToolExecution,
    ToolExecutionRequest,
    tool,
)
from agentloop.middleware import NextToolCall
from agentloop.testing import ScriptedChatModel
from tests.runtime.test_middleware import invoke, memory_of
from tests.runtime.test_seam_safety import Lingering
from tests.runtime_helpers import assert_valid_for_provider, calls


class Order(Middleware):
    """Logs the plain hooks and the tool calls as they pass."""

    allows_eager_tools = True

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def before_tool_call(self, call: ToolCall) -> None:
        self.log.append(f"before {call.request.id} {call.index}")

    async def wrap_tool_call(self, call: ToolCall, call_next: NextToolCall) -> ToolExecution:
        self.log.append(f"wrap {call.request.id}")
        return await call_next(call)


def slow_and_fast(log: list[str]) -> list[Any]:
    @tool
    async def slow() -> str:
        """Finishes last."""
        await anyio.sleep(0.05)
        log.append("slow ran")
        return "slow"

    @tool
    def fast() -> str:
        """Finishes first."""
        log.append("fast ran")
        return "fast"

    return [slow, fast]


@pytest.mark.parametrize("streaming", [False, True])
async def test_before_tool_call_sees_the_calls_in_call_order_before_any_runs(streaming: bool) -> None:
    log: list[str] = []
    response = calls(("slow", {}, "c1"), ("fast", {}, "c2"), ("slow", {}, "c3"))
    agent = Agent(ScriptedChatModel([response, "done"]), tools=slow_and_fast(log), middleware=[Order(log)])
    result = await invoke(agent, "go", streaming)
    assert result.content == "done"
    befores = [entry for entry in log if entry.startswith("before")]
    assert befores == ["before c1 0", "before c2 1", "before c3 2"]
    for index, call_id in enumerate(("c1", "c2", "c3")):  # taken on before its task reaches wrap_tool_call
        assert log.index(f"before {call_id} {index}") < log.index(f"wrap {call_id}")
    assert log.index("fast ran") < log.index("slow ran")  # they finished in another order


async def test_before_tool_call_sees_an_eager_call_while_the_model_still_streams() -> None:
    log: list[str] = []

    @tool
    async def note(text: str) -> str:
        """Notes a text."""
        log.append(f"ran {text}")
        return "noted"

    response = calls(("note", {"text": "a"}, "n1"), ("note", {"text": "b"}, "n2"))
    agent = Agent(Lingering([response, "ok"]), tools=[note], middleware=[Order(log)])
    async with agent.stream("go") as stream:
        kinds = [type(event).__name__ async for event in stream.events()]
    assert stream.result.content == "ok"
    # The first call's task started before the second call was whole: it was taken on while streaming.
    assert log.index("before n1 0") < log.index("wrap n1") < log.index("before n2 1")
    assert kinds.count("ToolExecuted") == 2


async def test_before_tool_call_sees_calls_that_approval_then_denies() -> None:
    log: list[str] = []

    @tool
    def pay(amount: int) -> str:
        """Pays."""
        log.append("paid")
        return "paid"

    agent = Agent(
        ScriptedChatModel([calls(("pay", {"amount": 5}, "p1")), "Not paid."]),
        tools=[pay],
        middleware=[Order(log)],
        requires_approval=["pay"],
        approval_handler=lambda request: False,
    )
    result = await agent.chat("pay 5")
    assert result.content == "Not paid." and result.tool_executions[0].has_failed
    assert log == ["before p1 0"]  # taken on, then denied before any wrap_tool_call or the tool


class StopButton(Middleware):
    """A `halt` of the user's own: a fresh scope per invocation, pressed from another task."""

    def __init__(self) -> None:
        self.scope: anyio.CancelScope | None = None
        self.reason: str | None = None
        self.asked = 0

    def halt(self, context: CallContext) -> StopButton:
        self.asked += 1
        self.scope = anyio.CancelScope()
        return self

    def press(self, reason: str) -> None:
        assert self.scope is not None
        self.reason = reason
        self.scope.cancel()


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_halt_of_your_own_ends_the_invocation_at_once_and_keeps_memory_valid(streaming: bool) -> None:
    started, finished = anyio.Event(), []
    button = StopButton()

    @tool
    async def wait_forever() -> str:
        """Never finishes on its own."""
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            finished.append("cleaned up")
        return "never"

    model = ScriptedChatModel(
        [calls(("add", {"a": 1, "b": 2}, "a1")), calls(("wait_forever", {}, "w1")), "again"]
    )

    @tool
    def add(a: int, b: int) -> int:
        """Adds."""
        return a + b

    agent = Agent(
        model, tools=[add, wait_forever], middleware=[button], memory=MessageWindowChatMemory.provider(20)
    )
    outcome: dict[str, Any] = {}

    async def run() -> None:
        outcome["result"] = await invoke(agent, "go", streaming, memory_id="m")

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await started.wait()
        button.press("pressed")
    result = outcome["result"]
    assert result.finish_reason is FinishReason.CANCELLED and result.cancel_reason == "pressed"
    assert finished == ["cleaned up"] and button.asked == 1
    stored = await memory_of(agent)
    assert_valid_for_provider(stored)  # the first round is stored, nothing of the one in flight
    assert [e.request.id for e in result.tool_executions] == ["a1"]
    asked = [r.id for m in stored for r in (getattr(m, "tool_execution_requests", None) or ())]
    assert asked == ["a1"]  # the call in flight (w1) was never stored
    again = await invoke(agent, "and now?", streaming, memory_id="m")
    assert again.content == "again" and button.asked == 2  # a fresh scope for the next invocation


class Stamp(Middleware):
    """An `on_result` of the user's own: a copy of the Result with its cancel_reason set (a visible mark)."""

    def __init__(self, answer: Any = None) -> None:
        self.seen: list[Result[Any]] = []
        self.answer = answer

    def on_result(self, result: Result[Any]) -> Any:
        self.seen.append(result)
        if self.answer is not None:
            return self.answer
        return dataclasses.replace(result, cancel_reason="stamped")


@pytest.mark.parametrize("streaming", [False, True])
async def test_on_result_gives_the_result_everyone_sees(streaming: bool) -> None:
    stamp = Stamp()
    agent = Agent(ScriptedChatModel(["hello"]), middleware=[stamp])
    if not streaming:
        result = await agent.chat("hi")
    else:
        async with agent.stream("hi") as stream:
            events = [event async for event in stream.events()]
        result = stream.result
        complete = [event for event in events if isinstance(event, CompleteResponse)]
        assert complete[0].result is result
    assert result.content == "hello" and result.cancel_reason == "stamped"
    assert len(stamp.seen) == 1 and stamp.seen[0].cancel_reason is None


async def test_on_result_must_give_a_result_back() -> None:
    agent = Agent(ScriptedChatModel(["hello"]), middleware=[Stamp(answer="not a result")])
    with pytest.raises(IllegalConfigurationError, match=r"on_result hook \(Stamp.on_result\).*dataclasses"):
        await agent.chat("hi")


async def test_the_tool_runner_is_inside_every_middleware() -> None:
    log: list[str] = []

    async def runner(request: ToolExecutionRequest, run: Any) -> ToolExecution:
        log.append(f"runner {request.arguments}")
        return await run()  # type: ignore[no-any-return]

    class Doubles(Middleware):
        async def wrap_tool_call(self, call: ToolCall, call_next: NextToolCall) -> ToolExecution:
            log.append("middleware")
            request = call.request
            doubled = ToolExecutionRequest(request.id, request.name, '{"a": 2, "b": 4}')
            return await call_next(call.replace(request=doubled))

    @tool
    def add(a: int, b: int) -> int:
        """Adds."""
        return a + b

    agent = Agent(
        ScriptedChatModel([calls(("add", {"a": 1, "b": 2}, "a1")), "6."]),
        tools=[add],
        tool_runner=runner,
        middleware=[Doubles()],
    )
    result = await agent.chat("1+2?")
    assert log == ["middleware", 'runner {"a": 2, "b": 4}']  # the runner got the call as changed
    assert result.tool_executions[0].result == "6"


class Deterministic(Middleware):
    """A durable engine's values: a fixed clock and run ids, given as the middleware's attributes."""

    def __init__(self, run_id: str, when: datetime) -> None:
        self.id_factory = lambda: run_id
        self.clock = lambda: when


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_middleware_gives_the_invocation_its_id_and_its_clock(streaming: bool) -> None:
    when = datetime(2001, 2, 3, 4, 5, 6, tzinfo=timezone.utc)

    @tool
    def add(a: int, b: int) -> int:
        """Adds."""
        return a + b

    agent = Agent(
        ScriptedChatModel([calls(("add", {"a": 1, "b": 2}, "")), "3.", "again"]),
        tools=[add],
        middleware=[Deterministic("run-42", when), Deterministic("inner", datetime.now(timezone.utc))],
    )
    result = await invoke(agent, "1+2?", streaming)
    assert result.invocation_id == "run-42"  # the outermost middleware's id wins
    execution = result.tool_executions[0]
    assert execution.request.id.startswith("call_run-42")  # a fresh call id derives from it
    assert execution.started_at == when and execution.finished_at == when
    plain = await Agent(ScriptedChatModel(["hi"])).chat("hi")
    assert plain.invocation_id != "run-42"  # without such a middleware: the agent's own ids


async def test_a_resumed_round_keeps_the_id_it_paused_with() -> None:
    @tool
    def pay(amount: int) -> str:
        """Pays."""
        return "paid"

    when = datetime(2001, 2, 3, tzinfo=timezone.utc)
    runs = Deterministic("unused", when)
    numbers = iter(range(1, 10))
    runs.id_factory = lambda: f"run-{next(numbers)}"  # a new id each time it is asked
    agent = Agent(
        ScriptedChatModel([calls(("pay", {"amount": 5}, "p1")), "Paid."]),
        tools=[pay],
        requires_approval=["pay"],
        memory=MessageWindowChatMemory.provider(20),
        middleware=[runs],
    )
    paused = await agent.chat("pay 5", memory_id="m")
    assert paused.finish_reason is FinishReason.APPROVAL_REQUIRED and paused.pending is not None
    assert paused.invocation_id == "run-1"
    resumed = await agent.resume(paused.pending, {"p1": True})
    assert resumed.invocation_id == "run-1" and resumed.content == "Paid."
    assert resumed.tool_executions[-1].started_at == when  # the middleware's clock, after the resume too


class BrokenHalt(Middleware):
    """A halt whose scope cannot be had."""

    def halt(self, context: CallContext) -> Any:
        return self

    @property
    def scope(self) -> anyio.CancelScope:
        raise RuntimeError("no scope today")

    reason = None


class NotAScope(Middleware):
    scope = "soon"
    reason = None

    def halt(self, context: CallContext) -> Any:
        return self


async def test_a_halt_without_a_usable_scope_fails_before_anything_runs() -> None:
    with pytest.raises(RuntimeError, match="no scope today"):
        await Agent(ScriptedChatModel(["hi"]), middleware=[BrokenHalt()]).chat("hi")
    with pytest.raises(IllegalConfigurationError, match=r"halt hook \(NotAScope.halt\).*anyio.CancelScope"):
        await Agent(ScriptedChatModel(["hi"]), middleware=[NotAScope()]).chat("hi")


async def test_a_halt_scope_that_cannot_be_entered_leaves_run_controls_scope_closed() -> None:
    busy = anyio.CancelScope()

    class InUse(Middleware):
        reason = None

        def __init__(self) -> None:
            self.scope = busy

        def halt(self, context: CallContext) -> Any:
            return self

    agent = Agent(ScriptedChatModel(["hi"]), middleware=[InUse()])
    # `busy` is entered here already: the invocation cannot enter it (after run control's own scope).
    with busy, pytest.raises(RuntimeError):
        await agent.chat("hi")
    # Leaving `busy` worked: nothing the invocation entered is still open in this task.
    assert (await Agent(ScriptedChatModel(["fine"])).chat("hi")).content == "fine"


async def test_a_tool_runner_with_reserve_is_refused_with_the_way_to_number_steps() -> None:
    class Reserving:
        def reserve(self, request: ToolExecutionRequest) -> None:
            pass

        async def __call__(self, request: ToolExecutionRequest, run: Any) -> ToolExecution:
            return await run()  # type: ignore[no-any-return]

    with pytest.raises(IllegalConfigurationError, match="before_tool_call"):
        Agent(ScriptedChatModel(["hi"]), tool_runner=Reserving())


class Timing(Middleware):
    """A middleware keeping a `clock` attribute for another use (a float clock)."""

    def __init__(self) -> None:
        import time

        self.clock = time.monotonic


class BadIds(Middleware):
    id_factory = staticmethod(lambda: 42)


async def test_a_clock_or_id_factory_that_gives_the_wrong_kind_of_value_is_refused_by_name() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Adds."""
        return a + b

    timed = Agent(
        ScriptedChatModel([calls(("add", {"a": 1, "b": 2})), "3."]), tools=[add], middleware=[Timing()]
    )
    with pytest.raises(IllegalConfigurationError, match=r"Timing.clock\(\) gave .*datetime"):
        await timed.chat("1+2?")
    with pytest.raises(IllegalConfigurationError, match=r"BadIds.id_factory\(\) gave 42"):
        await Agent(ScriptedChatModel(["hi"]), middleware=[BadIds()]).chat("hi")


async def test_on_result_sees_the_background_tasks_the_run_started() -> None:
    seen: list[int] = []

    class Audit(Middleware):
        def on_result(self, result: Result[Any]) -> Result[Any]:
            seen.append(len(result.background_tasks))
            return result

    @tool(background=True)
    async def report() -> str:
        """Writes a report in the background."""
        return "report ready"

    agent = Agent(
        ScriptedChatModel([calls(("report", {}, "r1")), "Started.", "Read it."]),
        tools=[report],
        middleware=[Audit()],
    )
    result = await agent.chat("report please")
    assert len(result.background_tasks) == 1 and seen[0] == 1  # the hook saw what the caller got


async def test_middleware_replaced_by_an_equal_one_is_the_one_used() -> None:
    @dataclasses.dataclass(eq=True)
    class Counts(Middleware):
        calls: int = 0

        async def wrap_invocation(self, call: Any, call_next: Any) -> Any:
            self.calls += 1
            return await call_next(call)

    first = Counts()
    agent = Agent(ScriptedChatModel(["one", "two"]), middleware=[first])
    await agent.chat("a")
    second = Counts(calls=first.calls)  # equal to the first one, yet another object
    agent.middleware = (second,)
    await agent.chat("b")
    assert (first.calls, second.calls) == (1, 2)
