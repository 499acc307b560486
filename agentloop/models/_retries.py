"""How an observer hears of a model call's retries: a context variable the HTTP layer reads on each retry.

Declared with the models (which tell it) rather than with the observers (which set it), so a provider does
not import the runtime.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

__all__ = ["RetryListener", "retry_listener"]

RetryListener = Callable[[int, float, BaseException], None]
"""`(failed attempt number, seconds until the next, error)`: told of each retry of a model call."""

retry_listener: ContextVar[RetryListener | None] = ContextVar("agentloop_retry_listener", default=None)
"""Set by an observer around a model call; the HTTP layer tells it of each retry (read only on a retry)."""
