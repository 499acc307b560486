"""Holding a store's lease on one memory id: wait for it, renew it while held, give it back.

Stores shared between processes implement three steps (`try_acquire`, `renew`, `release`); this module
runs them. A waiter polls (the head of the line is marked in the store, so processes take turns); the
holder renews every third of the lease's time-to-live; when renewal has failed for a whole TTL the lease
may belong to someone else, so the body is cancelled and `ChatMemoryStoreError` is raised.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

import anyio

from .._errors import ChatMemoryConflictError, ChatMemoryStoreError

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

_FIRST_POLL = 0.002
_MAX_POLL = 0.05


class LeaseSteps(Protocol):
    """The store side of a lease: each step is atomic in the store."""

    async def try_acquire(self, memory_id: Any, token: str, ttl: float) -> bool:
        """Takes the lease if it is free or expired and nobody else is first in line; else queues `token`."""
        ...

    async def renew(self, memory_id: Any, token: str, ttl: float) -> bool:
        """Extends the lease; False when `token` no longer holds it."""
        ...

    async def release(self, memory_id: Any, token: str) -> None:
        """Gives the lease back (and leaves the line) if `token` holds it (or waits for it)."""
        ...


@asynccontextmanager
async def hold_lease(steps: LeaseSteps, memory_id: Any, ttl: float, store: str) -> AsyncIterator[str]:
    """Waits for the lease on `memory_id`, yields its token, renews it while the block runs."""
    token = uuid.uuid4().hex
    delay = _FIRST_POLL
    try:
        while True:
            asked = anyio.current_time()
            if await steps.try_acquire(memory_id, token, ttl):
                break
            await anyio.sleep(delay)
            delay = min(delay * 1.5, _MAX_POLL)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await _quietly_release(steps, memory_id, token)
        raise
    lost: list[ChatMemoryStoreError] = []
    error: BaseException | None = None
    try:
        async with anyio.create_task_group() as task_group:
            scope = task_group.cancel_scope
            task_group.start_soon(_renew, steps, memory_id, token, ttl, asked + ttl, store, scope, lost)
            try:
                yield token
            finally:
                scope.cancel()
    except BaseExceptionGroup as group:  # the block's own error, wrapped by the task group
        error = _single(group)
    finally:
        with anyio.CancelScope(shield=True):
            await _quietly_release(steps, memory_id, token)
    if lost:  # the block was stopped because the lease was lost: that is the error to report
        raise lost[0] from None
    if error is not None:
        raise error


async def _renew(
    steps: LeaseSteps,
    memory_id: Any,
    token: str,
    ttl: float,
    expires: float,
    store: str,
    scope: anyio.CancelScope,
    lost: list[ChatMemoryStoreError],
) -> None:
    """Renews every ttl/3; on failure retries until the lease would have expired, then cancels the holder."""
    failure: ChatMemoryStoreError | None = None
    while True:
        await anyio.sleep(ttl / 3 if failure is None else min(ttl / 10, 0.5))
        asked = anyio.current_time()
        try:
            still_held = await steps.renew(memory_id, token, ttl)
        except ChatMemoryStoreError as error:
            failure = error
            if anyio.current_time() + min(ttl / 10, 0.5) < expires:
                continue
            lost.append(
                ChatMemoryStoreError(
                    f"{store}: lost the lease on memory {memory_id!r}: it could not be renewed for "
                    f"{ttl:g} s ({failure}); the invocation was stopped and its unfinished round not stored",
                    store=store,
                )
            )
            scope.cancel()
            return
        if not still_held:
            lost.append(
                ChatMemoryConflictError(
                    f"{store}: the lease on memory {memory_id!r} expired and another worker took it; the "
                    "invocation was stopped and its unfinished round not stored",
                    store=store,
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
