"""Running the tool calls of one model response, and the immediate-return rule.

Each call: validate arguments -> `on_start` -> run (timeout) -> convert the result -> `ToolExecution`.
Every call of a response runs concurrently; a failing call becomes that call's error result and leaves its
siblings alone, unless an error handler re-raises, which cancels the siblings and propagates.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal, Union

import anyio
import anyio.lowlevel
import msgspec

from .._values._background import STARTED, current_starter
from .._values._context import NO_CONTEXT, ToolContext
from .._values._errors import (
    HallucinatedToolError,
    IllegalConfigurationError,
    ModelRetry,
    ToolArgumentsError,
    ToolExecutionError,
)
from .._values._messages import ToolExecutionRequest, ToolExecutionResultMessage
from .._values._records import ReturnBehavior, ToolExecution
from ._threads import starved_call
from ._tool import Tool, check_timeout
from ._toolset import Toolset

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "TELL_MODEL",
    "ErrorHandler",
    "ExecutionOptions",
    "HallucinatedToolNameStrategy",
    "ToolExecution",
    "ToolRunner",
    "UnknownToolPolicy",
    "any_error",
    "behaviours",
    "execute_tool_call",
    "should_return_immediately",
]

ErrorHandler = Callable[[Exception, ToolExecutionRequest], Union[str, Awaitable[str]]]
"""`(error, request) -> text for the model` (sync or async); re-raising aborts the response's calls."""

HallucinatedToolNameStrategy = Callable[
    [ToolExecutionRequest],
    Union[str, ToolExecutionResultMessage, Awaitable[Union[str, ToolExecutionResultMessage]]],
]
"""`request -> what to tell the model` when it calls a tool that does not exist."""

TELL_MODEL: Literal["tell_model"] = "tell_model"
"""The agent's default `hallucinated_tool_name_strategy`: the model gets an error result naming the tools it
can call, and corrects itself (pydantic-ai, LangGraph and most peers do so); None raises instead."""

UnknownToolPolicy = Union[HallucinatedToolNameStrategy, Literal["tell_model"], None]
"""A strategy function, `"tell_model"` (the agent's default), or None: raise `HallucinatedToolError`."""

OnStart = Callable[[int, ToolExecutionRequest], Any]
OnComplete = Callable[["ToolExecution"], Any]

_utcnow = functools.partial(datetime.now, timezone.utc)

DEFAULT_MAX_RESULT_CHARS = 100_000
"""Default cap on the text of one tool result sent to the model (about 25,000 tokens)."""
DEFAULT_MAX_CALLS = 128
"""Default cap on the tool calls of one model response that run."""
ToolRunner = Callable[
    [ToolExecutionRequest, Callable[[], Awaitable[ToolExecution]]], Awaitable[ToolExecution]
]
"""`(request, run) -> record`: every call an agent runs goes through it; `run()` runs the call in this
process (validation, timeout, error policy) and returns its record. A durable-execution engine makes each
call a step: it returns `run()`'s record the first time and the recorded one when a run is replayed.

Calls reach the runner in whatever order their tasks get there; an engine that numbers its steps numbers
them in call order with a middleware's `before_tool_call` hook (docs/middleware.md)."""


@dataclass(frozen=True, slots=True)
class ExecutionOptions:
    """How tool calls run; shared by `execute_tool_calls` and the agent's loop.

    `timeout` applies to tools without their own; `max_concurrency` caps the calls of one response running
    at once (None: no cap). The handlers and the strategy are described in `execute_tool_calls`.
    """

    timeout: float | None = None
    max_concurrency: int | None = None
    hallucinated_tool_name_strategy: UnknownToolPolicy = None
    tool_arguments_error_handler: ErrorHandler | None = None
    tool_execution_error_handler: ErrorHandler | None = None
    max_result_chars: int | None = DEFAULT_MAX_RESULT_CHARS
    """Longer result texts are cut to this many characters, with a marker saying so (None: no cap)."""
    max_calls: int | None = DEFAULT_MAX_CALLS
    """Calls of one response past this many are not run; each gets an error result saying why."""
    tool_runner: ToolRunner | None = None
    """Runs each call of the agent's loop (None: in process); see `ToolRunner`. The agent puts it on its seam
    as the innermost `wrap_tool_call`."""
    clock: Callable[[], datetime] | None = None
    """Where `started_at` / `finished_at` come from (default: the system clock, UTC); a durable engine may
    give its own deterministic clock. Durations always come from a monotonic clock."""

    def now(self) -> datetime:
        return _utcnow() if self.clock is None else self.clock()

    def __post_init__(self) -> None:
        check_timeout(self.timeout, "timeout")
        for name in ("max_concurrency", "max_result_chars", "max_calls"):
            m = getattr(self, name)
            if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
                raise IllegalConfigurationError(f"{name} must be an int >= 1 or None, got {m!r}")
        for name in (
            "hallucinated_tool_name_strategy",
            "tool_arguments_error_handler",
            "tool_execution_error_handler",
            "tool_runner",
            "clock",
        ):
            value = getattr(self, name)
            if name == "hallucinated_tool_name_strategy" and value == TELL_MODEL:
                continue
            if value is not None and not callable(value):
                raise IllegalConfigurationError(f"{name} must be callable, got {type(value).__name__}")


_DEFAULT_OPTIONS = ExecutionOptions()
# -- the immediate-return rule ---------------------------------------------------------------------------


def should_return_immediately(behaviours: Sequence[ReturnBehavior], any_error: bool) -> bool:
    """LangChain4j's rule, applied once per response after all its calls finished.

    Return immediately iff no call errored, and either the last call is `IMMEDIATE_IF_LAST` or every call
    is `IMMEDIATE`/`IMMEDIATE_IF_LAST`. A response without calls never returns immediately.
    """
    if any_error or not behaviours:
        return False
    if behaviours[-1] == ReturnBehavior.IMMEDIATE_IF_LAST:
        return True
    return all(b != ReturnBehavior.TO_LLM for b in behaviours)


def behaviours(executions: Iterable[ToolExecution]) -> list[ReturnBehavior]:
    """The return behaviours of `executions`, in their order (unknown tools count as `TO_LLM`)."""
    return [e.return_behavior for e in executions]


def any_error(executions: Iterable[ToolExecution]) -> bool:
    """True when a call failed; an unknown tool answered by the hallucination strategy is not a failure."""
    return any(e.error is not None for e in executions)


# -- one call ------------------------------------------------------------------------------------------------


async def execute_tool_call(
    request: ToolExecutionRequest,
    *,
    index: int,
    toolset: Toolset,
    options: ExecutionOptions = _DEFAULT_OPTIONS,
    limiter: anyio.CapacityLimiter | None = None,
    invocation_id: str = "",
    memory_id: Any = None,
    context: Mapping[str, Any] | None = None,
    deadline: float | None = None,
    round: int = 0,
    on_start: OnStart | None = None,
) -> ToolExecution:
    """Runs one call completely and returns its record; the building block of `execute_tool_calls`.

    `invocation_id`, `memory_id`, `context`, `deadline` (absolute, `anyio.current_time()` clock) and
    `round` make up the call's `ToolContext`. `limiter` caps concurrent calls across the caller's calls.
    Raises only when an error handler or `on_start` raises, or for an unknown tool without a
    `hallucinated_tool_name_strategy`. The result text is capped at `options.max_result_chars`.
    """
    execution = await _execute(
        request,
        index,
        toolset,
        options,
        limiter,
        invocation_id,
        memory_id,
        context,
        deadline,
        round,
        on_start,
    )
    return capped(execution, options.max_result_chars)


async def _execute(
    request: ToolExecutionRequest,
    index: int,
    toolset: Toolset,
    options: ExecutionOptions,
    limiter: anyio.CapacityLimiter | None,
    invocation_id: str,
    memory_id: Any,
    context: Mapping[str, Any] | None,
    deadline: float | None,
    round: int,
    on_start: OnStart | None,
) -> ToolExecution:
    tool = toolset.get(request.name)
    if tool is None:
        return await _answer_hallucination(request, index, round, toolset, options)
    try:
        prepared = tool.prepare(request.arguments)
    except ToolArgumentsError as exc:
        now, clock = options.now(), time.perf_counter()
        return await _failed(exc, tool, request, index, round, options, now, clock)
    call_context = ToolContext(
        invocation_id, memory_id, NO_CONTEXT if context is None else context, request, round, deadline
    )
    if limiter is None:
        return await _run(tool, prepared, call_context, index, options, on_start)
    async with limiter:
        return await _run(tool, prepared, call_context, index, options, on_start)


async def _run(
    tool: Tool,
    prepared: dict[str, Any] | None,
    context: ToolContext,
    index: int,
    options: ExecutionOptions,
    on_start: OnStart | None,
) -> ToolExecution:
    request = context.request
    assert request is not None
    if on_start is not None:
        await maybe_await(on_start(index, request))
    started_at, clock = options.now(), time.perf_counter()
    timeout = tool.timeout if tool.timeout is not None else options.timeout
    starter = current_starter() if tool.background else None
    if starter is not None:  # the work goes on as a background task; the model hears it started
        task = await starter.start(tool, prepared, context, timeout)
        text = (
            f"{STARTED}{task.task_id} ({tool.name}). It runs on; its result will be sent to "
            "you in a message when it finishes. Do not call the tool again for it."
        )
        finished = options.now()
        duration = time.perf_counter() - clock
        return ToolExecution(
            request, text, task, None, index, context.round, started_at, finished, duration,
            tool.return_behavior, False,
        )  # fmt: skip
    try:
        if timeout is None:
            result = await tool.invoke(prepared, context)
        else:
            starved_call()  # forget a reason left by an earlier call of this task that was cancelled
            with anyio.move_on_after(timeout) as scope:
                result = await tool.invoke(prepared, context)
            if scope.cancelled_caught:
                starved = starved_call()  # it never got a worker thread: say why, not just "timed out"
                if starved is not None:
                    raise ToolExecutionError(f"{starved}; it waited its whole timeout of {timeout:g} s")
                raise TimeoutError(f"Tool {tool.name!r} timed out after {timeout:g} s")
        try:
            text = await tool.text_of(result)
        except Exception as exc:
            raise ToolExecutionError(
                f"Tool {tool.name!r} returned a result that cannot be sent to the model: {exc}"
            ) from exc
    except Exception as exc:
        return await _failed(exc, tool, request, index, context.round, options, started_at, clock)
    except BaseException as exc:
        if await _stops_the_invocation(exc):
            raise
        # A tool raised a BaseException of its own (e.g. `asyncio.CancelledError` out of a library while
        # nothing cancelled this invocation): it is that call's failure, so the round stays whole.
        detail = f": {exc}" if str(exc) else ""
        failure = ToolExecutionError(f"Tool {tool.name!r} raised {type(exc).__name__}{detail}")
        failure.__cause__ = exc
        return await _failed(failure, tool, request, index, context.round, options, started_at, clock)
    return ToolExecution(
        request,
        text,
        result,
        None,
        index,
        context.round,
        started_at,
        options.now(),
        time.perf_counter() - clock,
        tool.return_behavior,
        False,
    )


async def _stops_the_invocation(error: BaseException) -> bool:
    """True for a `BaseException` that must propagate out of a tool call: a cancellation of the invocation
    itself (not one the tool raised on its own), `KeyboardInterrupt` and `SystemExit`."""
    if isinstance(error, (KeyboardInterrupt, SystemExit)):
        return True
    if not isinstance(error, anyio.get_cancelled_exc_class()):
        return False
    task = current_asyncio_task()
    if task is not None:
        cancelling = getattr(task, "cancelling", None)
        if cancelling is None:
            return True  # Python 3.10 cannot tell asyncio's own Task.cancel() from a tool's: propagate
        if cancelling():
            return True  # asyncio's own Task.cancel(), outside any anyio scope
    try:
        await anyio.lowlevel.checkpoint_if_cancelled()  # raises again iff an enclosing scope was cancelled
    except anyio.get_cancelled_exc_class():
        return True
    return False


def current_asyncio_task() -> asyncio.Task[Any] | None:
    """The running asyncio task, or None (no task, or not asyncio: trio)."""
    import asyncio  # here, not at the top: `import agentloop` does not load asyncio (trio never needs it)

    try:
        return asyncio.current_task()
    except RuntimeError:  # no asyncio loop running: trio
        return None


async def _failed(
    exc: Exception,
    tool: Tool,
    request: ToolExecutionRequest,
    index: int,
    round: int,
    options: ExecutionOptions,
    started_at: datetime,
    clock: float,
) -> ToolExecution:
    """The error result of a call, through the matching handler (which may re-raise to abort)."""
    if isinstance(exc, ToolArgumentsError):
        handler, handler_name = options.tool_arguments_error_handler, "tool_arguments_error_handler"
    else:
        handler, handler_name = options.tool_execution_error_handler, "tool_execution_error_handler"
    if handler is None or isinstance(exc, ModelRetry):  # a retry request speaks to the model as it is
        text = error_text(exc)
    else:
        text = await maybe_await(handler(exc, request))
        if not isinstance(text, str):
            raise IllegalConfigurationError(
                f"{handler_name} must return the text for the model (str) or raise, got {type(text).__name__}"
            )
    return ToolExecution(
        request,
        text,
        None,
        exc,
        index,
        round,
        started_at,
        options.now(),
        time.perf_counter() - clock,
        tool.return_behavior,
        True,
    )


def capped(execution: ToolExecution, limit: int | None) -> ToolExecution:
    """`execution` with its result text cut to `limit` characters and a marker, when it is longer."""
    text = execution.result
    if limit is None or len(text) <= limit:
        return execution
    marker = f"\n[... truncated: the result had {len(text):,} characters; the first {limit:,} are shown]"
    return msgspec.structs.replace(execution, result=text[:limit] + marker)


def rejected_call(
    request: ToolExecutionRequest,
    index: int,
    round: int,
    total: int,
    limit: int,
    clock: Callable[[], datetime] = _utcnow,
) -> ToolExecution:
    """The error result of a call past the per-response cap: it is not run, the model is told why."""
    message = (
        f"Not run: this response asked for {total} tool calls and at most {limit} run per response. "
        f"Calls #{limit} and later were skipped; ask for them again in a later response."
    )
    now = clock()
    return ToolExecution(
        request,
        message,
        None,
        ToolExecutionError(message),
        index,
        round,
        now,
        now,
        0.0,
        ReturnBehavior.TO_LLM,
        True,
    )


def error_text(exc: BaseException) -> str:
    """What the model reads for a failed call by default: the exception's message."""
    if isinstance(exc, (ToolExecutionError, ToolArgumentsError, ModelRetry)):
        return exc.message
    return str(exc) or type(exc).__name__


async def _answer_hallucination(
    request: ToolExecutionRequest, index: int, round: int, toolset: Toolset, options: ExecutionOptions
) -> ToolExecution:
    strategy = options.hallucinated_tool_name_strategy
    if strategy is None:
        raise hallucinated_tool_error(request.name, toolset)
    started_at, clock = options.now(), time.perf_counter()
    if isinstance(strategy, str):  # TELL_MODEL
        answer: Any = ToolExecutionResultMessage.from_request(
            request, _unknown_tool_text(request.name, toolset)
        )
        answer = msgspec.structs.replace(answer, is_error=True)
    else:
        answer = await maybe_await(strategy(request))
    if isinstance(answer, ToolExecutionResultMessage):
        text, is_error = answer.text, answer.is_error
    elif isinstance(answer, str):
        text, is_error = answer, False
    else:
        raise IllegalConfigurationError(
            "hallucinated_tool_name_strategy must return a str or a ToolExecutionResultMessage, got "
            f"{type(answer).__name__}"
        )
    return ToolExecution(
        request,
        text,
        None,
        None,
        index,
        round,
        started_at,
        options.now(),
        time.perf_counter() - clock,
        ReturnBehavior.TO_LLM,
        is_error,
    )


def _unknown_tool_text(name: str, toolset: Toolset) -> str:
    """What the model reads, by default, after calling a tool that does not exist."""
    available = ", ".join(repr(n) for n in toolset.names)
    if not available:
        return f"There is no tool named {name!r}, and no tools are available now: answer without a tool."
    return (
        f"There is no tool named {name!r}. The tools you can call: {available}. Call one of them by its "
        "exact name, or answer without a tool."
    )


def hallucinated_tool_error(name: str, toolset: Toolset) -> HallucinatedToolError:
    available = ", ".join(repr(n) for n in toolset.names) or "none"
    return HallucinatedToolError(
        f"The model called a tool named {name!r}, which does not exist (available tools: {available}). "
        'Give the agent hallucinated_tool_name_strategy="tell_model" (the default) or a function to answer '
        "the model instead of failing.",
        tool_name=name,
    )


async def maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value
