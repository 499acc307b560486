"""Built-in middleware (see docs/middleware.md, docs/context.md): limits, guardrails, tool retries, context.

`UsageLimits` stops an invocation that would exceed a budget of model requests, tool calls or tokens;
`InputGuardrail` / `OutputGuardrail` stop one whose message or answer a check of yours rejects; `ToolRetry`
runs a failed tool call again; `Compaction` keeps a long conversation under a token budget by summarising
its older part; `ClearToolResults` sends older tool results as placeholders. A stopped invocation raises
(`UsageLimitExceeded`, `GuardrailTripped`) before anything of its current round reaches memory, and the error
names the limit or guardrail and its value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._public import publish
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
from ._clearing import ClearToolResults
from ._compaction import Compaction
from ._errors import GuardrailTripped, UsageLimitExceeded
from ._guardrails import InputGuardrail, OutputGuardrail
from ._limits import UsageLimits
from ._retry import ToolRetry

__all__ = [
    "CallContext",
    "ClearToolResults",
    "Compaction",
    "GuardrailTripped",
    "InputGuardrail",
    "InvocationCall",
    "Middleware",
    "ModelCall",
    "NextInvocation",
    "NextModelCall",
    "NextToolCall",
    "OutputGuardrail",
    "ToolCall",
    "ToolRetry",
    "UsageLimitExceeded",
    "UsageLimits",
]

publish(globals(), __all__, __name__)

if not TYPE_CHECKING:  # at run time only: to mypy, this module's names stay exactly the ones above

    def __getattr__(name: str) -> object:
        """A name this module does not have: the error says which public module has it."""
        from .._hints import missing_name

        raise missing_name(__name__, name)
