"""The Protocols through which the loop calls the features that change an invocation from inside a round.

Structured output (`agentloop/_features/output/`) and approval (`agentloop/_features/approval/`) implement
them; the loop (`_loop.py`, `_calls.py`) knows only these declarations, never the features' modules. What a
user adds goes through `Middleware` (`_seam.py`); these two need hooks a middleware cannot give: the request
shaped before every model call and the answer checked before it is committed (output), a round that pauses
instead of committing (approval).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ._messages import AiMessage, ChatMessage, ChatRequest, ChatResponse, ToolExecutionRequest, UserMessage

if TYPE_CHECKING:
    from ._context import ToolContext
    from ._execution import ToolExecution
    from ._loop import Invocation, Listener
    from ._toolset import Toolset
    from .models import ModelEvent

__all__ = ["NOT_FOUND", "ApprovalHook", "OutputHook", "PausedRound", "RetryOutput", "SettledCall"]

NOT_FOUND: Any = object()
"""`OutputHook.found()` when the round holds no valid output."""


class RetryOutput(Exception):
    """The answer was not a valid output and retries remain: `message` asks the model to correct it."""

    def __init__(self, message: UserMessage) -> None:
        super().__init__(message.text)
        self.message = message


class OutputHook(Protocol):
    """Structured output of one invocation, as the loop uses it."""

    def request(self, request: ChatRequest) -> ChatRequest:
        """The request as this output needs it (an output tool, a response format, or instructions)."""
        ...

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


class SettledCall(Protocol):
    """What became of a gated call that does not run now."""

    @property
    def execution(self) -> ToolExecution | None:
        """Its execution (denied, or finished before a pause); None while it waits for a person."""
        ...

    @property
    def report(self) -> bool:
        """Whether a `ToolExecuted` event is due for it."""
        ...


class PausedRound(Protocol):
    """The part of a paused round the loop goes on from."""

    @property
    def messages(self) -> tuple[ChatMessage, ...]: ...

    @property
    def round(self) -> int: ...

    @property
    def user_message(self) -> UserMessage: ...


class Resumed(Protocol):
    @property
    def pending(self) -> PausedRound: ...


class ApprovalHook(Protocol):
    """Approval of one invocation's tool calls, as the loop and its calls use it."""

    @property
    def resumed(self) -> Resumed | None:
        """The paused round this invocation finishes first, if it is a `resume()`."""
        ...

    @property
    def waiting(self) -> bool:
        """True when calls of the current round wait for a person: the round pauses instead of committing."""
        ...

    def concerns(self, name: str, toolset: Toolset) -> bool:
        """Cheap first look: whether the call named `name` may need the gate at all."""
        ...

    async def settle(
        self, request: ToolExecutionRequest, index: int, round: int, toolset: Toolset, inv: Invocation
    ) -> SettledCall | None:
        """None when the call runs now; else what became of it."""
        ...

    async def pause(
        self,
        inv: Invocation,
        response: ChatResponse,
        round: int,
        finished: list[ToolExecution],
        carried: list[ChatMessage],
        emit: Listener | None,
    ) -> Any:
        """The paused round's state (a `PendingApproval`), recorded and announced."""
        ...

    async def resume(self, toolset: Toolset, inv: Invocation) -> ChatResponse:
        """Claims the paused round and hands back its response, to run as if the model just sent it."""
        ...
