"""`Flag`: a one-way event whose `anyio.Event` is made only when someone waits for it.

Most invocations end with nobody waiting for their end: a flag that is only ever set costs a bool, where an
event costs an `asyncio.Event` and its deque (about 700 bytes per running invocation, held while it waits).
"""

from __future__ import annotations

import anyio
import anyio.lowlevel

__all__ = ["Flag"]


class Flag:
    """Set once; `wait()` returns once set (a checkpoint, as `anyio.Event.wait` is)."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: anyio.Event | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        if self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        if self._set:
            await anyio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()
