"""Stores whose rows or keys were damaged by hand: every field of every row (SQLite) and key (Redis) kind is
given what the store never writes; each step on that memory id then works or fails with a
`ChatMemoryStoreError` naming the id and the field (never a bare `TypeError`/`ValueError`), and every other
id keeps working exactly. A memory id that cannot be encoded (a lone surrogate) is refused the same way."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import AiMessage, SystemMessage, UserMessage
from agentloop._memory._chat import StoredMemory
from agentloop.stores import (
    ChatMemoryConflictError,
    ChatMemoryStoreError,
    RedisChatMemoryStore,
    SQLiteChatMemoryStore,
)

from ..store_servers import redis_url  # noqa: F401 (fixture)
from ..store_workload import agent_on
from ._support import Fault

GOOD, VICTIM = "good-id", "victim-id"
ROUND_1 = [SystemMessage("Be brief."), UserMessage("one"), AiMessage("1")]
ROUND_2 = [UserMessage("two"), AiMessage("2")]
EXPECTED = "ChatMemoryStoreError naming the memory id and the damaged field; every other id unaffected"
HARMLESS = "never read: every step on that id still works"


@dataclass(frozen=True)
class Damage:
    """One field given a value the store never writes: `where` it is (the fault's group in the report),
    the SQL or Redis commands that write it, and what the error must name (None: the field is never read)."""

    where: str
    name: str
    commands: tuple[tuple[Any, ...], ...]
    names: str | None


def sql(where: str, name: str, statement: str, names: str | None, *values: Any) -> Damage:
    return Damage(where, name, ((statement, (*values, VICTIM)),), names)


SQLITE = [
    *(
        sql(
            "the memory's version",
            f"version {v!r}",
            "UPDATE agentloop_memory SET version = ? WHERE memory_id = ?",
            "its version",
            v,
        )
        for v in ("abc", -1, 1.5, b"\x00", 2**63 - 1)
    ),
    *(
        sql(
            "the system message",
            f"system_format {v!r}",
            "UPDATE agentloop_memory SET system_format = ? WHERE memory_id = ?",
            "system message",
            v,
        )
        for v in ("abc", 99, 0, None)
    ),
    *(
        sql(
            "the system message",
            f"system {v!r}",
            "UPDATE agentloop_memory SET system = ? WHERE memory_id = ?",
            "system message",
            v,
        )
        for v in ("not json", b"\xff\xfe", 7, '[{"type": "bogus"}]')
    ),
    *(
        sql(
            "a round (sequence number, format, size, user flag, body)",
            f"round {column} {v!r}",
            f"UPDATE agentloop_round SET {column} = ? WHERE memory_id = ? AND seq = 2",
            "round",
            v,
        )
        for column, values in {
            "seq": ["abc", -4],
            "format": ["abc", 0, 99, 2.5],
            "size": ["abc", 0, 7, -3],
            "starts_with_user": ["abc", 2],
            "body": ["not json", b"\xff", "[]", '[{"type": "bogus"}]', 12],
        }.items()
        for v in values
    ),
    *(
        sql(
            "a paused round's record",
            f"record {v!r}",
            "UPDATE agentloop_pending_approval SET record = ? WHERE memory_id = ?",
            "record",
            v,
        )
        for v in (b"\x00rec",)
    ),
    *(
        sql(
            "the lease (token, expires_at, next in line)",
            f"lease {column} {v!r}",
            f"UPDATE agentloop_lease SET {column} = ? WHERE memory_id = ?",
            "lease",
            v,
        )
        for column, values in {
            "token": [b"\x01"],
            "expires_at": ["abc", b"\x01"],
            "next_token": [b"\x05"],
            "next_expires_at": ["soon"],
        }.items()
        for v in values
    ),
    *(
        sql(
            "a field never read (timestamps)",
            f"{table}.{column} 'abc'",
            f"UPDATE {table} SET {column} = ? WHERE memory_id = ?{only}",
            None,
            "abc",
        )
        for table, column, only in (
            ("agentloop_memory", "updated_at", ""),
            ("agentloop_round", "created_at", " AND seq = 2"),
            ("agentloop_pending_approval", "created_at", ""),
        )
    ),
]


def redis_damage(where: str, name: str, names: str | None, *commands: tuple[Any, ...]) -> Damage:
    return Damage(where, name, commands, names)


ONE_MESSAGE = b'[{"type":"user","text":"x"}]'
REDIS = [
    *(
        redis_damage("the memory's version", f"version {v!r}", "its version", ("HSET", "meta", "version", v))
        for v in ("abc", "-1", "1.5", "", "9" * 30)
    ),
    *(
        redis_damage("the system message", f"system {v!r}", "system message", ("HSET", "meta", "system", v))
        for v in (b"nospace", b"1 not json", b"99 " + ONE_MESSAGE, b"x " + ONE_MESSAGE)
    ),
    *(
        redis_damage(
            "a round (format, size, user flag, body)", f"round {v!r}", "round", ("LSET", "log", -1, v)
        )
        for v in (
            b"garbage",
            b"1 x 1 " + ONE_MESSAGE,
            b"1 1 2 " + ONE_MESSAGE,
            b"99 1 1 " + ONE_MESSAGE,
            b"1 5 1 " + ONE_MESSAGE,
            b"1 1 1 not json",
            b"1 1 1 \xff",
            b"",
        )
    ),
    redis_damage("a paused round's record", "record b'\\xff'", "record", ("HSET", "pending", "p1", b"\xff")),
    *(
        redis_damage(
            "a key of the wrong Redis type",
            f"{key} as a {kind}",
            "wrong kind of Redis value",
            ("DEL", key),
            command,
        )
        for key, kind, command in (
            ("meta", "string", ("SET", "meta", "x")),
            ("log", "hash", ("HSET", "log", "a", "b")),
            ("lease", "list", ("RPUSH", "lease", "x")),
            ("next", "hash", ("HSET", "next", "a", "b")),
            ("pending", "string", ("SET", "pending", "x")),
        )
    ),
    redis_damage(
        "a field never read (timestamps)", "last_write 'abc'", None, ("HSET", "meta", "last_write", "abc")
    ),
]


@pytest.fixture
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "sqlite":
        opened: Any = SQLiteChatMemoryStore(tmp_path / "chat.db")
    else:
        opened = RedisChatMemoryStore(request.getfixturevalue("redis_url"), prefix=uuid.uuid4().hex[:8])
    async with opened:
        yield opened


async def fill(store: Any, memory_id: str) -> None:
    """Two rounds (the first with a system message), a paused round's record, a held lease and a waiter."""
    await store.append(memory_id, ROUND_1)
    await store.append(memory_id, ROUND_2)
    await store.save_pending_approval(memory_id, "p1", "record-1")
    assert await store.try_acquire(memory_id, "holder", 30.0) is True
    assert await store.try_acquire(memory_id, "waiter", 30.0) is False


async def damage(store: Any, how: Damage) -> None:
    if isinstance(store, SQLiteChatMemoryStore):
        with sqlite3.connect(store.path) as connection:
            for statement, values in how.commands:
                assert connection.execute(statement, values).rowcount == 1, statement
        return
    for command, key, *rest in how.commands:
        await anyio.to_thread.run_sync(
            lambda c=command, k=key, r=rest: store._client.execute_command(c, store._key(VICTIM, k), *r)
        )


STEPS: dict[str, Callable[[Any, str], Any]] = {
    "load": lambda store, id: store.load(id),
    "load a window": lambda store, id: store.load(id, max_messages=1),
    "get_messages": lambda store, id: store.get_messages(id),
    "append": lambda store, id: store.append(id, [UserMessage("three"), AiMessage("3")]),
    "take a lease and read": lambda store, id: store.try_acquire(id, "newcomer", 30.0, read=True),
    "renew": lambda store, id: store.renew(id, "holder", 30.0),
    "take a paused round": lambda store, id: store.take_pending_approval(id, "p1", "record-1"),
    "release with a round": lambda store, id: store.release(id, "holder", last=(ROUND_2, None)),
}


async def check_good_id(store: Any) -> None:
    """The undamaged id reads back exactly and takes every step."""
    loaded = await store.load(GOOD)
    assert loaded == StoredMemory(ROUND_1 + ROUND_2, 2)
    assert await store.take_pending_approval(GOOD, "p1", "record-1") == "record-1"
    assert await store.append(GOOD, [UserMessage("three"), AiMessage("3")], lease="holder") == 3
    assert await store.release(GOOD, "holder") is None
    taken = await store.try_acquire(GOOD, "waiter", 30.0, read=True)
    assert isinstance(taken, StoredMemory) and taken.version == 3 and len(taken.messages) == 7


async def store_error(step: Awaitable[Any]) -> ChatMemoryStoreError | None:
    """The store error `step` raised, or None when it worked."""
    try:
        await step
    except ChatMemoryStoreError as error:
        return error
    return None


async def run_steps(store: Any, how: Damage) -> list[str]:
    """Every step on the damaged id; returns the names of those that refused it (with the right error)."""
    refused = []
    for name, step in STEPS.items():
        try:
            await step(store, VICTIM)
        except ChatMemoryConflictError:
            pass  # the lease is held by another token, as it would be by another worker: not the damage
        except ChatMemoryStoreError as error:
            text = str(error)
            assert repr(VICTIM) in text, (name, text)
            assert how.names is not None and how.names in text, (name, how.names, text)
            assert "damaged" in text and repr(store) in text, text
            refused.append(name)
    return refused


def params(damages: list[Damage]) -> list[Any]:
    return [pytest.param(d, id=d.name) for d in damages]


async def check_damage(store: Any, how: Damage, fault: Fault, kind: str) -> None:
    fault.declare("stores", how.where, HARMLESS if how.names is None else EXPECTED, provider=kind)
    await fill(store, GOOD)
    await fill(store, VICTIM)
    await damage(store, how)
    refused = await run_steps(store, how)
    if how.names is None:
        assert refused == []
    else:
        assert refused, "no step noticed the damage"
    await check_good_id(store)
    # Through an agent: the damaged id fails as a store error (or works); the other id goes on.
    agent = agent_on(store)
    for memory_id, token in [(GOOD, "waiter"), *((VICTIM, t) for t in ("holder", "waiter", "newcomer"))]:
        error = await store_error(store.release(memory_id, token))
        assert error is None or (memory_id == VICTIM and repr(VICTIM) in str(error))
    error = await store_error(agent.chat("hello", memory_id=VICTIM, timeout=10))
    fault.scan(error)
    assert error is None or (repr(VICTIM) in str(error) and how.names is not None and how.names in str(error))
    assert (await agent.chat("hi", memory_id=GOOD)).content == "answer to hi"
    # The remedy the error gives works (a damaged lease goes when it is released or expires).
    if not how.where.startswith("the lease") and "wrong Redis type" not in how.where:
        await store.delete_messages(VICTIM)
        assert (await store.load(VICTIM)).messages == []
        assert (await agent.chat("again", memory_id=VICTIM)).content == "answer to again"


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
@pytest.mark.parametrize("how", params(SQLITE))
async def test_a_damaged_sqlite_row_fails_only_its_memory_id_with_a_clear_error(
    store: Any, how: Damage, fault: Fault
) -> None:
    await check_damage(store, how, fault, "SQLite")


@pytest.mark.parametrize("store", ["redis"], indirect=True)
@pytest.mark.parametrize("how", params(REDIS))
async def test_a_damaged_redis_key_fails_only_its_memory_id_with_a_clear_error(
    store: Any, how: Damage, fault: Fault
) -> None:
    await check_damage(store, how, fault, "Redis")


@pytest.mark.parametrize("store", ["sqlite", "redis"], indirect=True)
async def test_a_memory_id_with_a_lone_surrogate_is_refused_by_every_step(store: Any, fault: Fault) -> None:
    kind = "SQLite" if isinstance(store, SQLiteChatMemoryStore) else "Redis"
    fault.declare(
        "stores",
        "a memory id with a lone surrogate (from os.listdir of a badly named file)",
        "ChatMemoryStoreError naming the id and the surrogate's position, from every step; other ids "
        "unaffected",
        provider=kind,
    )
    bad = "user-\udc80"
    await fill(store, GOOD)
    steps = {
        **STEPS,
        "delete": lambda store, id: store.delete_messages(id),
        "save a paused round": lambda store, id: store.save_pending_approval(id, "p", "r"),
    }
    for name, step in steps.items():
        with pytest.raises(
            ChatMemoryStoreError, match=r"lone surrogate \('\\udc80' at position 5\)"
        ) as caught:
            await step(store, bad)
        assert repr(bad) in str(caught.value), name
    with pytest.raises(ChatMemoryStoreError, match="lone surrogate"):
        async with store.lease(bad):
            pass
    agent = agent_on(store)
    with pytest.raises(ChatMemoryStoreError, match="lone surrogate"):
        await agent.chat("hello", memory_id=bad)
    await store.release(GOOD, "waiter")
    await check_good_id(store)
