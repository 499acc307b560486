"""What every run-control backend offers: a registration per running invocation, and sending to it."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, runtime_checkable

from ._command import RunCommand

__all__ = ["Inbox", "RunControl", "check_target"]


@runtime_checkable
class Inbox(Protocol):
    """The commands sent to one running invocation, in the order they were sent."""

    async def receive(self) -> RunCommand:
        """The next command, waiting until one arrives."""
        ...

    async def poll(self) -> RunCommand | None:
        """The next command if one is there, else None at once (what an invocation checks between rounds,
        so a command sent before a round ended is applied there, whatever the listener's polling)."""
        ...


@runtime_checkable
class RunControl(Protocol):
    """Where running invocations register and where commands for them are sent (`agentloop.control`)."""

    def running(self, invocation_id: str, memory_id: Any = None) -> AbstractAsyncContextManager[Inbox]:
        """Registers the invocation for as long as the context is open; its commands arrive in the inbox."""
        ...

    async def send(
        self, command: RunCommand, *, invocation_id: str | None = None, memory_id: Any = None
    ) -> bool:
        """Delivers `command` to the invocation with that id, or to every invocation running on that memory
        id; True if at least one running invocation received it, False if none runs."""
        ...

    async def busy(self, memory_id: Any) -> bool:
        """True while an invocation on `memory_id` runs in any process sharing this control (what
        `if_busy=` decides on)."""
        ...


def check_target(backend: str, invocation_id: str | None, memory_id: Any) -> None:
    """Exactly one of `invocation_id` / `memory_id` names where a command goes."""
    if (invocation_id is None) == (memory_id is None):
        raise TypeError(
            f"{backend}.send() takes exactly one of invocation_id= or memory_id= (got "
            f"{'both' if invocation_id is not None else 'neither'})"
        )
