"""The instrumentation seam: what an observer (tracing, metrics) gets to see of an invocation.

The loop consults `Invocation.observer` at two places, an invocation and each tool call; an observer sees
model calls by wrapping the invocation's model. None (the default) costs one attribute test per invocation
and per tool call. `agentloop.otel` implements it for OpenTelemetry; nothing here imports it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from ._errors import IllegalConfigurationError

if TYPE_CHECKING:
    from ._execution import ToolExecution
    from ._loop import Invocation, Listener
    from ._messages import ChatResponse, ToolExecutionRequest
    from ._result import Result

__all__ = [
    "Observer",
    "RetryListener",
    "default_observer",
    "instrument",
    "log_model_call",
    "log_tool_call",
    "model_name_of",
    "provider_of",
    "retry_listener",
    "set_default_observer",
    "uninstrument",
]

RunInvocation = Callable[["Invocation", "Listener | None"], Awaitable["Result[Any]"]]


class Observer(Protocol):
    """Watches invocations. Each method wraps the real work and must return (or raise) what it does."""

    async def invocation(self, inv: Invocation, emit: Listener | None, run: RunInvocation) -> Result[Any]:
        """Runs `await run(inv, emit)`, observed. May pass on a copy of `inv` whose model is wrapped to see
        each model call (a wrapper model such as a fallback chain may offer `__agentloop_instrument__(wrap)`,
        returning itself with each inner model passed through `wrap`, so the inner calls show)."""
        ...

    async def tool_call(
        self, call: Awaitable[ToolExecution], request: ToolExecutionRequest, index: int, round: int
    ) -> ToolExecution:
        """Awaits `call` (one tool call of the invocation, in its own task), observed."""
        ...


RetryListener = Callable[[int, float, BaseException], None]
"""`(failed attempt number, seconds until the next, error)`: told of each retry of a model call."""

retry_listener: ContextVar[RetryListener | None] = ContextVar("agentloop_retry_listener", default=None)
"""Set by an observer around a model call; the HTTP layer tells it of each retry (read only on a retry)."""

_default: list[Observer | None] = [None]


def default_observer() -> Observer | None:
    """The observer of every agent that does not choose its own (`agentloop.instrument()` sets it)."""
    return _default[0]


def set_default_observer(observer: Observer | None) -> None:
    """Sets (None: removes) the observer of every agent that does not choose its own."""
    _default[0] = observer


def instrument(
    tracer_provider: Any = None, meter_provider: Any = None, capture_content: bool | None = None
) -> Observer:
    """Traces every agent with OpenTelemetry (extra `agentloop-runtime[otel]`), except those created with
    `instrument=False`; returns the `agentloop.otel.Instrumentation` in use. Calling it again replaces it.

    `tracer_provider` / `meter_provider`: default the global ones. `capture_content`: record messages and
    tool arguments and results (default: `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`, else off).
    """
    observer = new_instrumentation(tracer_provider, meter_provider, capture_content)
    set_default_observer(observer)
    return observer


def uninstrument() -> None:
    """Stops what `instrument()` started (agents created with `instrument=True` keep tracing)."""
    set_default_observer(None)


def new_instrumentation(tracer_provider: Any, meter_provider: Any, capture_content: bool | None) -> Observer:
    """An `agentloop.otel.Instrumentation`, or an error saying how to install the extra."""
    try:
        from .otel import Instrumentation
    except ImportError as exc:
        raise IllegalConfigurationError(
            "Tracing needs the OpenTelemetry API: pip install 'agentloop-runtime[otel]'"
        ) from exc
    return Instrumentation(tracer_provider, meter_provider, capture_content)


def model_name_of(model: Any) -> str | None:
    """A model's name as its requests give it (`model`, or `model_name` for the in-process ones)."""
    for attribute in ("model", "model_name"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return None


def provider_of(model: Any) -> str | None:
    """A model's provider name ("openai", "anthropic", ...), when it has one."""
    provider = getattr(model, "provider", None)
    return provider if isinstance(provider, str) and provider else None


# -- plain logging: the "agentloop" logger hierarchy -----------------------------------------------------

_log = logging.getLogger("agentloop.agent")


def log_model_call(inv: Invocation, response: ChatResponse, round: int) -> None:
    """DEBUG: one model call's outcome (no content: model, finish reason, calls asked for, tokens)."""
    if _log.isEnabledFor(logging.DEBUG):
        usage = response.token_usage
        _log.debug(
            "%s: model call %d answered (model=%s, finish=%s, tool calls=%d, tokens in=%s out=%s)",
            inv.agent_name or "agent",
            round + 1,
            response.model,
            response.finish_reason.value if response.finish_reason is not None else None,
            len(response.ai_message.tool_execution_requests),
            usage.input_tokens if usage is not None else "?",
            usage.output_tokens if usage is not None else "?",
        )


def log_tool_call(execution: ToolExecution) -> None:
    """INFO for a failed tool call (its error's type only: the message may hold user data), DEBUG for the
    others."""
    request = execution.request
    if execution.error is not None:
        if _log.isEnabledFor(logging.INFO):
            _log.info(
                "tool %s (call %s) failed after %.3fs: %s",
                request.name,
                request.id,
                execution.duration,
                type(execution.error).__name__,
            )
    elif _log.isEnabledFor(logging.DEBUG):
        _log.debug("tool %s (call %s) finished in %.3fs", request.name, request.id, execution.duration)
