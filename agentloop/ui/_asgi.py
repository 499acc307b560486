"""Bare ASGI plumbing for the UI apps: read a JSON body, answer JSON, stream SSE while watching for the
client going away (which cancels the stream: the model request and the running tools stop).

Plain ASGI rather than a framework: the apps mount under FastAPI, Starlette or any ASGI server as they are,
and `import agentloop.ui` needs nothing beyond agentloop's own dependencies.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import msgspec

__all__ = ["ASGIApp", "HTTPError", "UIApp", "UIRequest", "answer_json", "read_body", "serve", "stream_sse"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY = 8 * 1024 * 1024
"""The largest request body the apps read (a long conversation with tool outputs fits)."""


class HTTPError(Exception):
    """An answer other than the stream: `status`, a `type` and a `message` sent as JSON; nothing ran."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


@dataclass(frozen=True)
class UIRequest:
    """One request to a UI app, for the per-request options (`memory_id=`, `context=`): the headers
    (lower-case names), the decoded JSON body, the thread or chat id the page sent, and the ASGI scope."""

    headers: Mapping[str, str]
    body: Mapping[str, Any]
    thread_id: str | None
    scope: Mapping[str, Any] = field(repr=False)


def headers_of(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}


async def read_body(receive: Receive, limit: int = MAX_BODY) -> Any:
    """The request's JSON body; `HTTPError` 413 past `limit` bytes, 400 when it is not JSON."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise HTTPError(400, "Disconnected", "The client went away before sending its request")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise HTTPError(413, "BodyTooLarge", f"The request body is larger than {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    try:
        return msgspec.json.decode(b"".join(chunks))
    except (msgspec.DecodeError, RecursionError) as error:
        raise HTTPError(400, "BadRequest", f"The request body is not JSON: {error}") from None


async def answer_json(send: Send, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
    data = msgspec.json.encode(body)
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})


async def stream_sse(
    receive: Receive, send: Send, headers: Mapping[str, str], events: AsyncIterator[str]
) -> None:
    """Sends `events` as the response body, flushing each one. A client that disconnects cancels it (and,
    through the generator's close, the invocation behind it)."""
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
        }
    )
    async with contextlib.aclosing(events), anyio.create_task_group() as group:  # type: ignore[type-var]

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            group.cancel_scope.cancel()

        group.start_soon(watch)
        try:
            async for event in events:
                await send({"type": "http.response.body", "body": event.encode(), "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        except OSError:
            pass  # the server says the client went away: stop as for a disconnect
        group.cancel_scope.cancel()


class UIApp:
    """An ASGI app of agentloop.ui (a class, so frameworks mount it as an ASGI app rather than calling it as
    an endpoint function): `app(scope, receive, send)`. `runs` is where its paused runs wait."""

    def __init__(
        self, name: str, handle: Callable[[Scope, Receive, Send, Any], Awaitable[None]], runs: Any
    ) -> None:
        self.name = name
        self.runs = runs
        self._handle = handle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await serve(scope, receive, send, self._handle)

    def __repr__(self) -> str:
        return f"<{self.name} app>"


async def check_scope(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers a lifespan scope (the apps hold nothing to start or stop); refuses anything but HTTP."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] not in ("http", "lifespan"):
        raise RuntimeError(f"agentloop.ui apps serve HTTP, not {scope['type']!r}")


async def serve(
    scope: Scope, receive: Receive, send: Send, handle: Callable[[Scope, Receive, Send, Any], Awaitable[None]]
) -> None:
    """The common front of the apps: lifespan, POST only, the JSON body, errors as JSON answers."""
    await check_scope(scope, receive, send)
    if scope["type"] == "lifespan":
        return
    try:
        if scope["method"] != "POST":
            raise HTTPError(405, "MethodNotAllowed", "POST the request body as JSON")
        body = await read_body(receive)
        await handle(scope, receive, send, body)
    except HTTPError as error:
        extra = {"allow": "POST"} if error.status == 405 else None
        await answer_json(send, error.status, {"type": error.kind, "message": error.message}, extra)
