"""Running sync code (sync tools, executors, providers) in worker threads: limits, abandoned threads."""

from __future__ import annotations

import functools
import inspect
import logging
import math
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar

# -- running sync code -------------------------------------------------------------------------------------

TOOL_THREADS = 40
"""Worker threads sync tools (and sync executors/providers) may occupy at once, per event loop, while their
caller waits. A call that stops waiting (timeout, cancellation) gives its slot back at once."""

ABANDONED_THREADS_PER_TOOL = 4
"""Threads one tool (or provider) may leave running after their callers stopped waiting; at that many, new
calls of that tool wait for one to end instead of starting yet another thread (other tools go on)."""

ABANDONED_THREADS = 40
"""Abandoned threads, all tools of the process together; at that many, every new sync call waits."""

logger = logging.getLogger("agentloop")
_thread_limiter: RunVar[anyio.CapacityLimiter] = RunVar("agentloop_tool_threads")
_thread_runner: RunVar[anyio.CapacityLimiter] = RunVar("agentloop_tool_thread_runner")
_abandoned_lock = threading.Lock()
_abandoned: dict[int, int] = {}  # id(owner) -> threads still running whose caller stopped waiting


def _tool_thread_limiter() -> anyio.CapacityLimiter:
    try:
        return _thread_limiter.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(TOOL_THREADS)
        _thread_limiter.set(limiter)
        return limiter


def _unbounded() -> anyio.CapacityLimiter:
    """The limiter handed to anyio: never full, so the backends' different ways of holding it (trio keeps an
    abandoned thread's token until the thread ends, asyncio frees it at once) change nothing."""
    try:
        return _thread_runner.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(math.inf)
        _thread_runner.set(limiter)
        return limiter


def abandoned_threads(func: Callable[..., Any] | None = None) -> int:
    """Threads still running after their caller stopped waiting: of the code `func` runs, or of everyone."""
    with _abandoned_lock:
        if func is None:
            return sum(_abandoned.values())
        return _abandoned.get(_worker_key(func), 0)


def _worker_key(func: Callable[..., Any]) -> int:
    """What counts as "the same tool" for abandoned threads: the code it runs (partials and bound methods
    unwrapped), so the tools a provider builds afresh for each invocation still share one count."""
    while isinstance(func, functools.partial):
        func = func.func
    func = getattr(func, "__func__", func)
    code = getattr(func, "__code__", None)
    return id(code if code is not None else type(func))


async def run_sync_in_worker(func: Callable[..., Any], *args: Any, what: str = "") -> Any:
    """`func(*args)` in a worker thread of the tool layer's bounded pool; an awaitable it returns is awaited.

    The same on asyncio and trio: the call holds one of `TOOL_THREADS` slots while it waits. On cancellation
    it stops waiting at once and frees its slot; the thread, which cannot be interrupted, runs to its end and
    counts as abandoned for the code it runs until then. While that code has `ABANDONED_THREADS_PER_TOOL`
    abandoned threads (or the process `ABANDONED_THREADS`), a new call starts no thread: it waits, holding
    no slot, until one ends (or its own timeout or cancellation). `what` names the caller in the warning
    logged then (e.g. "Tool 'search'").
    """
    key = _worker_key(func)
    if _abandoned:  # someone's threads outlived their callers: no new thread while over a bound
        await _wait_for_room(key, what or _qualname(func))
    call = _WorkerCall(key)

    def work() -> tuple[Any] | None:
        if not call.begin():  # the caller stopped waiting before the thread got to it: nothing to run
            return None
        try:
            return (func(*args),)  # boxed: trio refuses a worker that returns a coroutine
        finally:
            call.end()

    async with _tool_thread_limiter():
        try:
            boxed = await anyio.to_thread.run_sync(work, abandon_on_cancel=True, limiter=_unbounded())
        except BaseException:
            call.leave()
            raise
    assert boxed is not None  # `work` returns None only to a caller that already left
    result = boxed[0]
    if inspect.isawaitable(result):  # a sync callable that handed back a coroutine: awaited on both backends
        result = await result
    return result


async def _wait_for_room(key: int, who: str) -> None:
    """Returns once `key` has fewer than `ABANDONED_THREADS_PER_TOOL` abandoned threads and the process fewer
    than `ABANDONED_THREADS`; until then the caller waits (no slot held, cancellable, its timeout running).

    Abandoned threads end in other threads and the waiter may be on any event loop, so their count is polled,
    backing off from 1 ms to 50 ms: the wait only happens while a tool is hung or just cancelled.
    """
    delay = 0.001
    warned = False
    while True:
        with _abandoned_lock:
            mine, total = _abandoned.get(key, 0), sum(_abandoned.values())
        if mine < ABANDONED_THREADS_PER_TOOL and total < ABANDONED_THREADS:
            return
        if not warned:
            warned = True
            scope = f"it has {mine}" if mine >= ABANDONED_THREADS_PER_TOOL else f"the process has {total}"
            logger.warning(
                "%s waits to start: %s calls still running in worker threads after they timed out or were "
                "cancelled (a sync function cannot be interrupted); if it is hung, give its blocking calls a "
                "timeout or make it async",
                who,
                scope,
            )
        await anyio.sleep(delay)
        delay = min(delay * 2, 0.05)


class _WorkerCall:
    """Where one call of `run_sync_in_worker` stands; read and written under `_abandoned_lock`.

    A call whose caller left before its thread started never runs (asyncio's worker skips it anyway; trio's
    would run it), so the same calls run on both backends, and only started threads count as abandoned.
    """

    __slots__ = ("finished", "key", "left", "started")

    def __init__(self, key: int) -> None:
        self.key = key
        self.started = False
        self.finished = False
        self.left = False

    def begin(self) -> bool:
        """In the thread, first: whether to run at all (the caller is still waiting)."""
        with _abandoned_lock:
            self.started = not self.left
            return self.started

    def end(self) -> None:
        """In the thread, last: an abandoned call is counted out."""
        with _abandoned_lock:
            self.finished = True
            if self.left:
                _forget(self.key)

    def leave(self) -> None:
        """In the event loop, when the caller stops waiting: a thread still running counts as abandoned."""
        with _abandoned_lock:
            self.left = True
            if self.started and not self.finished:
                _abandoned[self.key] = _abandoned.get(self.key, 0) + 1
            else:
                self.finished = True  # never started (and never will), or already done


def _forget(key: int) -> None:
    """One abandoned thread of `key` ended (called with the lock held)."""
    left = _abandoned[key] - 1
    if left:
        _abandoned[key] = left
    else:
        del _abandoned[key]


def _is_async_callable(func: object) -> bool:
    """An `async def` function (bound, partial...) or an object whose class has an `async def __call__`."""
    if inspect.iscoroutinefunction(func):
        return True
    return inspect.iscoroutinefunction(getattr(type(func), "__call__", None))  # noqa: B004


def _qualname(obj: object) -> str:
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{module}.{qualname}" if module else qualname
