"""The tool calls of one model response: each starts as soon as it is known and runs in its own task.

Each call is shown to the `before_tool_call` hooks in call order as it is taken on; then it passes the
features' `wrap_tool_call` hooks (approval: a denied call gets its error result, a deferred one returns
`DEFERRED` and waits for a person), then the user's middleware (the agent's `tool_runner` innermost among
them), then `execute_tool_call`. Every call of a response runs concurrently; the loop waits for all of them
and commits them as one unit (or, when one waits, saves the round).
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from anyio.abc import TaskGroup

from .._tools._execution import execute_tool_call, rejected_call
from .._tools._toolset import Toolset
from .._values._context import ToolContext, watch_tools
from .._values._errors import BadResponseError, IllegalConfigurationError, ResponseTruncatedError
from .._values._events import BeforeToolExecution, ToolExecuted, ToolRetrying
from .._values._messages import ToolExecutionRequest, is_whole_object
from .._values._records import ToolExecution
from ._hooks import DEFERRED
from ._observe import log_tool_call
from ._seam import ToolCall

if TYPE_CHECKING:
    from .._tools._execution import ExecutionOptions
    from ._loop import Listener
    from ._seam import Seam

__all__ = ["CallSite", "Calls", "refuse_cut_calls"]


class CallSite(Protocol):
    """What the engine reads of the invocation its calls belong to: the loop's `Invocation`, or the
    stand-alone site of `execute_tool_calls`."""

    @property
    def options(self) -> ExecutionOptions: ...
    @property
    def invocation_id(self) -> str: ...
    @property
    def memory_id(self) -> Any: ...
    @property
    def context(self) -> Mapping[str, Any]: ...
    @property
    def seam(self) -> Seam: ...
    @property
    def deadline(self) -> float | None: ...
    @property
    def eager_tools(self) -> bool: ...
    @property
    def ordered_events(self) -> bool: ...


class Calls:
    """The tool calls of one response, each running in the round's task group as soon as it is known.

    Used as `async with Calls(...) as calls:` for a round: the task group opens (`open()`) only when a call
    is about to start, so a response that calls no tool costs no task group; leaving the block waits for
    every call, as leaving the task group does.

    Calls are matched by position (providers number them by position in the response). A call without an
    id, or with the id of an earlier call, gets a fresh one, so every result pairs with exactly one call.
    Calls past `options.max_calls` are not run; each gets an error result.
    """

    __slots__ = (
        "_by_index",
        "_eager",
        "_emit",
        "_executions",
        "_ids",
        "_in_order",
        "_inv",
        "_kept",
        "_limiter",
        "_reported",
        "_round",
        "_silent",
        "_tg",
        "_toolset",
        "_used",
        "waiting",
    )

    def __init__(
        self,
        inv: CallSite,
        toolset: Toolset,
        round: int,
        limiter: anyio.CapacityLimiter | None,
        emit: Listener | None,
        *,
        eager: bool,
    ) -> None:
        self._tg: TaskGroup | None = None  # the round's task group, once a call needs it
        self._inv = inv
        self._toolset = toolset
        self._round = round
        self._limiter = limiter
        self._emit = emit
        self._eager = eager and inv.eager_tools and inv.seam.eager_tools
        self._by_index: dict[int, ToolExecutionRequest] = {}  # as the model sent them
        self._ids: dict[int, str] = {}  # the id each call carries from here on
        self._used: dict[str, None] = {}  # ids given out (a dict as a set: a third the size empty)
        self._executions: dict[int, ToolExecution] = {}
        self._in_order: anyio.Lock | None = None  # ordered_events: one call reports at a time
        self._reported = 0  # ordered_events: the next index to report
        self._silent: dict[int, None] = {}  # calls deferred, or kept from a saved round: never reported now
        self._kept: dict[int, ToolExecution] = {}
        self.waiting = False
        """True once a call returned `DEFERRED`: the round is saved instead of committed."""

    async def __aenter__(self) -> Calls:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> bool:
        """Waits for every call started (the task group's exit: a failed call's error, as a group)."""
        if self._tg is None:
            return False
        return bool(await self._tg.__aexit__(kind, error, tb))

    @property
    def eager(self) -> bool:
        """Calls start while the model still streams (eager tools, allowed by the middleware)."""
        return self._eager

    async def open(self) -> None:
        """Opens the round's task group in this task (nothing if it is open). The block of `async with
        Calls(...)` leaves it, so every cancel scope entered after this must be left before that: the loop
        opens it before a middleware chain or a stream that may hold a scope across the point where a call
        starts (any stream but a `TextSinkModel`'s, whose yields sit outside its scopes)."""
        if self._tg is None:
            group = anyio.create_task_group()
            await group.__aenter__()
            self._tg = group

    async def start_early(self, index: int, request: ToolExecutionRequest) -> None:
        """A call became whole while the model still streams: start it now (eager tools), opening the round's
        task group if this is the first."""
        limit = self._inv.options.max_calls
        if self._eager and (limit is None or index < limit) and is_whole_object(request.arguments):
            await self.open()
            self._start(index, request, index + 1)  # else it waits for the end of the response

    async def start_all(self, requests: Sequence[ToolExecutionRequest]) -> Sequence[ToolExecutionRequest]:
        """The response is complete: start every call not started yet, check the early ones, and return the
        calls as they go to memory (`requests` itself unless an id had to be replaced)."""
        await self.open()
        for index, request in enumerate(requests):
            started = self._by_index.get(index)
            if started is None:
                self._start(index, request, len(requests))
            elif started != request:
                raise BadResponseError(
                    f"The model's stream reported tool call #{index} as {started!r} but its final "
                    f"response has {request!r}"
                )
        if len(self._by_index) != len(requests):
            raise BadResponseError(
                f"The model's stream reported {len(self._by_index)} tool calls but its final response has "
                f"{len(requests)}"
            )
        if all(request.id == self._ids[i] for i, request in enumerate(requests)):
            return requests
        return tuple(_with_id(request, self._ids[i]) for i, request in enumerate(requests))

    def discard(self) -> None:
        """The final response has no tool calls: anything started early must not run on."""
        if self._by_index:
            assert self._tg is not None
            self._tg.cancel_scope.cancel()
            raise BadResponseError(
                "The model's stream reported tool calls that its final response does not hold"
            )

    def executions(self) -> list[ToolExecution]:
        """Every execution, in the model's call order."""
        return [self._executions[index] for index in sorted(self._executions)]

    def _start(self, index: int, request: ToolExecutionRequest, total: int) -> None:
        if index in self._by_index:
            return
        self._by_index[index] = request
        call_id = request.id
        if not call_id or call_id in self._used:
            call_id = f"call_{self._inv.invocation_id[:12]}_{self._round}_{index}"
        self._ids[index] = call_id
        self._used[call_id] = None
        request = _with_id(request, call_id)
        limit = self._inv.options.max_calls
        if limit is not None and index >= limit:
            execution = rejected_call(request, index, self._round, total, limit, self._inv.options.now)
            self._executions[index] = execution
            if self._emit is not None:
                self._group().start_soon(self._report, execution, index)
            return
        before = self._inv.seam.before_call
        if before:  # in call order, in this task, before the call's task starts (durable step numbers)
            call = self._tool_call(request, index)
            for hook in before:
                hook(call)
        kept = self._kept.get(index)
        if kept is not None:  # finished before its round was saved: reported then, never run again
            self._executions[index] = kept
            self._silent[index] = None
            return
        self._group().start_soon(self._run, index, request)

    def _group(self) -> TaskGroup:
        if self._tg is None:
            raise RuntimeError("Calls: a call started before the round's task group opened (await open())")
        return self._tg

    def keep(self, executions: Sequence[ToolExecution]) -> None:
        """A saved round goes on: these of its calls finished before it was saved (and were reported then),
        so they keep their executions and never run again."""
        self._kept = {execution.index: execution for execution in executions}

    async def _run(self, index: int, request: ToolExecutionRequest) -> None:
        features = self._inv.seam.features_tool
        if features is None:
            execution = await self._call(index, request, None)
        else:  # the features' middleware (approval) outside the user's: denied or deferred calls stop there

            def past_features(call: ToolCall) -> Awaitable[ToolExecution]:
                self._check_same(request, call.request, "passed on")
                return self._call(index, call.request, call)

            execution = await features(self._tool_call(request, index), past_features)
        if execution is not DEFERRED:
            self._check_same(request, execution.request, "returned an execution of")
        if execution is DEFERRED:  # waits for a decision from outside: not stored, not reported
            self.waiting = True
            self._silent[index] = None
        else:
            self._executions[index] = execution
        if self._emit is not None:
            await self._report(None if execution is DEFERRED else execution, index)

    def _tool_call(self, request: ToolExecutionRequest, index: int) -> ToolCall:
        inv, round = self._inv, self._round
        context = ToolContext(inv.invocation_id, inv.memory_id, inv.context, request, round, inv.deadline)
        return ToolCall(request, self._toolset.get(request.name), context, round, index)

    async def _call(self, index: int, request: ToolExecutionRequest, call: ToolCall | None) -> ToolExecution:
        """The call past the features: the user's middleware (if any), tracing, the tool runner."""
        inv, emit = self._inv, self._emit
        on_start = None
        if emit is not None:
            round = self._round
            attempts = 0

            async def on_start(index: int, request: ToolExecutionRequest) -> None:
                nonlocal attempts  # ToolRetry runs the call again: one BeforeToolExecution per call
                attempts += 1
                if attempts == 1:
                    await emit(BeforeToolExecution(request, index, round))
                else:
                    await emit(ToolRetrying(request, index, round, attempts))

        chain = inv.seam.tool
        if chain is None:
            work = self._execute(request, index, on_start)
        else:  # the middleware's hooks around the call, outermost first

            async def innermost(call: ToolCall) -> ToolExecution:
                self._check_same(request, call.request, "passed on")
                return await self._execute(call.request, index, on_start)

            work = chain(call or self._tool_call(request, index), innermost)
        if emit is None:
            execution: object = await work
        else:
            with watch_tools(emit):  # the call's progress and streamed values go to the stream too
                execution = await work
        if not isinstance(execution, ToolExecution):
            raise IllegalConfigurationError(
                f"A wrap_tool_call middleware ({', '.join(inv.seam.tool_middleware)}) returned "
                f"{execution!r} for tool call {request.id!r}; return the ToolExecution that "
                "`await call_next(call)` gave (or one you built for this call)"
            )
        log_tool_call(execution)
        return execution

    def _execute(self, request: ToolExecutionRequest, index: int, on_start: Any) -> Awaitable[ToolExecution]:
        """The call itself."""
        inv = self._inv
        return execute_tool_call(
            request,
            index=index,
            round=self._round,
            toolset=self._toolset,
            options=inv.options,
            limiter=self._limiter,
            invocation_id=inv.invocation_id,
            memory_id=inv.memory_id,
            context=inv.context,
            deadline=inv.deadline,
            on_start=on_start,
        )

    def _check_same(self, request: ToolExecutionRequest, got: ToolExecutionRequest, did: str) -> None:
        """A `wrap_tool_call` may change a call's arguments, never its id or name: a result for another id
        would sit in memory next to a call nothing answers, and every later request on it would fail."""
        if got.id == request.id and got.name == request.name:
            return
        names = ", ".join(self._inv.seam.tool_middleware) or "none"
        raise IllegalConfigurationError(
            f"A wrap_tool_call middleware (the tool middleware of this invocation: {names}) {did} tool call "
            f"{request.id!r} ({request.name!r}) as call {got.id!r} ({got.name!r}); a middleware may change "
            "a call's arguments (call.replace(request=...) keeping the request's id and name) but not its id "
            "or name. To run another tool, call it from your middleware and return an execution of this "
            "call. Nothing of this round was stored."
        )

    async def _report(self, execution: ToolExecution | None, index: int) -> None:
        """Emits `ToolExecuted` for call `index` (None: it waits for a person): as each call completes, or in
        call order with `ordered_events`. Calls in `_silent` are not reported."""
        assert self._emit is not None
        if not self._inv.ordered_events:
            if execution is not None and index not in self._silent:
                await self._emit(ToolExecuted(execution))
            return
        if self._in_order is None:
            self._in_order = anyio.Lock()
        async with self._in_order:  # the call that completes a prefix reports it, in order
            while self._reported in self._executions or self._reported in self._silent:
                if self._reported not in self._silent:
                    await self._emit(ToolExecuted(self._executions[self._reported]))
                self._reported += 1


def _with_id(request: ToolExecutionRequest, call_id: str) -> ToolExecutionRequest:
    return (
        request if request.id == call_id else ToolExecutionRequest(call_id, request.name, request.arguments)
    )


def refuse_cut_calls(requests: Sequence[ToolExecutionRequest]) -> None:
    """A response cut by the output token limit: a call whose arguments are not whole must not run (and the
    round must not be stored: a cut call sent back makes providers reject every later request)."""
    for index, request in enumerate(requests):
        if not is_whole_object(request.arguments):
            raise ResponseTruncatedError(
                f"The model's response hit its output token limit (finish reason LENGTH) inside tool call "
                f"#{index} {request.name!r} ({len(request.arguments)} characters of arguments received), so "
                "it cannot run and nothing of this response was stored (calls that started early while it "
                "streamed were cancelled; their side effects up to then may have happened). Raise the "
                "model's max_tokens (e.g. OpenAIChatModel(..., max_tokens=4096)) or ask for shorter tool "
                "arguments."
            )
