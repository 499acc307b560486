"""The Redis store under load: thousands of concurrent invocations through one store share a bounded pool
of connections, none fails, and every session's exchange is stored whole (both anyio backends, a real
redis-server)."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest
import redis

from agentloop import ChatMemoryStoreError, MessageWindowChatMemory
from agentloop.stores import RedisChatMemoryStore
from tests.store_servers import redis_server
from tests.store_workload import agent_on, exchanges

pytestmark = pytest.mark.anyio

SESSIONS = 5_000
POOL = 20


@pytest.fixture(scope="module")
def load_redis() -> Iterator[str]:
    with redis_server() as url:  # its own server: the connection count below is this test's alone
        yield url


async def test_5000_concurrent_invocations_share_a_bounded_pool(load_redis: str) -> None:
    probe = redis.Redis.from_url(load_redis)
    probe.flushdb()
    before = len(probe.client_list())
    most_connections = 0
    store = RedisChatMemoryStore(load_redis, prefix="load", max_connections=POOL, pool_timeout=60)
    agent = agent_on(store, tool_seconds=0.001)
    answers: dict[int, str | None] = {}
    tool_counts: dict[int, int] = {}

    async def one(i: int) -> None:
        result = await agent.chat(f"s{i}", memory_id=f"session-{i}")
        answers[i] = result.content
        tool_counts[i] = len(result.tool_executions)

    async def watch_connections(done: anyio.Event) -> None:
        nonlocal most_connections
        while not done.is_set():
            count = await anyio.to_thread.run_sync(lambda: len(probe.client_list()))
            most_connections = max(most_connections, count - before)
            await anyio.sleep(0.05)

    try:
        done = anyio.Event()
        async with anyio.create_task_group() as watcher:
            watcher.start_soon(watch_connections, done)
            async with anyio.create_task_group() as sessions:
                for i in range(SESSIONS):
                    sessions.start_soon(one, i)
            done.set()
        assert answers == {i: f"answer to s{i}" for i in range(SESSIONS)}
        assert set(tool_counts.values()) == {1}
        assert 1 <= most_connections <= POOL
        memory = MessageWindowChatMemory.provider(10_000, store=store)
        for i in range(0, SESSIONS, 97):  # every session holds exactly its own exchange
            assert exchanges(await memory(f"session-{i}").messages()) == [f"s{i}"]
        assert len(probe.keys("load:*:log")) == SESSIONS
    finally:
        await store.aclose()
        probe.close()


async def test_a_caller_that_finds_every_connection_busy_waits_then_fails_naming_the_pool(
    load_redis: str,
) -> None:
    probe = redis.Redis.from_url(load_redis)
    store = RedisChatMemoryStore(load_redis, prefix="busy", max_connections=1, pool_timeout=0.2)
    try:
        await store.get_messages("warm")  # the one connection exists
        probe.execute_command("CLIENT", "PAUSE", "1500", "ALL")  # every command now waits 1.5 s
        outcomes: list[BaseException | None] = []

        async def step(memory_id: str) -> None:
            try:
                await store.get_messages(memory_id)
                outcomes.append(None)
            except ChatMemoryStoreError as error:
                outcomes.append(error)

        async with anyio.create_task_group() as group:
            group.start_soon(step, "a")
            group.start_soon(step, "b")
        failed = [error for error in outcomes if error is not None]
        assert len(failed) == 1, outcomes  # one got the connection and was answered after the pause
        message = str(failed[0])
        assert "no Redis connection became free within 0.2 s" in message
        assert "max_connections=1" in message and "Raise max_connections" in message
    finally:
        probe.execute_command("CLIENT", "UNPAUSE")
        await store.aclose()
        probe.close()


def test_pool_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="max_connections must be at least 1"):
        RedisChatMemoryStore("redis://127.0.0.1:1/0", max_connections=0)
    with pytest.raises(ValueError, match="pool_timeout must be positive"):
        RedisChatMemoryStore("redis://127.0.0.1:1/0", pool_timeout=0)
