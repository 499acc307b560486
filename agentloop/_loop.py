"""The execution loop of one invocation (one `chat()` or `stream()` call), top to bottom.

loop:
  request  = system + memory + this invocation's messages, with this invocation's tools
  response = model call (streamed when someone listens; tool calls may start while it streams)
  no tool calls -> commit the answer, finish
  round += 1, at most max_tool_rounds
  run every call of the response concurrently, wait for all of them
  commit the round to memory as one unit (the AiMessage and every result, in call order)
  immediate return (ReturnBehavior rule, once per response) -> finish with content None
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import msgspec
from anyio.abc import TaskGroup

from ._context import ToolContext
from ._errors import BadResponseError, ResponseTruncatedError, ToolRoundsExceededError
from ._events import (
    BeforeToolExecution,
    IntermediateResponse,
    ModelProgress,
    PartialResponse,
    PartialThinking,
    PartialToolCall,
    StreamEvent,
    ToolExecuted,
)
from ._execution import (
    ExecutionOptions,
    ToolExecution,
    execute_tool_call,
    rejected_call,
    should_return_immediately,
)
from ._features.output import NOT_FOUND, RetryOutput
from ._memory import ChatMemory
from ._messages import (
    ChatMessage,
    ChatRequest,
    ChatResponse,
    FinishReason,
    SystemMessage,
    TokenUsage,
    ToolExecutionRequest,
    UserMessage,
    is_whole_object,
)
from ._observe import Observer, log_model_call, log_tool_call
from ._result import Result
from ._toolset import ToolProvider, ToolProviderRequest, Toolset, provide_tools, resolve_tools
from .models import (
    ChatModel,
    GenerationProgress,
    ResponseComplete,
    TextDelta,
    ThinkingDelta,
    ToolCallComplete,
    ToolCallDelta,
)

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup
if TYPE_CHECKING:
    from ._features.output import OutputRun

if TYPE_CHECKING:
    from ._features.approval import ApprovalGate, PendingApproval

__all__ = ["Invocation", "Listener", "run_invocation"]


class Listener(Protocol):
    """Where a streaming invocation sends its events: the TokenStream's queue, or the user's callbacks."""

    text_only: bool
    """True when only answer text is wanted: the loop does not build the other events at all."""

    async def __call__(self, event: StreamEvent) -> None:
        """Delivers `event`, waiting while the consumer is behind."""

    def text_nowait(self, text: str, round: int) -> bool:
        """Delivers a piece of answer text when that needs neither waiting nor a callback (the hot path);
        False when the caller must deliver a `PartialResponse` instead."""


@dataclass(frozen=True, slots=True)
class Invocation:
    """Everything one invocation needs, resolved by the `Agent` before the loop starts."""

    model: ChatModel
    user_message: UserMessage
    system_message: SystemMessage | None
    memory: ChatMemory | None
    tools: Toolset
    tool_provider: ToolProvider | None
    options: ExecutionOptions
    max_tool_rounds: int
    memory_id: Any
    invocation_id: str
    context: Mapping[str, Any]
    deadline: float | None
    eager_tools: bool
    ordered_events: bool = False
    approval: ApprovalGate | None = None
    """Asks about gated tool calls, pauses a round that waits for a person, finishes a resumed one."""
    agent_name: str | None = None
    observer: Observer | None = None
    """Sees the invocation, its model calls and its tool calls (tracing); None: nobody watches."""
    output: OutputRun | None = None
    """Structured output (`output_type=`), None for plain text."""
    history: Sequence[ChatMessage] = ()
    """The conversation so far when the caller keeps it (`message_history=`); read only without memory."""


async def run_invocation(inv: Invocation, emit: Listener | None) -> Result[Any]:
    """Runs one invocation to its end. `emit` receives stream events; None means nobody listens, so the
    model is called whole rather than streamed."""
    if inv.observer is not None:
        return await inv.observer.invocation(inv, emit, _invoke)
    return await _invoke(inv, emit)


async def _invoke(inv: Invocation, emit: Listener | None) -> Result[str]:
    try:
        return await _run(inv, emit)
    except BaseExceptionGroup as group:
        error = _first_error(group)
        raise error from error.__cause__  # the error's own cause (a transport failure), not the group


async def _run(inv: Invocation, emit: Listener | None) -> Result[Any]:
    history: list[ChatMessage] = await inv.memory.messages() if inv.memory is not None else [*inv.history]
    unsaved: list[ChatMessage] = [inv.user_message]  # this invocation's messages not yet in memory
    added: list[ChatMessage] = []
    executions: list[ToolExecution] = []
    intermediate: list[ChatResponse] = []
    usage: TokenUsage | None = None
    limiter = anyio.CapacityLimiter(inv.options.max_concurrency) if inv.options.max_concurrency else None
    toolset = await _tools(inv, history)
    dynamic = inv.tool_provider is not None and bool(getattr(inv.tool_provider, "dynamic", False))
    prefix: list[ChatMessage] = [inv.system_message] if inv.system_message is not None else []
    typed = None if emit is None or emit.text_only else emit  # where events other than text go
    round = 0
    resumed = inv.approval.resumed if inv.approval is not None else None
    if resumed is not None:  # a paused round goes on: its calls run first, then the loop as usual
        unsaved, round = list(resumed.pending.messages), resumed.pending.round - 1
        if inv.memory is None:  # the state carried the history too: for the model, not for new_messages
            history, unsaved = _split_history(unsaved, resumed.pending.user_message)
    while True:
        if dynamic and round > 0:
            toolset = await _tools(inv, history + unsaved)
        request = ChatRequest(prefix + history + unsaved, toolset.specifications)
        if inv.output is not None:
            request = inv.output.request(request)
        may_run_tools = round < inv.max_tool_rounds
        async with anyio.create_task_group() as task_group:
            calls = _Calls(task_group, inv, toolset, round + 1, limiter, typed, eager=may_run_tools)
            if resumed is not None:  # the paused response, claimed: its approved calls run now
                assert inv.approval is not None
                response, resumed = await inv.approval.resume(toolset, inv), None
            elif emit is None:
                response = await inv.model.chat(request)
            else:
                response = await _stream_model(inv.model, request, round, emit, typed, calls, inv.output)
            log_model_call(inv, response, round)
            ai = response.ai_message
            if ai.tool_execution_requests:
                if response.finish_reason is FinishReason.LENGTH:
                    _refuse_cut_calls(ai.tool_execution_requests)
                if not may_run_tools:
                    raise ToolRoundsExceededError(
                        f"The model asked for tools again after {inv.max_tool_rounds} tool rounds "
                        f"(max_tool_rounds={inv.max_tool_rounds}); raise the limit or check the tools' "
                        "results",
                        max_tool_rounds=inv.max_tool_rounds,
                    )
                requests = calls.start_all(ai.tool_execution_requests)
                if requests is not ai.tool_execution_requests:  # ids were missing or repeated
                    ai = msgspec.structs.replace(ai, tool_execution_requests=requests)
                    response = msgspec.structs.replace(response, ai_message=ai)
                if typed is not None:
                    await typed(IntermediateResponse(response, round))
            else:
                calls.discard()
        usage = response.token_usage if usage is None else usage + response.token_usage
        if not ai.tool_execution_requests:
            output: Any = ai.text
            if inv.output is not None:
                try:
                    output = await inv.output.answer(ai, _context(inv, round))
                except RetryOutput as retry:  # not a valid output: the model gets a correction
                    intermediate.append(response)
                    unsaved += [ai, retry.message]
                    continue
            await _commit(inv.memory, [*unsaved, ai], final=True)
            added += [*unsaved, ai]
            finish = response.finish_reason
            return _result(inv, ai.text, finish, executions, intermediate, response, usage, added, output)

        # Every call has finished: commit the round as one unit, in the model's call order.
        round += 1
        round_executions = calls.executions()
        executions += round_executions
        intermediate.append(response)
        if inv.approval is not None and inv.approval.waiting:  # a person decides: nothing is committed
            carried = unsaved if inv.memory is not None else history + unsaved
            pending = await inv.approval.pause(inv, response, round, round_executions, carried, typed)
            finish = FinishReason.APPROVAL_REQUIRED
            return _result(inv, None, finish, executions, intermediate, response, usage, added, None, pending)
        messages = [*unsaved, ai, *(e.result_message() for e in round_executions)]
        # Judged before the commit: retries used up (OutputValidationError) store nothing of the round.
        output = NOT_FOUND if inv.output is None else inv.output.found(round_executions)
        behaviours = [e.return_behavior for e in round_executions]
        immediate = should_return_immediately(behaviours, any(e.has_failed for e in round_executions))
        if output is NOT_FOUND and not immediate and inv.output is not None and inv.output.retrying:
            unsaved = messages  # an output being corrected: stored with the valid one, or never
            continue
        await _commit(inv.memory, messages)
        history += messages
        added += messages
        unsaved = []
        if output is not NOT_FOUND:  # a valid output call ends the invocation
            finish = FinishReason.STOP
            return _result(inv, ai.text, finish, executions, intermediate, response, usage, added, output)
        if immediate:
            finish = FinishReason.TOOL_EXECUTION
            return _result(inv, None, finish, executions, intermediate, response, usage, added, None)


def _split_history(
    messages: list[ChatMessage], user_message: UserMessage
) -> tuple[list[ChatMessage], list[ChatMessage]]:
    """A memory-less paused state's messages as (the history before the invocation, the invocation's own):
    the invocation's part starts at its user message, the last one equal to it."""
    for start in range(len(messages) - 1, -1, -1):
        if messages[start] == user_message:
            return messages[:start], messages[start:]
    return [], messages


async def _stream_model(
    model: ChatModel,
    request: ChatRequest,
    round: int,
    emit: Listener,
    typed: Listener | None,
    calls: _Calls,
    output: OutputRun | None,
) -> ChatResponse:
    """Streams one model call, forwarding its pieces (text to `emit`, the others to `typed` if anyone wants
    them) and starting each tool call as soon as it is whole. Structured output watches the stream for its
    partial values."""
    response: ChatResponse | None = None
    text_nowait = emit.text_nowait
    async with aclosing(model.stream(request)) as source:  # type: ignore[type-var]
        events = source if output is None else output.watch(source, round, typed)
        async for event in events:
            kind = type(event)
            if kind is TextDelta:
                text: str = event.text  # type: ignore[union-attr]
                if not text_nowait(text, round):
                    await emit(PartialResponse(text, round))
            elif kind is ToolCallDelta:
                if typed is not None:
                    e: Any = event
                    await typed(PartialToolCall(e.index, e.id, e.name, e.arguments, round))
            elif kind is ToolCallComplete:
                calls.start_early(event.index, event.request)  # type: ignore[union-attr]
            elif kind is ThinkingDelta:
                if typed is not None:
                    await typed(PartialThinking(event.text, round))  # type: ignore[union-attr]
            elif kind is GenerationProgress:
                if typed is not None:
                    p: Any = event
                    progress = (p.prompt_processed, p.prompt_tokens, p.cached_tokens, p.generated_tokens)
                    await typed(ModelProgress(*progress, round))
            elif kind is ResponseComplete:
                response = event.response  # type: ignore[union-attr]
    if response is None:
        raise BadResponseError("The model's stream ended without a final response")
    return response


class _Calls:
    """The tool calls of one response, each running in the round's task group as soon as it is known.

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
        "_limiter",
        "_reported",
        "_round",
        "_silent",
        "_tg",
        "_toolset",
        "_used",
    )

    def __init__(
        self,
        task_group: TaskGroup,
        inv: Invocation,
        toolset: Toolset,
        round: int,
        limiter: anyio.CapacityLimiter | None,
        emit: Listener | None,
        *,
        eager: bool,
    ) -> None:
        self._tg = task_group
        self._inv = inv
        self._toolset = toolset
        self._round = round
        self._limiter = limiter
        self._emit = emit
        self._eager = eager and inv.eager_tools
        self._by_index: dict[int, ToolExecutionRequest] = {}  # as the model sent them
        self._ids: dict[int, str] = {}  # the id each call carries from here on
        self._used: set[str] = set()
        self._executions: dict[int, ToolExecution] = {}
        self._in_order: anyio.Lock | None = None  # ordered_events: one call reports at a time
        self._reported = 0  # ordered_events: the next index to report
        self._silent: set[int] = set()  # calls reported before a pause: not again when resumed

    def start_early(self, index: int, request: ToolExecutionRequest) -> None:
        """A call became whole while the model still streams: start it now (eager tools)."""
        limit = self._inv.options.max_calls
        if self._eager and (limit is None or index < limit) and is_whole_object(request.arguments):
            self._start(index, request, index + 1)  # else it waits for the end of the response

    def start_all(self, requests: Sequence[ToolExecutionRequest]) -> Sequence[ToolExecutionRequest]:
        """The response is complete: start every call not started yet, check the early ones, and return the
        calls as they go to memory (`requests` itself unless an id had to be replaced)."""
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
        self._used.add(call_id)
        request = _with_id(request, call_id)
        limit = self._inv.options.max_calls
        if limit is not None and index >= limit:
            execution = rejected_call(request, index, self._round, total, limit, self._inv.options.now)
            self._executions[index] = execution
            if self._emit is not None:
                self._tg.start_soon(self._report, execution, index)
            return
        reserve = getattr(self._inv.options.tool_runner, "reserve", None)
        if reserve is not None:
            reserve(request)  # in call order, before any call runs (see ToolRunner)
        self._tg.start_soon(self._run, index, request)

    async def _run(self, index: int, request: ToolExecutionRequest) -> None:
        inv, emit = self._inv, self._emit
        gate = inv.approval
        if gate is not None and gate.concerns(request.name, self._toolset):
            settled = await gate.settle(request, index, self._round, self._toolset, inv)
            if settled is not None:  # denied, waiting for a person, or finished before a pause
                if settled.execution is None or not settled.report:
                    self._silent.add(index)  # waits for a person, or was reported before the pause
                if settled.execution is not None:
                    self._executions[index] = settled.execution
                if emit is not None:
                    await self._report(settled.execution, index)
                return
        on_start = None
        if emit is not None:
            round = self._round

            async def on_start(index: int, request: ToolExecutionRequest) -> None:
                await emit(BeforeToolExecution(request, index, round))

        run = functools.partial(
            execute_tool_call,
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
        runner = inv.options.tool_runner
        call = run() if runner is None else runner(request, run)
        observer = inv.observer
        execution = await (
            call if observer is None else observer.tool_call(call, request, index, self._round)
        )
        log_tool_call(execution)
        self._executions[index] = execution
        if emit is not None:
            await self._report(execution, index)

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


def _refuse_cut_calls(requests: Sequence[ToolExecutionRequest]) -> None:
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


def _with_id(request: ToolExecutionRequest, call_id: str) -> ToolExecutionRequest:
    return (
        request if request.id == call_id else ToolExecutionRequest(call_id, request.name, request.arguments)
    )


async def _tools(inv: Invocation, messages: list[ChatMessage]) -> Toolset:
    """The tools of this model call: the agent's (or the call's) plus what the tool provider adds."""
    if inv.tool_provider is None:
        return inv.tools
    request = ToolProviderRequest(inv.user_message, inv.memory_id, inv.invocation_id, tuple(messages))
    provided = await provide_tools(inv.tool_provider, request)
    return resolve_tools([inv.tools, provided]) if len(provided) else inv.tools


async def _commit(memory: ChatMemory | None, messages: list[ChatMessage], *, final: bool = False) -> None:
    """Writes one unit to memory; shielded, so a cancellation cannot leave half a round behind. The final
    unit goes to the memory's `add_final` when it has one (it may give the memory id back with it)."""
    if memory is not None:
        add = getattr(memory, "add_final", None) if final else None
        with anyio.CancelScope(shield=True):
            await (add or memory.add)(messages)


def _result(
    inv: Invocation,
    content: str | None,
    finish_reason: FinishReason | None,
    executions: list[ToolExecution],
    intermediate: list[ChatResponse],
    final: ChatResponse,
    usage: TokenUsage | None,
    added: list[ChatMessage],
    output: Any,
    pending: PendingApproval | None = None,
) -> Result[Any]:
    return Result(
        content=content,
        tool_executions=executions,
        token_usage=usage,
        finish_reason=finish_reason,
        intermediate_responses=intermediate,
        final_response=final,
        messages=tuple(added),
        memory_id=inv.memory_id,
        invocation_id=inv.invocation_id,
        output=output,
        pending=pending,
    )


def _context(inv: Invocation, round: int) -> ToolContext:
    """What an output validator gets outside a tool call (native and prompted modes)."""
    return ToolContext(inv.invocation_id, inv.memory_id, inv.context, None, round, inv.deadline)


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The error to raise for a task group's failure: its first real error, not a cancellation."""
    cancelled = anyio.get_cancelled_exc_class()
    first: BaseException | None = None
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            error = _first_error(error)
        if not isinstance(error, cancelled):
            return error
        first = first or error
    return first if first is not None else group
