"""`ToolRetry`: a failed tool call runs again (on tenacity)."""

from __future__ import annotations

from typing import Any

import anyio
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_result,
    stop_after_attempt,
    wait_exponential,
    wait_fixed,
)

from .._runtime._seam import Middleware, NextToolCall, ToolCall
from .._values._errors import IllegalConfigurationError, ModelRetry, ToolArgumentsError

__all__ = ["ToolRetry"]


class ToolRetry(Middleware):
    """Runs a tool call again when it failed with one of `on` (default: any `Exception`), at most
    `max_attempts` times in all, waiting `wait` between attempts: seconds, or a tenacity wait strategy
    (default: exponential from 0.1 s, at most 2 s). Never retried: bad arguments (`ToolArgumentsError`, the
    same arguments fail again) and `ModelRetry` (the tool asks the model, not the runtime, to try again).
    The last attempt's execution is the call's result. Retried calls are each a step of a durable runner."""

    def __init__(
        self,
        max_attempts: int = 3,
        on: type[BaseException] | tuple[type[BaseException], ...] = (Exception,),
        wait: Any = None,
    ) -> None:
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise IllegalConfigurationError(
                f"ToolRetry(max_attempts=...) must be an int >= 1, got {max_attempts!r}"
            )
        kinds = on if isinstance(on, tuple) else (on,)
        if not kinds or not all(isinstance(k, type) and issubclass(k, BaseException) for k in kinds):
            raise IllegalConfigurationError(f"ToolRetry(on=...) takes exception classes, got {on!r}")
        if wait is None:
            wait = wait_exponential(multiplier=0.1, max=2)
        elif isinstance(wait, (int, float)) and not isinstance(wait, bool):
            if wait < 0:
                raise IllegalConfigurationError(f"ToolRetry(wait=...) must be >= 0 seconds, got {wait!r}")
            wait = wait_fixed(wait)
        self.max_attempts = max_attempts
        self.on = kinds
        self.wait = wait

    def __repr__(self) -> str:
        return f"ToolRetry(max_attempts={self.max_attempts}, on={[k.__name__ for k in self.on]})"

    def _failed(self, execution: Any) -> bool:
        error = execution.error
        return (
            error is not None
            and isinstance(error, self.on)
            and not isinstance(error, (ToolArgumentsError, ModelRetry))
        )

    async def wrap_tool_call(self, call: ToolCall, call_next: NextToolCall) -> Any:
        if call.tool is None:  # no such tool: nothing to retry
            return await call_next(call)
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_attempts),
            wait=self.wait,
            retry=retry_if_result(self._failed),
            sleep=anyio.sleep,
            retry_error_callback=_last_execution,
        )
        return await retrying(call_next, call)


def _last_execution(state: RetryCallState) -> Any:
    """Attempts are used up: the last attempt's execution (a failed one) is the call's result."""
    assert state.outcome is not None
    return state.outcome.result()
