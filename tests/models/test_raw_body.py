"""An event stream's body is read from agentloop's own connection pool, below httpx2's response layers (the
streaming path's hot loop, issue 36): the events, the connection going back to the pool, a broken or stalled
body and a stream left early behave as through httpx2, and a content-encoded body still goes through httpx2
(it decodes it). Real sockets on 127.0.0.1: a small HTTP/1.1 server written here sends the bytes."""

from __future__ import annotations

import contextlib
import gc
import gzip
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx2
import pytest
from anyio.abc import SocketStream

from agentloop import ModelConnectionError, ModelTimeoutError
from agentloop.models._http import Timeouts
from agentloop.models._http._client import ProviderClient
from tests.provider_helpers import loopback_server

EVENTS = [f'{{"n": {i}}}' for i in range(40)]


def _chunked(pieces: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces)


class _Server:
    """Answers every request on a connection with an event stream of `EVENTS`, one chunk per event.

    `mode`: "ok" (the whole stream), "gzip" (the stream gzip-encoded), "break" (the connection drops after
    five events), "stall" (nothing after five events), "endless" (five events, then waits for the hang-up).
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.accepted = 0
        self.requests = 0
        self.hung_up = anyio.Event()
        self.port = 0

    async def serve(self, stream: SocketStream) -> None:
        self.accepted += 1
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    buffer += await stream.receive()
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                lines = head.lower().split(b"\r\n")
                length = next((int(line[15:]) for line in lines if line.startswith(b"content-length:")), 0)
                while len(buffer) < length:
                    buffer += await stream.receive()
                buffer = buffer[length:]
                self.requests += 1
                await self._answer(stream)
                if self.mode != "ok" and self.mode != "gzip":
                    return
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            self.hung_up.set()
        finally:
            await stream.aclose()

    async def _answer(self, stream: SocketStream) -> None:
        events = [f"data: {data}\n\n".encode() for data in EVENTS] + [b"data: [DONE]\n\n"]
        headers = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
        if self.mode == "gzip":
            body = gzip.compress(b"".join(events))
            pieces = [body[i : i + 50] for i in range(0, len(body), 50)]
            await stream.send(headers + b"content-encoding: gzip\r\n\r\n" + _chunked(pieces) + b"0\r\n\r\n")
            return
        if self.mode == "ok":
            await stream.send(headers + b"\r\n" + _chunked(events) + b"0\r\n\r\n")
            return
        await stream.send(headers + b"\r\n" + _chunked(events[:5]))
        if self.mode == "break":
            return  # the caller closes the socket: the body ends half-way
        with anyio.move_on_after(30):
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                await stream.receive()  # "stall" and "endless": nothing more until the client hangs up
        self.hung_up.set()


@asynccontextmanager
async def _serving(mode: str) -> AsyncIterator[_Server]:
    server = _Server(mode)
    async with loopback_server(server.serve) as server.port:
        yield server


async def _read_all(provider: ProviderClient, seen: list[str] | None = None) -> list[str]:
    seen = [] if seen is None else seen
    async with provider.open_sse("/stream", {"go": True}) as events:
        async for event in events:
            seen.append(event.data)
    return seen


@pytest.fixture
def httpx_layers_unused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails any read of a response body through httpx2's own iterators."""

    def refused(self: httpx2.Response, *args: object, **kwargs: object) -> None:
        raise AssertionError("the body was read through httpx2's response iterators")

    monkeypatch.setattr(httpx2.Response, "aiter_bytes", refused)
    monkeypatch.setattr(httpx2.Response, "aiter_raw", refused)


@pytest.mark.usefixtures("httpx_layers_unused")
async def test_the_events_come_from_the_pool_and_the_connection_is_reused() -> None:
    async with _serving("ok") as server:
        provider = ProviderClient(provider="test", base_url=f"http://127.0.0.1:{server.port}")
        try:
            for _ in range(3):
                assert await _read_all(provider) == [*EVENTS, "[DONE]"]
        finally:
            await provider.aclose()
    assert (server.requests, server.accepted) == (3, 1)  # one kept-alive connection carried all three


async def test_a_content_encoded_stream_is_decoded_by_httpx() -> None:
    async with _serving("gzip") as server:
        provider = ProviderClient(provider="test", base_url=f"http://127.0.0.1:{server.port}")
        try:
            assert await _read_all(provider) == [*EVENTS, "[DONE]"]
            assert await _read_all(provider) == [*EVENTS, "[DONE]"]
        finally:
            await provider.aclose()
    assert (server.requests, server.accepted) == (2, 1)


@pytest.mark.usefixtures("httpx_layers_unused")
async def test_a_body_that_breaks_half_way_is_a_connection_error() -> None:
    async with _serving("break") as server:
        provider = ProviderClient(provider="test", base_url=f"http://127.0.0.1:{server.port}")
        seen: list[str] = []
        try:
            with pytest.raises(ModelConnectionError, match="the stream broke before it was complete"):
                await _read_all(provider, seen)
        finally:
            await provider.aclose()
    assert seen == EVENTS[:5]


@pytest.mark.usefixtures("httpx_layers_unused")
async def test_a_body_that_stalls_is_a_timeout() -> None:
    async with _serving("stall") as server:
        provider = ProviderClient(
            provider="test", base_url=f"http://127.0.0.1:{server.port}", timeouts=Timeouts(read=0.3)
        )
        try:
            with pytest.raises(ModelTimeoutError):
                await _read_all(provider)
        finally:
            await provider.aclose()
        with anyio.fail_after(10):
            await server.hung_up.wait()  # the stalled connection was closed, not kept


@pytest.mark.usefixtures("httpx_layers_unused")
async def test_a_stream_left_early_closes_its_connection_and_leaves_no_generator() -> None:
    async with _serving("endless") as server:
        provider = ProviderClient(provider="test", base_url=f"http://127.0.0.1:{server.port}")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                async with provider.open_sse("/stream", {"go": True}) as events:
                    async for event in events:
                        if event.data == EVENTS[2]:
                            break
                with anyio.fail_after(10):
                    await server.hung_up.wait()
            finally:
                await provider.aclose()
            gc.collect()
        assert [str(w.message) for w in caught if "generator" in str(w.message)] == []
