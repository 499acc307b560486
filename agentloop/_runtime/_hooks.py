"""The declarations through which the loop meets what the seam cannot carry: what gets committed.

Features change an invocation through `Middleware` (`_seam.py`): approval asks, denies and defers in its
`wrap_tool_call` (`agentloop/_features/approval/`). Two decisions stay with the loop, because they decide
what memory receives and a middleware sees one call, never the round around it:
- `OutputHook` (structured output, `agentloop/_features/output/`; its `wrap_model_call` shapes each
  request): the stream watched for partial outputs (a middleware sees the whole response, not its events),
  and the answer judged before it is committed (an output being corrected is stored with the valid one, or
  never; the invalid answer and its correction are in `Result.intermediate_responses` and the usage);
- `Checkpoint` (approval's saved rounds): a round with a `DEFERRED` call commits nothing and is saved; an
  invocation may go on from a saved round.
The loop (`_loop.py`, `_calls.py`) knows only these declarations, never the features' modules.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from .._tools._execution import ToolExecution
from .._tools._tool import ReturnBehavior
from .._values._messages import AiMessage, ChatMessage, ChatResponse, ToolExecutionRequest, UserMessage

if TYPE_CHECKING:
    from .._tools._toolset import Toolset
    from .._values._context import ToolContext
    from ..models import ModelEvent
    from ._loop import Invocation, Listener

__all__ = ["DEFERRED", "NOT_FOUND", "Checkpoint", "OutputHook", "RetryOutput", "SavedRound"]

NOT_FOUND: Any = object()
"""`OutputHook.found()` when the round holds no valid output."""


class RetryOutput(Exception):
    """The answer was not a valid output and retries remain: `message` asks the model to correct it."""

    def __init__(self, message: UserMessage) -> None:
        super().__init__(message.text)
        self.message = message


class OutputHook(Protocol):
    """Structured output of one invocation, as the loop uses it."""

    async def answer(self, message: AiMessage, context: ToolContext) -> Any:
        """The output a final answer holds; raises `RetryOutput` to ask the model for a correction."""
        ...

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


class SavedRound(Protocol):
    """A round saved while some of its calls waited: the part the loop goes on from."""

    @property
    def messages(self) -> tuple[ChatMessage, ...]: ...

    @property
    def round(self) -> int: ...

    @property
    def user_message(self) -> UserMessage: ...

    @property
    def executions(self) -> tuple[ToolExecution, ...]:
        """The round's calls that finished before it was saved: kept, never run again."""
        ...


class Checkpoint(Protocol):
    """Saving a round whose calls wait for a decision from outside the invocation, and going on from a
    saved one (approval implements it; `PendingApproval` is its saved form)."""

    @property
    def restart(self) -> SavedRound | None:
        """The saved round this invocation goes on from, if it is a `resume()`."""
        ...

    async def save(
        self,
        inv: Invocation,
        response: ChatResponse,
        round: int,
        finished: list[ToolExecution],
        carried: list[ChatMessage],
        emit: Listener | None,
    ) -> Any:
        """The waiting round's saved state (a `PendingApproval`), recorded and announced."""
        ...

    async def claim(self, toolset: Toolset, inv: Invocation) -> ChatResponse:
        """Claims the saved round (once) and hands back its response, to run as if the model just sent it."""
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
invocation's `Checkpoint` instead of committed."""
