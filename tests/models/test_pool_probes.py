"""The provider clients' pool socket-checks only the connection it hands out (issue 36): a connection the
server closed is never reused, the checks per request are O(1) whatever the number of idle connections,
and aclose leaves no connection open. Real sockets on 127.0.0.1 (a small HTTP/1.1 server written here)."""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpcore2
import httpx2
import pytest
from anyio.abc import SocketStream

from agentloop.models._http._client import ProviderClient
from agentloop.models._http._pool import ProbeOnUsePool
from tests.provider_helpers import loopback_server


class _Server:
    """HTTP/1.1 on 127.0.0.1: answers `GET /` with keep-alive; `close_after_reply` drops each connection after
    its reply (no `Connection: close` header: the client learns it only from the socket). `hold` makes replies
    wait until that many requests are in, so that many connections get opened."""

    def __init__(self) -> None:
        self.accepted = 0
        self.open = 0
        self.requests = 0
        self.close_after_reply = False
        self.hold = 0
        self.closed = anyio.Event()
        self._arrived = anyio.Event()
        self.port = 0

    async def serve(self, stream: SocketStream) -> None:
        self.accepted += 1
        self.open += 1
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = await stream.receive()
                    buffer += chunk
                _, _, buffer = buffer.partition(b"\r\n\r\n")
                self.requests += 1
                if self.hold and self.requests >= self.hold:
                    self._arrived.set()
                if self.hold:
                    await self._arrived.wait()
                await stream.send(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                if self.close_after_reply:
                    await stream.aclose()
                    self.closed.set()
                    return
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            self.open -= 1
            await stream.aclose()


@asynccontextmanager
async def _serving() -> AsyncIterator[_Server]:
    server = _Server()
    async with loopback_server(server.serve) as server.port:
        yield server


def _pool_of(provider: ProviderClient) -> ProbeOnUsePool:
    pool = provider.client._transport._pool
    assert isinstance(pool, ProbeOnUsePool)
    return pool


@pytest.fixture
def socket_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts httpcore2's HTTP/1.1 `has_expired()` calls that check the socket (state IDLE), independently
    of the pool's own counter."""
    checks = [0]
    connection_type = httpcore2._async.http11.AsyncHTTP11Connection
    original = connection_type.has_expired

    def counted(self: httpcore2._async.http11.AsyncHTTP11Connection) -> bool:
        if self.is_idle():
            checks[0] += 1
        return original(self)

    monkeypatch.setattr(connection_type, "has_expired", counted)
    return checks


async def test_a_connection_the_server_closed_is_not_reused() -> None:
    async with _serving() as server:
        server.close_after_reply = True
        provider = ProviderClient(provider="test", base_url=f"http://127.0.0.1:{server.port}")
        client = provider.client
        first = await client.get(f"http://127.0.0.1:{server.port}/")
        assert first.text == "ok"
        await server.closed.wait()
        # The pooled connection is idle and dead; the next request must find that and open a new one.
        for n in range(2, 5):
            server.closed = anyio.Event()
            response = await client.get(f"http://127.0.0.1:{server.port}/")
            assert response.text == "ok"
            assert server.accepted == n
            await server.closed.wait()
        assert _pool_of(provider).probes >= 3
        await provider.aclose()


async def test_socket_checks_per_request_do_not_grow_with_idle_connections(socket_checks: list[int]) -> None:
    idle = 20
    async with _serving() as server:
        server.hold = idle
        provider = ProviderClient(provider="test", base_url=f"http://127.0.0.1:{server.port}")
        client = provider.client
        url = f"http://127.0.0.1:{server.port}/"
        async with anyio.create_task_group() as group:
            for _ in range(idle):
                group.start_soon(client.get, url)
        assert server.accepted == idle
        assert len(_pool_of(provider).connections) == idle
        server.hold = 0
        before, probes_before = socket_checks[0], _pool_of(provider).probes
        for _ in range(30):
            assert (await client.get(url)).text == "ok"
        # One check per request (the connection handed out), not one per idle connection per pool pass.
        assert socket_checks[0] - before == 30
        assert _pool_of(provider).probes - probes_before == 30
        assert server.accepted == idle
        await provider.aclose()
        assert _pool_of_closed(provider)
        with anyio.fail_after(10):
            while server.open:
                await anyio.sleep(0.01)


def _pool_of_closed(provider: ProviderClient) -> bool:
    return not provider.clients


async def test_the_stock_pool_checks_every_idle_connection(socket_checks: list[int]) -> None:
    """The counter above can fail: httpx2's own pool makes O(idle) checks per request on the same workload."""
    idle = 20
    async with _serving() as server:
        server.hold = idle
        url = f"http://127.0.0.1:{server.port}/"
        async with httpx2.AsyncClient() as client:
            async with anyio.create_task_group() as group:
                for _ in range(idle):
                    group.start_soon(client.get, url)
            server.hold = 0
            before = socket_checks[0]
            for _ in range(10):
                await client.get(url)
            assert socket_checks[0] - before >= 10 * (idle - 1)


async def test_keepalive_expiry_counts_from_going_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr("agentloop.models._http._pool.time.monotonic", lambda: now[0])
    async with _serving() as server:
        provider = ProviderClient(provider="test", base_url=f"http://127.0.0.1:{server.port}")
        client = provider.client
        url = f"http://127.0.0.1:{server.port}/"
        await client.get(url)
        pool = _pool_of(provider)
        (connection,) = pool.connections
        now[0] += 29.0
        assert not connection.has_expired()
        await client.get(url)  # reused: its idle time starts again when the response closes
        assert server.accepted == 1
        now[0] += 29.0
        assert not connection.has_expired()
        now[0] += 2.0
        assert connection.has_expired()
        await client.get(url)  # the pool closes the expired connection and opens another
        assert server.accepted == 2
        assert connection.is_closed()
        await provider.aclose()


def test_a_client_not_laid_out_as_expected_keeps_its_pool() -> None:
    from agentloop.models._http._pool import use_probe_on_use_pool

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(lambda request: httpx2.Response(200)))
    assert not use_probe_on_use_pool(client, ssl_context=None, limits=httpx2.Limits())
    proxied = httpx2.AsyncClient(proxy="http://127.0.0.1:9")
    # The proxy is mounted; the default transport is the stock one, so the swap applies to it alone.
    assert use_probe_on_use_pool(proxied, ssl_context=None, limits=httpx2.Limits())


async def test_a_body_left_before_its_end_leaves_no_generator_to_the_garbage_collector() -> None:
    # httpx2 iterates the pool's body inside an async generator of its own and drops the pool's generator
    # unclosed when a stream is closed early; on trio that was a ResourceWarning whenever it was collected.
    async def endless(stream: SocketStream) -> None:
        with anyio.move_on_after(30):
            await stream.receive()
            await stream.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                await stream.receive()  # until the client hangs up
        await stream.aclose()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, endless)
        provider = ProviderClient(provider="test", base_url=f"http://127.0.0.1:{port}")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            async with provider.client.stream("GET", f"http://127.0.0.1:{port}/") as response:
                chunks = response.aiter_bytes()
                assert await chunks.__anext__() == b"first"
                await chunks.aclose()  # left before the end, as a consumer that breaks out does
            del chunks, response
            gc.collect()
        assert [str(w.message) for w in caught if "Async generator" in str(w.message)] == []
        await provider.aclose()
        group.cancel_scope.cancel()
