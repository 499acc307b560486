"""Holding a store's lease on one memory id: wait for it, renew it while held, give it back.

Stores shared between processes implement three steps (`try_acquire`, `renew`, `release`); this module
runs them. A waiter polls (the head of the line is marked in the store, so processes take turns); the
holder renews every third of the lease's time-to-live; when renewal has failed for a whole TTL the lease
may belong to someone else, so the body is cancelled and `ChatMemoryStoreError` is raised.

Each step does more than its name when asked, to spare round trips: taking the lease may read the window in
the same step, and giving it back may append the invocation's last round in the same step.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

import anyio

from .. import ChatMemoryConflictError, ChatMemoryStoreError, ChatMessage, MemoryLease, StoredMemory
from .._backend import running_on_asyncio

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

_FIRST_POLL = 0.002
_MAX_POLL = 0.05

LastRound = tuple[Sequence[ChatMessage], int | None]
"""A round to append as the lease is given back, and the version it was based on."""


class LeaseSteps(Protocol):
    """The store side of a lease: each step is atomic in the store."""

    async def try_acquire(
        self, memory_id: Any, token: str, ttl: float, *, read: bool = False, max_messages: int | None = None
    ) -> StoredMemory | bool:
        """Takes the lease if it is free or expired and nobody else is first in line (True, or with `read`
        the window of `max_messages` read in the same step); else queues `token` and returns False."""
        ...

    async def renew(self, memory_id: Any, token: str, ttl: float) -> bool:
        """Extends the lease; False when `token` no longer holds it."""
        ...

    async def release(self, memory_id: Any, token: str, *, last: LastRound | None = None) -> int | None:
        """Gives the lease back (and leaves the line) if `token` holds it (or waits for it). With `last`,
        first appends that round as `append(..., lease=token)` would (raising as it would), and returns the
        new version."""
        ...


class _Lease(MemoryLease):
    """A held lease: renewed by a task of `hold_lease`, given back by it or with the last round."""

    __slots__ = ("_stopped", "_turn", "memory_id", "released", "renewal", "steps", "store")

    def __init__(self, steps: LeaseSteps, memory_id: Any, token: str, store: str) -> None:
        super().__init__(token)
        self.steps = steps
        self.memory_id = memory_id
        self.store = store
        self.released = False
        self._stopped = False
        # Made by the renewal task when it starts (most holds end before one is needed): its cancel scope,
        # and the turn that keeps a renewal and the release from overlapping in the store.
        self.renewal: anyio.CancelScope | None = None
        self._turn: anyio.Lock | None = None

    def start_renewal(self) -> bool:
        """Called by the renewal task as it starts: False when the lease is already being given back."""
        self.renewal = anyio.CancelScope()
        self._turn = anyio.Lock(fast_acquire=True)
        return not self._stopped

    async def renew(self, ttl: float) -> bool | None:
        """One renewal, unless the lease is being given back (None)."""
        assert self._turn is not None
        async with self._turn:
            if self._stopped:
                return None
            return await self.steps.renew(self.memory_id, self.token, ttl)

    async def stop_renewal(self) -> None:
        """Stops the renewal task, after any renewal it has under way reached the store."""
        if self._turn is None:  # no renewal task has started: none can be under way
            self._stopped = True
            return
        async with self._turn:
            self._stopped = True
        assert self.renewal is not None
        self.renewal.cancel()  # (only here: cancelling a scope costs, anyio formats the task's repr)

    async def append_and_release(
        self, messages: Sequence[ChatMessage], *, expected_version: int | None
    ) -> int | None:
        await self.stop_renewal()
        version = await self.steps.release(self.memory_id, self.token, last=(messages, expected_version))
        self.released = True
        return version


@asynccontextmanager
async def hold_lease(
    steps: LeaseSteps, memory_id: Any, ttl: float, store: str, *, read: bool, max_messages: int | None
) -> AsyncIterator[MemoryLease]:
    """Waits for the lease on `memory_id`, yields it, renews it while the block runs, gives it back."""
    lease = _Lease(steps, memory_id, os.urandom(16).hex(), store)
    delay = _FIRST_POLL
    try:
        while True:
            asked = anyio.current_time()
            taken = await steps.try_acquire(memory_id, lease.token, ttl, read=read, max_messages=max_messages)
            if taken is not False:
                lease.loaded = taken if isinstance(taken, StoredMemory) else None
                break
            await anyio.sleep(delay)
            delay = min(delay * 1.5, _MAX_POLL)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await _quietly_release(steps, memory_id, lease.token)
        raise
    lost: list[ChatMemoryStoreError] = []
    body = anyio.CancelScope()  # cancelled by the renewal when the lease is lost
    renewing = _renewing_on_asyncio if running_on_asyncio() else _renewing_in_task
    error: BaseException | None = None
    try:
        async with renewing(lease, ttl, asked + ttl, body, lost):
            with body:
                yield lease
    except BaseExceptionGroup as group:  # the block's own error, wrapped by the task group
        error = _single(group)
    finally:
        if not lease.released:
            with anyio.CancelScope(shield=True):
                await _quietly_release(steps, memory_id, lease.token)
    if lost:  # the block was stopped because the lease was lost: that is the error to report
        raise lost[0] from None
    if error is not None:
        raise error


@asynccontextmanager
async def _renewing_in_task(
    lease: _Lease, ttl: float, expires: float, body: anyio.CancelScope, lost: list[ChatMemoryStoreError]
) -> AsyncIterator[None]:
    """Renews the lease in a task of its own while the block runs (trio)."""
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(_renew, lease, ttl, expires, body, lost)
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                await lease.stop_renewal()


@asynccontextmanager
async def _renewing_on_asyncio(
    lease: _Lease, ttl: float, expires: float, body: anyio.CancelScope, lost: list[ChatMemoryStoreError]
) -> AsyncIterator[None]:
    """Renews the lease while the block runs (asyncio): a timer of the event loop, which starts the
    renewal task only when the block outlasts a third of the lease's time-to-live. Most blocks end first, so
    most holds cost a timer rather than a task and a task group."""
    loop = asyncio.get_running_loop()
    started: list[asyncio.Task[None]] = []

    def start() -> None:
        started.append(loop.create_task(_renew(lease, ttl, expires, body, lost, wait=False)))

    timer = loop.call_later(ttl / 3, start)
    try:
        yield
    finally:
        timer.cancel()
        if started:
            with anyio.CancelScope(shield=True):
                await lease.stop_renewal()
                await started[0]


async def _renew(
    lease: _Lease,
    ttl: float,
    expires: float,
    scope: anyio.CancelScope,
    lost: list[ChatMemoryStoreError],
    *,
    wait: bool = True,
) -> None:
    """Renews every ttl/3 (the first time at once unless `wait`); on failure retries until the lease would
    have expired, then cancels the holder."""
    failure: ChatMemoryStoreError | None = None
    if not lease.start_renewal():  # given back before this task started
        return
    assert lease.renewal is not None
    with lease.renewal:
        while True:
            if wait:
                await anyio.sleep(ttl / 3 if failure is None else min(ttl / 10, 0.5))
            wait = True
            asked = anyio.current_time()
            try:
                still_held = await lease.renew(ttl)
            except ChatMemoryStoreError as error:
                failure = error
                if anyio.current_time() + min(ttl / 10, 0.5) < expires:
                    continue
                lost.append(
                    ChatMemoryStoreError(
                        f"{lease.store}: lost the lease on memory {lease.memory_id!r}: it could not be "
                        f"renewed for {ttl:g} s ({failure}); the invocation was stopped and its unfinished "
                        "round not stored",
                        store=lease.store,
                    )
                )
                scope.cancel()
                return
            if still_held is None:  # being given back
                return
            if not still_held:
                lost.append(
                    ChatMemoryConflictError(
                        f"{lease.store}: the lease on memory {lease.memory_id!r} expired and another worker "
                        "took it; the invocation was stopped and its unfinished round not stored",
                        store=lease.store,
                    )
                )
                scope.cancel()
                return
            failure = None
            expires = asked + ttl


async def _quietly_release(steps: LeaseSteps, memory_id: Any, token: str) -> None:
    try:
        await steps.release(memory_id, token)
    except ChatMemoryStoreError:
        pass  # the lease expires by itself


def _single(group: BaseExceptionGroup[BaseException]) -> BaseException:
    errors = group.exceptions
    if len(errors) == 1:
        error = errors[0]
        return _single(error) if isinstance(error, BaseExceptionGroup) else error
    return group
