"""`RunHandle`: one invocation's remote control (cancel it, steer it), shared by `TokenStream` and `chat()`.

The handle is a built-in feature on the seam's round hooks: `before_round` hands the steering messages
waiting to the next model call, `after_round` ends the invocation after a round when
`cancel(after_round=True)` asked. An immediate `cancel()` cancels the handle's cancel scope, which the
loop runs in: the model call and the tools are cancelled where they wait, nothing of the round in flight
is committed (a commit already under way finishes: it is shielded), and the loop returns a
`FinishReason.CANCELLED` Result. While no command is pending the hooks cost one attribute test per round,
and nothing per streamed event.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio

from .._values._errors import RunFinishedError
from .._values._messages import ChatMessage, UserMessage
from ._seam import Middleware, RoundEnd, RoundStart, Stop

__all__ = ["RunHandle"]


class RunHandle(Middleware):
    """Cancels or steers one invocation from any task of its event loop; made before the invocation starts
    (commands given before it starts apply as soon as it does)."""

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        """The scope the invocation's loop runs in: `cancel()` cancels it."""
        self.reason: str | None = None
        """The reason of the cancellation asked (`Result.cancel_reason`)."""
        self.finished = False
        self._steering: list[ChatMessage] = []
        self._stop_after_round = False

    @property
    def cancelled(self) -> bool:
        """True once a cancellation was asked (at once or after the round)."""
        return self._stop_after_round or self.scope.cancel_called

    async def cancel(self, *, after_round: bool = False, reason: str | None = None) -> None:
        """Asks the invocation to end: at once (`after_round=False`: nothing of the round in flight is
        committed) or once the round in flight has committed. Returns without waiting for the end; a no-op
        once the invocation finished. A later immediate `cancel()` overrides an `after_round` one."""
        if self.finished or self.scope.cancel_called:
            return
        if reason is not None or self.reason is None:
            self.reason = reason
        if after_round:
            self._stop_after_round = True
        else:
            self.scope.cancel()

    async def steer(self, message: str | UserMessage) -> None:
        """Hands `message` to the invocation: it reaches the model before its next call (after the round in
        flight commits) and is committed with that round; an invocation about to end answers it first.
        Raises `RunFinishedError` once the invocation finished (start a new one with the message)."""
        if isinstance(message, str):
            message = UserMessage(message)
        elif not isinstance(message, UserMessage):
            raise TypeError(
                f"steer() takes a str or a UserMessage, not {type(message).__name__}; wrap other content in "
                "UserMessage(...)"
            )
        if self.finished:
            raise RunFinishedError(
                "This invocation has finished, so a steering message would never be read; send it as a new "
                "invocation instead (agent.chat(message, memory_id=...))"
            )
        self._steering.append(message)

    def close(self) -> None:
        """The invocation ended: later commands do nothing (cancel) or raise (steer)."""
        self.finished = True

    # -- the seam's round hooks ---------------------------------------------------------------------------

    async def before_round(self, start: RoundStart) -> Sequence[ChatMessage]:
        if not self._steering or self.cancelled:
            return ()
        messages, self._steering = self._steering, []
        return messages

    async def after_round(self, end: RoundEnd) -> Stop | None:
        return Stop(self.reason) if self._stop_after_round else None
