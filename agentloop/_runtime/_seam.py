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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .._tools._execution import ToolExecution
from .._tools._tool import Tool
from .._values._context import ToolContext
from .._values._errors import IllegalConfigurationError
from .._values._messages import ChatRequest, ChatResponse, ToolExecutionRequest, UserMessage
from .._values._result import Result

__all__ = [
    "NO_MIDDLEWARE",
    "CallContext",
    "InvocationCall",
    "Middleware",
    "ModelCall",
    "NextInvocation",
    "NextModelCall",
    "NextToolCall",
    "Seam",
    "ToolCall",
    "check_middleware",
]

_C = TypeVar("_C")
_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class CallContext:
    """Whose call it is: the agent, this invocation's id, its memory id and the `context=` mapping."""

    agent: Any
    invocation_id: str
    memory_id: Any
    context: Mapping[str, Any]


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

    One instance may serve many invocations at once: keep per-invocation state keyed by
    `call.context.invocation_id` (or in the call), never in plain attributes.
    """

    async def wrap_model_call(self, call: ModelCall, call_next: NextModelCall) -> ChatResponse:
        return await call_next(call)

    async def wrap_tool_call(self, call: ToolCall, call_next: NextToolCall) -> ToolExecution:
        return await call_next(call)

    async def wrap_invocation(self, call: InvocationCall, call_next: NextInvocation) -> Result[Any]:
        return await call_next(call)


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
                "wrap_tool_call or wrap_invocation)"
            )
    return tuple(middleware)


class _Chain(Generic[_C, _R]):
    """`hooks[0]` outermost: calling the chain with a call and the innermost step runs them all."""

    __slots__ = ("hooks",)

    def __init__(self, hooks: Sequence[Callable[[_C, Callable[[_C], Awaitable[_R]]], Awaitable[_R]]]) -> None:
        self.hooks = tuple(hooks)

    def __call__(self, call: _C, innermost: Callable[[_C], Awaitable[_R]]) -> Awaitable[_R]:
        step = innermost
        for hook in reversed(self.hooks):
            step = _bind(hook, step)
        return step(call)


def _bind(
    hook: Callable[[_C, Callable[[_C], Awaitable[_R]]], Awaitable[_R]], then: Callable[[_C], Awaitable[_R]]
) -> Callable[[_C], Awaitable[_R]]:
    async def step(call: _C) -> _R:
        return await hook(call, then)

    return step


@dataclass(frozen=True, slots=True)
class Seam:
    """The middleware of one invocation, as three chains; a chain is None when no middleware has that hook."""

    middleware: tuple[Middleware, ...] = ()
    model: _Chain[ModelCall, ChatResponse] | None = None
    tool: _Chain[ToolCall, ToolExecution] | None = None
    invocation: _Chain[InvocationCall, Result[Any]] | None = None
    features_tool: _Chain[ToolCall, ToolExecution] | None = None
    """The built-in features' `wrap_tool_call` hooks (approval), run before tracing and the user's."""

    @classmethod
    def of(cls, middleware: Sequence[Middleware]) -> Seam:
        if not middleware:
            return NO_MIDDLEWARE
        base = Middleware
        model = [m.wrap_model_call for m in middleware if type(m).wrap_model_call is not base.wrap_model_call]
        tool = [m.wrap_tool_call for m in middleware if type(m).wrap_tool_call is not base.wrap_tool_call]
        invocation = [
            m.wrap_invocation for m in middleware if type(m).wrap_invocation is not base.wrap_invocation
        ]
        return cls(
            tuple(middleware),
            _Chain(model) if model else None,
            _Chain(tool) if tool else None,
            _Chain(invocation) if invocation else None,
        )

    def with_features(self, features: Sequence[Middleware]) -> Seam:
        """This seam with the built-in features' middleware (structured output, approval) outside the user's:
        their model hooks come first in the model chain (a user's `wrap_model_call` sees the request as the
        output shaped it); their tool hooks form `features_tool`, so a call they deny or defer reaches
        neither tracing nor the user's `wrap_tool_call`."""
        if not features:
            return self
        base = Middleware
        model: list[Callable[[ModelCall, NextModelCall], Awaitable[ChatResponse]]] = [
            m.wrap_model_call for m in features if type(m).wrap_model_call is not base.wrap_model_call
        ]
        tool = [m.wrap_tool_call for m in features if type(m).wrap_tool_call is not base.wrap_tool_call]
        model += self.model.hooks if self.model is not None else ()
        return Seam(
            self.middleware,
            _Chain(model) if model else None,
            self.tool,
            self.invocation,
            _Chain(tool) if tool else None,
        )

    def names(self) -> list[str]:
        """The middleware's class names, outermost first (what a paused run records of them)."""
        return [type(m).__qualname__ for m in self.middleware]


NO_MIDDLEWARE = Seam()
"""The seam of an invocation without middleware: no chain at all."""
