"""Run control's core: `RunCommand`, what a backend offers (`RunControl`, `Inbox`) and `LocalRunControl`.

They live below the agent so that every `Agent` has a `LocalRunControl` by default; `agentloop.control`
publishes them with the shared backends (SQLite, Redis).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._values._messages import UserMessage

__all__ = ["Inbox", "LocalRunControl", "RunCommand", "RunControl", "check_target"]


@dataclass(frozen=True, slots=True)
class RunCommand:
    """One command for a running invocation.

    `kind="cancel"` ends it: at once (the round in flight is not committed) or, with `after_round=True`,
    once the round in flight has committed; `reason` is kept in `Result.cancel_reason`. `kind="steer"`
    hands it `message`, a user message delivered before its next model call.
    """

    kind: Literal["cancel", "steer"]
    after_round: bool = False
    reason: str | None = None
    message: UserMessage | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("cancel", "steer"):
            raise ValueError(f"RunCommand kind must be 'cancel' or 'steer', not {self.kind!r}")
        if self.kind == "steer" and not isinstance(self.message, UserMessage):
            raise ValueError(
                "RunCommand(kind='steer') needs message=UserMessage(...): the message to hand to the running "
                f"invocation (got {type(self.message).__name__})"
            )
        if self.kind == "cancel" and self.message is not None:
            raise ValueError("RunCommand(kind='cancel') takes no message; use kind='steer' to send one")

    @classmethod
    def cancel(cls, *, after_round: bool = False, reason: str | None = None) -> RunCommand:
        """A command that cancels the invocation (at once, or after the round in flight commits)."""
        return cls("cancel", after_round=after_round, reason=reason)

    @classmethod
    def steer(cls, message: UserMessage | str) -> RunCommand:
        """A command that hands the invocation a user message before its next model call."""
        return cls("steer", message=UserMessage(message) if isinstance(message, str) else message)


@runtime_checkable
class Inbox(Protocol):
    """The commands sent to one running invocation, in the order they were sent."""

    async def receive(self) -> RunCommand:
        """The next command, waiting until one arrives."""
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


def check_target(backend: str, invocation_id: str | None, memory_id: Any) -> None:
    """Exactly one of `invocation_id` / `memory_id` names where a command goes."""
    if (invocation_id is None) == (memory_id is None):
        raise TypeError(
            f"{backend}.send() takes exactly one of invocation_id= or memory_id= (got "
            f"{'both' if invocation_id is not None else 'neither'})"
        )


class _StreamInbox:
    """An inbox over an in-memory stream."""

    __slots__ = ("_receive",)

    def __init__(self, receive: MemoryObjectReceiveStream[RunCommand]) -> None:
        self._receive = receive

    async def receive(self) -> RunCommand:
        return await self._receive.receive()


class LocalRunControl:
    """Reaches the invocations running in this process (commands never wait: an inbox has no bound)."""

    def __init__(self) -> None:
        self._inboxes: dict[str, tuple[Any, MemoryObjectSendStream[RunCommand]]] = {}
        self._by_memory: dict[Any, set[str]] = {}

    @asynccontextmanager
    async def running(self, invocation_id: str, memory_id: Any = None) -> AsyncIterator[Inbox]:
        if invocation_id in self._inboxes:
            raise ValueError(
                f"LocalRunControl: invocation {invocation_id!r} is already registered as running"
            )
        send, receive = anyio.create_memory_object_stream[RunCommand](math.inf)
        self._inboxes[invocation_id] = (memory_id, send)
        if memory_id is not None:
            self._by_memory.setdefault(memory_id, set()).add(invocation_id)
        try:
            with send, receive:
                yield _StreamInbox(receive)
        finally:
            del self._inboxes[invocation_id]
            if memory_id is not None:
                running = self._by_memory[memory_id]
                running.discard(invocation_id)
                if not running:
                    del self._by_memory[memory_id]

    async def send(
        self, command: RunCommand, *, invocation_id: str | None = None, memory_id: Any = None
    ) -> bool:
        check_target("LocalRunControl", invocation_id, memory_id)
        targets = [invocation_id] if invocation_id is not None else sorted(self._by_memory.get(memory_id, ()))
        delivered = False
        for target in targets:
            entry = self._inboxes.get(target)
            if entry is not None:
                entry[1].send_nowait(command)
                delivered = True
        return delivered

    def __repr__(self) -> str:
        return f"LocalRunControl(running={len(self._inboxes)})"
