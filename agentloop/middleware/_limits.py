"""`UsageLimits`: a budget of model requests, tool calls and tokens per invocation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._runtime._seam import (
    InvocationCall,
    Middleware,
    ModelCall,
    NextInvocation,
    NextModelCall,
    NextToolCall,
    ToolCall,
)
from .._values._errors import IllegalConfigurationError
from .._values._messages import ChatResponse
from ._errors import UsageLimitExceeded

__all__ = ["UsageLimits"]


@dataclass(slots=True)
class _Used:
    requests: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0


class UsageLimits(Middleware):
    """Stops an invocation (`UsageLimitExceeded`) before it exceeds one of these budgets (None: no limit).

    `max_requests`: model calls; checked before each call, so the call past the limit is never made.
    `max_tool_calls`: tool calls; checked before each call runs, so the call past the limit never runs (its
    siblings of the same response are cancelled). The token limits are checked when a model call returned:
    the response that crossed one is not used. In every case the round in progress is not stored, and the
    invocation's earlier rounds stay in memory as they were. Counts are per invocation (a `resume()` starts
    afresh), and one `UsageLimits` may serve many invocations at once.
    """

    def __init__(
        self,
        max_requests: int | None = None,
        max_tool_calls: int | None = None,
        max_input_tokens: int | None = None,
        max_output_tokens: int | None = None,
        max_total_tokens: int | None = None,
    ) -> None:
        self.limits: dict[str, int] = {}
        for name, value in (
            ("max_requests", max_requests),
            ("max_tool_calls", max_tool_calls),
            ("max_input_tokens", max_input_tokens),
            ("max_output_tokens", max_output_tokens),
            ("max_total_tokens", max_total_tokens),
        ):
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise IllegalConfigurationError(f"UsageLimits({name}=...) must be an int >= 0, got {value!r}")
            self.limits[name] = value
        self._used: dict[str, _Used] = {}

    def __repr__(self) -> str:
        return f"UsageLimits({', '.join(f'{k}={v}' for k, v in self.limits.items())})"

    def _of(self, invocation_id: str) -> _Used:
        used = self._used.get(invocation_id)
        if used is None:
            used = self._used[invocation_id] = _Used()
        return used

    async def wrap_invocation(self, call: InvocationCall, call_next: NextInvocation) -> Any:
        key = call.context.invocation_id
        self._used[key] = _Used()
        try:
            return await call_next(call)
        finally:
            self._used.pop(key, None)

    async def wrap_model_call(self, call: ModelCall, call_next: NextModelCall) -> ChatResponse:
        used = self._of(call.context.invocation_id)
        self._check("max_requests", used.requests + 1, "model request")
        used.requests += 1
        response = await call_next(call)
        usage = response.token_usage
        if usage is not None:
            used.input_tokens += usage.input_tokens
            used.output_tokens += usage.output_tokens
            used.total_tokens += usage.total_tokens or usage.input_tokens + usage.output_tokens
            self._check("max_input_tokens", used.input_tokens, "input tokens")
            self._check("max_output_tokens", used.output_tokens, "output tokens")
            self._check("max_total_tokens", used.total_tokens, "tokens in all")
        return response

    async def wrap_tool_call(self, call: ToolCall, call_next: NextToolCall) -> Any:
        used = self._of(call.context.invocation_id)
        self._check("max_tool_calls", used.tool_calls + 1, "tool call")
        used.tool_calls += 1
        return await call_next(call)

    def _check(self, limit: str, would_use: int, what: str) -> None:
        value = self.limits.get(limit)
        if value is None or would_use <= value:
            return
        if limit in ("max_requests", "max_tool_calls"):
            detail = f"the invocation would make {what} #{would_use}"
        else:
            detail = f"the invocation used {would_use} {what}"
        raise UsageLimitExceeded(
            f"Usage limit {limit}={value} exceeded: {detail}; the invocation stopped and nothing of its "
            "current round was stored",
            limit=limit,
            value=value,
            used=would_use,
        )
