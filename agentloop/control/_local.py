"""`LocalRunControl`: run control inside one process (the default)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio

from ._base import Inbox, check_target
from ._command import RunCommand

if TYPE_CHECKING:  # anyio loads the streams module with the first inbox, not with `import agentloop`
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = ["LocalRunControl"]


class _StreamInbox:
    """An inbox over an in-memory stream."""

    __slots__ = ("_receive",)

    def __init__(self, receive: MemoryObjectReceiveStream[RunCommand]) -> None:
        self._receive = receive

    async def receive(self) -> RunCommand:
        return await self._receive.receive()

    async def poll(self) -> RunCommand | None:
        try:
            return self._receive.receive_nowait()
        except anyio.WouldBlock:
            return None


Deliver = Callable[[RunCommand], Awaitable[None]]


class LocalRunControl:
    """Reaches the invocations running in this process (commands never wait: an inbox has no bound)."""

    def __init__(self) -> None:
        self._inboxes: dict[str, tuple[Any, MemoryObjectSendStream[RunCommand] | Deliver]] = {}
        self._by_memory: dict[Any, set[str]] = {}

    def attach(self, invocation_id: str, memory_id: Any, deliver: Deliver) -> AbstractContextManager[None]:
        """Registers an invocation whose commands are handed straight to `deliver` (awaited by `send`), for
        as long as the `with` block runs: what an agent in this process uses, with no inbox and no task
        reading it."""
        return _Attachment(self, invocation_id, memory_id, deliver)

    def _attach(self, invocation_id: str, memory_id: Any, deliver: Deliver) -> None:
        if invocation_id in self._inboxes:
            raise ValueError(
                f"LocalRunControl: invocation {invocation_id!r} is already registered as running"
            )
        self._inboxes[invocation_id] = (memory_id, deliver)
        if memory_id is not None:
            self._by_memory.setdefault(memory_id, set()).add(invocation_id)

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
            self._forget(invocation_id, memory_id)

    def _forget(self, invocation_id: str, memory_id: Any) -> None:
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
                receiver = entry[1]
                if callable(receiver):  # a registered callback (a stream is not callable)
                    await receiver(command)
                else:
                    receiver.send_nowait(command)
                delivered = True
        return delivered

    async def busy(self, memory_id: Any) -> bool:
        return bool(self._by_memory.get(memory_id))

    def __repr__(self) -> str:
        return f"LocalRunControl(running={len(self._inboxes)})"


class _Attachment:
    """`attach()`'s context manager: a plain object, so an invocation held open keeps no generator frame."""

    __slots__ = ("_control", "_deliver", "_invocation_id", "_memory_id")

    def __init__(
        self, control: LocalRunControl, invocation_id: str, memory_id: Any, deliver: Deliver
    ) -> None:
        self._control = control
        self._invocation_id = invocation_id
        self._memory_id = memory_id
        self._deliver = deliver

    def __enter__(self) -> None:
        self._control._attach(self._invocation_id, self._memory_id, self._deliver)

    def __exit__(self, *exc_info: object) -> None:
        self._control._forget(self._invocation_id, self._memory_id)
