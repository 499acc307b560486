"""Watching invocations (tracing, metrics): `Observer`, a middleware that `Agent(instrument=...)` and
`agentloop.instrument()` place outermost on the seam, and the plain-logging helpers.

The loop knows nothing of tracing: an observer is one more `Middleware` (`wrap_invocation`, `wrap_model_call`,
`wrap_tool_call`), put before the agent's and the call's own middleware so its spans cover what they do.
`agentloop.otel.Instrumentation` is the OpenTelemetry one; nothing here imports it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from .._tools._execution import ToolExecution
from .._values._errors import IllegalConfigurationError
from ._seam import Middleware

if TYPE_CHECKING:
    from .._values._messages import ChatResponse
    from ._loop import Invocation

__all__ = [
    "Observer",
    "RetryListener",
    "default_observer",
    "instrument",
    "log_model_call",
    "log_tool_call",
    "observer_for",
    "retry_listener",
    "set_default_observer",
    "uninstrument",
]


class Observer(Middleware):
    """A middleware that watches invocations (tracing, metrics) rather than changing them.

    `Agent(instrument=...)` takes one, and `agentloop.instrument()` sets one for every agent; either way it
    runs outermost, around the agent's and the call's middleware, so what it records covers what they do.
    While `enabled` is False (e.g. no telemetry backend configured) it is left out of the invocation.
    """

    @property
    def enabled(self) -> bool:
        """Whether to place it on the next invocation's seam (looked up once per invocation)."""
        return True


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
        from ..otel import Instrumentation
    except ImportError as exc:
        raise IllegalConfigurationError(
            "Tracing needs the OpenTelemetry API: pip install 'agentloop-runtime[otel]'"
        ) from exc
    return Instrumentation(tracer_provider, meter_provider, capture_content)


def observer_for(instrument: Any) -> Observer | None:
    """The observer an `Agent(instrument=...)` setting asks for (None also for "follow
    `agentloop.instrument()`", which is looked up at each invocation)."""
    if instrument is None or instrument is False:
        return None
    if instrument is True:
        return new_instrumentation(None, None, None)
    if not isinstance(instrument, Observer):
        raise IllegalConfigurationError(
            "instrument must be True, False, None or an agentloop.Observer such as "
            f"agentloop.otel.Instrumentation, got {type(instrument).__name__} (a middleware that changes "
            "calls goes in middleware=)"
        )
    return instrument


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
