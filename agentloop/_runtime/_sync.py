"""`run_sync`: an async call made blocking, for scripts and notebooks (`Agent.chat_sync`, `Agent.ask_sync`).

Sync calls run on one event loop kept by a worker thread for the whole process, whichever thread calls and
whether or not that thread already runs a loop (Jupyter, IPython): a model's pooled connections belong to the
loop that opened them, so every sync call must use the same one. From a worker thread of a running loop (a
sync tool, `anyio.to_thread.run_sync`), the call runs on that loop instead, so it cannot deadlock.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

__all__ = ["AsyncClosable", "close_at_exit", "run_sync"]

logger = logging.getLogger("agentloop")

T = TypeVar("T")

_lock = threading.Lock()
_worker: ThreadPoolExecutor | None = None
_loop: asyncio.AbstractEventLoop | None = None  # created and used by the worker thread only


@runtime_checkable
class AsyncClosable(Protocol):
    """What holds connections on the sync calls' loop (a model's HTTP pool): closed before that loop is."""

    async def aclose(self) -> None: ...


_to_close: weakref.WeakSet[AsyncClosable] = weakref.WeakSet()
_to_close_strong: list[AsyncClosable] = []  # those that take no weak reference (`__slots__`)


def close_at_exit(resource: object) -> None:
    """Closes `resource` (if it is `AsyncClosable`) on the sync calls' loop at interpreter exit, before the
    loop itself: otherwise its pooled connections are garbage-collected open (`ResourceWarning: unclosed
    transport` under `python -X dev`). A call made from a loop's worker thread runs on that loop, whose
    owner closes what it opened, so nothing is registered then."""
    if isinstance(resource, AsyncClosable) and not _in_loop_worker_thread():
        try:
            _to_close.add(resource)
        except TypeError:
            if all(kept is not resource for kept in _to_close_strong):
                _to_close_strong.append(resource)


def run_sync(call: Callable[..., Awaitable[T]], /, *args: Any, **kwargs: Any) -> T:
    """`await call(*args, **kwargs)` from synchronous code; returns its result or raises its error."""

    async def main() -> T:
        return await call(*args, **kwargs)

    if _in_loop_worker_thread():
        from anyio import from_thread

        return from_thread.run(main)
    if threading.current_thread().name.startswith("agentloop-sync"):
        raise RuntimeError("agentloop: a sync call from inside another sync call; use `await` there")
    tasks: list[asyncio.Task[T]] = []
    future = _worker_thread().submit(_run_on_worker_loop, main, tasks)
    try:
        return future.result()
    except KeyboardInterrupt:  # Ctrl-C: cancel the call (HTTP request, tools) and let it clean up
        loop = _loop
        if tasks and loop is not None:
            loop.call_soon_threadsafe(tasks[0].cancel)
        try:
            future.result(timeout=10)
        except BaseException:
            pass
        raise


def _in_loop_worker_thread() -> bool:
    """Whether this is a worker thread of a running anyio loop (a sync tool, `to_thread.run_sync`)."""
    from anyio import from_thread  # here: `import agentloop` does not load it

    try:
        from_thread.check_cancelled()
    except RuntimeError:  # anyio's NoEventLoopError: not a worker thread
        return False
    return True


def _run_on_worker_loop(main: Callable[[], Coroutine[Any, Any, T]], tasks: list[asyncio.Task[T]]) -> T:
    global _loop
    if _loop is None:
        import asyncio  # the first sync call loads it: `import agentloop` does not

        _loop = asyncio.new_event_loop()
    task = _loop.create_task(main())
    tasks.append(task)
    return _loop.run_until_complete(task)


def _worker_thread() -> ThreadPoolExecutor:
    global _worker
    with _lock:
        if _worker is None:
            from concurrent.futures import ThreadPoolExecutor

            _worker = ThreadPoolExecutor(1, thread_name_prefix="agentloop-sync")
        return _worker


@atexit.register
def _close_loop() -> None:
    """At interpreter exit (the worker thread has stopped by then): closes the sync calls' loop, the
    connections of the models used there and its async generators first."""
    global _loop
    loop, _loop = _loop, None
    if loop is not None and not loop.is_running():
        try:
            for resource in [*_to_close, *_to_close_strong]:
                try:
                    loop.run_until_complete(resource.aclose())
                except Exception as error:  # exiting anyway: the others still get closed
                    logger.debug("agentloop: closing %r at exit failed: %r", resource, error)
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
