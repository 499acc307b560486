"""The errors built-in middleware raise to stop an invocation (defined with every other error, in
agentloop/_values/_errors.py)."""

from __future__ import annotations

from .._values._errors import GuardrailTripped, UsageLimitExceeded

__all__ = ["GuardrailTripped", "UsageLimitExceeded"]
