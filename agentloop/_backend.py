"""Which event loop the current task runs on, through anyio's public API only.

The Redis store and the DBOS integration take a native asyncio path when they run on asyncio. They used to
ask `sniffio`, which neither agentloop nor anyio (since 4.x) declares, so a clean `[redis]` install failed
on import. anyio names the running loop's cancellation exception: on asyncio it is `asyncio.CancelledError`,
on trio `trio.Cancelled`; that answers the question without another dependency.
"""

from __future__ import annotations

import asyncio

import anyio


def running_on_asyncio() -> bool:
    """True inside a task of an asyncio event loop (anyio's asyncio backend), False on trio.

    Raises anyio's `NoEventLoopError` (a RuntimeError) outside any event loop, as anyio does.
    """
    return anyio.get_cancelled_exc_class() is asyncio.CancelledError
