"""`execute_tool_calls`: the tool calls of one model response, for loops written by hand.

It runs them on the agent loop's own engine (`Calls`, `_calls.py`) rather than a copy of it, so a call
behaves the same in both: the middleware's `wrap_tool_call` hooks, the concurrency limit, timeouts, error
results and handlers, the `max_calls` cap, fresh ids for calls without one, `ToolExecuted` order. What only
an invocation has is absent: no approval gate (nobody could resume a paused call), no durable tool runner,
no tracing of the invocation.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import msgspec

from .._tools._execution import (
    DEFAULT_MAX_CALLS,
    DEFAULT_MAX_RESULT_CHARS,
    ErrorHandler,
    ExecutionOptions,
    OnComplete,
    OnStart,
    UnknownToolPolicy,
    hallucinated_tool_error,
    maybe_await,
)
from .._tools._toolset import ToolsLike, resolve_tools
from .._values._context import NO_CONTEXT, new_invocation_id
from .._values._events import BeforeToolExecution, StreamEvent, ToolExecuted
from .._values._messages import ToolExecutionRequest
from .._values._records import ToolExecution
from ._calls import Calls
from ._outcome import first_error
from ._seam import NO_MIDDLEWARE, Middleware, Seam, check_middleware

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

__all__ = ["execute_tool_calls"]


async def execute_tool_calls(
    requests: Iterable[ToolExecutionRequest],
    tools: ToolsLike,
    *,
    memory_id: Any = None,
    context: Mapping[str, Any] | None = None,
    max_concurrency: int | None = None,
    timeout: float | None = None,
    hallucinated_tool_name_strategy: UnknownToolPolicy = None,
    tool_arguments_error_handler: ErrorHandler | None = None,
    tool_execution_error_handler: ErrorHandler | None = None,
    on_start: OnStart | None = None,
    on_complete: OnComplete | None = None,
    round: int = 0,
    invocation_id: str | None = None,
    max_result_chars: int | None = DEFAULT_MAX_RESULT_CHARS,
    max_calls: int | None = DEFAULT_MAX_CALLS,
    middleware: Sequence[Middleware] | None = None,
) -> list[ToolExecution]:
    """Runs every call of one model response concurrently; returns their records in the model's call order.

    `tools` is anything `Agent(tools=...)` accepts. Sync tools run in worker threads, async tools in the
    event loop; `max_concurrency` caps how many run at once. `timeout` (seconds) bounds each call of a tool
    without its own timeout; a timed-out call gets the error result "Tool 'x' timed out after N s".

    A failing call does not disturb the others: its error message goes to the model (`is_error`). The
    handlers `(error, request) -> str` (sync or async) choose that text instead, or re-raise: then the other
    calls are cancelled and the error propagates. An unknown tool name raises `HallucinatedToolError`
    before any call starts, unless `hallucinated_tool_name_strategy(request)` answers the model, or it is
    `"tell_model"` (what an `Agent` does by default: an error result naming the available tools).

    `on_start(index, request)` runs just before a call runs (after its arguments validated);
    `on_complete(execution)` as each call finishes, in completion order. Both may be sync or async.
    `middleware`: `Middleware` whose `wrap_tool_call` hooks wrap each call, outermost first, as in an agent.

    A result text longer than `max_result_chars` is cut, with a marker. Calls past `max_calls` are not run:
    each gets an error result telling the model to ask again later. The calls run on the agent loop's
    engine: a call without an id (or repeating an earlier one's) runs under a fresh id, as there; the
    records returned carry your requests as given.
    """
    toolset = resolve_tools(tools)
    options = ExecutionOptions(
        timeout,
        max_concurrency,
        hallucinated_tool_name_strategy,
        tool_arguments_error_handler,
        tool_execution_error_handler,
        max_result_chars,
        max_calls,
    )
    seam = Seam.of(check_middleware(middleware, "execute_tool_calls()")) if middleware else NO_MIDDLEWARE
    calls = tuple(requests)
    if hallucinated_tool_name_strategy is None:
        for request in calls[:max_calls]:
            if request.name not in toolset:
                raise hallucinated_tool_error(request.name, toolset)
    if not calls:
        return []
    site = _Standalone(
        options,
        invocation_id if invocation_id is not None else new_invocation_id(),
        memory_id,
        NO_CONTEXT if context is None else context,
        seam,
    )
    limiter = anyio.CapacityLimiter(max_concurrency) if max_concurrency else None
    listener = _Callbacks(on_start, on_complete) if on_start or on_complete else None
    try:
        async with Calls(site, toolset, round, limiter, listener, eager=False) as engine:
            await engine.start_all(calls)
    except BaseExceptionGroup as failures:
        error = first_error(failures)
        raise error from error.__cause__  # the handler's error itself, as the agent's loop raises it
    executions = engine.executions()
    for index in _fresh_ids(calls):  # give back the caller's id: its results pair with its AiMessage
        execution = executions[index]
        request = ToolExecutionRequest(calls[index].id, execution.request.name, execution.request.arguments)
        executions[index] = msgspec.structs.replace(execution, request=request)
    return executions


def _fresh_ids(calls: Sequence[ToolExecutionRequest]) -> list[int]:
    """The calls the engine runs under a fresh id: those without one, or with an earlier call's."""
    used: set[str | None] = set()
    fresh = []
    for index, request in enumerate(calls):
        if not request.id or request.id in used:
            fresh.append(index)
        used.add(request.id)
    return fresh


@dataclass(frozen=True, slots=True)
class _Standalone:
    """The `CallSite` of calls outside an invocation: no approval gate, no deadline; events in completion
    order (tracing, like any middleware, is in `seam`)."""

    options: ExecutionOptions
    invocation_id: str
    memory_id: Any
    context: Mapping[str, Any]
    seam: Seam
    deadline: None = None
    eager_tools: bool = False
    ordered_events: bool = False


class _Callbacks:
    """The engine's listener: `on_start` for `BeforeToolExecution`, `on_complete` for `ToolExecuted`."""

    __slots__ = ("_on_complete", "_on_start")
    text_only = False
    text_sink: Callable[[str], bool] | None = None

    def __init__(self, on_start: OnStart | None, on_complete: OnComplete | None) -> None:
        self._on_start = on_start
        self._on_complete = on_complete

    async def __call__(self, event: StreamEvent) -> None:
        if type(event) is BeforeToolExecution:
            if self._on_start is not None:
                await maybe_await(self._on_start(event.index, event.request))
        elif type(event) is ToolExecuted and self._on_complete is not None:
            await maybe_await(self._on_complete(event.execution))

    def text_nowait(self, text: str, round: int) -> bool:
        return False
