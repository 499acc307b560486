"""`SSEStream`: an open server-sent event stream read off one HTTP response, and the response helpers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, cast

import anyio
import httpx2

from agentloop._values._errors import (
    ModelConnectionError,
    ModelError,
    ModelTimeoutError,
)

from ._config import MAX_ERROR_BODY
from ._errors import Retryable, is_transport_error, request_id_of
from ._sse import ServerSentEvent, SSEDecoder

if TYPE_CHECKING:
    from ._client import ProviderClient


async def read_body(response: Any, limit: int) -> tuple[bytes, bool]:
    """At most `limit` bytes of `response`'s body, and whether that was all of it."""
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            return b"".join(parts)[:limit], False
    return b"".join(parts), True


async def close_response(response: Any) -> None:
    """Closes `response` even inside a cancelled scope (the connection must not leak)."""
    _release(response)
    with anyio.CancelScope(shield=True):
        await response.aclose()


def _release(response: Any) -> None:
    """Counts `response` out of its shard (once, however often it is closed)."""
    shard = response.extensions.pop("agentloop.shard", None)
    if shard is not None:
        shard.in_flight -= 1


class SSEStream:
    """An open event stream: iterate it for `ServerSentEvent`s; failures surface as `ModelError`s."""

    __slots__ = (
        "_bytes",
        "_client",
        "_closed",
        "_deadline",
        "_decoder",
        "_done",
        "_feed",
        "_next_chunk",
        "_pending",
        "_position",
        "response",
    )

    def __init__(self, client: ProviderClient, response: httpx2.Response, deadline: float | None) -> None:
        self._client = client
        self.response = response
        self._deadline = deadline
        self._decoder = SSEDecoder(provider=client.provider)
        # `feed_payloads` after `take_payloads()` (typed as `feed`: `payload_batch()` says what comes out)
        self._feed: Callable[[bytes], list[ServerSentEvent]] = self._decoder.feed
        from ._pool import raw_chunks  # loaded with the first client (httpcore2 loads trio at import)

        raw = raw_chunks(response)  # our pool's body when it can be read as it is: the hot path
        self._bytes: Any = response.aiter_bytes() if raw is None else raw
        self._next_chunk: Any = self._bytes.__anext__
        self._pending: list[ServerSentEvent] = []
        self._position = 0
        self._done = False
        self._closed = False

    @property
    def request_id(self) -> str | None:
        """The provider's id for this request, from the response headers."""
        return request_id_of(self.response.headers)

    def __aiter__(self) -> SSEStream:
        return self

    async def __anext__(self) -> ServerSentEvent:
        if self._position >= len(self._pending):
            self._pending, self._position = await self.batch(), 0
            if not self._pending:
                raise StopAsyncIteration
        event = self._pending[self._position]
        self._position += 1
        return event

    async def batch(self) -> list[ServerSentEvent]:
        """The events completed by the next network read(s): never empty until the stream ended, then [].

        The hot path of every streaming provider: one call per read instead of one per event.
        """
        if self._position < len(self._pending):  # left by the first read (`_prefetch`) or by `__anext__`
            events = self._pending[self._position :]
            self._pending, self._position = [], 0
            return events
        feed = self._feed
        while not self._done:
            if self._deadline is None:
                try:
                    chunk = await self._next_chunk()
                except StopAsyncIteration:
                    chunk = None
                except Exception as exc:
                    self._raise_failure(exc, retryable=False)
            else:
                chunk = await self._read(False)
            if chunk is None:
                self._decoder.close()
                self._done = True
                break
            events = feed(chunk)
            if events:
                return events
        return []

    if TYPE_CHECKING:

        async def payload_batch(self) -> list[ServerSentEvent | bytes]:
            """`batch()` after `take_payloads()`: a one-line `data:` event read alone comes as its bytes."""
            ...

    else:
        payload_batch = batch  # the same code: `take_payloads()` changed what it feeds the decoder

    def take_payloads(self) -> None:
        """From now on, an event that a network read brings alone, as one `data:` line, comes out of
        `payload_batch()` as its data's undecoded bytes (the decoder's `feed_payloads`): a provider whose
        events are JSON in `data:` lines decodes them from there, with no text decoded and no event object
        made per token. Read the stream with `payload_batch()` from then on."""
        self._feed = self._decoder.feed_payloads  # type: ignore[assignment]

    def check_payload(self, payload: bytes) -> None:
        """The decoder's `check_payload`: the error for a payload that is not UTF-8, as for an event."""
        self._decoder.check_payload(payload)

    async def aclose(self) -> None:
        """Closes the response (idempotent; safe in a cancelled scope)."""
        if self._closed:
            return
        self._closed = True
        self._done = True
        _release(self.response)
        if self.response.is_closed:  # read to its end: httpx2 closed it and gave the connection back
            return
        with anyio.CancelScope(shield=True):
            try:
                await self._bytes.aclose()
            finally:
                await self.response.aclose()

    async def drain(self, *, timeout: float = 0.1, limit: int = 65536) -> None:
        """Reads what is left of the response (normally nothing but the end of the body), then closes it.

        Call it when the provider's end-of-stream marker has arrived: a fully read response hands its
        connection back to the pool, where closing a half-read one would drop the connection. The end of
        the body normally comes with the marker, so `timeout` is short: a server that keeps the body open
        after its marker costs one dropped connection, not a stalled answer.
        """
        if self._closed:
            return
        left = limit
        with anyio.move_on_after(timeout):
            try:
                while left >= 0 and not self._done:
                    chunk = await self._read(False)
                    if chunk is None:
                        self._done = True
                    else:
                        left -= len(chunk)
            except ModelError:
                pass
        await self.aclose()

    async def _prefetch(self) -> bytes | None:
        """Reads until the first event arrived (or the stream ended); transport failures here may retry.

        Returns None once an event arrived; the start of the body when it ended without any (a server that
        sent an error body with an event-stream content type), for the caller to look at.
        """
        head: list[bytes] = []
        size = 0
        while not self._pending and not self._done:
            chunk = await self._read(True)
            if chunk is None:
                self._decoder.close()
                self._done = True
            else:
                self._pending = self._decoder.feed(chunk)
                if size < MAX_ERROR_BODY:
                    head.append(chunk)
                    size += len(chunk)
        return None if self._pending else b"".join(head)[:MAX_ERROR_BODY]

    async def _read(self, retryable: bool) -> bytes | None:
        try:
            if self._deadline is None:
                return cast(bytes, await self._next_chunk())
            with anyio.move_on_after(max(0.0, self._deadline - time.monotonic())):
                return cast(bytes, await self._next_chunk())
        except StopAsyncIteration:
            return None
        except Exception as exc:
            self._raise_failure(exc, retryable=retryable)
        total = self._client.timeouts.total
        raise ModelTimeoutError(
            f"{self._client.provider}: the stream did not finish within the total timeout of {total:g}s",
            provider=self._client.provider,
            request_id=self.request_id,
        )

    def _raise_failure(self, exc: Exception, *, retryable: bool) -> NoReturn:
        """Raises what a failed read means: a `ModelError` for a transport failure (wrapped when it may be
        retried, before the first event), `exc` itself for anything else."""
        from ._pool import httpx_error

        exc = httpx_error(exc)
        if not is_transport_error(exc):
            raise exc
        error = self._client.broken_stream(exc, request_id=self.request_id)
        if retryable and isinstance(error, ModelConnectionError):
            raise Retryable(error) from exc
        raise error from exc
