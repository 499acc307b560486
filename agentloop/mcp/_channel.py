"""The `ToolChannel` of one MCP tool call: a served tool's logs, progress and questions, in order.

Everything a call sends goes through one queue that a task drains while the tool runs, so notifications
reach the client in the order the tool sent them, and all of them before the call's result. `log()` never
blocks, and works from sync tools in worker threads too.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import anyio.from_thread
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning

from .._values._context import LogLevel

__all__ = ["LEVELS", "CallChannel", "LogLevels"]

LEVELS: tuple[LogLevel, ...] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)

_Note = Callable[[], Awaitable[None]]


class LogLevels:
    """The level each client connection asked for with `logging/setLevel` (all levels until it asks).

    The SDK builds a `ServerSession` per request over one connection object, which it does not expose
    publicly (mcp 2.3); the level is kept per connection, dropped with it.
    """

    def __init__(self) -> None:
        self._levels: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()

    @staticmethod
    def _key(session: Any) -> Any:
        return session._connection  # one per client connection, shared by its requests' sessions

    def set(self, session: Any, level: LogLevel) -> None:
        self._levels[self._key(session)] = LEVELS.index(level)

    def allows(self, session: Any, level: LogLevel) -> bool:
        return LEVELS.index(level) >= self._levels.get(self._key(session), 0)


class CallChannel:
    """The channel bound to one `tools/call` while its tool runs; `drain()` delivers what it queues."""

    def __init__(self, ctx: ServerRequestContext[Any], levels: LogLevels, logger: str) -> None:
        self._ctx = ctx
        self._levels = levels
        self._logger = logger
        self._loop_thread = threading.get_ident()
        self._send: MemoryObjectSendStream[_Note]
        self._receive: MemoryObjectReceiveStream[_Note]
        self._send, self._receive = anyio.create_memory_object_stream[_Note](float("inf"))

    async def drain(self) -> None:
        """Delivers every queued notification in order until `close()`; a failed delivery is dropped (the
        client went away), never the tool's result."""
        async with self._receive:
            async for note in self._receive:
                try:
                    await note()
                except Exception:  # a notification must never fail the call
                    continue

    def close(self) -> None:
        """No more notifications: `drain()` returns once the queued ones are delivered."""
        self._send.close()

    def _queue(self, note: _Note) -> None:
        if threading.get_ident() == self._loop_thread:
            self._send.send_nowait(note)
        else:  # a sync tool in a worker thread
            anyio.from_thread.run_sync(self._send.send_nowait, note)

    def log(self, level: LogLevel, message: Any) -> None:
        if level not in LEVELS:
            raise ValueError(f"unknown log level {level!r}: use one of {', '.join(LEVELS)}")
        session = self._ctx.session
        if not self._levels.allows(session, level):
            return
        request_id = self._ctx.request_id

        async def note() -> None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)  # setLevel-era logging, still current
                await session.send_log_message(level, message, self._logger, related_request_id=request_id)

        self._queue(note)

    async def report_progress(self, progress: float, total: float | None, message: str | None) -> None:
        token = self._ctx.meta.get("progress_token") if self._ctx.meta is not None else None
        if token is None:
            return  # the client did not ask for progress on this call
        session, request_id = self._ctx.session, self._ctx.request_id

        async def note() -> None:
            await session.send_progress_notification(
                token, progress, total, message, related_request_id=str(request_id)
            )

        self._queue(note)

    async def _ask(self, request: Callable[[], Awaitable[Any]]) -> Any:
        """Sends a request to the client after everything queued before it; its answer."""
        done = anyio.Event()
        outcome: list[Any] = []
        failure: list[BaseException] = []

        async def note() -> None:
            try:
                outcome.append(await request())
            except Exception as exc:  # handed back to the tool that asked
                failure.append(exc)
            finally:
                done.set()

        self._queue(note)
        await done.wait()
        if failure:
            raise failure[0]
        return outcome[0]

    async def elicit(self, message: str, schema: Mapping[str, Any]) -> Any:
        session, request_id = self._ctx.session, self._ctx.request_id
        return await self._ask(
            lambda: session.elicit_form(message, dict(schema), related_request_id=request_id)
        )

    async def sample(self, prompt: str, *, max_tokens: int, system: str | None) -> str:
        session, request_id = self._ctx.session, self._ctx.request_id
        messages = [types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))]

        async def request() -> Any:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)  # sampling is deprecated by 2026-07-28
                return await session.create_message(
                    messages, max_tokens=max_tokens, system_prompt=system, related_request_id=request_id
                )

        result = await self._ask(request)
        content = result.content
        blocks = content if isinstance(content, list) else [content]
        return "".join(block.text for block in blocks if isinstance(block, types.TextContent))
