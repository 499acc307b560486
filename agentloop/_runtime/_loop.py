"""The execution loop of one invocation (one `chat()` or `stream()` call), top to bottom.

loop:
  request  = system + memory + this invocation's messages, with this invocation's tools
  response = the model call through the seam: `wrap_model_call` of the features (structured output shapes
             the request), then the user's; streamed when someone listens (structured output watches it
             for partial outputs), tool calls may start while it streams. A resumed invocation's first
             response is its saved round's (an `on_resume` hook gives it; calls that had finished are kept)
  no tool calls -> the seam's `on_answer` hooks check it (ModelRetry: a correction, go on), commit, finish
  round += 1, at most max_tool_rounds
  run every call concurrently (`wrap_tool_call` of the features, then the user's, the tool runner)
  some call DEFERRED (waits for a person) -> an `on_hold` hook saves the round, nothing committed, finish
  commit the round to memory as one unit (the AiMessage and every result, in call order)
  a valid output call (checked by `on_answer` before the commit), or immediate return -> finish

The loop knows features only through the seam (`Invocation.seam`: tracing too) and declared Protocols:
`OutputHook` (`_hooks.py`: a round's output call, partial outputs), `ReservingToolRunner`, the durable clock
and ids (`ExecutionOptions`, `invocation_id`), `FinalCommitMemory`, `DynamicToolProvider`."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import msgspec

from .._conforms import conforms
from .._memory._chat import ChatMemory, FinalCommitMemory
from .._memory._history import split_history
from .._tools._execution import ExecutionOptions, should_return_immediately
from .._tools._toolset import ToolProvider, ToolProviderRequest, Toolset, provide_tools, resolve_tools
from .._values._context import ToolContext
from .._values._errors import ModelRetry, ToolRoundsExceededError
from .._values._events import (
    IntermediateResponse,
    StreamEvent,
)
from .._values._messages import (
    AiMessage,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    FinishReason,
    SystemMessage,
    TokenUsage,
    ToolExecutionRequest,
    UserMessage,
)
from .._values._options import NO_OPTIONS, CallOptions
from .._values._records import ToolExecution
from .._values._result import Result
from ..models import (
    ChatModel,
)
from ._calls import Calls, refuse_cut_calls
from ._hooks import NOT_FOUND, OutputHook
from ._model_call import model_call
from ._observe import log_model_call
from ._seam import NO_MIDDLEWARE, Answer, CallContext, HeldRound, RoundEnd, RoundStart, Seam

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

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
    agent_name: str | None = None
    output: OutputHook | None = None  # structured output (`output_type=`), None for plain text
    seam: Seam = NO_MIDDLEWARE  # the features' middleware, then the agent's, then the call's
    call_context: CallContext | None = None  # whose calls these are, as middleware sees them
    dynamic_tools: bool = False  # the tool provider is asked before every model call (DynamicToolProvider)
    reserve: Callable[[ToolExecutionRequest], None] | None = None
    """The tool runner's `reserve(request)` when it is a `ReservingToolRunner`, else None."""
    call_options: CallOptions = NO_OPTIONS
    """The call's own `output_type` and `middleware`: a paused round keeps them."""
    history: Sequence[ChatMessage] = ()
    """The conversation so far when the caller keeps it (`message_history=`); read only without memory."""
    price_source: Any = None
    """What `Result.cost()` prices the responses with (the agent's `pricing=`), carried into the Result."""
    stop: Stoppable | None = None
    """What may end the invocation from outside at once (run control's handle); None: nothing can."""


class Stoppable(Protocol):
    """Ends an invocation from outside at once: the loop runs in `scope`; cancelling it gives a
    `FinishReason.CANCELLED` Result with `reason`. `close()` is called when the invocation ends."""

    scope: anyio.CancelScope
    reason: str | None

    def close(self) -> None: ...


async def run_invocation(inv: Invocation, emit: Listener | None) -> Result[Any]:
    """Runs one invocation to its end. `emit` receives stream events; None means nobody listens, so the
    model is called whole rather than streamed. Cancelling `inv.stop`'s scope ends it at once with a
    `FinishReason.CANCELLED` Result holding what the rounds committed before."""
    tally = _Tally()
    stop = inv.stop
    try:
        if stop is None:
            return await _run(inv, emit, tally)
        with stop.scope:
            return await _run(inv, emit, tally)
    except BaseExceptionGroup as group:
        error = _first_error(group)
        raise error from error.__cause__  # the error's own cause (a transport failure), not the group
    finally:
        if stop is not None:
            stop.close()
    final = tally.last or ChatResponse(AiMessage(""), finish_reason=FinishReason.CANCELLED)
    return _result(inv, tally, None, FinishReason.CANCELLED, final, None, cancel_reason=stop.reason)


async def _run(inv: Invocation, emit: Listener | None, tally: _Tally) -> Result[Any]:
    history: list[ChatMessage] = await inv.memory.messages() if inv.memory is not None else [*inv.history]
    unsaved: list[ChatMessage] = [inv.user_message]  # this invocation's messages not yet in memory
    added, executions, intermediate = tally.added, tally.executions, tally.intermediate
    limiter = anyio.CapacityLimiter(inv.options.max_concurrency) if inv.options.max_concurrency else None
    toolset = await _tools(inv, history)
    prefix: list[ChatMessage] = [inv.system_message] if inv.system_message is not None else []
    typed = None if emit is None or emit.text_only else emit  # where events other than text go
    round = 0
    corrected = False  # an answer was sent back for correction: the messages wait for a valid one
    context = inv.call_context
    assert context is not None
    resumed = await inv.seam.resumed(context) if inv.seam.resume else None
    if resumed is not None:  # a saved round goes on: its calls run first, then the loop as usual
        unsaved, round = list(resumed.messages), resumed.round - 1
        if inv.memory is None:  # the state carried the history too: for the model, not for new_messages
            history, unsaved = split_history(unsaved, resumed.user_message)
    while True:
        if inv.seam.round_start and resumed is None:  # messages handed in before the model call (steering)
            unsaved += await inv.seam.starting(RoundStart(round, context))
        if inv.dynamic_tools and round > 0:
            toolset = await _tools(inv, history + unsaved)
        request = ChatRequest(prefix + history + unsaved, toolset.specifications)
        may_run_tools = round < inv.max_tool_rounds
        async with anyio.create_task_group() as task_group:
            calls = Calls(task_group, inv, toolset, round + 1, limiter, typed, eager=may_run_tools)
            if resumed is not None:  # the saved response, claimed: its calls that did not finish run now
                calls.keep(resumed.executions)
                response, resumed = await resumed.claim(toolset, inv.memory), None
            else:
                response = await model_call(inv, request, round, emit, typed, calls)
            log_model_call(inv, response, round)
            ai = response.ai_message
            if ai.tool_execution_requests:
                if response.finish_reason is FinishReason.LENGTH:
                    refuse_cut_calls(ai.tool_execution_requests)
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
        tally.count(response)
        if not ai.tool_execution_requests:
            try:
                output: Any = await _answer(inv, response, ai.text, round)
            except ModelRetry as retry:  # not a valid answer: the model gets a correction
                intermediate.append(response)
                unsaved += [ai, UserMessage(retry.message)]
                corrected = True
                continue
            await _commit(inv.memory, [*unsaved, ai], final=True)
            added += [*unsaved, ai]
            more = await inv.seam.starting(RoundStart(round, context, True)) if inv.seam.round_start else ()
            if more:  # a message came in as it was ending (steering): the model answers it too
                history, unsaved, corrected = history + unsaved + [ai], list(more), False
                intermediate.append(response)
                tally.last = response
                continue
            return _result(inv, tally, ai.text, response.finish_reason, response, output)

        # Every call has finished: commit the round as one unit, in the model's call order.
        round += 1
        round_executions = calls.executions()
        executions += round_executions
        intermediate.append(response)
        if calls.waiting:  # a deferred call waits (for a person): the round is held, nothing committed
            carried = unsaved if inv.memory is not None else history + unsaved
            held = HeldRound(
                response, round, tuple(round_executions), tuple(carried), inv.user_message,
                context, inv.memory, inv.call_options, typed,
            )  # fmt: skip
            pending = await inv.seam.held(held)
            finish = FinishReason.APPROVAL_REQUIRED
            return _result(inv, tally, None, finish, response, None, pending)
        messages = [*unsaved, ai, *(e.result_message() for e in round_executions)]
        # Judged before the commit: retries used up (OutputValidationError) store nothing of the round.
        output = NOT_FOUND if inv.output is None else inv.output.found(round_executions)
        behaviours = [e.return_behavior for e in round_executions]
        immediate = should_return_immediately(behaviours, any(e.has_failed for e in round_executions))
        corrected = corrected or (inv.output is not None and inv.output.retrying)
        if output is not NOT_FOUND:
            try:
                output = await _answer(inv, response, output, round)
            except ModelRetry as retry:  # the output call's value is not accepted: a correction
                unsaved, output, corrected = [*messages, UserMessage(retry.message)], NOT_FOUND, True
                continue
        if output is NOT_FOUND and not immediate and corrected:
            unsaved = messages  # an output being corrected: stored with the valid one, or never
            continue
        await _commit(inv.memory, messages)
        history += messages
        added += messages
        unsaved = []
        tally.last = response
        if output is not NOT_FOUND:  # a valid output call ends the invocation
            return _result(inv, tally, ai.text, FinishReason.STOP, response, output)
        if immediate:
            return _result(inv, tally, None, FinishReason.TOOL_EXECUTION, response, None)
        if inv.seam.round_end and (stop := await inv.seam.ended(RoundEnd(round, context, tuple(messages)))):
            return _result(inv, tally, None, stop.finish_reason, response, None, cancel_reason=stop.reason)


async def _answer(inv: Invocation, response: ChatResponse, output: Any, round: int) -> Any:
    """The output of the answer ending the invocation, through the seam's `on_answer` hooks."""
    if not inv.seam.answer:
        return output
    return await inv.seam.answered(Answer(response, output, round, _context(inv, round)))


async def _tools(inv: Invocation, messages: list[ChatMessage]) -> Toolset:
    """The tools of this model call: the agent's (or the call's) plus what the tool provider adds."""
    if inv.tool_provider is None:
        return inv.tools
    request = ToolProviderRequest(inv.user_message, inv.memory_id, inv.invocation_id, tuple(messages))
    provided = await provide_tools(inv.tool_provider, request)
    return resolve_tools([inv.tools, provided]) if len(provided) else inv.tools


async def _commit(memory: ChatMemory | None, messages: list[ChatMessage], *, final: bool = False) -> None:
    """Writes one unit to memory; shielded, so a cancellation cannot leave half a round behind. The final
    unit goes to `add_final` of a `FinalCommitMemory` (it may give the memory id back with it)."""
    if memory is not None:
        with anyio.CancelScope(shield=True):
            if final and conforms(memory, FinalCommitMemory):
                await memory.add_final(messages)
            else:
                await memory.add(messages)


@dataclass(slots=True)
class _Tally:
    """What an invocation's Result reports, kept as it goes (a cancelled one reports it too)."""

    added: list[ChatMessage] = field(default_factory=list)  # committed to memory
    executions: list[ToolExecution] = field(default_factory=list)
    intermediate: list[ChatResponse] = field(default_factory=list)
    usage: TokenUsage | None = None
    last: ChatResponse | None = None  # the response of the last round committed

    def count(self, response: ChatResponse) -> None:
        usage = response.token_usage
        self.usage = usage if self.usage is None else self.usage + usage


def _result(
    inv: Invocation,
    tally: _Tally,
    content: str | None,
    finish_reason: FinishReason | None,
    final: ChatResponse,
    output: Any,
    pending: Any = None,
    *,
    cancel_reason: str | None = None,
) -> Result[Any]:
    return Result(
        content=content,
        tool_executions=tally.executions,
        token_usage=tally.usage,
        finish_reason=finish_reason,
        intermediate_responses=tally.intermediate,
        final_response=final,
        messages=tuple(tally.added),
        memory_id=inv.memory_id,
        invocation_id=inv.invocation_id,
        output=output,
        pending=pending,
        price_source=inv.price_source,
        cancel_reason=cancel_reason,
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
