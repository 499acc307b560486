"""What two A2A workers share in the cross-worker tests: a task store in one SQLite file (a2a-sdk's
`DatabaseTaskStore` plays this part in production), and the agent each serves
(tests/integrations/test_a2a_workers.py)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import anyio
from a2a.server.context import ServerCallContext
from a2a.server.tasks import TaskStore
from a2a.types.a2a_pb2 import ListTasksRequest, ListTasksResponse, Task

from agentloop import Agent, ChatMessage, MessageWindowChatMemory
from agentloop.control import SQLiteRunControl
from agentloop.stores import SQLiteChatMemoryStore
from agentloop.testing import FunctionChatModel


class SQLiteTaskStore(TaskStore):
    """A2A tasks as protobuf bytes in one SQLite file, shared by the processes that open it."""

    def __init__(self, path: str | Path) -> None:
        self._path = str(path)
        self._lock = threading.Lock()
        with self._connect() as db:
            db.execute("CREATE TABLE IF NOT EXISTS tasks (id TEXT PRIMARY KEY, context_id TEXT, body BLOB)")

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self._path, timeout=10)

    async def _run(self, query: str, *args: Any) -> list[Any]:
        def step() -> list[Any]:
            with self._lock, self._connect() as db:
                return db.execute(query, args).fetchall()

        return await anyio.to_thread.run_sync(step)

    async def save(self, task: Task, context: ServerCallContext) -> None:
        await self._run(
            "INSERT OR REPLACE INTO tasks VALUES (?, ?, ?)",
            task.id,
            task.context_id,
            task.SerializeToString(),
        )

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        rows = await self._run("SELECT body FROM tasks WHERE id = ?", task_id)
        return Task.FromString(rows[0][0]) if rows else None

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        rows = await self._run(
            "SELECT body FROM tasks WHERE ? = '' OR context_id = ?", params.context_id, params.context_id
        )
        tasks = [Task.FromString(row[0]) for row in rows]
        return ListTasksResponse(tasks=tasks, total_size=len(tasks), page_size=len(tasks))

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        await self._run("DELETE FROM tasks WHERE id = ?", task_id)


def worker_agent(directory: Path, on_hang: Any = None) -> Agent:
    """One worker's agent: memory and run control in `directory`'s SQLite files, shared with the others."""

    async def answer(messages: list[ChatMessage], tools: Any) -> str:
        said = str(messages[-1].text)
        if said == "hang":
            if on_hang is not None:
                on_hang("started")
            try:
                await anyio.sleep_forever()
            finally:
                if on_hang is not None:
                    on_hang("cancelled")
        users = sum(1 for m in messages if type(m).__name__ == "UserMessage")
        return f"you said {said} (message {users} of this conversation)"

    store = SQLiteChatMemoryStore(directory / "memory.db")
    return Agent(
        FunctionChatModel(answer, chunk_size=4),
        memory=MessageWindowChatMemory.provider(50, store=store),
        control=SQLiteRunControl(directory / "control.db", poll_interval=0.01),
    )
