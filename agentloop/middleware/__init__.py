"""Built-in middleware (see docs/middleware.md, docs/context.md): limits, guardrails, tool retries, context.

`UsageLimits` stops an invocation that would exceed a budget of model requests, tool calls or tokens;
`InputGuardrail` / `OutputGuardrail` stop one whose message or answer a check of yours rejects; `ToolRetry`
runs a failed tool call again; `Compaction` keeps a long conversation under a token budget by summarising
its older part; `ClearToolResults` sends older tool results as placeholders; `ConcurrencyLimit` and
`RateLimit` share limits among every invocation with the same key (a tenant, a user, a model), in this
process or, with `backend=RedisLimiter(url)`, across workers. A stopped invocation raises
(`UsageLimitExceeded`, `GuardrailTripped`) before anything of its current round reaches memory, and the error
names the limit or guardrail and its value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._public import publish, publish_one
from .._runtime._seam import (
    CallContext,
    InvocationCall,
    Middleware,
    ModelCall,
    NextInvocation,
    NextModelCall,
    NextToolCall,
    ToolCall,
)
from .._values._errors import LimiterError, LimitExceededError
from ._clearing import ClearToolResults
from ._compaction import Compaction
from ._errors import GuardrailTripped, UsageLimitExceeded
from ._guardrails import InputGuardrail, OutputGuardrail
from ._keyed import ConcurrencyLimit, RateLimit
from ._limiter import Limiter, LocalLimiter
from ._limits import UsageLimits
from ._retry import ToolRetry

if TYPE_CHECKING:
    from ._redis_limiter import RedisLimiter

__all__ = [
    "CallContext",
    "ClearToolResults",
    "Compaction",
    "ConcurrencyLimit",
    "GuardrailTripped",
    "InputGuardrail",
    "InvocationCall",
    "LimitExceededError",
    "Limiter",
    "LimiterError",
    "LocalLimiter",
    "Middleware",
    "ModelCall",
    "NextInvocation",
    "NextModelCall",
    "NextToolCall",
    "OutputGuardrail",
    "RateLimit",
    "RedisLimiter",
    "ToolCall",
    "ToolRetry",
    "UsageLimitExceeded",
    "UsageLimits",
]

publish(globals(), __all__, __name__)


def __getattr__(name: str) -> Any:
    """`RedisLimiter` loads on first use (it imports redis); another name: the error says which public
    module has it."""
    if name == "RedisLimiter":
        from ._redis_limiter import RedisLimiter

        return publish_one(RedisLimiter, __name__)
    from .._hints import missing_name

    raise missing_name(__name__, name)
