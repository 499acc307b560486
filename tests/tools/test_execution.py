"""Running the tool calls of one response: concurrency, order, timeouts, errors, handlers, hallucinations."""

from __future__ import annotations

import contextvars
import threading
import time
from datetime import timezone
from typing import Annotated, Any

import anyio
import pytest

from agentloop import (
    HallucinatedToolError,
    IllegalConfigurationError,
    ReturnBehavior,
    ToolArgumentsError,
    ToolContext,
    ToolExecutionError,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolMemoryId,
    ToolSpecification,
    execute_tool_calls,
    tool,
)
from agentloop._tools._execution import ExecutionOptions, execute_tool_call
from agentloop._tools._toolset import resolve_tools
from agentloop._values._records import ToolExecution


def call(name: str, arguments: str = "{}", id: str | None = None) -> ToolExecutionRequest:
    return ToolExecutionRequest(id or f"call-{name}", name, arguments)


@tool
def add(a: int, b: int) -> int:
    return a + b


@tool
async def echo(text: str) -> str:
    return text


# -- concurrency and order -----------------------------------------------------------------------------------


def _sleepers(sleeps: list[float]) -> tuple[list[Any], list[ToolExecutionRequest]]:
    """Tools sleeping the given times, alternately sync (time.sleep in a thread) and async."""
    tools: list[Any] = []
    for i, seconds in enumerate(sleeps):
        if i % 2 == 0:

            def sync_sleeper(seconds: float = seconds, i: int = i) -> str:
                time.sleep(seconds)
                return f"sync-{i}"

            tools.append(tool(sync_sleeper, name=f"t{i}"))
        else:

            async def async_sleeper(seconds: float = seconds, i: int = i) -> str:
                await anyio.sleep(seconds)
                return f"async-{i}"

            tools.append(tool(async_sleeper, name=f"t{i}"))
    return tools, [call(f"t{i}", id=f"id-{i}") for i in range(len(sleeps))]


async def test_sync_and_async_tools_run_concurrently_and_results_keep_call_order() -> None:
    # Four sync and four async tools of 100-170 ms; the first calls sleep longest, so they finish last.
    sleeps = [0.17, 0.16, 0.15, 0.14, 0.13, 0.12, 0.11, 0.10]
    tools, requests = _sleepers(sleeps)
    completed: list[int] = []
    started = time.perf_counter()
    executions = await execute_tool_calls(requests, tools, on_complete=lambda e: completed.append(e.index))
    elapsed = time.perf_counter() - started

    assert elapsed < 0.3, f"8 tools of >= 100 ms took {elapsed:.3f} s: they did not run concurrently"
    assert [e.index for e in executions] == list(range(8))
    assert [e.request.id for e in executions] == [f"id-{i}" for i in range(8)]
    assert [e.result for e in executions] == [f"{'sync' if i % 2 == 0 else 'async'}-{i}" for i in range(8)]
    assert sorted(completed) == list(range(8))
    assert completed != list(range(8)), "completion order should follow the sleeps, not the call order"
    for execution, seconds in zip(executions, sleeps):
        assert execution.duration >= seconds * 0.9
        assert execution.started_at.tzinfo is timezone.utc
        assert execution.finished_at >= execution.started_at
        assert not execution.is_error


async def test_sync_tools_run_in_worker_threads_and_async_tools_in_the_loop() -> None:
    loop_thread = threading.get_ident()
    threads: dict[str, int] = {}

    @tool
    def in_thread() -> None:
        threads["sync"] = threading.get_ident()

    @tool
    async def in_loop() -> None:
        threads["async"] = threading.get_ident()

    await execute_tool_calls([call("in_thread"), call("in_loop")], [in_thread, in_loop])
    assert threads["async"] == loop_thread
    assert threads["sync"] != loop_thread


async def test_each_call_runs_in_a_task_of_its_own_with_the_callers_context() -> None:
    # As in the agent's loop (one engine): a task per call, in a task group of the calling task.
    caller = anyio.get_current_task().id
    seen: list[tuple[int, str]] = []
    tenant: contextvars.ContextVar[str] = contextvars.ContextVar("tenant")
    tenant.set("acme")

    @tool
    async def where() -> None:
        seen.append((anyio.get_current_task().id, tenant.get()))

    await execute_tool_calls([call("where"), call("where", id="2")], where)
    assert len({task for task, _ in seen}) == 2 and caller not in {task for task, _ in seen}
    assert [value for _, value in seen] == ["acme", "acme"]


async def test_max_concurrency_caps_calls_running_at_once() -> None:
    running = 0
    peak = 0

    @tool
    async def busy(n: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.02)
        running -= 1
        return n

    requests = [call("busy", f'{{"n": {i}}}', id=str(i)) for i in range(6)]
    executions = await execute_tool_calls(requests, busy, max_concurrency=2)
    assert peak == 2
    assert [e.result for e in executions] == [str(i) for i in range(6)]


async def test_no_calls_no_work() -> None:
    assert await execute_tool_calls([], [add]) == []


# -- timeouts ------------------------------------------------------------------------------------------------


async def test_a_timed_out_tool_does_not_block_its_siblings() -> None:
    released = threading.Event()

    @tool(timeout=0.1)
    async def slow_async() -> str:
        await anyio.sleep(10)
        return "never"

    @tool(timeout=0.1)
    def slow_sync() -> str:
        released.wait(10)  # a thread cannot be interrupted: the call stops waiting for it
        return "too late"

    @tool
    async def quick() -> str:
        await anyio.sleep(0.05)
        return "done"

    started = time.perf_counter()
    try:
        a, s, q = await execute_tool_calls(
            [call("slow_async"), call("slow_sync"), call("quick")], [slow_async, slow_sync, quick]
        )
    finally:
        released.set()
    assert time.perf_counter() - started < 1
    assert (a.result, a.is_error) == ("Tool 'slow_async' timed out after 0.1 s", True)
    assert (s.result, s.is_error) == ("Tool 'slow_sync' timed out after 0.1 s", True)
    assert isinstance(a.error, TimeoutError)
    assert a.has_failed
    assert a.result_object is None
    assert (q.result, q.is_error) == ("done", False)


async def test_the_default_timeout_applies_to_tools_without_their_own() -> None:
    @tool
    async def waits() -> str:
        await anyio.sleep(10)
        return "never"

    @tool(timeout=5)
    async def patient() -> str:
        await anyio.sleep(0.2)
        return "waited"

    w, p = await execute_tool_calls([call("waits"), call("patient")], [waits, patient], timeout=0.05)
    assert w.result == "Tool 'waits' timed out after 0.05 s"
    assert (p.result, p.is_error) == ("waited", False)  # its own 5 s wins over the default


async def test_whole_seconds_read_without_decimals() -> None:
    @tool(timeout=1)
    async def hangs() -> None:
        await anyio.sleep(10)

    with anyio.fail_after(5):
        (execution,) = await execute_tool_calls([call("hangs")], hangs, timeout=None)
    assert execution.result == "Tool 'hangs' timed out after 1 s"


# -- errors inside tools -------------------------------------------------------------------------------------


@tool
def divide(a: float, b: float) -> float:
    if b == 0:
        raise ToolExecutionError("Cannot divide by zero; ask for another divisor", error_code=400)
    return a / b


@tool
async def crash() -> None:
    raise ValueError("the database is down")


@tool
def silent_crash() -> None:
    raise KeyError


async def test_errors_become_the_calls_error_result_and_siblings_finish() -> None:
    d, c, s, ok = await execute_tool_calls(
        [
            call("divide", '{"a": 1, "b": 0}'),
            call("crash"),
            call("silent_crash"),
            call("echo", '{"text": "hi"}'),
        ],
        [divide, crash, silent_crash, echo],
    )
    assert (d.result, d.is_error) == ("Cannot divide by zero; ask for another divisor", True)
    assert isinstance(d.error, ToolExecutionError)
    assert d.error.error_code == 400
    assert (c.result, c.is_error) == ("the database is down", True)
    assert isinstance(c.error, ValueError)
    assert s.result == "KeyError"  # no message: the exception's type
    assert (ok.result, ok.is_error, ok.error) == ("hi", False, None)
    assert d.result_message() == ToolExecutionResultMessage("call-divide", "divide", d.result, is_error=True)


async def test_argument_errors_become_error_results() -> None:
    (execution,) = await execute_tool_calls([call("add", '{"a": 1}')], add)
    assert execution.is_error
    assert isinstance(execution.error, ToolArgumentsError)
    assert execution.result == "Invalid arguments for tool 'add': b: required field is missing"


async def test_handlers_choose_the_text_sync_or_async() -> None:
    seen: list[tuple[type[Exception], str]] = []

    def on_arguments(error: Exception, request: ToolExecutionRequest) -> str:
        seen.append((type(error), request.name))
        return f"Please fix: {error}"

    async def on_execution(error: Exception, request: ToolExecutionRequest) -> str:
        seen.append((type(error), request.name))
        return "The tool failed, try later"

    bad_args, failed = await execute_tool_calls(
        [call("add", '{"a": "x", "b": 1}'), call("crash")],
        [add, crash],
        tool_arguments_error_handler=on_arguments,
        tool_execution_error_handler=on_execution,
    )
    assert bad_args.result.startswith("Please fix: Invalid arguments for tool 'add': a:")
    assert (bad_args.is_error, type(bad_args.error)) == (True, ToolArgumentsError)
    assert (failed.result, failed.is_error, type(failed.error)) == (
        "The tool failed, try later",
        True,
        ValueError,
    )
    assert sorted(seen, key=str) == sorted([(ToolArgumentsError, "add"), (ValueError, "crash")], key=str)


async def test_a_tool_raising_tool_arguments_error_goes_to_the_arguments_handler() -> None:
    @tool
    def strict(date: str) -> str:
        raise ToolArgumentsError("date must look like 2024-12-31")

    handled: list[Exception] = []

    def handler(error: Exception, request: ToolExecutionRequest) -> str:
        handled.append(error)
        return "bad date"

    (execution,) = await execute_tool_calls(
        [call("strict", '{"date": "tomorrow"}')], strict, tool_arguments_error_handler=handler
    )
    assert execution.result == "bad date"
    assert isinstance(handled[0], ToolArgumentsError)


@pytest.mark.parametrize("which", ["execution", "arguments"])
async def test_a_handler_that_re_raises_cancels_the_siblings_and_propagates(which: str) -> None:
    sibling_started = anyio.Event()
    sibling_cancelled = anyio.Event()
    sibling_finished = False

    @tool
    async def sibling() -> str:
        nonlocal sibling_finished
        sibling_started.set()
        try:
            await anyio.sleep(10)
        except anyio.get_cancelled_exc_class():
            sibling_cancelled.set()
            raise
        sibling_finished = True
        return "should not finish"

    @tool
    async def failing(a: int) -> None:
        await sibling_started.wait()
        raise RuntimeError("fatal")

    class Abort(Exception):
        pass

    def handler(error: Exception, request: ToolExecutionRequest) -> str:
        raise Abort(f"aborting on {request.name}") from error

    if which == "execution":
        requests, options = (
            [call("sibling"), call("failing", '{"a": 1}')],
            {"tool_execution_error_handler": handler},
        )
    else:
        # The bad call is rejected before running: give the sibling time to start first.
        async def late_handler(error: Exception, request: ToolExecutionRequest) -> str:
            await sibling_started.wait()
            handler(error, request)
            return "unreachable"

        requests, options = (
            [call("sibling"), call("failing", '{"a": "x"}')],
            {"tool_arguments_error_handler": late_handler},
        )

    started = time.perf_counter()
    with pytest.raises(Abort, match="aborting on failing"):
        await execute_tool_calls(requests, [sibling, failing], **options)
    assert time.perf_counter() - started < 2
    assert sibling_cancelled.is_set()
    assert not sibling_finished


async def test_a_handler_returning_something_else_is_a_configuration_error() -> None:
    with pytest.raises(IllegalConfigurationError, match="tool_execution_error_handler must return the text"):
        await execute_tool_calls([call("crash")], crash, tool_execution_error_handler=lambda e, r: 42)  # type: ignore[arg-type, return-value]


# -- hallucinated tool names ---------------------------------------------------------------------------------


async def test_an_unknown_tool_raises_before_any_call_starts() -> None:
    started: list[int] = []
    with pytest.raises(HallucinatedToolError) as info:
        await execute_tool_calls(
            [call("echo", '{"text": "x"}'), call("get_wether")],
            [echo, add],
            on_start=lambda index, request: started.append(index),
        )
    assert info.value.tool_name == "get_wether"
    assert str(info.value).startswith(
        "The model called a tool named 'get_wether', which does not exist (available tools: 'echo', 'add')."
    )
    assert "hallucinated_tool_name_strategy" in str(info.value)
    assert started == []


async def test_a_strategy_answers_the_model_instead() -> None:
    def strategy(request: ToolExecutionRequest) -> str:
        return f"Error: there is no tool called {request.name}"

    ok, unknown = await execute_tool_calls(
        [call("echo", '{"text": "x"}'), call("get_wether")], echo, hallucinated_tool_name_strategy=strategy
    )
    assert ok.result == "x"
    assert unknown.result == "Error: there is no tool called get_wether"
    assert (unknown.is_error, unknown.error, unknown.has_failed) == (False, None, False)
    assert unknown.return_behavior is ReturnBehavior.TO_LLM
    assert unknown.index == 1


async def test_a_strategy_may_return_a_result_message_flagged_as_error() -> None:
    async def strategy(request: ToolExecutionRequest) -> ToolExecutionResultMessage:
        return ToolExecutionResultMessage.from_request(request, "no such tool", is_error=True)

    (execution,) = await execute_tool_calls([call("nope")], [], hallucinated_tool_name_strategy=strategy)
    assert (execution.result, execution.is_error) == ("no such tool", True)
    assert not execution.has_failed  # flagged for the model, but not a failed call (see docs/tools.md)


# -- callbacks and injection ---------------------------------------------------------------------------------


async def test_on_start_runs_after_validation_and_before_the_tool() -> None:
    events: list[str] = []

    @tool
    async def work(n: int) -> int:
        events.append(f"run {n}")
        return n

    async def on_start(index: int, request: ToolExecutionRequest) -> None:
        events.append(f"start {index}")

    def on_complete(execution: ToolExecution) -> None:
        events.append(f"complete {execution.index}")

    await execute_tool_calls([call("work", '{"n": 0}')], work, on_start=on_start, on_complete=on_complete)
    assert events == ["start 0", "run 0", "complete 0"]

    events.clear()
    await execute_tool_calls(
        [call("work", '{"n": 0}', id="a"), call("work", '{"n": "bad"}', id="b")],
        work,
        on_start=on_start,
        on_complete=on_complete,
    )
    assert "start 1" not in events  # rejected arguments: the call never ran
    assert sorted(events) == ["complete 0", "complete 1", "run 0", "start 0"]
    assert events.index("start 0") < events.index("run 0") < events.index("complete 0")


async def test_an_error_in_a_callback_propagates() -> None:
    def on_complete(execution: ToolExecution) -> None:
        raise RuntimeError("listener broke")

    with pytest.raises(RuntimeError, match="listener broke"):
        await execute_tool_calls(
            [call("echo", '{"text": "a"}'), call("add", '{"a": 1, "b": 2}')],
            [echo, add],
            on_complete=on_complete,
        )


async def test_memory_id_and_context_are_injected() -> None:
    seen: dict[str, Any] = {}

    @tool
    def whoami(user: Annotated[str, ToolMemoryId], ctx: ToolContext, question: str) -> str:
        seen.update(user=user, ctx=ctx)
        return f"{user} ({ctx['tenant']}) asks {question}"

    request = call("whoami", '{"question": "why", "user": "admin", "ctx": null}')
    (execution,) = await execute_tool_calls(
        [request], whoami, memory_id="user-1", context={"tenant": "acme"}, round=3, invocation_id="inv-9"
    )
    assert execution.result == "user-1 (acme) asks why"
    ctx: ToolContext = seen["ctx"]
    assert (ctx.invocation_id, ctx.memory_id, ctx.round, ctx.request) == ("inv-9", "user-1", 3, request)
    assert ctx.deadline is None
    assert execution.round == 3


async def test_programmatic_executors_get_the_request_and_context() -> None:
    loop_thread = threading.get_ident()
    seen: list[Any] = []

    async def async_executor(request: ToolExecutionRequest, context: ToolContext) -> dict[str, Any]:
        return {"arguments": request.arguments, "memory": context.memory_id}

    def sync_executor(request: ToolExecutionRequest, context: ToolContext) -> None:
        seen.append(threading.get_ident())

    class CallableExecutor:
        async def __call__(self, request: ToolExecutionRequest, context: ToolContext) -> str:
            seen.append(threading.get_ident())
            return "from an object"

    executions = await execute_tool_calls(
        [call("a", '{"raw": true}'), call("s"), call("o")],
        [
            (ToolSpecification(name="a"), async_executor),
            (ToolSpecification(name="s"), sync_executor),
            (ToolSpecification(name="o"), CallableExecutor()),
        ],
        memory_id="m",
    )
    assert executions[0].result == '{"arguments":"{\\"raw\\": true}","memory":"m"}'
    assert executions[1].result == "Success"
    assert executions[2].result == "from an object"
    assert sorted(t == loop_thread for t in seen) == [False, True]  # the sync one in a thread


async def test_execute_tool_call_runs_one_call_with_a_deadline_and_shared_limiter() -> None:
    seen: list[float | None] = []

    @tool
    async def remaining(ctx: ToolContext) -> None:
        seen.append(ctx.remaining_time())

    toolset = resolve_tools(remaining)
    limiter = anyio.CapacityLimiter(1)
    execution = await execute_tool_call(
        call("remaining"),
        index=4,
        toolset=toolset,
        options=ExecutionOptions(timeout=1),
        limiter=limiter,
        invocation_id="inv",
        deadline=anyio.current_time() + 30,
        round=2,
    )
    assert (execution.index, execution.round, execution.is_error) == (4, 2, False)
    assert seen[0] is not None
    assert 29 < seen[0] <= 30
    assert limiter.borrowed_tokens == 0


async def test_cancelling_the_caller_cancels_running_tools() -> None:
    cancelled = anyio.Event()

    @tool
    async def forever() -> None:
        try:
            await anyio.sleep(60)
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise

    with anyio.move_on_after(0.1):
        await execute_tool_calls([call("forever", id="1"), call("forever", id="2")], forever)
    assert cancelled.is_set()


@pytest.mark.parametrize(
    "options",
    [
        {"timeout": 0},
        {"timeout": -1},
        {"max_concurrency": 0},
        {"max_concurrency": 1.5},
        {"tool_execution_error_handler": 3},
    ],
)
async def test_bad_options_are_rejected(options: dict[str, Any]) -> None:
    with pytest.raises(IllegalConfigurationError):
        await execute_tool_calls([call("echo", '{"text": "x"}')], echo, **options)


def test_a_tool_execution_reads_well() -> None:
    from datetime import datetime

    now = datetime.now(timezone.utc)
    execution = ToolExecution(
        call("add"), "3" * 100, 3, None, 0, 1, now, now, 0.0012, ReturnBehavior.TO_LLM, False
    )
    text = repr(execution)
    assert text.startswith("ToolExecution(index=0, name='add', result='333")
    assert "..." in text
    assert "duration=0.0012" in text
