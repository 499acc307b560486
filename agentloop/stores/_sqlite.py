"""`SQLiteChatMemoryStore`: conversations in one SQLite file, shared by the processes of one machine.

stdlib `sqlite3`, WAL, a busy timeout. One round is one `BEGIN IMMEDIATE` transaction: a row per round, the
memory's version bumped in the same transaction. A step runs at once on the event loop's thread when it
cannot wait (the connection is free and SQLite answers without waiting for another process's lock: tens
of microseconds, less than handing it to a thread); otherwise in an anyio worker thread, where it may wait
up to the busy timeout. Both work the same on asyncio and trio. Checkpoints run in a worker thread.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

import anyio
import anyio.lowlevel

from .._codec import FORMAT, CodecError, encode_messages
from .._errors import ChatMemoryConflictError, ChatMemoryStoreError
from .._memory import StoredMemory, needs_more, split_round
from .._messages import ChatMessage, UserMessage
from ._lease import LastRound, hold_lease
from ._rows import Damaged, damaged, memory_key, messages_of, stored_float, stored_int

__all__ = ["SQLiteChatMemoryStore"]

T = TypeVar("T")

_CHECKPOINT_EVERY = 500
"""Writes between two WAL checkpoints (run in a worker thread, so the event loop never waits on fsync)."""

_MAX_VERSION = 2**62
"""Far beyond any real count of rounds, and far from the limit of SQLite's integers."""

_LEASE_REMEDY = (
    "delete its row from agentloop_lease once no process is using this memory id (a lease is only held "
    "while an invocation runs)"
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS agentloop_memory (
    memory_id TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    system_format INTEGER,
    system BLOB,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS agentloop_round (
    memory_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    format INTEGER NOT NULL,
    size INTEGER NOT NULL,
    starts_with_user INTEGER NOT NULL,
    body BLOB NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (memory_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS agentloop_pending_approval (
    memory_id TEXT NOT NULL,
    pending_id TEXT NOT NULL,
    record TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (memory_id, pending_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS agentloop_lease (
    memory_id TEXT PRIMARY KEY,
    token TEXT,
    expires_at REAL NOT NULL DEFAULT 0,
    next_token TEXT,
    next_expires_at REAL NOT NULL DEFAULT 0
);
"""


class SQLiteChatMemoryStore:
    """Chat memory in a SQLite file: survives restarts, shared by every process on the machine that opens it.

    `busy_timeout` (seconds) is how long a write waits for another process's transaction before failing;
    `lease_ttl` how long a crashed process keeps a memory id blocked (renewed every third of it while held).
    Memory ids are stored as `str(memory_id)`. Close it with `close()` / `async with` when done.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 5.0, lease_ttl: float = 10.0):
        if busy_timeout < 0 or lease_ttl <= 0:
            raise ValueError("busy_timeout must be >= 0 and lease_ttl > 0")
        self.path = os.fspath(path)
        self.busy_timeout = busy_timeout
        self.lease_ttl = lease_ttl
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # one connection, used by one thread at a time
        self._closed = False
        self._writes = 0
        self._turns_of_loop: tuple[anyio.lowlevel.EventLoopToken, anyio.Lock] | None = None

    # -- the versioned store protocol ---------------------------------------------------------------------

    async def load(self, memory_id: Any, *, max_messages: int | None = None) -> StoredMemory:
        return await self._run(_load, self._id(memory_id), max_messages)

    async def append(
        self,
        memory_id: Any,
        messages: Sequence[ChatMessage],
        *,
        expected_version: int | None = None,
        lease: str | None = None,
    ) -> int:
        return await self._run(_append, self._id(memory_id), _Round.of(messages, expected_version, lease))

    async def get_messages(self, memory_id: Any) -> list[ChatMessage]:
        """Every stored message of `memory_id` (system message first)."""
        return (await self.load(memory_id)).messages

    async def delete_messages(self, memory_id: Any) -> None:
        await self._run(_delete, self._id(memory_id))

    # -- rounds waiting for approval (docs/approval.md) ------------------------------------------------------

    async def save_pending_approval(self, memory_id: Any, pending_id: str, record: str) -> None:
        """Records a paused round's check record, for a resume in any process."""
        await self._run(_save_pending, self._id(memory_id), pending_id, record)

    async def take_pending_approval(self, memory_id: Any, pending_id: str, record: str) -> str | None:
        """The recorded check record (None if none), deleted in the same transaction when it equals `record`:
        of several processes resuming one paused round, exactly one gets it."""
        return await self._run(_take_pending, self._id(memory_id), pending_id, record)

    def lease(self, memory_id: Any, *, read: bool = False, max_messages: int | None = None) -> Any:
        """Async context manager: holds the lease on `memory_id` for this process (see docs/memory.md),
        yielding a `MemoryLease`; with `read`, the window of `max_messages` is read in the step that takes
        it."""
        return hold_lease(
            self, self._id(memory_id), self.lease_ttl, repr(self), read=read, max_messages=max_messages
        )

    # -- lease steps ----------------------------------------------------------------------------------------

    async def try_acquire(
        self, memory_id: Any, token: str, ttl: float, *, read: bool = False, max_messages: int | None = None
    ) -> StoredMemory | bool:
        return await self._run(_try_acquire, self._id(memory_id), token, ttl, read, max_messages)

    async def renew(self, memory_id: Any, token: str, ttl: float) -> bool:
        return await self._run(_renew, self._id(memory_id), token, ttl)

    async def release(self, memory_id: Any, token: str, *, last: LastRound | None = None) -> int | None:
        round = None if last is None else _Round.of(last[0], last[1], token)
        return await self._run(_release, self._id(memory_id), token, round)

    # -- plumbing -----------------------------------------------------------------------------------------

    def _id(self, memory_id: Any) -> str:
        return memory_key(repr(self), memory_id)

    async def _run(self, step: Callable[..., T], memory_id: str, *args: Any) -> T:
        """Runs one step on `memory_id`'s rows: damaged rows become a `ChatMemoryStoreError` naming it."""
        try:
            return await self._step(step, memory_id, *args)
        except Damaged as error:
            raise damaged(repr(self), memory_id, error.what, error.remedy) from None
        except (TypeError, ValueError, OverflowError) as error:  # a damaged field no check above foresaw
            raise damaged(repr(self), memory_id, f"{type(error).__name__}: {error}") from error

    async def _step(self, step: Callable[..., T], *args: Any) -> T:
        """Runs one step on the store's connection: here if it need not wait, else in a worker thread.

        The steps of one event loop take turns (so a step waiting in a thread does not send the others to
        threads too); the thread lock guards the connection against other event loops and `close()`."""
        async with self._turns():
            connection = self._connection
            if connection is not None and self._writes < _CHECKPOINT_EVERY and self._lock.acquire(False):
                try:
                    return self._guarded(step, connection, *args, waited=False)
                except _Busy:
                    pass  # another process holds the lock: wait for it in a thread
                finally:
                    self._lock.release()
            return await anyio.to_thread.run_sync(self._locked, step, args)

    def _turns(self) -> anyio.Lock:
        token = anyio.lowlevel.current_token()
        turns = self._turns_of_loop
        if turns is None or turns[0] != token:
            turns = self._turns_of_loop = (token, anyio.Lock(fast_acquire=True))
        return turns[1]

    def _locked(self, step: Callable[..., T], args: tuple[Any, ...]) -> T:
        """In a worker thread: runs `step`, retrying while another process holds the lock (up to
        `busy_timeout`); the connection's own busy handler is off so steps on the event loop never wait."""
        deadline = time.monotonic() + self.busy_timeout
        pause = 0.001
        while True:
            with self._lock:
                connection = self._connection or self._guarded(self._connect)
                try:
                    if self._writes >= _CHECKPOINT_EVERY:
                        self._writes = 0
                        self._guarded(_checkpoint, connection, waited=False)
                    return self._guarded(step, connection, *args, waited=time.monotonic() > deadline)
                except _Busy:
                    pass
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _guarded(self, run: Callable[..., T], *args: Any, waited: bool = True) -> T:
        """Runs `run`; sqlite and codec errors become store errors (`_Busy` where it must not wait)."""
        self._writes += 1
        try:
            try:
                return run(*args)
            except sqlite3.OperationalError as error:
                if not waited and ("locked" in str(error) or "busy" in str(error)):
                    raise _Busy from None
                raise
        except sqlite3.Error as error:
            raise self._error(error) from None
        except ChatMemoryStoreError as error:
            error.store = error.store or repr(self)
            raise
        except CodecError as error:
            raise ChatMemoryStoreError(
                f"{self!r}: a stored row cannot be read ({error}); the file was written by a newer "
                "release or damaged",
                store=repr(self),
            ) from None

    def _connect(self) -> sqlite3.Connection:
        if self._closed:
            raise ChatMemoryStoreError(f"{self!r} is closed", store=repr(self))
        connection = sqlite3.connect(self.path, timeout=0, isolation_level=None, check_same_thread=False)
        try:
            deadline = time.monotonic() + self.busy_timeout
            while True:  # switching to WAL takes a lock the busy handler does not always wait for
                try:
                    connection.execute("PRAGMA journal_mode = WAL")
                    break
                except sqlite3.OperationalError as error:
                    if "locked" not in str(error) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)
            connection.execute("PRAGMA synchronous = NORMAL")
            connection.execute("PRAGMA wal_autocheckpoint = 0")  # see _CHECKPOINT_EVERY
            while True:  # several processes may create the schema at once
                try:
                    _transaction(
                        connection, lambda: [connection.execute(t) for t in _SCHEMA.split(";")], write=True
                    )
                    break
                except sqlite3.OperationalError as error:
                    if "locked" not in str(error) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)
        except BaseException:
            connection.close()
            raise
        self._connection = connection
        return connection

    def _error(self, error: sqlite3.Error) -> ChatMemoryStoreError:
        text = str(error)
        if "locked" in text or "busy" in text:
            hint = (
                f"the file stayed locked for more than busy_timeout={self.busy_timeout:g} s: another process "
                "holds a long write transaction on it (check other programs using the file), or raise "
                "busy_timeout"
            )
        elif isinstance(error, sqlite3.DatabaseError) and (
            "not a database" in text or "malformed" in text or "corrupt" in text
        ):
            hint = "the file is not a SQLite database or is damaged: check the path, or restore or remove it"
        elif "unable to open" in text:
            hint = "the file cannot be opened: check that its directory exists and is writable"
        elif "readonly" in text:
            hint = "the file is read-only: check its permissions"
        else:
            hint = "check the file and its directory"
        return ChatMemoryStoreError(f"{self!r}: {hint} (sqlite3: {text})", store=repr(self))

    def close(self) -> None:
        """Closes the connection; the store cannot be used afterwards."""
        with self._lock:
            self._closed = True
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    async def aclose(self) -> None:
        """`close()` from async code (it waits for a running step to finish)."""
        await anyio.to_thread.run_sync(self.close)

    async def __aenter__(self) -> SQLiteChatMemoryStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"SQLiteChatMemoryStore({self.path!r})"


# -- steps, each in a worker thread holding the store's connection ------------------------------------------


def _checkpoint(connection: sqlite3.Connection) -> None:
    connection.execute("PRAGMA wal_checkpoint(PASSIVE)")


class _Busy(Exception):
    """SQLite would have had to wait for another process's lock (raised only where it must not wait)."""


def _transaction(connection: sqlite3.Connection, step: Callable[[], T], *, write: bool) -> T:
    connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    try:
        result = step()
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")
    return result


def _load(connection: sqlite3.Connection, memory_id: str, max_messages: int | None) -> StoredMemory:
    return _transaction(connection, lambda: _read_window(connection, memory_id, max_messages), write=False)


def _read_window(connection: sqlite3.Connection, memory_id: str, max_messages: int | None) -> StoredMemory:
    """The system message and the newest rounds a window of `max_messages` needs (inside a transaction)."""
    head = connection.execute(
        "SELECT version, system_format, system FROM agentloop_memory WHERE memory_id = ?", (memory_id,)
    ).fetchone()
    if head is None:
        return StoredMemory([], 0)
    version, system_format, system = head
    version = stored_int(version, "its version", maximum=_MAX_VERSION)
    rows: list[tuple[Any, ...]] = []
    count, saw_user = 0, False
    cursor = connection.execute(
        "SELECT seq, format, size, starts_with_user, body FROM agentloop_round WHERE memory_id = ? "
        "ORDER BY seq DESC",
        (memory_id,),
    )
    try:
        for seq, format, size, starts_with_user, body in cursor:
            if not needs_more(count, saw_user, max_messages):
                break
            name = f"round {stored_int(seq, 'the sequence number of a round', minimum=1)}"
            rows.append((name, format, size, body))
            count += stored_int(size, f"{name}'s size", minimum=1)
            saw_user = saw_user or bool(stored_int(starts_with_user, f"{name}'s starts_with_user", maximum=1))
    finally:
        cursor.close()
    messages: list[ChatMessage] = []
    if system is not None or system_format is not None:
        messages += messages_of(system, system_format, "the system message")
    for name, format, size, body in reversed(rows):
        messages += messages_of(body, format, name, size)
    return StoredMemory(messages, version)


class _Round(NamedTuple):
    """A round as `_write_round` stores it: encoded once, with the checks it is written under."""

    body: bytes | None
    size: int
    starts_with_user: bool
    system: bytes | None
    expected_version: int | None
    lease: str | None

    @classmethod
    def of(cls, messages: Sequence[ChatMessage], expected_version: int | None, lease: str | None) -> _Round:
        system, rest = split_round(messages)
        return cls(
            encode_messages(rest) if rest else None,
            len(rest),
            bool(rest) and isinstance(rest[0], UserMessage),
            None if system is None else encode_messages([system]),
            expected_version,
            lease,
        )


def _append(connection: sqlite3.Connection, memory_id: str, round: _Round) -> int:
    return _transaction(connection, lambda: _write_round(connection, memory_id, round), write=True)


def _write_round(connection: sqlite3.Connection, memory_id: str, round: _Round) -> int:
    """Appends `round` and bumps the version, after checking its lease and version (inside a transaction)."""
    if round.lease is not None:
        holder = connection.execute(
            "SELECT token FROM agentloop_lease WHERE memory_id = ?", (memory_id,)
        ).fetchone()
        if holder is not None and not isinstance(holder[0], (str, type(None))):
            raise Damaged(f"its lease's token is {holder[0]!r}, not text", _LEASE_REMEDY)
        if holder is None or holder[0] != round.lease:
            raise ChatMemoryConflictError(
                f"The lease on memory {memory_id!r} was lost (it expired and another worker took it); "
                "this round was not stored",
            )
    row = connection.execute(
        "SELECT version FROM agentloop_memory WHERE memory_id = ?", (memory_id,)
    ).fetchone()
    version = 0 if row is None else stored_int(row[0], "its version", maximum=_MAX_VERSION)
    if round.expected_version is not None and round.expected_version != version:
        raise ChatMemoryConflictError(
            f"Memory {memory_id!r} is at version {version}, not {round.expected_version}: another writer "
            "appended since it was read; this round was not stored",
        )
    now = time.time()
    if round.body is not None:
        connection.execute(
            "INSERT INTO agentloop_round VALUES (?, ?, ?, ?, ?, ?, ?)",
            (memory_id, version + 1, FORMAT, round.size, int(round.starts_with_user), round.body, now),
        )
    connection.execute(
        "INSERT INTO agentloop_memory (memory_id, version, system_format, system, updated_at) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (memory_id) DO UPDATE SET version = excluded.version, "
        "system_format = coalesce(excluded.system_format, system_format), "
        "system = coalesce(excluded.system, system), updated_at = excluded.updated_at",
        (memory_id, version + 1, None if round.system is None else FORMAT, round.system, now),
    )
    return version + 1


def _delete(connection: sqlite3.Connection, memory_id: str) -> None:
    def delete() -> None:
        connection.execute("DELETE FROM agentloop_pending_approval WHERE memory_id = ?", (memory_id,))
        connection.execute("DELETE FROM agentloop_round WHERE memory_id = ?", (memory_id,))
        connection.execute("DELETE FROM agentloop_memory WHERE memory_id = ?", (memory_id,))

    _transaction(connection, delete, write=True)


def _save_pending(connection: sqlite3.Connection, memory_id: str, pending_id: str, record: str) -> None:
    def save() -> None:
        connection.execute(
            "INSERT OR REPLACE INTO agentloop_pending_approval VALUES (?, ?, ?, ?)",
            (memory_id, pending_id, record, time.time()),
        )

    _transaction(connection, save, write=True)


def _take_pending(connection: sqlite3.Connection, memory_id: str, pending_id: str, record: str) -> str | None:
    def take() -> str | None:
        row = connection.execute(
            "SELECT record FROM agentloop_pending_approval WHERE memory_id = ? AND pending_id = ?",
            (memory_id, pending_id),
        ).fetchone()
        if row is None:
            return None
        if not isinstance(row[0], str):
            raise Damaged(f"the record of paused round {pending_id!r} is {row[0]!r}, not text")
        if row[0] == record:
            connection.execute(
                "DELETE FROM agentloop_pending_approval WHERE memory_id = ? AND pending_id = ?",
                (memory_id, pending_id),
            )
        return str(row[0])

    return _transaction(connection, take, write=True)


def _try_acquire(
    connection: sqlite3.Connection,
    memory_id: str,
    token: str,
    ttl: float,
    read: bool,
    max_messages: int | None,
) -> StoredMemory | bool:
    def acquire() -> StoredMemory | bool:
        now = time.time()
        row = connection.execute(
            "SELECT token, expires_at, next_token, next_expires_at FROM agentloop_lease WHERE memory_id = ?",
            (memory_id,),
        ).fetchone()
        holder, expires_at, next_token, next_expires_at = row if row is not None else (None, 0.0, None, 0.0)
        for field, value in (("its lease's token", holder), ("its lease's next_token", next_token)):
            if value is not None and not isinstance(value, str):
                raise Damaged(f"{field} is {value!r}, not text", _LEASE_REMEDY)
        try:
            expires_at = stored_float(expires_at, "its lease's expires_at")
            next_expires_at = stored_float(next_expires_at, "its lease's next_expires_at")
        except Damaged as error:
            raise Damaged(error.what, _LEASE_REMEDY) from None
        someone_next = next_token is not None and next_token != token and next_expires_at > now
        if (holder is not None and holder != token and expires_at > now) or someone_next:
            if not someone_next:  # first in line: the next free lease is ours
                connection.execute(
                    "INSERT INTO agentloop_lease (memory_id, next_token, next_expires_at) VALUES (?, ?, ?) "
                    "ON CONFLICT (memory_id) DO UPDATE SET next_token = excluded.next_token, "
                    "next_expires_at = excluded.next_expires_at",
                    (memory_id, token, now + ttl),
                )
            return False
        connection.execute(
            "INSERT INTO agentloop_lease (memory_id, token, expires_at) VALUES (?, ?, ?) "
            "ON CONFLICT (memory_id) DO UPDATE SET token = excluded.token, expires_at = excluded.expires_at, "
            "next_token = NULL, next_expires_at = 0",
            (memory_id, token, now + ttl),
        )
        return _read_window(connection, memory_id, max_messages) if read else True

    return _transaction(connection, acquire, write=True)


def _renew(connection: sqlite3.Connection, memory_id: str, token: str, ttl: float) -> bool:
    cursor = connection.execute(
        "UPDATE agentloop_lease SET expires_at = ? WHERE memory_id = ? AND token = ?",
        (time.time() + ttl, memory_id, token),
    )
    return cursor.rowcount == 1


def _release(connection: sqlite3.Connection, memory_id: str, token: str, last: _Round | None) -> int | None:
    """Gives the lease back; with `last`, appends that round first, in the same transaction."""

    def release() -> int | None:
        version = None if last is None else _write_round(connection, memory_id, last)
        connection.execute(
            "UPDATE agentloop_lease SET token = NULL, expires_at = 0 WHERE memory_id = ? AND token = ?",
            (memory_id, token),
        )
        connection.execute(
            "UPDATE agentloop_lease SET next_token = NULL, next_expires_at = 0 "
            "WHERE memory_id = ? AND next_token = ?",
            (memory_id, token),
        )
        connection.execute(
            "DELETE FROM agentloop_lease WHERE memory_id = ? AND token IS NULL AND next_token IS NULL",
            (memory_id,),
        )
        return version

    return _transaction(connection, release, write=True)
