"""A connection pool that probes only the connection it hands out (issue 36).

httpcore2's `AsyncConnectionPool` calls `has_expired()` on every idle connection each time a request starts or
ends, and on an idle HTTP/1.1 connection that is a socket readability check: O(idle) system calls per request.
`ProbeOnUsePool` keeps httpcore2's pool (limits, queueing, proxies, error mapping) and wraps each connection
so that the pool's scan costs a clock read, and the socket check runs once, on the connection about to carry
a request. A connection the server closed is found there, closed and skipped (the pool picks or opens
another), so it is never handed out; keep-alive expiry stays `keepalive_expiry` after going idle.
"""

from __future__ import annotations

import time
from typing import Any

import httpcore2
import httpx2


class _ProbeOnUse(httpcore2.AsyncConnectionInterface):
    """One pooled connection: a cheap `has_expired()` for the pool's scan, the socket check before reuse."""

    __slots__ = ("_idle_since", "_inner", "_pool")

    def __init__(self, inner: httpcore2.AsyncConnectionInterface, pool: ProbeOnUsePool) -> None:
        self._inner = inner
        self._pool = pool
        self._idle_since: float | None = None

    async def handle_async_request(self, request: httpcore2.Request) -> httpcore2.Response:
        inner = self._inner
        if inner.is_connected() and inner.is_idle():
            # A kept-alive connection about to be reused: the one socket check of this request.
            self._pool.probes += 1
            if inner.has_expired():
                await inner.aclose()
                raise httpcore2.ConnectionNotAvailable()
        self._idle_since = None
        return await inner.handle_async_request(request)

    def has_expired(self) -> bool:
        inner = self._inner
        if not (inner.is_connected() and inner.is_idle()):
            # Not an idle socket: httpcore2's own answer does no socket check here.
            self._idle_since = None
            return inner.has_expired()
        now = time.monotonic()
        if self._idle_since is None:
            # The pool scans after every response closes, so this is when the connection went idle.
            self._idle_since = now
            return False
        expiry = self._pool.keepalive_expiry
        return expiry is not None and now - self._idle_since > expiry

    async def aclose(self) -> None:
        await self._inner.aclose()

    def info(self) -> str:
        return self._inner.info()

    def can_handle_request(self, origin: httpcore2.Origin) -> bool:
        return self._inner.can_handle_request(origin)

    def is_connected(self) -> bool:
        return self._inner.is_connected()

    def is_available(self) -> bool:
        return self._inner.is_available()

    def is_idle(self) -> bool:
        return self._inner.is_idle()

    def can_multiplex(self) -> bool:
        return self._inner.can_multiplex()

    def is_closed(self) -> bool:
        return self._inner.is_closed()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._inner!r}>"


class ProbeOnUsePool(httpcore2.AsyncConnectionPool):
    """httpcore2's pool whose idle connections are socket-checked only when handed out. `probes` counts the
    checks (one per reused connection per request, plus one per dead connection skipped)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.keepalive_expiry: float | None = kwargs.get("keepalive_expiry")
        self.probes = 0

    def create_connection(self, origin: httpcore2.Origin) -> httpcore2.AsyncConnectionInterface:
        return _ProbeOnUse(super().create_connection(origin), self)

    async def handle_async_request(self, request: httpcore2.Request) -> httpcore2.Response:
        response = await super().handle_async_request(request)
        body = response.stream = _ClosingBody(response.stream)
        # httpx2 hands the extensions to its Response: a stream reader finds the body there (`raw_chunks`).
        response.extensions[BODY] = body
        return response


BODY = "agentloop.body"
"""The `Response.extensions` key under which a response from a `ProbeOnUsePool` carries its pool body."""


class _ClosingBody:
    """A response body iterated by an object, not an async generator, that closes what it iterates.

    httpx2 iterates the pool's body with `async for` in an async generator of its own and, when a stream is
    closed before its end, drops the pool's body generator unclosed: trio then warns when it is garbage
    collected (`ResourceWarning` under `-X dev`). Handed this object, httpx2 drops nothing that needs closing:
    `aclose()` (httpx2 calls it when the response closes) closes the pool's generator, then the body.
    """

    __slots__ = ("_body", "_iterator")

    def __init__(self, body: Any) -> None:
        self._body = body
        self._iterator: Any = None

    def __aiter__(self) -> _ClosingBody:
        return self

    async def __anext__(self) -> bytes:
        if self._iterator is None:
            self._iterator = self._body.__aiter__()
        chunk: bytes = await self._iterator.__anext__()
        return chunk

    def chunks(self) -> Any:
        """The pool's own iterator of the body, for a reader that skips httpx2's layers (`raw_chunks`); it is
        closed with the response, like the one `__anext__` iterates."""
        if self._iterator is None:
            self._iterator = self._body.__aiter__()
        return self._iterator

    async def aclose(self) -> None:
        iterator, self._iterator = self._iterator, None
        try:
            if iterator is not None and hasattr(iterator, "aclose"):
                await iterator.aclose()
        finally:
            if hasattr(self._body, "aclose"):
                await self._body.aclose()


def use_probe_on_use_pool(client: Any, *, ssl_context: Any, limits: Any) -> bool:
    """Gives a fresh `httpx2.AsyncClient` of ours a `ProbeOnUsePool` as its default (non-proxy) transport's
    pool, built with the same settings; proxy mounts (from the environment) keep httpx2's own. httpx2 has no
    public hook for the pool, so this replaces the transport's unused stock pool, and leaves the client as it
    is (still correct, only probing more) if httpx2's layout is not the one known here. Says if it did."""
    transport = getattr(client, "_transport", None)
    if type(transport) is not httpx2.AsyncHTTPTransport:
        return False
    stock = getattr(transport, "_pool", None)
    if type(stock) is not httpcore2.AsyncConnectionPool or stock.connections:
        return False
    transport._pool = ProbeOnUsePool(
        ssl_context=ssl_context,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
    )
    return True


def raw_chunks(response: httpx2.Response) -> Any:
    """An async iterator of `response`'s body straight from a `ProbeOnUsePool` (no httpx2 layer in between:
    five fewer generator hops per read on a streamed answer), or None when httpx2 must read it: the body is
    content-encoded, or the response did not come from our pool. Its failures are httpcore2's exceptions
    (`httpx_error` gives httpx2's), and its end does not close the response: the reader closes it."""
    body = response.extensions.get(BODY)
    if type(body) is not _ClosingBody or response.headers.get("content-encoding", "identity") != "identity":
        return None
    return body.chunks()


def httpx_error(exc: Exception) -> Exception:
    """An httpcore2 exception as the httpx2 exception httpx2 raises for it (what `raw_chunks` skips);
    anything else as it is."""
    for cls in type(exc).__mro__:
        if cls.__module__.partition(".")[0] != "httpcore2":
            continue
        mapped = getattr(httpx2, cls.__name__, None)
        if isinstance(mapped, type) and issubclass(mapped, httpx2.TransportError):
            error = mapped(str(exc))
            error.__cause__ = exc
            return error
    return exc
