"""The agent the approval tests pause in one process and resume in another, built the same way in each.

Tools append a line to a run log file per run, so run counts hold across processes. `SharedTestStore` is a
small memory store on stdlib sqlite3 that several processes share, with the `PendingApprovalStore`
capability: what a database-backed store gives the approval checks.

    python tests/approval_agent.py resume <state.json> <runs.log> [<store.db> [test|sqlite]]  # prints JSON
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import anyio

from agentloop import (
    Agent,
    ApprovalError,
    ChatMessage,
    Denied,
    MessageWindowChatMemory,
    PendingApproval,
    tool,
)
from agentloop._values._messages import decode_messages, encode_messages
from agentloop.stores import SQLiteChatMemoryStore
from agentloop.testing import ScriptedChatModel


class RunLog:
    """Counts tool runs in a file, one line per run."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def add(self, entry: str) -> None:
        with self.path.open("a") as file:
            file.write(entry + "\n")

    def entries(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []

    def count(self, entry: str) -> int:
        return self.entries().count(entry)


class SharedTestStore:
    """Messages and paused-round records in one SQLite file, safe to share between processes."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        with self._connect() as db:
            db.execute("CREATE TABLE IF NOT EXISTS messages (memory_id TEXT PRIMARY KEY, body BLOB)")
            db.execute(
                "CREATE TABLE IF NOT EXISTS pending "
                "(memory_id TEXT, id TEXT, record TEXT, PRIMARY KEY (memory_id, id))"
            )

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=10, isolation_level=None)

    async def get_messages(self, memory_id: Any) -> list[ChatMessage]:
        with self._connect() as db:
            row = db.execute("SELECT body FROM messages WHERE memory_id = ?", (str(memory_id),)).fetchone()
        return decode_messages(row[0]) if row else []

    async def update_messages(self, memory_id: Any, messages: list[ChatMessage]) -> None:
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO messages VALUES (?, ?)", (str(memory_id), encode_messages(messages))
            )

    async def delete_messages(self, memory_id: Any) -> None:
        with self._connect() as db:
            db.execute("DELETE FROM messages WHERE memory_id = ?", (str(memory_id),))

    async def save_pending_approval(self, memory_id: Any, pending_id: str, record: str) -> None:
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO pending VALUES (?, ?, ?)", (str(memory_id), pending_id, record)
            )

    async def take_pending_approval(self, memory_id: Any, pending_id: str, record: str) -> str | None:
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")  # one writer: a concurrent take waits, then finds nothing
            row = db.execute(
                "SELECT record FROM pending WHERE memory_id = ? AND id = ?", (str(memory_id), pending_id)
            ).fetchone()
            if row is not None and row[0] == record:
                db.execute("DELETE FROM pending WHERE memory_id = ? AND id = ?", (str(memory_id), pending_id))
            db.execute("COMMIT")
        finally:
            db.close()
        return row[0] if row is not None else None


def build_agent(
    runs: Path, store_path: Path | None = None, answers: list[Any] | None = None, kind: str = "test"
) -> Agent:
    """An agent with a gated `pay`, a gated `delete_file` and an ungated `lookup`; no approval handler."""
    log = RunLog(runs)

    @tool("Pays an amount to someone", requires_approval=True)
    def pay(to: str, amount: int) -> str:
        log.add(f"pay {to} {amount}")
        return f"paid {amount} to {to}"

    @tool("Deletes a file", requires_approval=True)
    async def delete_file(path: str) -> str:
        log.add(f"delete {path}")
        return f"deleted {path}"

    @tool("Looks someone up")
    def lookup(name: str) -> str:
        log.add(f"lookup {name}")
        return f"{name} is a friend"

    memory = None
    if store_path is not None:
        store: Any = SharedTestStore(store_path) if kind == "test" else SQLiteChatMemoryStore(store_path)
        memory = MessageWindowChatMemory.provider(50, store=store)
    return Agent(
        ScriptedChatModel(answers if answers is not None else ["All done."]),
        tools=[pay, delete_file, lookup],
        memory=memory,
    )


async def _resume(state: Path, runs: Path, store: Path | None, kind: str) -> dict[str, Any]:
    pending = PendingApproval.from_json(state.read_bytes())
    agent = build_agent(runs, store, kind=kind)
    decisions: dict[str, Any] = {}
    for request in pending.requests:
        decisions[request.call_id] = True if request.tool_name == "pay" else Denied("not this file")
    try:
        result = await agent.resume(pending, decisions)
    except ApprovalError as error:
        return {"error": error.message, "pending_id": error.pending_id}
    messages = await agent._memory_for(pending.memory_id).messages() if store is not None else []  # type: ignore[union-attr]
    return {
        "content": result.content,
        "executions": [[e.request.name, e.result, e.is_error] for e in result.tool_executions],
        "memory": [type(m).__name__ for m in messages],
    }


if __name__ == "__main__":
    command, state_file, runs_file, *rest = sys.argv[1:]
    assert command == "resume"
    store_file, kind = (Path(rest[0]) if rest else None), (rest[1] if len(rest) > 1 else "test")
    outcome = anyio.run(_resume, Path(state_file), Path(runs_file), store_file, kind)
    print(json.dumps(outcome))
