"""`RunHandle`: one invocation's handle for run control, a feature on the seam like any other.

`cancel()` at once cancels the scope the loop runs in (the handle is the `Halt` its `halt` hook gives): the
loop commits nothing of the round in flight (as for any cancellation) and returns a CANCELLED Result with what
it committed before. Cancelling
after the round in flight and steering go through the seam's `after_round` hook: a `Stop` once the round
committed, or the steered messages before the next model call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import anyio

from .._values._errors import AgentLoopError
from .._values._messages import ChatMessage, UserMessage
from ._seam import CallContext, Halt, Middleware, RoundEnd, Stop

__all__ = ["RunHandle"]


class RunHandle(Middleware):
    """Cancels and steers one invocation, from any task of its event loop (`TokenStream.cancel/steer`,
    `Agent.cancel/steer` through the agent's run control)."""

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self.reason: str | None = None
        self.ended = False
        self._stop: Stop | None = None
        self._steered: list[ChatMessage] = []
        self.check_inbox: Callable[[], Awaitable[None]] | None = None
        """Applies the commands waiting in a shared run control's inbox (set while one is registered), so
        that a command sent before a round ended is applied there rather than at the listener's next poll."""

    async def cancel(self, *, after_round: bool = False, reason: str | None = None) -> None:
        """Ends the invocation: at once (the round in flight is not committed), or once the round in flight
        has committed (`after_round`). Nothing happens once it has ended."""
        if self.ended or self.scope.cancel_called:
            return
        if after_round:
            if self._stop is None:
                self._stop = Stop(reason)
            return
        self.reason = reason
        self.scope.cancel()

    async def steer(self, message: UserMessage | str) -> None:
        """Hands the invocation a user message, added before its next model call (in the order given); an
        invocation about to finish calls the model once more to answer it."""
        if not isinstance(message, (UserMessage, str)):
            raise TypeError(f"steer() takes a str or a UserMessage, not {type(message).__name__}")
        if self.ended:
            raise AgentLoopError(
                "steer(): this invocation has ended, so nothing would read the message; start a new "
                "invocation with it (chat() or stream() on the same memory id)"
            )
        self._steered.append(UserMessage(message) if isinstance(message, str) else message)

    def halt(self, context: CallContext) -> Halt:
        return self  # its `scope` and `reason`

    async def after_round(self, end: RoundEnd) -> Sequence[ChatMessage] | Stop | None:
        if self.check_inbox is not None:
            await self.check_inbox()
            if self.scope.cancel_called:  # cancelled at once by what was waiting: do not call the model again
                return Stop(self.reason)
        if self._stop is not None and not end.final:
            return self._stop
        if self._steered:
            taken, self._steered = self._steered, []
            return taken
        return None

    def __repr__(self) -> str:
        return f"RunHandle(ended={self.ended}, steered={len(self._steered)})"
