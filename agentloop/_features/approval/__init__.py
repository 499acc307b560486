"""Human approval of tool calls: which calls need it, asking inline, pausing a round, resuming it.

A gated call is looked at after its arguments validated and before it runs. The agent's `approval_handler`
answers at once (True, False, `Denied(reason)`) or `Defer`s; without a handler the call waits. Once every
call of the response has finished or waits, and some wait, the invocation pauses: nothing of the round goes
to memory, and a `PendingApproval` keeps the response, the finished calls and the waiting ones.
`Agent.resume()` checks that state and the decisions, claims the round (once: through the memory store when
it records paused rounds, else in this process), runs the approved calls, and the loop goes on.

The gate itself (`_gate.py`: `ApprovalGate`, a `Middleware`, and `Resume`) is imported from its module: it
sits on the seam, which this package's public types must not import.
"""

from ..._values._approval import (
    ApprovalHandler,
    ApprovalPredicate,
    ApprovalRules,
    Decision,
    Defer,
    Denied,
    ToolApprovalRequest,
)
from ..._values._pending import PendingApproval

__all__ = [
    "ApprovalHandler",
    "ApprovalPredicate",
    "ApprovalRules",
    "Decision",
    "Defer",
    "Denied",
    "PendingApproval",
    "ToolApprovalRequest",
]
