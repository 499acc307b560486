"""Running sync code (sync tools, executors, providers) in worker threads: limits, abandoned threads."""

from __future__ import annotations

import functools
import inspect
import logging
import math
import threading
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar

# -- running sync code -------------------------------------------------------------------------------------

TOOL_THREADS = 40
"""Worker threads sync tools (and sync executors/providers) may run at once in the process, counting those
still running after their caller stopped waiting (a timeout, a cancellation): an exact bound on the threads
this layer keeps busy. A call that finds them all busy waits for one to end."""

THREADS_PER_TOOL = 16
"""Worker threads one tool (or provider) may hold at once, running or abandoned: many concurrent calls of one
sync tool that hangs can take at most this many of the `TOOL_THREADS`, so other tools always find threads.
Further calls of that tool wait for one of its threads to end."""

ABANDONED_THREADS_PER_TOOL = 4
"""Threads one tool (or provider) may leave running after their callers stopped waiting; at that many, new
calls of that tool wait for one to end instead of starting yet another thread (other tools go on)."""

logger = logging.getLogger("agentloop")
_threads_lock = threading.Lock()
_busy = 0  # threads of this layer running (or about to run) sync code, abandoned ones included
_abandoned: dict[int, int] = {}  # id(owner) -> threads still running whose caller stopped waiting
_held: dict[int, int] = {}  # id(owner) -> slots its calls hold (running, about to run, or abandoned)
_starved: ContextVar[str | None] = ContextVar("agentloop_worker_starved", default=None)


def abandoned_threads(func: Callable[..., Any] | None = None) -> int:
    """Threads still running after their caller stopped waiting: of the code `func` runs, or of everyone."""
    with _threads_lock:
        if func is None:
            return sum(_abandoned.values())
        return _abandoned.get(_worker_key(func), 0)


def busy_threads() -> int:
    """Worker threads of this layer running sync code now (at most `TOOL_THREADS`), abandoned ones
    included."""
    with _threads_lock:
        return _busy


def starved_call() -> str | None:
    """Why the current task's last `run_sync_in_worker` call was still waiting to start a thread when it was
    cancelled (None if it was not): read by the tool executor to explain a timeout (the model sees it)."""
    reason = _starved.get()
    _starved.set(None)
    return reason


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

    The same on asyncio and trio: a call takes one of the process's `TOOL_THREADS` slots for as long as its
    thread runs. On cancellation it stops waiting at once; the thread, which cannot be interrupted, runs to
    its end (holding its slot) and counts as abandoned for the code it runs until then. While that code has
    `ABANDONED_THREADS_PER_TOOL` abandoned threads, or every slot is busy, a new call starts no thread: it
    waits until one ends, or its own timeout or cancellation comes first (then `starved_call()` says why).
    `what` names the caller in the messages (e.g. "Tool 'search'").
    """
    key = _worker_key(func)
    call = _WorkerCall(key)
    await _take_slot(call, what or qualified_name(func))

    def work() -> tuple[Any] | None:
        if not call.begin():  # the caller stopped waiting before the thread got to it: nothing to run
            return None
        try:
            return (func(*args),)  # boxed: trio refuses a worker that returns a coroutine
        finally:
            call.end()

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


_thread_runner: RunVar[anyio.CapacityLimiter] = RunVar("agentloop_tool_thread_runner")


def _unbounded() -> anyio.CapacityLimiter:
    """The limiter handed to anyio: never full (the slots above are the bound), so the backends' different
    ways of holding it (trio keeps an abandoned thread's token until the thread ends, asyncio frees it at
    once) change nothing."""
    try:
        return _thread_runner.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(math.inf)
        _thread_runner.set(limiter)
        return limiter


async def _take_slot(call: _WorkerCall, who: str) -> None:
    """Takes a slot for `call` once its code has fewer than `ABANDONED_THREADS_PER_TOOL` abandoned threads
    and holds fewer than `THREADS_PER_TOOL` slots, and fewer than `TOOL_THREADS` threads are busy; until then
    the caller waits (cancellable, its timeout running).

    Slots are freed by threads ending, in other threads, and the waiter may be on any event loop, so the count
    is polled, backing off from 1 ms to 20 ms: the wait only happens under load or while a tool is hung.
    """
    global _busy
    delay = 0.001
    reason: str | None = None
    while True:
        with _threads_lock:
            mine, abandoned = _abandoned.get(call.key, 0), sum(_abandoned.values())
            taken = _held.get(call.key, 0)
            if mine < ABANDONED_THREADS_PER_TOOL and taken < THREADS_PER_TOOL and _busy < TOOL_THREADS:
                _busy += 1
                _held[call.key] = taken + 1
                call.holds_slot = True
                break
            busy = _busy
        if reason is None and (mine >= ABANDONED_THREADS_PER_TOOL or abandoned):
            if mine >= ABANDONED_THREADS_PER_TOOL:
                held = f"{mine} earlier calls of it are"
            else:
                held = f"all {busy} worker threads are busy, {abandoned} of them with calls"
            reason = (
                f"{who} could not start: {held} still running after they timed out or were cancelled (a "
                "sync function cannot be interrupted); if it is hung, give its blocking calls a timeout or "
                "make it async"
            )
            logger.warning("%s; it waits for one of them to end", reason)
            _starved.set(reason)
        await anyio.sleep(delay)
        delay = min(delay * 2, 0.02)
    if reason is not None:
        _starved.set(None)


class _WorkerCall:
    """Where one call of `run_sync_in_worker` stands; read and written under `_threads_lock`.

    The slot is given back by whoever sees the call end: the thread when it finishes, or the caller when it
    leaves before the thread started. A call whose caller left before its thread started never runs
    (asyncio's worker skips it anyway; trio's would run it), so the same calls run on both backends, and
    only started threads count as abandoned.
    """

    __slots__ = ("finished", "holds_slot", "key", "left", "started")

    def __init__(self, key: int) -> None:
        self.key = key
        self.holds_slot = False
        self.started = False
        self.finished = False
        self.left = False

    def begin(self) -> bool:
        """In the thread, first: whether to run at all (the caller is still waiting)."""
        with _threads_lock:
            self.started = not self.left
            return self.started

    def end(self) -> None:
        """In the thread, last: the slot is given back, and an abandoned call counted out."""
        with _threads_lock:
            self.finished = True
            self._free()
            if self.left:
                _forget(self.key)

    def leave(self) -> None:
        """In the event loop, when the caller stops waiting: a thread still running counts as abandoned (and
        keeps its slot until it ends); a thread that never started gives its slot back now."""
        with _threads_lock:
            self.left = True
            if self.started and not self.finished:
                _abandoned[self.key] = _abandoned.get(self.key, 0) + 1
            elif not self.started:
                self.finished = True  # never started, and never will
                self._free()

    def _free(self) -> None:
        global _busy
        if self.holds_slot:
            self.holds_slot = False
            _busy -= 1
            held = _held[self.key] - 1
            if held:
                _held[self.key] = held
            else:
                del _held[self.key]


def _forget(key: int) -> None:
    """One abandoned thread of `key` ended (called with the lock held)."""
    left = _abandoned[key] - 1
    if left:
        _abandoned[key] = left
    else:
        del _abandoned[key]


def is_async_callable(func: object) -> bool:
    """An `async def` function (bound, partial...) or an object whose class has an `async def __call__`."""
    if inspect.iscoroutinefunction(func):
        return True
    return inspect.iscoroutinefunction(getattr(type(func), "__call__", None))  # noqa: B004


def qualified_name(obj: object) -> str:
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{module}.{qualname}" if module else qualname
