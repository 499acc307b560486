"""One conformance suite over every store agentloop ships: in memory, SQLite (a temp file) and Redis (a real
redis-server on loopback). Then what only the shared stores do: leases, expiry, errors, ttl."""

from __future__ import annotations

import functools
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import (
    Agent,
    AiMessage,
    ChatMessage,
    InMemoryChatMemoryStore,
    InvocationTimeoutError,
    MemoryLease,
    MessageWindowChatMemory,
    SystemMessage,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from agentloop._memory._chat import PendingApprovalStore, VersionedChatMemoryStore, _evict
from agentloop.stores import (
    ChatMemoryConflictError,
    ChatMemoryStoreError,
    RedisChatMemoryStore,
    SQLiteChatMemoryStore,
)
from agentloop.testing import ScriptedChatModel
from tests.store_servers import free_port, redis_server, redis_url  # noqa: F401 (fixture)
from tests.store_workload import agent_on, exchanges

KINDS = ["memory", "sqlite", "redis"]


@pytest.fixture
async def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """Opens stores of one kind, all on the same data (as separate processes would); closes them after."""
    kind = request.param
    opened: list[Any] = []
    shared = InMemoryChatMemoryStore()
    url = request.getfixturevalue("redis_url") if kind == "redis" else ""
    prefix = f"test-{uuid.uuid4().hex[:8]}"

    def make(**options: Any) -> Any:
        if kind == "memory":
            return shared
        store: Any = (
            SQLiteChatMemoryStore(tmp_path / "chat.db", **options)
            if kind == "sqlite"
            else RedisChatMemoryStore(url, prefix=prefix, **options)
        )
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.aclose()


stores = pytest.mark.parametrize("make_store", KINDS, indirect=True)
shared_stores = pytest.mark.parametrize("make_store", ["sqlite", "redis"], indirect=True)


def tool_round(*ids: str, error: bool = False) -> list[ChatMessage]:
    return [
        AiMessage("calling", [ToolExecutionRequest(i, "f", '{"x": 1}') for i in ids], thinking="why not"),
        *(ToolExecutionResultMessage(i, "f", f"result {i}", is_error=error) for i in ids),
    ]


@stores
async def test_rounds_are_appended_and_read_back_exactly(make_store: Any) -> None:
    store = make_store()
    assert isinstance(store, VersionedChatMemoryStore)
    assert await store.load("a") == ([], 0)
    first = [UserMessage("q1"), *tool_round("c1", "c2", error=True)]
    assert await store.append("a", first, expected_version=0) == 1
    assert await store.append("a", [AiMessage("a1")], expected_version=1) == 2
    assert await store.append("a", [SystemMessage("be brief")]) == 3
    loaded = await store.load("a")
    assert loaded.version == 3
    assert loaded.messages == [SystemMessage("be brief"), *first, AiMessage("a1")]
    assert await store.get_messages("a") == loaded.messages
    assert await store.load("b") == ([], 0)


@stores
async def test_a_write_based_on_an_old_version_is_refused_and_stores_nothing(make_store: Any) -> None:
    store = make_store()
    await store.append("a", [UserMessage("q1"), AiMessage("a1")], expected_version=0)
    with pytest.raises(ChatMemoryConflictError, match="version 1, not 0"):
        await store.append("a", [UserMessage("q2"), AiMessage("a2")], expected_version=0)
    assert await store.load("a") == ([UserMessage("q1"), AiMessage("a1")], 1)


@stores
async def test_a_paused_round_is_taken_back_once_and_only_with_its_record(make_store: Any) -> None:
    """The approval capability: whichever process resumes first takes the record; a second take, or a take
    with an altered record, gets the stored one back and deletes nothing."""
    first, second = make_store(), make_store()  # two processes on the same data
    assert isinstance(first, PendingApprovalStore)
    await first.save_pending_approval("a", "p1", "record-1")
    await first.save_pending_approval("b", "p1", "record-b")
    assert await second.take_pending_approval("a", "p1", "tampered") == "record-1"  # kept
    assert await second.take_pending_approval("a", "p1", "record-1") == "record-1"  # taken
    assert await first.take_pending_approval("a", "p1", "record-1") is None  # only once
    assert await first.take_pending_approval("b", "p1", "record-b") == "record-b"  # ids are separate
    await first.save_pending_approval("c", "p2", "record-c")
    await first.delete_messages("c")
    assert await second.take_pending_approval("c", "p2", "record-c") is None  # forgotten with its memory


@stores
async def test_window_read_equals_the_window_of_the_whole_log(make_store: Any) -> None:
    store = make_store()
    rounds: list[list[ChatMessage]] = [
        [UserMessage("q1"), *tool_round("a", "b")],
        [AiMessage("a1")],
        [UserMessage("q2"), *tool_round("c")],
        [*tool_round("d", "e", "f")],
        [AiMessage("a2"), AiMessage("a2 again")],
        [UserMessage("q3")],
        [AiMessage("a3")],
    ]
    log: list[ChatMessage] = []
    for round in rounds:
        await store.append("w", round)
        log += round
        for size in range(1, 16):
            memory = MessageWindowChatMemory(size, id="w", store=store)
            assert await memory.messages() == _evict(log, size), size


@stores
async def test_system_message_is_pinned_and_replaced(make_store: Any) -> None:
    memory = MessageWindowChatMemory(3, id="s", store=make_store())
    await memory.add([SystemMessage("be brief"), UserMessage("q1"), AiMessage("a1")])
    await memory.add([UserMessage("q2"), AiMessage("a2")])
    await memory.add([SystemMessage("be verbose")])
    assert await memory.messages() == [SystemMessage("be verbose"), UserMessage("q2"), AiMessage("a2")]


@stores
async def test_clear_forgets_one_id_only(make_store: Any) -> None:
    provider = MessageWindowChatMemory.provider(10, store=make_store())
    await provider("alice").add([UserMessage("I am Alice")])
    await provider("bob").add([UserMessage("I am Bob")])
    await provider("alice").clear()
    assert await provider("alice").messages() == []
    assert await provider("bob").messages() == [UserMessage("I am Bob")]
    await provider("alice").add([UserMessage("again")])
    assert await provider("alice").messages() == [UserMessage("again")]


@stores
async def test_memory_survives_a_new_store_object(make_store: Any) -> None:
    """A restart: a new store object on the same file or server sees the conversation."""
    agent = Agent(
        ScriptedChatModel(["Hello Ann"]), memory=MessageWindowChatMemory.provider(20, store=make_store())
    )
    await agent.chat("I am Ann", memory_id="ann")
    model = ScriptedChatModel(["You are Ann"])
    again = Agent(model, memory=MessageWindowChatMemory.provider(20, store=make_store()))
    assert await again.ask("Who am I?", memory_id="ann") == "You are Ann"
    assert list(model.requests[0].messages) == [
        UserMessage("I am Ann"),
        AiMessage("Hello Ann"),
        UserMessage("Who am I?"),
    ]


@stores
async def test_two_agents_on_one_store_and_id_never_interleave(make_store: Any) -> None:
    """Issue: two Agent objects on one store and memory id lost an exchange when the store awaited."""
    first, second = agent_on(make_store()), agent_on(make_store())
    async with anyio.create_task_group() as task_group:
        for i in range(6):
            agent = first if i % 2 else second
            task_group.start_soon(functools.partial(agent.chat, f"m{i}", memory_id="shared"))
    memory = MessageWindowChatMemory(10_000, id="shared", store=make_store())
    assert sorted(exchanges(await memory.messages())) == [f"m{i}" for i in range(6)]


@stores
async def test_a_timed_out_invocation_stores_nothing_and_frees_the_id_at_once(make_store: Any) -> None:
    slow = agent_on(make_store(lease_ttl=30.0), tool_seconds=5.0)
    with pytest.raises(InvocationTimeoutError):
        await slow.chat("too slow", memory_id="t", timeout=0.3)
    with anyio.fail_after(3):  # far less than the lease's 30 s: it was given back, not left to expire
        await agent_on(make_store(lease_ttl=30.0)).chat("next", memory_id="t")
    memory = MessageWindowChatMemory(100, id="t", store=make_store())
    assert exchanges(await memory.messages()) == ["next"]


class SlowDictStore:
    """A user-written store of the simple protocol (get/update/delete) that awaits on every call."""

    def __init__(self) -> None:
        self.data: dict[Any, list[ChatMessage]] = {}

    async def get_messages(self, memory_id: Any) -> list[ChatMessage]:
        await anyio.sleep(0.001)
        return list(self.data.get(memory_id, []))

    async def update_messages(self, memory_id: Any, messages: list[ChatMessage]) -> None:
        await anyio.sleep(0.001)
        self.data[memory_id] = list(messages)

    async def delete_messages(self, memory_id: Any) -> None:
        self.data.pop(memory_id, None)


async def test_two_agents_on_a_user_written_store_never_interleave() -> None:
    store = SlowDictStore()
    first, second = agent_on(store), agent_on(store)
    async with anyio.create_task_group() as task_group:
        for i in range(6):
            agent = first if i % 2 else second
            task_group.start_soon(functools.partial(agent.chat, f"m{i}", memory_id="shared"))
    assert sorted(exchanges(store.data["shared"])) == [f"m{i}" for i in range(6)]


# -- shared stores: leases -----------------------------------------------------------------------------------


@shared_stores
async def test_a_crashed_holder_blocks_the_id_only_until_its_lease_expires(make_store: Any) -> None:
    crashed = make_store(lease_ttl=0.5)
    assert await crashed.try_acquire("x", "dead-worker", 0.5)  # and never renews nor releases
    memory = MessageWindowChatMemory(10, id="x", store=make_store(lease_ttl=0.5))
    started = anyio.current_time()
    with anyio.fail_after(5):
        await memory.add([UserMessage("after the crash")])
    assert anyio.current_time() - started >= 0.3
    assert await memory.messages() == [UserMessage("after the crash")]
    # The dead worker's lease is gone: its late write is refused.
    with pytest.raises(ChatMemoryConflictError, match="lease"):
        await crashed.append("x", [UserMessage("zombie")], lease="dead-worker")


@shared_stores
async def test_a_write_at_the_current_version_under_a_lease_another_worker_holds_stores_nothing(
    make_store: Any,
) -> None:
    """The version check and the lease check hold together: a round based on the current version is still
    refused while another worker holds the lease, for a memory's first round and for a later one."""
    store = make_store()
    assert await store.try_acquire("n", "first", 5.0)
    with pytest.raises(ChatMemoryConflictError, match="lease"):
        await store.append("n", [UserMessage("q")], expected_version=0, lease="intruder")
    assert await store.load("n") == ([], 0)
    assert await store.append("n", [UserMessage("q1")], expected_version=0, lease="first") == 1
    await store.release("n", "first")
    assert await store.try_acquire("n", "second", 5.0)
    for version, token in ((1, "first"), (0, "first"), (1, "third")):
        with pytest.raises(ChatMemoryConflictError, match="lease"):
            await store.append("n", [UserMessage("late")], expected_version=version, lease=token)
    with pytest.raises(ChatMemoryConflictError, match="version 1, not 2"):  # the right lease, a wrong version
        await store.append("n", [UserMessage("ahead")], expected_version=2, lease="second")
    assert await store.append("n", [AiMessage("a1")], expected_version=1, lease="second") == 2
    assert await store.load("n") == ([UserMessage("q1"), AiMessage("a1")], 2)


@shared_stores
async def test_a_late_renewal_keeps_the_lease_only_if_nobody_took_it(make_store: Any) -> None:
    store = make_store()
    assert await store.try_acquire("late", "paused", 0.2)
    await anyio.sleep(0.3)  # the holder was paused past its lease (GC, a blocked event loop)
    assert await store.renew("late", "paused", 5.0)  # nobody took it: still the holder
    assert not await store.try_acquire("late", "other", 5.0)  # waits, first in line
    await store.release("late", "paused")
    assert not await store.try_acquire("late", "third", 5.0)  # the first in line goes first
    assert await store.try_acquire("late", "other", 0.2)
    await anyio.sleep(0.3)
    assert await store.try_acquire("late", "third", 5.0)  # expired, and taken by the next in line
    assert not await store.renew("late", "other", 5.0)


@shared_stores
async def test_a_slow_invocation_keeps_its_lease(make_store: Any) -> None:
    """A tool slower than three lease lifetimes: the lease is renewed, nobody else writes meanwhile."""
    slow = agent_on(make_store(lease_ttl=0.75), tool_seconds=2.5)
    fast = agent_on(make_store(lease_ttl=0.75))
    order: list[str] = []

    async def run(agent: Agent, text: str) -> None:
        await agent.chat(text, memory_id="slow")
        order.append(text)

    async with anyio.create_task_group() as task_group:
        task_group.start_soon(run, slow, "slow")
        await anyio.sleep(0.2)
        task_group.start_soon(run, fast, "fast")
    assert order == ["slow", "fast"]
    memory = MessageWindowChatMemory(100, id="slow", store=make_store())
    assert exchanges(await memory.messages()) == ["slow", "fast"]


@shared_stores
async def test_losing_the_lease_stops_the_invocation_and_stores_nothing_of_it(make_store: Any) -> None:
    store = make_store(lease_ttl=0.3)
    agent = agent_on(store, tool_seconds=2.0)
    thief = make_store(lease_ttl=0.3)

    async def steal() -> None:
        await anyio.sleep(0.1)  # the victim's tool is running
        await _take_over(store, "victim", "thief")  # as if the lease had expired and another took it

    errors: list[BaseException] = []

    async def victim() -> None:
        try:
            with anyio.fail_after(5):
                await agent.chat("lost", memory_id="victim")
        except ChatMemoryConflictError as error:
            errors.append(error)

    async with anyio.create_task_group() as task_group:
        task_group.start_soon(victim)
        task_group.start_soon(steal)
    assert len(errors) == 1 and "another worker took it" in str(errors[0])
    assert await thief.load("victim") == ([], 0)


@shared_stores
async def test_the_lease_reads_the_window_in_the_step_that_takes_it(make_store: Any) -> None:
    """`lease(read=True)` yields the window `load` would read; a read inside the hold uses it once, and only
    for the window it was read for; a write in the hold makes the next read go to the store."""
    store = make_store()
    log: list[ChatMessage] = [UserMessage("q0"), AiMessage("a0")]
    log += [UserMessage("q1"), *tool_round("a"), AiMessage("a1"), UserMessage("q2")]
    for round in (log[:2], log[2:6], log[6:]):
        await store.append("w", round)
    async with store.lease("w", read=True, max_messages=2) as lease:
        assert lease.loaded == await store.load("w", max_messages=2)
    async with store.lease("w") as lease:
        assert lease.loaded is None
    memory = MessageWindowChatMemory(3, id="w", store=store)
    async with memory.exclusive():
        assert await memory.messages() == _evict(log, 3)
    async with memory.exclusive():
        await memory.add([AiMessage("a2")])  # a write before the first read: the preloaded window is old
        log.append(AiMessage("a2"))
        assert await memory.messages() == _evict(log, 3)
    async with memory.exclusive():
        wider = MessageWindowChatMemory(100, id="w", store=store)
        assert await wider.messages() == log  # read for another window: not the preloaded one


@shared_stores
async def test_the_last_round_and_the_lease_go_back_in_one_step(make_store: Any) -> None:
    """`append_and_release`: the round is stored under the lease and version checks, and the memory id is
    free at once (a second worker takes it without waiting); a stale version stores nothing."""
    first, second = make_store(lease_ttl=30.0), make_store(lease_ttl=30.0)
    async with first.lease("r") as lease:
        assert await lease.append_and_release([UserMessage("q"), AiMessage("a")], expected_version=0) == 1
        with anyio.fail_after(2):  # far less than the 30 s lease: it was given back
            async with second.lease("r", read=True, max_messages=10) as other:
                assert other.loaded == ([UserMessage("q"), AiMessage("a")], 1)
    async with first.lease("r") as lease:
        with pytest.raises(ChatMemoryConflictError, match="version 1, not 0"):
            await lease.append_and_release([UserMessage("stale")], expected_version=0)
    with anyio.fail_after(2):  # given back by the exit even though the last round was refused
        async with second.lease("r") as other:
            pass
    assert await second.load("r") == ([UserMessage("q"), AiMessage("a")], 1)


@shared_stores
async def test_an_invocation_gives_its_memory_id_back_with_its_answer(make_store: Any) -> None:
    """After `chat()` returns the lease is free in the store (the answer's step gave it back), so a worker
    elsewhere starts at once; and nothing can be written under the given-back hold."""
    store = make_store(lease_ttl=30.0)
    agent = agent_on(store)
    await agent.chat("one", memory_id="g")
    with anyio.fail_after(2):
        async with make_store(lease_ttl=30.0).lease("g"):
            pass
    memory = MessageWindowChatMemory(100, id="g", store=store)
    async with memory.exclusive():
        await memory.messages()
        await memory.add_final([UserMessage("two"), AiMessage("answer")])
        with pytest.raises(ChatMemoryConflictError, match="already wrote its last round"):
            await memory.add([UserMessage("three")])
    assert exchanges((await store.load("g")).messages[:4]) == ["one"]
    assert (await store.load("g")).messages[4:] == [UserMessage("two"), AiMessage("answer")]


@stores
async def test_a_nested_final_write_keeps_the_outer_hold(make_store: Any) -> None:
    """A tool that runs an agent on its own invocation's memory id (a re-entrant hold): the inner answer is
    an ordinary write, and the outer invocation still holds the id and writes after it."""
    memory = MessageWindowChatMemory(100, id="n", store=make_store())
    async with memory.exclusive():
        await memory.messages()
        async with memory.exclusive():  # re-entrant
            await memory.add_final([UserMessage("inner"), AiMessage("inner answer")])
        await memory.add([UserMessage("outer")])
        await memory.add_final([AiMessage("outer answer")])
    assert await memory.messages() == [
        UserMessage("inner"),
        AiMessage("inner answer"),
        UserMessage("outer"),
        AiMessage("outer answer"),
    ]


class LeasedDictStore(InMemoryChatMemoryStore):
    """A user-written shared store: a lease of its own that yields a plain `MemoryLease` (no read, no
    release with the last round), over the in-memory store's rounds."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[str] = []

    @asynccontextmanager
    async def lease(self, memory_id: Any, *, read: bool = False, max_messages: int | None = None) -> Any:
        self.steps.append("acquire")
        yield MemoryLease(f"token-{memory_id}")
        self.steps.append("release")

    async def append(self, memory_id: Any, messages: Any, **options: Any) -> int:
        assert options["lease"] == f"token-{memory_id}"
        self.steps.append("append")
        return await super().append(memory_id, messages, **options)


async def test_a_store_whose_lease_cannot_read_nor_release_with_the_last_round() -> None:
    store = LeasedDictStore()
    agent = agent_on(store)
    await agent.chat("one", memory_id="u")
    assert store.steps == ["acquire", "append", "append", "release"]
    assert exchanges(await store.get_messages("u")) == ["one"]


async def _take_over(store: Any, memory_id: str, token: str) -> None:
    """Gives `memory_id`'s lease to `token`, behind the store's back (another worker after an expiry)."""
    if isinstance(store, SQLiteChatMemoryStore):
        with sqlite3.connect(store.path) as connection:
            connection.execute("UPDATE agentloop_lease SET token = ? WHERE memory_id = ?", (token, memory_id))
        return
    await anyio.to_thread.run_sync(store._client.set, store._key(memory_id, "lease"), token)


# -- errors -----------------------------------------------------------------------------------------------


async def test_corrupt_sqlite_file_names_the_file_and_commits_nothing(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    path.write_bytes(b"this is not a database" * 200)
    store = SQLiteChatMemoryStore(path)
    agent = Agent(ScriptedChatModel(["hi"]), memory=MessageWindowChatMemory.provider(10, store=store))
    with pytest.raises(
        ChatMemoryStoreError, match=r"chat\.db.*not a SQLite database or is damaged"
    ) as caught:
        await agent.chat("hello", memory_id="u")
    assert caught.value.store == f"SQLiteChatMemoryStore({str(path)!r})"
    assert path.read_bytes() == b"this is not a database" * 200
    await store.aclose()


async def test_locked_sqlite_file_says_so(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    store = SQLiteChatMemoryStore(path, busy_timeout=0.2)
    await store.append("u", [UserMessage("before")])
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process holding a write transaction
    try:
        with pytest.raises(ChatMemoryStoreError, match=r"stayed locked for more than busy_timeout=0\.2 s"):
            await store.append("u", [UserMessage("blocked")])
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert await store.get_messages("u") == [UserMessage("before")]
    await store.aclose()


async def test_unreachable_redis_names_the_server_without_its_password() -> None:
    pytest.importorskip("redis")
    url = f"redis://:s3cret-pw@127.0.0.1:{free_port()}/0"
    store = RedisChatMemoryStore(url, timeout=1.0)
    agent = Agent(ScriptedChatModel(["hi"]), memory=MessageWindowChatMemory.provider(10, store=store))
    with pytest.raises(ChatMemoryStoreError, match="cannot reach Redis") as caught:
        await agent.chat("hello", memory_id="u")
    message = str(caught.value)
    assert "127.0.0.1" in message and "check that the server is running" in message
    assert "s3cret" not in message and "s3cret" not in repr(store)
    await store.aclose()


async def test_redis_ttl_applies_to_every_key_written(redis_url: str) -> None:  # noqa: F811
    store = RedisChatMemoryStore(redis_url, ttl=30, prefix=f"ttl-{uuid.uuid4().hex[:6]}", lease_ttl=5)
    try:
        memory = MessageWindowChatMemory(10, id="t", store=store)
        async with memory.exclusive():
            await memory.messages()
            await memory.add([SystemMessage("s"), UserMessage("q"), AiMessage("a")])
            keys = await anyio.to_thread.run_sync(store._client.keys, f"{store.prefix}:*")
            assert len(keys) == 3  # log, meta and the lease
            for key in keys:
                ttl = await anyio.to_thread.run_sync(store._client.pttl, key)
                assert 0 < ttl <= 30_000, (key, ttl)
    finally:
        await store.aclose()


def test_imports_stay_lazy() -> None:
    """`import agentloop` loads neither sqlite3 nor redis; `agentloop.stores` loads redis only when asked."""
    code = (
        "import sys, agentloop\n"
        "assert 'sqlite3' not in sys.modules and 'redis' not in sys.modules\n"
        "import agentloop.stores\n"
        "assert 'redis' not in sys.modules, 'redis imported by agentloop.stores'\n"
        "agentloop.stores.RedisChatMemoryStore\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    without_redis = (
        "import sys; sys.modules['redis'] = None\n"  # as if the extra were not installed
        "from agentloop.stores import RedisChatMemoryStore, SQLiteChatMemoryStore\n"
        "try:\n"
        "    RedisChatMemoryStore('redis://127.0.0.1:1/0')\n"
        "except ImportError as error:\n"
        "    assert \"pip install 'agentloop-runtime[redis]'\" in str(error), error\n"
        "else:\n"
        "    raise AssertionError('no ImportError')\n"
    )
    subprocess.run([sys.executable, "-c", without_redis], check=True)


async def test_losing_redis_mid_invocation_stops_it_and_stores_nothing_of_it() -> None:
    """Redis stops answering while a tool runs: the lease cannot be renewed, so once it would have expired
    the invocation is cancelled with a store error; when Redis is back, nothing of the round is there."""
    import redis

    with redis_server() as url:
        store = RedisChatMemoryStore(url, lease_ttl=0.6, timeout=0.2)
        admin = redis.Redis.from_url(url)
        agent = agent_on(store, tool_seconds=5.0)

        async def pause_redis() -> None:
            await anyio.sleep(0.1)  # the invocation holds its lease and its tool is running
            await anyio.to_thread.run_sync(admin.execute_command, "CLIENT", "PAUSE", "2500", "ALL")

        errors: list[BaseException] = []

        async def invoke() -> None:
            try:
                await agent.chat("cut off", memory_id="cut")
            except ChatMemoryStoreError as error:
                errors.append(error)

        started = anyio.current_time()
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(invoke)
            task_group.start_soon(pause_redis)
        assert anyio.current_time() - started < 4.9  # stopped before the tool finished
        assert len(errors) == 1 and "lost the lease on memory 'cut'" in str(errors[0]), errors
        await anyio.to_thread.run_sync(admin.ping)  # blocks until Redis answers again
        assert await store.load("cut") == ([], 0)
        await store.aclose()
        admin.close()
