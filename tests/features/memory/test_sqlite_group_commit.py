"""The SQLite store's group commit: the steps many tasks of one event loop ask for together run in one
transaction, yet each caller keeps its own outcome: a conflict or a damaged row fails that caller only, a
cancelled caller's round is stored whole or not at all, and a closed store refuses every later step."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import (
    Agent,
    AiMessage,
    MessageWindowChatMemory,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from agentloop.stores import ChatMemoryConflictError, ChatMemoryStoreError, SQLiteChatMemoryStore
from agentloop.testing import ScriptedChatModel


def a_round(name: str) -> list[Any]:
    call = ToolExecutionRequest(f"c-{name}", "f", '{"x": 1}')
    return [UserMessage(f"q {name}"), AiMessage("", [call]), ToolExecutionResultMessage(call.id, "f", "r")]


def count_commits(store: SQLiteChatMemoryStore) -> list[str]:
    """The statements the store's connection runs from now on (the connection is opened by a first step)."""
    statements: list[str] = []
    assert store._connection is not None
    store._connection.set_trace_callback(statements.append)
    return statements


async def test_concurrent_rounds_share_one_commit_and_all_land(tmp_path: Path) -> None:
    store = SQLiteChatMemoryStore(tmp_path / "chat.db")
    await store.append("warm", [UserMessage("open the file")])
    statements = count_commits(store)
    versions: dict[str, int] = {}

    async def write(name: str) -> None:
        versions[name] = await store.append(name, a_round(name), expected_version=0)

    async with anyio.create_task_group() as group:
        for index in range(20):
            group.start_soon(write, f"m{index}")
    assert versions == {f"m{index}": 1 for index in range(20)}
    commits = [s for s in statements if s == "COMMIT"]
    assert 1 <= len(commits) < 20  # grouped (how many batches depends on the loop's scheduling)
    for index in range(20):
        assert await store.get_messages(f"m{index}") == a_round(f"m{index}")
    await store.aclose()


async def test_a_conflict_in_a_batch_fails_its_caller_only(tmp_path: Path) -> None:
    store = SQLiteChatMemoryStore(tmp_path / "chat.db")
    await store.append("late", [UserMessage("first")])
    outcomes: dict[str, Any] = {}

    async def write(name: str, expected: int) -> None:
        try:
            outcomes[name] = await store.append(name, a_round(name), expected_version=expected)
        except ChatMemoryConflictError as error:
            outcomes[name] = error

    statements = count_commits(store)
    async with anyio.create_task_group() as group:
        group.start_soon(write, "ok1", 0)
        group.start_soon(write, "late", 0)  # it is at version 1: refused
        group.start_soon(write, "ok2", 0)
    assert outcomes["ok1"] == outcomes["ok2"] == 1
    assert isinstance(outcomes["late"], ChatMemoryConflictError)
    assert "'late' is at version 1, not 0" in str(outcomes["late"])
    assert "ROLLBACK" in statements  # the batch was undone, then each ran alone
    assert await store.get_messages("late") == [UserMessage("first")]
    assert await store.get_messages("ok1") == a_round("ok1")
    assert await store.get_messages("ok2") == a_round("ok2")
    await store.aclose()


async def test_a_damaged_row_in_a_batch_fails_its_caller_only_and_names_it(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    store = SQLiteChatMemoryStore(path)
    await store.append("broken", [UserMessage("first")])
    await store.append("fine", [UserMessage("first")])
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("UPDATE agentloop_memory SET version = 'many' WHERE memory_id = 'broken'")
    other.close()
    outcomes: dict[str, Any] = {}

    async def write(name: str) -> None:
        try:
            outcomes[name] = await store.append(name, [AiMessage("more")])
        except ChatMemoryStoreError as error:
            outcomes[name] = error

    async with anyio.create_task_group() as group:
        for name in ("fine", "broken", "new"):
            group.start_soon(write, name)
    assert outcomes["fine"] == 2
    assert outcomes["new"] == 1
    error = outcomes["broken"]
    assert isinstance(error, ChatMemoryStoreError)
    assert "memory 'broken' is damaged: its version is 'many'" in str(error)
    assert await store.get_messages("fine") == [UserMessage("first"), AiMessage("more")]
    await store.aclose()


async def test_a_cancelled_caller_stores_its_round_whole_or_not_at_all(tmp_path: Path) -> None:
    store = SQLiteChatMemoryStore(tmp_path / "chat.db")
    await store.append("warm", [UserMessage("open the file")])
    for victim in range(6):  # cancelled at a different point of the batch each time
        names = [f"r{victim}-{index}" for index in range(6)]
        scopes = {name: anyio.CancelScope() for name in names}
        outcomes: dict[str, Any] = {}

        async def write(name: str) -> None:
            with scopes[name]:
                outcomes[name] = await store.append(name, a_round(name), expected_version=0)

        async def cancel(name: str, after: int) -> None:
            for _ in range(after):
                await anyio.lowlevel.checkpoint()
            scopes[name].cancel()

        async with anyio.create_task_group() as group:
            for name in names:
                group.start_soon(write, name)
            group.start_soon(cancel, names[victim], victim % 3)
        for name in names:
            stored = await store.load(name)
            if name in outcomes:
                assert stored.messages == a_round(name) and stored.version == outcomes[name]
            else:  # the cancelled caller: all of its round or none of it
                assert stored.messages in ([], a_round(name))
                assert stored.version == (1 if stored.messages else 0)
            assert await store.append(name, [AiMessage("after")]) == stored.version + 1
    await store.aclose()


async def test_many_invocations_at_once_each_keep_their_conversation(tmp_path: Path) -> None:
    store = SQLiteChatMemoryStore(tmp_path / "chat.db")
    model = ScriptedChatModel(["answer"] * 60)
    agent = Agent(model, memory=MessageWindowChatMemory.provider(20, store=store))

    async def session(index: int) -> None:
        await agent.chat(f"question {index}", memory_id=f"u{index}")

    async with anyio.create_task_group() as group:
        for index in range(30):
            group.start_soon(session, index)
    async with anyio.create_task_group() as group:  # a second round on each id, all at once again
        for index in range(30):
            group.start_soon(session, index)
    for index in range(30):
        assert await store.get_messages(f"u{index}") == [
            UserMessage(f"question {index}"),
            AiMessage("answer"),
            UserMessage(f"question {index}"),
            AiMessage("answer"),
        ]
    await store.aclose()


async def test_closing_closes_the_connection_and_refuses_later_steps(tmp_path: Path) -> None:
    store = SQLiteChatMemoryStore(tmp_path / "chat.db")
    async with anyio.create_task_group() as group:
        for index in range(10):
            group.start_soon(store.append, f"m{index}", [UserMessage("hi")])
    await store.aclose()
    assert store._connection is None
    with pytest.raises(ChatMemoryStoreError, match="is closed"):
        await store.append("m0", [UserMessage("again")])


async def test_a_batch_waits_for_another_process_then_every_step_lands(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    store = SQLiteChatMemoryStore(path, busy_timeout=10)
    await store.append("warm", [UserMessage("open the file")])
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock for a while
    versions: dict[str, int] = {}

    async def write(name: str) -> None:
        versions[name] = await store.append(name, a_round(name), expected_version=0)

    async def let_go() -> None:
        await anyio.sleep(0.3)
        other.execute("COMMIT")

    async with anyio.create_task_group() as group:
        group.start_soon(let_go)
        for index in range(8):
            group.start_soon(write, f"m{index}")
    other.close()
    assert versions == {f"m{index}": 1 for index in range(8)}
    for index in range(8):
        assert await store.get_messages(f"m{index}") == a_round(f"m{index}")
    await store.aclose()


async def test_a_batch_that_stays_locked_fails_every_caller_and_stores_nothing(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    store = SQLiteChatMemoryStore(path, busy_timeout=0.2)
    await store.append("warm", [UserMessage("open the file")])
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    errors: dict[str, Exception] = {}

    async def write(name: str) -> None:
        try:
            await store.append(name, a_round(name), expected_version=0)
        except ChatMemoryStoreError as error:
            errors[name] = error

    try:
        async with anyio.create_task_group() as group:
            for index in range(5):
                group.start_soon(write, f"m{index}")
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert sorted(errors) == [f"m{index}" for index in range(5)]
    assert all("stayed locked for more than busy_timeout=0.2 s" in str(e) for e in errors.values())
    for index in range(5):
        assert await store.load(f"m{index}") == ([], 0)
    await store.aclose()
