"""What the loop meets beside the middleware hooks: structured output's round-level part, and `DEFERRED`.

Features change an invocation through `Middleware` (`_seam.py`): approval asks, denies and defers in its
`wrap_tool_call` and saves and resumes a held round in its `on_hold` / `on_resume`
(`agentloop/_features/approval/`); structured output shapes requests in its `wrap_model_call` and judges
text answers in its `on_answer`. One declaration stays with the loop:
- `OutputHook` (structured output, `agentloop/_features/output/`): the stream watched for partial outputs
  (a middleware sees the whole response, not its events), and a round's output call found (and its
  failures counted, which decides whether the round is held back while the output is corrected).
The loop (`_loop.py`, `_calls.py`) knows only these declarations, never the features' modules.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from .._values._messages import ToolExecutionRequest
from .._values._records import ReturnBehavior, ToolExecution

if TYPE_CHECKING:
    from ..models import ModelEvent
    from ._loop import Listener

__all__ = ["DEFERRED", "NOT_FOUND", "OutputHook"]

NOT_FOUND: Any = object()
"""`OutputHook.found()` when the round holds no valid output."""


class OutputHook(Protocol):
    """Structured output of one invocation, as the loop uses it."""

    def found(self, executions: Sequence[ToolExecution]) -> Any:
        """The output a round's output-tool call gave, or `NOT_FOUND`."""
        ...

    @property
    def retrying(self) -> bool:
        """True once an output was sent back for correction: the invocation's messages are then held and
        stored with the valid output (or never)."""
        ...

    def watch(
        self, events: AsyncIterator[ModelEvent], round: int, typed: Listener | None
    ) -> AsyncIterator[ModelEvent]:
        """The streamed events, with partial outputs sent to `typed` as they grow."""
        ...


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

DEFERRED = ToolExecution(
    ToolExecutionRequest("", "", "{}"),
    "",
    None,
    None,
    -1,
    0,
    _EPOCH,
    _EPOCH,
    0.0,
    ReturnBehavior.TO_LLM,
    False,
)
"""What a tool-call layer returns for a call that did not run and waits for a decision from outside the
invocation (a person): the call is neither stored nor reported, and its round is saved through the
invocation's middleware (`Middleware.on_hold`) instead of committed."""
