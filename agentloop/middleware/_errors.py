"""The errors built-in middleware raise to stop an invocation."""

from __future__ import annotations

from typing import Any

from .._values._errors import AgentLoopError

__all__ = ["GuardrailTripped", "UsageLimitExceeded"]


class UsageLimitExceeded(AgentLoopError):
    """An invocation reached a `UsageLimits` budget: `limit` names it ("max_requests", ...), `value` is its
    setting and `used` what the invocation would have used. Nothing of the round in progress was stored."""

    def __init__(self, message: str, *, limit: str, value: int, used: int) -> None:
        super().__init__(message)
        self.message = message
        self.limit = limit
        self.value = value
        self.used = used


class GuardrailTripped(AgentLoopError):
    """A guardrail rejected the user's message (`InputGuardrail`) or the model's answer (`OutputGuardrail`):
    `guardrail` is its name, `value` what its check returned. Nothing of the round in progress was stored."""

    def __init__(self, message: str, *, guardrail: str, value: Any) -> None:
        super().__init__(message)
        self.message = message
        self.guardrail = guardrail
        self.value = value
