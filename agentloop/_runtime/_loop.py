"""The execution loop of one invocation (one `chat()` or `stream()` call), top to bottom.

(all of it inside the scopes the seam's `halt` hooks give; the Result passes its `on_result` hooks)
loop:
  request  = system + memory + this invocation's messages, with this invocation's tools
  response = the model call through the seam: `wrap_model_call` of the features, then the user's; streamed
             through the `wrap_stream` hooks when someone listens, tool calls may start while it streams
             (the round's task group opens with the first call to start: a text answer runs without one).
             A resumed invocation's first response is its saved round's (an `on_resume` hook gives it)
  no tool calls -> the seam's `on_answer` hooks check it (ModelRetry: a correction, go on), commit, finish
  round += 1, at most max_tool_rounds
  run every call concurrently (`before_tool_call` in call order, then `wrap_tool_call`: features, the user's)
  some call DEFERRED (waits for a person) -> an `on_hold` hook saves the round, nothing committed, finish
  commit the round to memory as one unit (the AiMessage and every result, in call order)
  an answer from the `on_tool_round` hooks (checked by `on_answer` before the commit), or immediate -> finish

The loop knows features only through the seam (`Invocation.seam`, markers in `_hooks.py`) and declared
Protocols: `FinalCommitMemory`, `DynamicToolProvider`, `TextSinkModel` (the short way, a lazy task group)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, aclosing
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import msgspec

from .._conforms import conforms
from .._memory._chat import ChatMemory
from .._memory._history import split_history
from .._tools._execution import ExecutionOptions, should_return_immediately
from .._tools._toolset import ToolProvider, ToolProviderRequest, Toolset, provide_tools, resolve_tools
from .._values._context import ToolContext
from .._values._errors import BadResponseError, IllegalConfigurationError, ModelRetry, ToolRoundsExceededError
from .._values._events import (
    IntermediateResponse,
    ModelProgress,
    PartialResponse,
    PartialThinking,
    PartialToolCall,
    StreamEvent,
)
from .._values._messages import (
    ChatMessage,
    ChatRequest,
    ChatResponse,
    FinishReason,
    SystemMessage,
    TokenUsage,
    UserMessage,
)
from .._values._options import NO_OPTIONS, CallOptions
from .._values._result import Result
from ..models import (
    ChatModel,
    GenerationProgress,
    ResponseComplete,
    TextDelta,
    TextSinkModel,
    ThinkingDelta,
    ToolCallComplete,
    ToolCallDelta,
)
from ._calls import Calls, refuse_cut_calls
from ._hooks import NO_ANSWER
from ._observe import log_model_call
from ._outcome import Sofar, commit, first_error, outcome
from ._seam import (
    NO_MIDDLEWARE,
    Answer,
    CallContext,
    Halt,
    HeldRound,
    ModelCall,
    RoundEnd,
    Seam,
    Stop,
    StreamCall,
    ToolRound,
)

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
        """Delivers answer text that needs no wait or callback (hot path); False: send a PartialResponse."""

    text_sink: Callable[[str], bool] | None
    """`text_nowait` when only the text is wanted (else None): a model's `stream_text_to` pushes it there."""


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
    seam: Seam = NO_MIDDLEWARE  # the features' middleware, then the agent's, then the call's
    call_context: CallContext | None = None  # whose calls these are, as middleware sees them
    dynamic_tools: bool = False  # the tool provider is asked before every model call (DynamicToolProvider)
    call_options: CallOptions = NO_OPTIONS
    """The call's own `output_type` and `middleware`: a paused round keeps them."""
    history: Sequence[ChatMessage] = ()
    """The conversation so far when the caller keeps it (`message_history=`); read only without memory."""


async def run_invocation(inv: Invocation, emit: Listener | None) -> Result[Any]:
    """Runs one invocation to its end, inside the scopes of the seam's `halt` hooks (run control's cancel:
    cancelling one ends it at once, with a CANCELLED Result of what it committed before); the `on_result`
    hooks see the Result last. `emit` receives stream events; None means nobody listens, so the model is
    called whole rather than streamed."""
    sofar = Sofar()
    assert inv.call_context is not None
    halts = inv.seam.halted(inv.call_context) if inv.seam.halts else []
    result: Result[Any] | None = None
    try:
        with _scopes(halts):
            result = await _run(inv, emit, sofar)
    except BaseExceptionGroup as group:
        error = first_error(group)
        raise error from error.__cause__  # the error's own cause (a transport failure), not the group
    if result is None:  # a halt's scope was cancelled
        result = sofar.cancelled(inv, next((h.reason for h in halts if h.scope.cancel_called), None))
    return inv.seam.resulted(result) if inv.seam.results else result


def _scopes(halts: list[Halt]) -> AbstractContextManager[object, bool]:
    """The halts' cancel scopes as one: no frame or stack of its own for the usual one (run control's)."""
    if len(halts) == 1:
        return halts[0].scope
    stack: ExitStack[bool] = ExitStack()
    try:
        for halt in halts:
            stack.enter_context(halt.scope)
    except BaseException:
        stack.close()  # the scopes entered before the one that failed: none left open in this task
        raise
    return stack


async def _run(inv: Invocation, emit: Listener | None, sofar: Sofar) -> Result[Any]:
    history: list[ChatMessage] = await inv.memory.messages() if inv.memory is not None else [*inv.history]
    unsaved: list[ChatMessage] = [inv.user_message]  # this invocation's messages not yet in memory
    added, executions, intermediate = sofar.added, sofar.executions, sofar.intermediate
    usage: TokenUsage | None = None
    limiter = anyio.CapacityLimiter(inv.options.max_concurrency) if inv.options.max_concurrency else None
    toolset = await _tools(inv, history)
    prefix: list[ChatMessage] = [inv.system_message] if inv.system_message is not None else []
    typed = None if emit is None or emit.text_only else emit  # where events other than text go
    round = 0
    corrected = False  # an answer was sent back for correction: the messages wait for a valid one
    assert inv.call_context is not None
    resumed = await inv.seam.resumed(inv.call_context) if inv.seam.resume else None
    if resumed is not None:  # a saved round goes on: its calls run first, then the loop as usual
        unsaved, round = list(resumed.messages), resumed.round - 1
        if inv.memory is None:  # the state carried the history too: for the model, not for new_messages
            history, unsaved = split_history(unsaved, resumed.user_message)
    while True:
        if inv.dynamic_tools and round > 0:
            toolset = await _tools(inv, history + unsaved)
        request = ChatRequest(prefix + history + unsaved, toolset.specifications)
        may_run_tools = round < inv.max_tool_rounds
        async with Calls(inv, toolset, round + 1, limiter, typed, eager=may_run_tools) as calls:
            if resumed is not None:  # the saved response, claimed: its calls that did not finish run now
                calls.keep(resumed.executions)
                response, resumed = await resumed.claim(toolset, inv.memory), None
            elif inv.seam.model is None and emit is not None:  # streamed: no frame between loop and model
                response = await _stream_model(inv, inv.model, request, round, emit, typed, calls)
            else:
                response = await _model_call(inv, request, round, emit, typed, calls)
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
                requests = await calls.start_all(ai.tool_execution_requests)
                if requests is not ai.tool_execution_requests:  # ids were missing or repeated
                    ai = msgspec.structs.replace(ai, tool_execution_requests=requests)
                    response = msgspec.structs.replace(response, ai_message=ai)
                if typed is not None:
                    await typed(IntermediateResponse(response, round))
            else:
                calls.discard()
        usage = sofar.usage = response.token_usage if usage is None else usage + response.token_usage
        if not ai.tool_execution_requests:
            try:
                output: Any = await _answer(inv, response, ai.text, round)
            except ModelRetry as retry:  # not a valid answer: the model gets a correction
                intermediate.append(response)
                unsaved += [ai, UserMessage(retry.message)]
                corrected = True
                continue
            await commit(inv.memory, [*unsaved, ai], final=True)
            added += [*unsaved, ai]
            more = (
                await inv.seam.round_ended(RoundEnd(round, True, inv.call_context))
                if inv.seam.rounds
                else None
            )
            if more and not isinstance(more, Stop):  # messages came in meanwhile: the model answers them
                history, unsaved = [*history, *unsaved, ai], more
                intermediate.append(response)
                continue
            finish = response.finish_reason
            return outcome(inv, ai.text, finish, executions, intermediate, response, usage, added, output)

        # Every call has finished: commit the round as one unit, in the model's call order.
        round += 1
        round_executions = calls.executions()
        executions += round_executions
        intermediate.append(response)
        if calls.waiting:  # a deferred call waits (for a person): the round is held, nothing committed
            carried = unsaved if inv.memory is not None else history + unsaved
            held = HeldRound(
                response, round, tuple(round_executions), tuple(carried), inv.user_message,
                inv.call_context, inv.memory, inv.call_options, typed,
            )  # fmt: skip
            pending = await inv.seam.held(held)
            finish = FinishReason.APPROVAL_REQUIRED
            return outcome(inv, None, finish, executions, intermediate, response, usage, added, None, pending)
        messages = [*unsaved, ai, *(e.result_message() for e in round_executions)]
        # Judged before the commit: retries used up (OutputValidationError) store nothing of the round.
        output, correcting = NO_ANSWER, False
        if inv.seam.tool_round:
            finished = ToolRound(response, round, tuple(round_executions), inv.call_context)
            output, correcting = await inv.seam.round_answer(finished)
        behaviours = [e.return_behavior for e in round_executions]
        immediate = should_return_immediately(behaviours, any(e.has_failed for e in round_executions))
        corrected = corrected or correcting
        if output is not NO_ANSWER:
            try:
                output = await _answer(inv, response, output, round)
            except ModelRetry as retry:  # the output call's value is not accepted: a correction
                unsaved, output, corrected = [*messages, UserMessage(retry.message)], NO_ANSWER, True
                continue
        if output is NO_ANSWER and not immediate and corrected:
            unsaved = messages  # an output being corrected: stored with the valid one, or never
            continue
        await commit(inv.memory, messages)
        history += messages
        added += messages
        unsaved = []
        if output is not NO_ANSWER:  # a valid output call ends the invocation
            finish = FinishReason.STOP
            return outcome(inv, ai.text, finish, executions, intermediate, response, usage, added, output)
        if immediate:
            finish = FinishReason.TOOL_EXECUTION
            return outcome(inv, None, finish, executions, intermediate, response, usage, added, None)
        if inv.seam.rounds:  # between rounds: messages to add before the next model call, or a stop
            more = await inv.seam.round_ended(RoundEnd(round, False, inv.call_context))
            if isinstance(more, Stop):
                finish, reason = FinishReason.CANCELLED, more.reason
                return outcome(
                    inv, None, finish, executions, intermediate, response, usage, added, None, cancel=reason
                )
            unsaved = more


async def _model_call(
    inv: Invocation,
    request: ChatRequest,
    round: int,
    emit: Listener | None,
    typed: Listener | None,
    calls: Calls,
) -> ChatResponse:
    """One model call, through the middleware's `wrap_model_call` hooks when there are any. A response a
    middleware gave without calling the model (a cache, a guard) reaches a streaming consumer as one text
    delta."""
    chain = inv.seam.model
    if chain is None:
        if emit is None:
            return await inv.model.chat(request)
        return await _stream_model(inv, inv.model, request, round, emit, typed, calls)
    if calls.eager and emit is not None and not inv.seam.scope_free_model:  # the group opens outside a scope
        await calls.open()
    streamed = False

    async def call_model(call: ModelCall) -> ChatResponse:
        nonlocal streamed
        model = inv.model if call.model is None else call.model
        if emit is None:
            return await model.chat(call.request)
        streamed = True
        return await _stream_model(inv, model, call.request, round, emit, typed, calls)

    assert inv.call_context is not None
    response: object = await chain(ModelCall(request, round, inv.call_context, inv.model), call_model)
    if not isinstance(response, ChatResponse):
        names = ", ".join(type(m).__qualname__ for m in inv.seam.middleware)
        raise IllegalConfigurationError(
            f"A wrap_model_call middleware ({names}) returned {response!r}; return the ChatResponse that "
            "`await call_next(call)` gave (or one you built, e.g. ChatResponse(AiMessage('...')))"
        )
    text = response.ai_message.text
    if emit is not None and not streamed and text:
        await emit(PartialResponse(text, round))
    return response


async def _answer(inv: Invocation, response: ChatResponse, output: Any, round: int) -> Any:
    """The output of the answer ending the invocation, through the seam's `on_answer` hooks."""
    if not inv.seam.answer:
        return output
    return await inv.seam.answered(Answer(response, output, round, _context(inv, round)))


async def _stream_model(
    inv: Invocation,
    model: ChatModel,
    request: ChatRequest,
    round: int,
    emit: Listener,
    typed: Listener | None,
    calls: Calls,
) -> ChatResponse:
    """Streams one model call, forwarding its pieces (text to `emit`, the others to `typed` if anyone wants
    them) and starting each tool call as soon as it is whole. The seam's `wrap_stream` hooks see the events
    first (structured output's partial values)."""
    short = not inv.seam.stream and conforms(model, TextSinkModel)  # keeps its scopes between yields
    if calls.eager and not short:  # the round's task group first: a `yield` may sit in a scope (PEP 789)
        await calls.open()
    response: ChatResponse | None = None
    text_nowait = emit.text_nowait
    sink = emit.text_sink if short else None  # the text's short way
    stream = model.stream(request) if sink is None else model.stream_text_to(request, sink)  # type: ignore[attr-defined]
    async with aclosing(stream) as source:  # type: ignore[type-var]
        events = source
        if inv.seam.stream:
            assert inv.call_context is not None
            events = inv.seam.streamed(source, StreamCall(round, inv.call_context, typed))
        async for event in events:
            kind = type(event)
            if kind is TextDelta:
                text: str = event.text  # type: ignore[union-attr]
                if not text_nowait(text, round):
                    await emit(PartialResponse(text, round))
            elif kind is ToolCallDelta and typed is not None:
                e: Any = event
                await typed(PartialToolCall(e.index, e.id, e.name, e.arguments, round))
            elif kind is ToolCallComplete:
                await calls.start_early(event.index, event.request)  # type: ignore[union-attr]
            elif kind is ThinkingDelta and typed is not None:
                await typed(PartialThinking(event.text, round))  # type: ignore[union-attr]
            elif kind is GenerationProgress and typed is not None:
                await typed(ModelProgress.of(event, round))  # type: ignore[arg-type]
            elif kind is ResponseComplete:
                response = event.response  # type: ignore[union-attr]
    if response is None:
        raise BadResponseError("The model's stream ended without a final response")
    return response


async def _tools(inv: Invocation, messages: list[ChatMessage]) -> Toolset:
    """The tools of this model call: the agent's (or the call's) plus what the tool provider adds."""
    if inv.tool_provider is None:
        return inv.tools
    request = ToolProviderRequest(inv.user_message, inv.memory_id, inv.invocation_id, tuple(messages))
    provided = await provide_tools(inv.tool_provider, request)
    return resolve_tools([inv.tools, provided]) if len(provided) else inv.tools


def _context(inv: Invocation, round: int) -> ToolContext:
    """What an output validator gets outside a tool call (native and prompted modes)."""
    return ToolContext(inv.invocation_id, inv.memory_id, inv.context, None, round, inv.deadline)
