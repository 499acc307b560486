"""The seam: `Middleware` around model calls, tool calls and whole invocations.

Every feature that changes what an invocation does plugs in here instead of branching inside the loop. A
middleware overrides the hooks it needs; each hook gets the call and `call_next`, and may change the call
(`call.replace(...)`), call `call_next` again (retry), or return without calling it (cache, guard, deny).

The loop builds one `Seam` per invocation from the agent's and the call's middleware (outermost first), with
the built-in features' middleware (structured output, approval) outside them (`Seam.with_features`). A hook
no middleware overrides is not in any chain, so an agent without middleware or features pays one attribute
test per model call and per tool call, nothing more.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

import anyio
import msgspec

from .._tools._tool import Tool
from .._values._context import ToolContext
from .._values._errors import IllegalConfigurationError
from .._values._messages import (
    AiMessage,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    ToolExecutionRequest,
    UserMessage,
)
from .._values._records import ToolExecution
from .._values._result import Result

# Imported for real: help() and typing.get_type_hints() resolve `wrap_stream`'s annotations here.
from ..models._base import ModelEvent
from ._hooks import CORRECTING, NO_ANSWER

__all__ = [
    "NO_MIDDLEWARE",
    "Answer",
    "CallContext",
    "Halt",
    "HeldRound",
    "InvocationCall",
    "Middleware",
    "ModelCall",
    "NextInvocation",
    "NextModelCall",
    "NextToolCall",
    "RoundEnd",
    "Seam",
    "Stop",
    "StreamCall",
    "ToolCall",
    "ToolRound",
    "check_middleware",
]

_C = TypeVar("_C")
_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class CallContext:
    """Whose call it is: the agent, this invocation's id, its memory id and the `context=` mapping; and the
    names of this invocation's output tools (structured output in the tool mode; empty otherwise), which
    tell an output call from a function call by what it is, whatever the names look like."""

    agent: Any
    invocation_id: str
    memory_id: Any
    context: Mapping[str, Any]
    output_tools: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One model call: the request as it will be sent, its round (0 for the first call), whose call it is,
    and the model it goes to (None: the agent's). `call.replace(model=...)` sends it to another model."""

    request: ChatRequest
    round: int
    context: CallContext
    model: Any = None

    def replace(self, **changes: Any) -> ModelCall:
        """A copy with `changes` (e.g. `call.replace(request=...)`)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call: the model's request, the tool it names (None: no such tool), its `ToolContext`, its
    round (from 1) and its position in the response."""

    request: ToolExecutionRequest
    tool: Tool | None
    context: ToolContext
    round: int
    index: int

    def replace(self, **changes: Any) -> ToolCall:
        """A copy with `changes` (e.g. `call.replace(request=...)` to run other arguments)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True)
class InvocationCall:
    """One whole `chat()` / `stream()` / `resume()`: the user's message, whose call it is, the call's
    `output_type` (None: the agent's), and whether a consumer streams it."""

    message: UserMessage
    context: CallContext
    output_type: Any = None
    streaming: bool = False

    def replace(self, **changes: Any) -> InvocationCall:
        """A copy with `changes` (e.g. `call.replace(message=UserMessage(...))`)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True)
class Answer:
    """The answer about to end an invocation, as `Middleware.on_answer` sees it: the model's `response`
    (its `ai_message` is plain text, or holds the output tool call that gave the output), the `output` so
    far (the text, or the value structured output made of it), the model call's `round`, and `context`
    (the `ToolContext` of the invocation: its ids, `context=` mapping and deadline)."""

    response: ChatResponse
    output: Any
    round: int
    context: ToolContext

    @property
    def message(self) -> AiMessage:
        """The model's message that holds the answer."""
        return self.response.ai_message

    def replace(self, **changes: Any) -> Answer:
        """A copy with `changes` (e.g. `answer.replace(output=...)`)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True)
class RoundEnd:
    """A point between two model calls, as `Middleware.after_round` sees it: the round just committed to
    memory (`round`: tool rounds so far), `final` when it was the text answer about to end the invocation,
    and `context` (whose invocation)."""

    round: int
    final: bool
    context: CallContext


@dataclass(frozen=True, slots=True)
class Stop:
    """What `Middleware.after_round` returns to end the invocation there: its Result has `finish_reason`
    `FinishReason.CANCELLED` and `cancel_reason` `reason`. Everything up to this point stays committed."""

    reason: str | None = None


class Halt(Protocol):
    """What `Middleware.halt` gives: a cancel scope the invocation runs in, made for this invocation alone.
    Cancelling `scope` (from any task of the event loop) ends the invocation at once: the model call and
    running tools are cancelled, nothing of the round in flight is committed, and the Result (`finish_reason`
    `CANCELLED`, `cancel_reason` the `reason` read once it ended) holds what was committed before."""

    @property
    def scope(self) -> anyio.CancelScope: ...
    @property
    def reason(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class HeldRound:
    """A round in which some call waits (its `wrap_tool_call` returned `DEFERRED`): nothing of it is
    committed, and `Middleware.on_hold` saves what going on later needs. `response` holds the round's
    calls, `round` counts from 1, `finished` are its calls that ran, `messages` what memory has not
    received yet (with the history before them when the invocation has no memory), `memory` the
    invocation's memory (None without), `call_options` the call's own options (opaque: what a resume runs
    under), `announce(event)` streams an event to the consumer (None when nobody listens)."""

    response: ChatResponse
    round: int
    finished: tuple[ToolExecution, ...]
    messages: tuple[ChatMessage, ...]
    user_message: UserMessage
    context: CallContext
    memory: Any
    call_options: Any
    announce: Callable[[Any], Awaitable[None]] | None


@dataclass(frozen=True, slots=True)
class StreamCall:
    """One streamed model response, as `Middleware.wrap_stream` sees it: its `round` (0 for the first model
    call), whose call it is, and `announce(event)`, which streams an event of your own (e.g. a
    `PartialOutput`) to the consumer; None when nobody listens for events other than the answer text."""

    round: int
    context: CallContext
    announce: Callable[[Any], Awaitable[None]] | None


@dataclass(frozen=True, slots=True)
class ToolRound:
    """A tool round whose calls all finished, as `Middleware.on_tool_round` sees it before it is committed:
    the model's `response` (its calls), the round's number (from 1), its `executions` in call order, and whose
    call it is."""

    response: ChatResponse
    round: int
    executions: tuple[ToolExecution, ...]
    context: CallContext


class SavedRound(Protocol):
    """A held round that an invocation goes on from (`Middleware.on_resume`): its calls that finished are
    kept, the others run, then the loop goes on as usual."""

    @property
    def messages(self) -> tuple[ChatMessage, ...]: ...

    @property
    def round(self) -> int: ...

    @property
    def user_message(self) -> UserMessage: ...

    @property
    def executions(self) -> tuple[ToolExecution, ...]:
        """The round's calls that finished before it was held: kept, never run again."""
        ...

    async def claim(self, tools: Any, memory: Any) -> ChatResponse:
        """Takes the saved round (once) and gives back its response, to run as if the model just sent it;
        `tools` is the invocation's toolset (`name in tools`)."""
        ...


NextModelCall = Callable[[ModelCall], Awaitable[ChatResponse]]
"""`call_next` of `Middleware.wrap_model_call`: runs the rest of the chain (the inner middleware, then the
model) on a call and returns its response; call it zero, one or several times."""
NextToolCall = Callable[[ToolCall], Awaitable["ToolExecution"]]
"""`call_next` of `Middleware.wrap_tool_call`: runs the rest of the chain and the tool on a call and returns
its `ToolExecution` (a failed tool is an execution with `has_failed`, not an exception)."""
NextInvocation = Callable[[InvocationCall], Awaitable["Result[Any]"]]
"""`call_next` of `Middleware.wrap_invocation`: runs the rest of the chain and the whole invocation (every
model call and tool round) and returns its `Result`."""


class Middleware:
    """Base class of middleware: override the hooks you need (all async, all optional).

    - `wrap_model_call(call, call_next) -> ChatResponse`: around one model call. `await call_next(call)`
      runs the model (streaming to the consumer as usual) and returns the whole response.
    - `wrap_tool_call(call, call_next) -> ToolExecution`: around one tool call (each runs in its own task,
      concurrently with the response's other calls).
    - `wrap_invocation(call, call_next) -> Result`: around one whole invocation.
    - `on_hold(held) -> saved state` / `on_resume(context) -> SavedRound`: a round in which a call of
      yours waits (your `wrap_tool_call` returned `DEFERRED`) is held, not committed: save it and return
      what the caller goes on with (`Result.pending`); a later invocation goes on from it when your
      `on_resume` returns it. Both return None when the round is not yours.
    - `on_answer(answer) -> output`: the answer about to end the invocation (a text answer, or the value of
      an output tool call), before anything of it is stored. Return the output (`answer.output`, or another
      value); raise `ModelRetry(message)` to send `message` to the model as a correction and go on.
    - `wrap_stream(events, call) -> events`: the events of one streamed model response (`TextDelta`,
      `ToolCallDelta`, ...): return them (or an async iterator over them) passed on, changed or held back;
      `call.announce(event)` streams events of your own (partial outputs). Not called when nobody streams.
    - `on_tool_round(round) -> output`: a tool round whose calls finished, before it is committed. Return
      the value that ends the invocation (it goes through `on_answer` as the answer's output), `NO_ANSWER`,
      or `CORRECTING` (no answer yet, one is being corrected: the messages wait to be stored with it).
    - `after_round(end) -> messages | Stop | None`: a tool round (or the final text answer, `end.final`)
      was committed. Return user messages to add before the next model call (after a final answer, the
      model is called once more to answer them), `Stop(reason)` to end the invocation here (ignored after
      a final answer), or None to go on as planned. Run control (`cancel(after_round=True)`, `steer()`)
      is built on it, asked after the middleware's hooks (so each hears every round that committed).
    - `before_tool_call(call) -> None` (not async): a tool call is taken on, in the model's call order, in
      the invocation's own task, before the call's task starts (and before any `wrap_tool_call` sees it;
      whether it then runs, is denied or waits; a call past the per-response cap is not taken on). A
      durable engine numbers its steps here, so a replay pairs each call with its own record whatever
      order the calls' tasks reach it in. Do not block.
    - `halt(context) -> Halt | None` (not async): a cancel scope of yours that the invocation runs in
      (`Halt`): cancel it to end the invocation at once with a `CANCELLED` Result. Run control's
      `cancel()` is built on it.
    - `on_result(result) -> Result` (not async): the Result the invocation ended with (an answer, a held
      round, a cancellation), before anyone sees it: the caller, the stream's `CompleteResponse`, a call
      that steered into it. Return it, or a copy (`dataclasses.replace`). Pricing is built on it.

    Two attributes give an invocation's values instead of the agent's settings: `clock` (the records'
    times) and `id_factory` (its id), for a durable engine's deterministic ones.

    One instance may serve many invocations at once: keep per-invocation state keyed by
    `call.context.invocation_id` (or in the call), never in plain attributes.

    A tool call never starts before every `wrap_model_call` around its response has returned that response,
    so a middleware may still reject or replace it. That costs eager tools (calls starting while the model
    streams): a middleware whose `wrap_model_call` never changes nor rejects a response once the model gave
    it (it may change the request, or raise before calling the model) declares `allows_eager_tools = True`
    to keep them.
    """

    allows_eager_tools: bool = False
    """True: this `wrap_model_call` returns the response `call_next` gave, as it is (tracing, shaping the
    request, a budget of requests), so tool calls may start while the model still streams. Read from the
    instance, so a middleware may decide by its configuration (a property). Without a `wrap_model_call` of
    its own it does not matter."""

    holds_no_scope: bool = False
    """True: this `wrap_model_call` keeps no cancel scope open around `call_next` (no `fail_after`, no
    `move_on_after`, no task group), so a streamed round may open its task group inside the call, when its
    first tool call starts: a text answer then runs without one. False (the default): while tool calls may
    start during the stream (every model hook allows eager tools), the round opens its task group before the
    call, also for a text answer (a group opened inside your scope could not be left outside it). Without a
    `wrap_model_call` of its own it does not matter."""

    clock: Callable[[], datetime] | None = None
    """Where the invocation's records take their times (`ToolExecution.started_at` / `finished_at`, approval
    decisions), instead of the agent's `clock` (the system clock, UTC): a durable engine's deterministic
    clock. The outermost middleware that gives one wins. Durations still come from a monotonic clock."""

    id_factory: Callable[[], str] | None = None
    """Makes the id of an invocation this middleware is on (`Result.invocation_id`; fresh tool-call ids
    derive from it), instead of the agent's `id_factory`: a durable engine's run id. The outermost
    middleware that gives one wins; a resumed round keeps the id it paused with."""

    async def wrap_model_call(self, call: ModelCall, call_next: NextModelCall) -> ChatResponse:
        return await call_next(call)

    async def wrap_tool_call(self, call: ToolCall, call_next: NextToolCall) -> ToolExecution:
        return await call_next(call)

    async def wrap_invocation(self, call: InvocationCall, call_next: NextInvocation) -> Result[Any]:
        return await call_next(call)

    async def on_answer(self, answer: Answer) -> Any:
        return answer.output

    async def on_hold(self, held: HeldRound) -> Any:
        return None

    async def on_resume(self, context: CallContext) -> SavedRound | None:
        return None

    def wrap_stream(self, events: AsyncIterator[ModelEvent], call: StreamCall) -> AsyncIterator[ModelEvent]:
        return events

    async def on_tool_round(self, round: ToolRound) -> Any:
        return NO_ANSWER

    async def after_round(self, end: RoundEnd) -> Sequence[ChatMessage] | Stop | None:
        return None

    def before_tool_call(self, call: ToolCall) -> None:
        return None

    def halt(self, context: CallContext) -> Halt | None:
        return None

    def on_result(self, result: Result[Any]) -> Result[Any]:
        return result


def check_middleware(middleware: Any, what: str) -> tuple[Middleware, ...]:
    """`middleware=` as a tuple of `Middleware`, or an error naming what was wrong."""
    if middleware is None:
        return ()
    if isinstance(middleware, Middleware):
        middleware = [middleware]
    if not isinstance(middleware, Sequence) or isinstance(middleware, str):
        raise IllegalConfigurationError(
            f"{what}: middleware must be a list of agentloop.Middleware, got {type(middleware).__name__}"
        )
    for item in middleware:
        if not isinstance(item, Middleware):
            raise IllegalConfigurationError(
                f"{what}: {item!r} is not an agentloop.Middleware (subclass it and override wrap_model_call, "
                "wrap_tool_call, wrap_invocation or on_answer)"
            )
    return tuple(middleware)


class _Chain(Generic[_C, _R]):
    """`hooks[0]` outermost: calling the chain with a call and the innermost step runs them all."""

    __slots__ = ("hooks",)

    def __init__(self, hooks: Sequence[Callable[[_C, Callable[[_C], Awaitable[_R]]], Awaitable[_R]]]) -> None:
        self.hooks = tuple(hooks)

    def __call__(self, call: _C, innermost: Callable[[_C], Awaitable[_R]]) -> Awaitable[_R]:
        step: Callable[[_C], Awaitable[_R]] = innermost
        for hook in reversed(self.hooks):
            step = _Step(hook, step)
        return step(call)


class _Step(Generic[_C, _R]):
    """A hook with the rest of the chain as its `call_next`. Calling it calls the hook and hands back the
    hook's own awaitable: no coroutine of the chain's own between two middlewares."""

    __slots__ = ("hook", "then")

    def __init__(
        self,
        hook: Callable[[_C, Callable[[_C], Awaitable[_R]]], Awaitable[_R]],
        then: Callable[[_C], Awaitable[_R]],
    ) -> None:
        self.hook = hook
        self.then = then

    def __call__(self, call: _C) -> Awaitable[_R]:
        return self.hook(call, self.then)


class Seam(msgspec.Struct, frozen=True):
    """The middleware of one invocation, as three chains; a chain is None when no middleware has that hook."""

    middleware: tuple[Middleware, ...] = ()
    model: _Chain[ModelCall, ChatResponse] | None = None
    tool: _Chain[ToolCall, ToolExecution] | None = None
    invocation: _Chain[InvocationCall, Result[Any]] | None = None
    features_tool: _Chain[ToolCall, ToolExecution] | None = None
    """The built-in features' `wrap_tool_call` hooks (approval), run before tracing and the user's."""
    eager_tools: bool = True
    """False when a `wrap_model_call` in the model chain may reject or replace a response (it does not
    declare `allows_eager_tools`): its tool calls then start only once the whole chain returned it."""
    scope_free_model: bool = True
    """True when every `wrap_model_call` in the model chain declares `holds_no_scope`: a streamed round then
    opens its task group inside the chain, only when a tool call starts."""
    answer: tuple[Callable[[Answer], Awaitable[Any]], ...] = ()
    """The `on_answer` hooks, in order: each gets the output the one before returned."""
    hold: tuple[Callable[[HeldRound], Awaitable[Any]], ...] = ()
    """The `on_hold` hooks: the first that returns something saved the round."""
    resume: tuple[Callable[[CallContext], Awaitable[SavedRound | None]], ...] = ()
    """The `on_resume` hooks: the first that returns a saved round is gone on from."""
    stream: tuple[Callable[[AsyncIterator[ModelEvent], StreamCall], AsyncIterator[ModelEvent]], ...] = ()
    """The `wrap_stream` hooks, outermost first (the innermost gets the model's events)."""
    tool_round: tuple[Callable[[ToolRound], Awaitable[Any]], ...] = ()
    """The `on_tool_round` hooks, in order: the first answer one gives ends the invocation."""
    rounds: tuple[Callable[[RoundEnd], Awaitable[Sequence[ChatMessage] | Stop | None]], ...] = ()
    """The `after_round` hooks, in order (see `round_ended`)."""
    before_call: tuple[Callable[[ToolCall], None], ...] = ()
    """The `before_tool_call` hooks, in order: each call is shown to all of them as it is taken on."""
    halts: tuple[Callable[[CallContext], Halt | None], ...] = ()
    """The `halt` hooks: the invocation runs inside every scope they give (see `halted`)."""
    results: tuple[Callable[[Result[Any]], Result[Any]], ...] = ()
    """The `on_result` hooks, in order: each gets the Result the one before returned."""
    clock: Callable[[], datetime] | None = None
    """The outermost middleware's `clock`, if one gives it."""
    id_factory: Callable[[], str] | None = None
    """The outermost middleware's `id_factory`, if one gives it."""
    tool_middleware: tuple[str, ...] = ()
    """The class names of the middleware with a `wrap_tool_call` (what an error about one of them names)."""

    @classmethod
    def of(cls, middleware: Sequence[Middleware]) -> Seam:
        if not middleware:
            return NO_MIDDLEWARE
        base = Middleware
        modelling = [m for m in middleware if type(m).wrap_model_call is not base.wrap_model_call]
        tooling = [m for m in middleware if type(m).wrap_tool_call is not base.wrap_tool_call]
        invocation = [
            m.wrap_invocation for m in middleware if type(m).wrap_invocation is not base.wrap_invocation
        ]
        return cls(
            tuple(middleware),
            _Chain([m.wrap_model_call for m in modelling]) if modelling else None,
            _Chain([m.wrap_tool_call for m in tooling]) if tooling else None,
            _Chain(invocation) if invocation else None,
            eager_tools=all(m.allows_eager_tools for m in modelling),
            scope_free_model=all(m.holds_no_scope for m in modelling),
            answer=_answer_hooks(middleware),
            hold=_hooks(middleware, "on_hold"),
            resume=_hooks(middleware, "on_resume"),
            stream=_hooks(middleware, "wrap_stream"),
            tool_round=_hooks(middleware, "on_tool_round"),
            rounds=_hooks(middleware, "after_round"),
            before_call=_hooks(middleware, "before_tool_call"),
            halts=_hooks(middleware, "halt"),
            results=_hooks(middleware, "on_result"),
            clock=_first(middleware, "clock"),
            id_factory=_first(middleware, "id_factory"),
            tool_middleware=tuple(type(m).__qualname__ for m in tooling),
        )

    def with_features(self, features: Sequence[Middleware]) -> Seam:
        """This seam with the built-in features' middleware (structured output, approval, ...) outside the
        user's, every hook of theirs taken the same way: their model hooks come first in the model chain (a
        user's `wrap_model_call` sees the request as the output shaped it); their tool hooks form
        `features_tool`, so a call they deny or defer reaches neither tracing nor the user's
        `wrap_tool_call`; their other hooks run before the user's, which see the output they made, except
        `after_round`: the user's run first, so a `Stop` of run control does not keep a round from them."""
        if not features:
            return self
        base = Middleware
        modelling = [m for m in features if type(m).wrap_model_call is not base.wrap_model_call]
        model: list[Callable[[ModelCall, NextModelCall], Awaitable[ChatResponse]]] = [
            m.wrap_model_call for m in modelling
        ]
        tooling = [m for m in features if type(m).wrap_tool_call is not base.wrap_tool_call]
        model += self.model.hooks if self.model is not None else ()
        return Seam(
            self.middleware,
            _Chain(model) if model else None,
            self.tool,
            self.invocation,
            _Chain([m.wrap_tool_call for m in tooling]) if tooling else None,
            eager_tools=self.eager_tools and all(m.allows_eager_tools for m in modelling),
            scope_free_model=self.scope_free_model and all(m.holds_no_scope for m in modelling),
            answer=(*_answer_hooks(features), *self.answer),
            hold=(*_hooks(features, "on_hold"), *self.hold),
            resume=(*_hooks(features, "on_resume"), *self.resume),
            stream=(*_hooks(features, "wrap_stream"), *self.stream),
            tool_round=(*_hooks(features, "on_tool_round"), *self.tool_round),
            # The user's first: each hears every round that committed, also the one run control stops after.
            rounds=(*self.rounds, *_hooks(features, "after_round")),
            before_call=(*_hooks(features, "before_tool_call"), *self.before_call),
            halts=(*_hooks(features, "halt"), *self.halts),
            results=(*_hooks(features, "on_result"), *self.results),
            clock=_first(features, "clock") or self.clock,
            id_factory=_first(features, "id_factory") or self.id_factory,
            tool_middleware=(*(type(m).__qualname__ for m in tooling), *self.tool_middleware),
        )

    async def answered(self, answer: Answer) -> Any:
        """The output of the answer ending the invocation, through the `on_answer` hooks in order (each
        gets what the one before returned); `ModelRetry` from one asks the model for a correction."""
        for hook in self.answer:
            answer = answer.replace(output=await hook(answer))
        return answer.output

    async def resumed(self, context: CallContext) -> SavedRound | None:
        """The saved round this invocation goes on from: the first `on_resume` hook's, if any gives one."""
        for hook in self.resume:
            saved = await hook(context)
            if saved is not None:
                return saved
        return None

    async def held(self, held: HeldRound) -> Any:
        """A round whose call waits, saved by the first `on_hold` hook that takes it (`Result.pending`)."""
        for hook in self.hold:
            saved = await hook(held)
            if saved is not None:
                return saved
        raise IllegalConfigurationError(
            f"A call of round {held.round} returned DEFERRED (it waits), but no middleware saved the round: "
            "give the middleware whose wrap_tool_call returns DEFERRED an on_hold hook"
        )

    def streamed(self, events: AsyncIterator[ModelEvent], call: StreamCall) -> AsyncIterator[ModelEvent]:
        """`events` through the `wrap_stream` hooks: the innermost gets the model's, the loop reads the
        outermost's."""
        for hook in reversed(self.stream):
            events = hook(events, call)
        return events

    async def round_answer(self, round: ToolRound) -> tuple[Any, bool]:
        """The answer a finished tool round gave (`NO_ANSWER`: none) through the `on_tool_round` hooks, and
        whether one of them is correcting an answer (`CORRECTING`)."""
        answer, correcting = NO_ANSWER, False
        for hook in self.tool_round:
            found = await hook(round)
            if found is CORRECTING:
                correcting = True
            elif found is not NO_ANSWER and answer is NO_ANSWER:
                answer = found
        return answer, correcting

    async def round_ended(self, end: RoundEnd) -> list[ChatMessage] | Stop:
        """What the `after_round` hooks decide: the first `Stop` one returns (the hooks after it are not
        asked), else the messages they all returned, in order (an empty list: go on as planned)."""
        added: list[ChatMessage] = []
        for hook in self.rounds:
            decided = await hook(end)
            if isinstance(decided, Stop):
                return decided
            if decided:
                added += decided
        return added

    def resulted(self, result: Result[Any]) -> Result[Any]:
        """`result` through the `on_result` hooks, in order; each must give a Result back."""
        for hook in self.results:
            result = hook(result)
            if not isinstance(result, Result):
                raise IllegalConfigurationError(
                    f"An on_result hook ({hook.__qualname__}) returned {result!r}; return the Result it was "
                    "given, or a copy of it (dataclasses.replace(result, ...))"
                )
        return result

    def halted(self, context: CallContext) -> list[Halt]:
        """The scopes the `halt` hooks give for this invocation, outermost first, each checked."""
        halts = []
        for hook in self.halts:
            halt = hook(context)
            if halt is None:
                continue
            scope = getattr(halt, "scope", None)
            if not isinstance(scope, anyio.CancelScope):
                raise IllegalConfigurationError(
                    f"A halt hook ({hook.__qualname__}) gave {halt!r}, whose scope is {scope!r}: give an "
                    "object with a `scope` (a fresh anyio.CancelScope for each invocation) and a `reason`, "
                    "or None"
                )
            halts.append(halt)
        return halts

    def names(self) -> list[str]:
        """The middleware's class names, outermost first (what a paused run records of them)."""
        return [type(m).__qualname__ for m in self.middleware]


def _hooks(middleware: Sequence[Middleware], name: str) -> tuple[Any, ...]:
    """The bound `name` hooks of the middleware that override it, in order."""
    base = getattr(Middleware, name)
    return tuple(getattr(m, name) for m in middleware if getattr(type(m), name) is not base)


def _first(middleware: Sequence[Middleware], name: str) -> Any:
    """The first `clock` or `id_factory` a middleware gives (not None), checked each time it is called: a
    middleware attribute of that name kept for another use fails clearly rather than making odd records."""
    for m in middleware:
        given = getattr(m, name)
        if given is None:
            continue
        owner = f"{type(m).__qualname__}.{name}"
        if not callable(given):
            raise IllegalConfigurationError(
                f"{owner} is {given!r}: give a function (or None), see Middleware.{name}"
            )
        return _checked(given, owner, name)
    return None


_GIVES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "clock": (
        lambda value: isinstance(value, datetime),
        "the time of the invocation's records, a datetime (datetime.now(timezone.utc))",
    ),
    "id_factory": (
        lambda value: isinstance(value, str) and bool(value),
        "the invocation's id, a non-empty str",
    ),
}
"""What a middleware's `clock` / `id_factory` must give, and how an error says it."""


def _checked(make: Callable[[], Any], owner: str, name: str) -> Callable[[], Any]:
    """`make` (a middleware's `name` attribute), refusing by its owner's name a value that does not fit."""
    fits, what = _GIVES[name]

    def checked() -> Any:
        value = make()
        if not fits(value):
            raise IllegalConfigurationError(
                f"{owner}() gave {value!r}; a middleware's {name} gives {what}. Rename it if it is for "
                "another use"
            )
        return value

    return checked


def _answer_hooks(middleware: Sequence[Middleware]) -> tuple[Callable[[Answer], Awaitable[Any]], ...]:
    return tuple(m.on_answer for m in middleware if type(m).on_answer is not Middleware.on_answer)


NO_MIDDLEWARE = Seam()
"""The seam of an invocation without middleware: no chain at all."""
