"""What the runtime hands to a tool besides the model's arguments: `ToolContext` and `ToolMemoryId`.

Both are injected: they never appear in a tool's JSON schema and the model can never set them.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any, Literal, Protocol

import anyio
import msgspec

from ._messages import ToolExecutionRequest
from ._tool_events import ToolOutputDelta, ToolProgress

__all__ = [
    "LogLevel",
    "ToolChannel",
    "ToolContext",
    "ToolMemoryId",
    "ToolWatcher",
    "bind_channel",
    "report_output",
    "watch_tools",
    "watched_by_nobody",
]

NO_CONTEXT: Mapping[str, Any] = MappingProxyType({})

LogLevel = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
"""The MCP (syslog) log levels a tool may log at."""


class ToolChannel(Protocol):
    """Where a tool's logs, progress and questions go while it serves a caller that can take them.

    The MCP server binds one around each call it serves (`bind_channel`); inside an agent there is none,
    so logging and progress are no-ops there and questions fail with a clear error.
    """

    def log(self, level: LogLevel, message: Any) -> None:
        """Sends a log message (in order with everything else the call sends); never blocks."""

    async def report_progress(self, progress: float, total: float | None, message: str | None) -> None:
        """Sends a progress notification."""

    async def elicit(self, message: str, schema: Mapping[str, Any]) -> Any:
        """Asks the user for input shaped by `schema` (a JSON schema object); the client's answer."""

    async def sample(self, prompt: str, *, max_tokens: int, system: str | None) -> str:
        """Asks the caller's model to complete `prompt`; its text."""


_channel: ContextVar[ToolChannel | None] = ContextVar("agentloop_tool_channel", default=None)


@contextmanager
def bind_channel(channel: ToolChannel) -> Iterator[None]:
    """Binds `channel` to the tool calls run inside this block (and the worker threads they start)."""
    token = _channel.set(channel)
    try:
        yield
    finally:
        _channel.reset(token)


ToolWatcher = Callable[[ToolProgress | ToolOutputDelta], Awaitable[None]]
"""Takes what running tools report (their progress, a streaming tool's values): the stream, tracing."""

_watchers: ContextVar[tuple[ToolWatcher, ...]] = ContextVar("agentloop_tool_watchers", default=())


@contextmanager
def watch_tools(watcher: ToolWatcher) -> Iterator[None]:
    """Hands what the tool calls run inside this block report to `watcher` too (innermost last).

    Nothing is built for a report nobody watches: with no watcher and no MCP channel,
    `report_progress` returns at once."""
    token = _watchers.set((*_watchers.get(), watcher))
    try:
        yield
    finally:
        _watchers.reset(token)


@contextmanager
def watched_by_nobody() -> Iterator[None]:
    """Tool calls inside this block report to no watcher of the task that started them (a background task
    outlives the stream that watched its invocation)."""
    token = _watchers.set(())
    try:
        yield
    finally:
        _watchers.reset(token)


async def report_output(
    request: ToolExecutionRequest | None, value: Any, count: int, describe: Callable[[Any], str]
) -> None:
    """A streaming tool yielded `value` (its `count`-th, from 1): a `ToolOutputDelta` to the watchers, and an
    MCP progress notification (`count`, with the value's text as its message) when served over MCP."""
    channel = _channel.get()
    if channel is not None:
        await channel.report_progress(count, None, describe(value))
    watchers = _watchers.get()
    if watchers:
        event = ToolOutputDelta(
            (request.id or "") if request is not None else "",
            request.name if request is not None else "",
            value,
        )
        for watcher in watchers:
            await watcher(event)


class ToolMemoryId:
    """Marks a parameter that receives the invocation's memory id: `user: Annotated[str, ToolMemoryId]`.

    The class itself or an instance (`ToolMemoryId()`) both work as the marker.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "ToolMemoryId()"


class ToolContext(msgspec.Struct, frozen=True):
    """Everything a tool may want to know about the call it serves; declare `ctx: ToolContext` to get it.

    `context` is the mapping given to `chat(..., context=...)` (look keys up with `ctx["tenant"]` or
    `ctx.get("tenant")`). `deadline` is the invocation's absolute deadline on the `anyio.current_time()`
    clock, or None; `remaining_time()` turns it into seconds left. A frozen msgspec Struct: one is built
    per call, so it must be cheap.
    """

    invocation_id: str
    memory_id: Any = None
    context: Mapping[str, Any] = NO_CONTEXT
    request: ToolExecutionRequest | None = None
    round: int = 0
    deadline: float | None = None

    def remaining_time(self) -> float | None:
        """Seconds left before the invocation's deadline (negative once passed), None without a deadline.

        Works from async tools and from sync tools running in a worker thread.
        """
        if self.deadline is None:
            return None
        return self.deadline - _current_time()

    def log(self, level: LogLevel, message: Any) -> None:
        """Logs `message` to the caller: an MCP log notification when the tool is served over MCP, a no-op
        inside an agent. Works from async tools and from sync tools in a worker thread."""
        channel = _channel.get()
        if channel is not None:
            channel.log(level, message)

    def debug(self, message: Any) -> None:
        """`log("debug", message)`."""
        self.log("debug", message)

    def info(self, message: Any) -> None:
        """`log("info", message)`."""
        self.log("info", message)

    def warning(self, message: Any) -> None:
        """`log("warning", message)`."""
        self.log("warning", message)

    def error(self, message: Any) -> None:
        """`log("error", message)`."""
        self.log("error", message)

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Reports how far the tool got: a `ToolProgress` event in the invocation's stream (and
        `TokenStream.on_tool_progress`), a span event when traced, an MCP progress notification when the
        tool is served over MCP; a no-op when nobody watches (`chat()`).

        From a sync tool (it runs in a worker thread): `anyio.from_thread.run(ctx.report_progress, 3, 10)`.
        """
        channel = _channel.get()
        watchers = _watchers.get()
        if channel is None and not watchers:
            return
        _check_progress(progress, total, message)
        if channel is not None:
            await channel.report_progress(progress, total, message)
        if watchers:
            request = self.request
            event = ToolProgress(
                (request.id or "") if request is not None else "",
                request.name if request is not None else "",
                progress,
                total,
                message,
            )
            for watcher in watchers:
                await watcher(event)

    async def elicit(self, message: str, schema: Mapping[str, Any]) -> Any:
        """Asks the user, through the MCP client, for input shaped by `schema` (a flat JSON schema object).

        Returns the SDK's `ElicitResult` (`.action` is "accept", "decline" or "cancel"; `.content` the
        answer). Raises `RuntimeError` when the tool is not served over MCP.
        """
        return await _required_channel("elicit").elicit(message, schema)

    async def sample(self, prompt: str, *, max_tokens: int = 1000, system: str | None = None) -> str:
        """Asks the MCP client's model to complete `prompt` (MCP sampling); returns its text.

        Raises `RuntimeError` when the tool is not served over MCP.
        """
        return await _required_channel("sample").sample(prompt, max_tokens=max_tokens, system=system)

    def get(self, key: str, default: Any = None) -> Any:
        """`context[key]`, or `default` when the key is absent."""
        return self.context.get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self.context[key]

    def __contains__(self, key: object) -> bool:
        return key in self.context


def new_invocation_id() -> str:
    """The id of an invocation nobody named (`Agent(id_factory=...)` names them otherwise): a random UUID
    as 32 hex digits, unique across processes, so paused rounds and durable records never collide. The one
    scheme of the agent's loop and of `execute_tool_calls`."""
    return uuid.uuid4().hex


def _check_progress(progress: object, total: object, message: object) -> None:
    def number(value: object) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    if not number(progress):
        raise TypeError(f"report_progress(progress=...) takes a number (e.g. 3 or 0.5), not {progress!r}")
    if total is not None and not number(total):
        raise TypeError(f"report_progress(total=...) takes a number or None, not {total!r}")
    if message is not None and not isinstance(message, str):
        raise TypeError(f"report_progress(message=...) takes a str or None, not {type(message).__name__}")


def _required_channel(what: str) -> ToolChannel:
    channel = _channel.get()
    if channel is None:
        raise RuntimeError(
            f"ToolContext.{what}() asks the MCP client, and this call has none: it works only while the tool "
            "is served over MCP (agentloop.mcp.server_from / python -m agentloop.mcp serve)"
        )
    return channel


def _current_time() -> float:
    try:
        return anyio.current_time()
    except RuntimeError:
        # A sync tool runs in a worker thread, which has no event loop: ask the loop that started it.
        from anyio import (
            from_thread,  # loaded already by the worker thread's start; not with `import agentloop`
        )

        return from_thread.run_sync(anyio.current_time)
