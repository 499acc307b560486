"""`SQLiteRunControl`: run control shared by the processes of one machine through one SQLite file.

Each running invocation has a row with a lease that its inbox renews while it reads (a crashed process's
rows lapse); a command is a row of the commands table that the inbox takes (polling every `poll_interval`
seconds, in a worker thread, so it works the same on asyncio and trio).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio

from .._values._errors import RunControlError
from ._base import Inbox, check_target
from ._command import RunCommand, decode_command, encode_command

__all__ = ["SQLiteRunControl"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS agentloop_runs (
    invocation_id TEXT PRIMARY KEY, memory_key TEXT, expires REAL NOT NULL);
CREATE INDEX IF NOT EXISTS agentloop_runs_by_memory ON agentloop_runs (memory_key);
CREATE TABLE IF NOT EXISTS agentloop_run_commands (
    id INTEGER PRIMARY KEY AUTOINCREMENT, invocation_id TEXT NOT NULL, body BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS agentloop_run_commands_by_run ON agentloop_run_commands (invocation_id, id);
"""


class SQLiteRunControl:
    """Reaches the invocations running in any process that opens the same SQLite file.

    `lease_ttl`: seconds a registration lives without renewal (renewed every third of it while the
    invocation runs); `poll_interval`: how often an inbox looks for commands (the delay a command may take).
    """

    def __init__(
        self, path: str | os.PathLike[str], *, lease_ttl: float = 10.0, poll_interval: float = 0.05
    ) -> None:
        if lease_ttl <= 0 or poll_interval <= 0:
            raise ValueError("SQLiteRunControl: lease_ttl and poll_interval must be > 0 seconds")
        self._path = os.fspath(path)
        self.lease_ttl = lease_ttl
        self.poll_interval = poll_interval
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        self._limiter = anyio.CapacityLimiter(4)

    @asynccontextmanager
    async def running(self, invocation_id: str, memory_id: Any = None) -> AsyncIterator[Inbox]:
        key = None if memory_id is None else str(memory_id)
        await self._step(self._register, invocation_id, key)
        try:
            yield _PolledInbox(self, invocation_id)
        finally:
            with anyio.CancelScope(shield=True):
                await self._step(self._unregister, invocation_id)

    async def send(
        self, command: RunCommand, *, invocation_id: str | None = None, memory_id: Any = None
    ) -> bool:
        check_target("SQLiteRunControl", invocation_id, memory_id)
        body = encode_command(command)
        key = None if memory_id is None else str(memory_id)
        return await self._step(self._send, invocation_id, key, body)

    async def busy(self, memory_id: Any) -> bool:
        return await self._step(self._busy, str(memory_id))

    async def take(self, invocation_id: str, *, renew: bool) -> RunCommand | None:
        """The oldest command waiting for the invocation, removed (None when there is none); `renew` also
        renews its registration."""
        body = await self._step(self._take, invocation_id, renew)
        return None if body is None else decode_command(body)

    # -- the steps, each one transaction in a worker thread ------------------------------------------------

    async def _step(self, step: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(self._guarded, step, *args, limiter=self._limiter)

    def _guarded(self, step: Callable[..., T], *args: Any) -> T:
        with self._lock:
            try:
                connection = self._connect()
                with connection:  # one transaction: committed on success, rolled back on error
                    connection.execute("BEGIN IMMEDIATE")
                    return step(connection, *args)
            except sqlite3.Error as error:
                raise RunControlError(f"SQLiteRunControl({self._path!r}): {error}") from error

    def _connect(self) -> sqlite3.Connection:
        if self._connection is None:
            connection = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None, timeout=5)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.executescript(_SCHEMA)
            self._connection = connection
        return self._connection

    def _register(self, connection: sqlite3.Connection, invocation_id: str, key: str | None) -> None:
        now = time.time()
        row = connection.execute(
            "SELECT expires FROM agentloop_runs WHERE invocation_id = ?", (invocation_id,)
        ).fetchone()
        if row is not None and row[0] > now:
            raise ValueError(
                f"SQLiteRunControl: invocation {invocation_id!r} is already registered as running"
            )
        connection.execute("DELETE FROM agentloop_run_commands WHERE invocation_id = ?", (invocation_id,))
        connection.execute(
            "INSERT OR REPLACE INTO agentloop_runs VALUES (?, ?, ?)",
            (invocation_id, key, now + self.lease_ttl),
        )

    def _unregister(self, connection: sqlite3.Connection, invocation_id: str) -> None:
        connection.execute("DELETE FROM agentloop_runs WHERE invocation_id = ?", (invocation_id,))
        connection.execute("DELETE FROM agentloop_run_commands WHERE invocation_id = ?", (invocation_id,))

    def _send(
        self, connection: sqlite3.Connection, invocation_id: str | None, key: str | None, body: bytes
    ) -> bool:
        now = time.time()
        column, target = (
            ("invocation_id", invocation_id) if invocation_id is not None else ("memory_key", key)
        )
        query = f"SELECT invocation_id FROM agentloop_runs WHERE {column} = ? AND expires > ?"
        running = [row[0] for row in connection.execute(query, (target, now))]
        connection.executemany(
            "INSERT INTO agentloop_run_commands (invocation_id, body) VALUES (?, ?)",
            [(i, body) for i in running],
        )
        connection.execute("DELETE FROM agentloop_runs WHERE expires <= ?", (now,))  # crashed processes' rows
        return bool(running)

    def _busy(self, connection: sqlite3.Connection, key: str) -> bool:
        query = "SELECT 1 FROM agentloop_runs WHERE memory_key = ? AND expires > ? LIMIT 1"
        return connection.execute(query, (key, time.time())).fetchone() is not None

    def _take(self, connection: sqlite3.Connection, invocation_id: str, renew: bool) -> bytes | None:
        if renew:
            expires = time.time() + self.lease_ttl
            connection.execute(
                "UPDATE agentloop_runs SET expires = ? WHERE invocation_id = ?", (expires, invocation_id)
            )
        row = connection.execute(
            "DELETE FROM agentloop_run_commands WHERE id = (SELECT min(id) FROM agentloop_run_commands "
            "WHERE invocation_id = ?) RETURNING body",
            (invocation_id,),
        ).fetchone()
        if row is None:
            return None
        return row[0].encode() if isinstance(row[0], str) else bytes(row[0])

    def close(self) -> None:
        """Closes the connection (a later call opens a new one)."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def __repr__(self) -> str:
        return f"SQLiteRunControl({self._path!r})"


class _PolledInbox:
    """An inbox that looks for the invocation's commands every `poll_interval` seconds, renewing the
    registration every third of its lease while it waits (a process that stops reading lets it lapse)."""

    __slots__ = ("_control", "_id", "_renewed")

    def __init__(self, control: SQLiteRunControl, invocation_id: str) -> None:
        self._control = control
        self._id = invocation_id
        self._renewed = time.monotonic()

    async def poll(self) -> RunCommand | None:
        return await self._control.take(self._id, renew=False)

    async def receive(self) -> RunCommand:
        control = self._control
        while True:
            renew = time.monotonic() - self._renewed >= control.lease_ttl / 3
            command = await control.take(self._id, renew=renew)
            if renew:
                self._renewed = time.monotonic()
            if command is not None:
                return command
            await anyio.sleep(control.poll_interval)
