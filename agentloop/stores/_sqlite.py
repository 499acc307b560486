"""`SQLiteChatMemoryStore`: conversations in one SQLite file, shared by the processes of one machine.

stdlib `sqlite3`, WAL, a busy timeout. A round is a row, the memory's version bumped in the same `BEGIN
IMMEDIATE` transaction. Group commit: the steps the tasks of one event loop ask for together (many sessions'
rounds, leases, reads) run as one transaction with one commit; when any of them fails the transaction is
rolled back and each runs again in its own, so every caller gets its own outcome. A batch runs at once on
the event loop's thread when it cannot wait (the connection is free and SQLite answers without waiting for
another process's lock: tens of microseconds, less than handing it to a thread); otherwise in an anyio
worker thread, where it may wait up to the busy timeout. Both work the same on asyncio and trio.
Checkpoints run in a worker thread.
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

from .. import ChatMemoryConflictError, ChatMemoryStoreError, ChatMessage, UserMessage
from .._memory._chat import StoredMemory, needs_more, split_round
from .._values._codec import FORMAT, CodecError, encode_messages
from ._lease import LastRound, hold_lease
from ._rows import Damaged, damaged, memory_key, messages_of, stored_float, stored_int

__all__ = ["SQLiteChatMemoryStore"]

T = TypeVar("T")

_CHECKPOINT_EVERY = 500
"""Writes between two WAL checkpoints (run in a worker thread, so the event loop never waits on fsync)."""

_PROBE_EVERY = 8
"""While steps come one at a time, every 8th batch still waits a turn of the event loop for company."""

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
) WITHOUT ROWID;
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
) WITHOUT ROWID;
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
        self._batches_of_loop: _Batches | None = None

    # -- the versioned store protocol ---------------------------------------------------------------------

    async def load(self, memory_id: Any, *, max_messages: int | None = None) -> StoredMemory:
        return await self._run(_read_window, self._id(memory_id), max_messages)

    async def append(
        self,
        memory_id: Any,
        messages: Sequence[ChatMessage],
        *,
        expected_version: int | None = None,
        lease: str | None = None,
    ) -> int:
        return await self._run(
            _write_round, self._id(memory_id), _Round.of(messages, expected_version, lease)
        )

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
        return memory_key(self, memory_id)

    async def _run(self, step: Callable[..., T], memory_id: str, *args: Any) -> T:
        """Runs one step on `memory_id`'s rows: damaged rows become a `ChatMemoryStoreError` naming it."""
        try:
            return await self._step(step, memory_id, *args)
        except Damaged as error:
            raise damaged(repr(self), memory_id, error.what, error.remedy) from None
        except (TypeError, ValueError, OverflowError) as error:  # a damaged field no check above foresaw
            raise damaged(repr(self), memory_id, f"{type(error).__name__}: {error}") from error

    async def _step(self, step: Callable[..., T], *args: Any) -> T:
        """Runs one step on the store's connection, in the next group commit of this event loop.

        A step joins the batch the event loop is gathering; the first step of a batch leads it: it lets the
        loop's other ready tasks run once (they add their steps; skipped while batches find no company, but
        for a probe now and then), then runs the whole batch in one transaction, on the event loop's thread
        if it need not wait, else in a worker thread. Batches of one event loop run one after another; the
        thread lock guards the connection against other event loops and `close()`. A step taken into a
        batch runs whole even if its caller is cancelled meanwhile (the caller then sees the cancellation,
        as after any finished step); one not yet taken is dropped."""
        batches = self._batches()
        op = _Op(step, args)
        batches.waiting.append(op)
        try:
            async with batches.turn:
                if op.outcome is None:
                    if batches.should_gather():
                        await anyio.lowlevel.cancel_shielded_checkpoint()  # the loop's ready tasks join
                    ops, batches.waiting = batches.waiting, []
                    batches.ran(len(ops))
                    await self._run_batch(ops)
        except BaseException:
            if op.outcome is None and op in batches.waiting:
                batches.waiting.remove(op)  # cancelled before any batch took it: it never runs
            elif op.outcome is None:  # a batch under way holds it: it runs whole before this returns
                with anyio.CancelScope(shield=True):
                    async with batches.turn:
                        pass
            raise
        return op.result()  # type: ignore[no-any-return]

    async def _run_batch(self, ops: list[_Op]) -> None:
        """Runs `ops` (one transaction; one each if that fails): here if SQLite need not wait, else in a
        worker thread (waiting up to `busy_timeout` for another process's lock)."""
        connection = self._connection
        if connection is not None and self._writes < _CHECKPOINT_EVERY and self._lock.acquire(False):
            try:
                self._batch(connection, ops, waited=False)
                return
            except _Busy:
                pass  # another process holds the lock: wait for it in a thread
            except Exception as error:  # outside any step (closing the connection under it...)
                for op in ops:
                    if op.outcome is None:
                        op.outcome = (False, error)
                return
            finally:
                self._lock.release()
        try:
            await anyio.to_thread.run_sync(self._locked, ops)
        except Exception as error:  # the batch could not run (the store is closed, the file is locked...)
            for op in ops:
                if op.outcome is None:
                    op.outcome = (False, error)

    def _batches(self) -> _Batches:
        token = anyio.lowlevel.current_token()
        batches = self._batches_of_loop
        if batches is None or batches.token != token:
            batches = self._batches_of_loop = _Batches(token)
        return batches

    def _locked(self, ops: list[_Op]) -> None:
        """In a worker thread: runs the batch, retrying while another process holds the lock (up to
        `busy_timeout`); the connection's own busy handler is off so batches on the event loop never wait."""
        deadline = time.monotonic() + self.busy_timeout
        pause = 0.001
        while True:
            with self._lock:
                connection = self._connection or self._guarded(self._connect)
                try:
                    if self._writes >= _CHECKPOINT_EVERY:
                        self._writes = 0
                        self._guarded(_checkpoint, connection, waited=False)
                    self._batch(connection, ops, waited=time.monotonic() > deadline)
                    return
                except _Busy:
                    pass
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _batch(self, connection: sqlite3.Connection, ops: list[_Op], *, waited: bool) -> None:
        """Runs `ops` in one transaction and sets their outcomes. When one of them fails (or the commit),
        the transaction is rolled back and each runs again in its own, so one caller's error (a version
        conflict, a damaged row) is that caller's alone. `_Busy` (nothing run yet) means try again later."""
        pending = [op for op in ops if op.outcome is None]  # a retry after `_Busy` skips those done
        self._writes += len(pending)
        if len(pending) > 1:
            try:
                results = self._guarded(_together, connection, pending, waited=waited)
            except _Busy:
                raise
            except Exception:
                pass  # each on its own below, so each caller gets its own outcome
            else:
                for op, result in zip(pending, results, strict=True):
                    op.outcome = (True, result)
                return
        for op in pending:
            try:
                op.outcome = (True, self._guarded(_alone, connection, op, waited=waited))
            except _Busy:
                raise
            except Exception as error:
                op.outcome = (False, error)

    def _guarded(self, run: Callable[..., T], *args: Any, waited: bool = True) -> T:
        """Runs `run`; sqlite and codec errors become store errors (`_Busy` where it must not wait)."""
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


# -- group commit ------------------------------------------------------------------------------------------


class _Op:
    """One caller's step waiting in a batch, and its outcome once run: (True, result) or (False, error)."""

    __slots__ = ("args", "outcome", "step")

    def __init__(self, step: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.step = step
        self.args = args
        self.outcome: tuple[bool, Any] | None = None

    def result(self) -> Any:
        assert self.outcome is not None
        done, value = self.outcome
        if done:
            return value
        raise value


class _Batches:
    """One event loop's batching: the steps waiting for the next batch, the turn its leader holds, and how
    many batches in a row ran alone (when steps come one at a time, waiting for company costs a turn of the
    event loop and gathers nothing, so a leader waits only after a batch that had company, or to probe)."""

    __slots__ = ("alone", "token", "turn", "waiting")

    def __init__(self, token: object) -> None:
        self.token = token
        self.waiting: list[_Op] = []
        self.turn = anyio.Lock(fast_acquire=True)
        self.alone = 0

    def should_gather(self) -> bool:
        return self.alone == 0 or self.alone % _PROBE_EVERY == 0

    def ran(self, size: int) -> None:
        self.alone = 0 if size > 1 else self.alone + 1


def _together(connection: sqlite3.Connection, ops: list[_Op]) -> list[Any]:
    """Runs every op's step in one transaction: one commit for all (any error rolls all of them back)."""
    write = any(op.step is not _read_window for op in ops)
    return _transaction(connection, lambda: [op.step(connection, *op.args) for op in ops], write=write)


def _alone(connection: sqlite3.Connection, op: _Op) -> Any:
    return _transaction(connection, lambda: op.step(connection, *op.args), write=op.step is not _read_window)


# -- steps: each runs inside a transaction, on the store's connection --------------------------------------


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


def _write_round(connection: sqlite3.Connection, memory_id: str, round: _Round) -> int:
    """Appends `round` and bumps the version, after checking its lease and version (inside a transaction).

    With an expected version (a memory's rounds always have one), one guarded statement checks the lease and
    the version and bumps it; only when it changes nothing are the rows read, to say what was wrong."""
    now = time.time()
    if round.expected_version is not None and _bump_if_current(connection, memory_id, round, now):
        version = round.expected_version
    else:
        version = _checked_version(connection, memory_id, round)
        connection.execute(
            "INSERT INTO agentloop_memory (memory_id, version, system_format, system, updated_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (memory_id) DO UPDATE SET version = excluded.version, "
            "system_format = coalesce(excluded.system_format, system_format), "
            "system = coalesce(excluded.system, system), updated_at = excluded.updated_at",
            (memory_id, version + 1, None if round.system is None else FORMAT, round.system, now),
        )
    if round.body is not None:
        connection.execute(
            "INSERT INTO agentloop_round VALUES (?, ?, ?, ?, ?, ?, ?)",
            (memory_id, version + 1, FORMAT, round.size, int(round.starts_with_user), round.body, now),
        )
    return version + 1


_BUMP_NEW = (  # a memory with no row yet (one at version 0, which no write leaves, is left to the slow path)
    "INSERT INTO agentloop_memory (memory_id, version, system_format, system, updated_at) "
    "SELECT ?1, ?2, ?3, ?4, ?5 "
    "WHERE ?6 IS NULL OR (SELECT token FROM agentloop_lease WHERE memory_id = ?1) = ?6 "
    "ON CONFLICT (memory_id) DO NOTHING"
)
_BUMP = (
    "UPDATE agentloop_memory SET version = ?2, system_format = coalesce(?3, system_format), "
    "system = coalesce(?4, system), updated_at = ?5 WHERE memory_id = ?1 AND version = ?7 "
    "AND (?6 IS NULL OR (SELECT token FROM agentloop_lease WHERE memory_id = ?1) = ?6)"
)


def _bump_if_current(connection: sqlite3.Connection, memory_id: str, round: _Round, now: float) -> bool:
    """Moves the memory's version from `round.expected_version` to the next if it is still at it and
    `round.lease` (if any) still holds the memory id, in one statement: True when it did."""
    expected = round.expected_version
    assert expected is not None
    system_format = None if round.system is None else FORMAT
    if expected == 0:
        values: tuple[Any, ...] = (memory_id, 1, system_format, round.system, now, round.lease)
        return connection.execute(_BUMP_NEW, values).rowcount == 1
    values = (memory_id, expected + 1, system_format, round.system, now, round.lease, expected)
    return connection.execute(_BUMP, values).rowcount == 1


def _checked_version(connection: sqlite3.Connection, memory_id: str, round: _Round) -> int:
    """The memory's version, after checking `round`'s lease and expected version against the rows."""
    holder, version = connection.execute(
        "SELECT (SELECT token FROM agentloop_lease WHERE memory_id = ?1), "
        "(SELECT version FROM agentloop_memory WHERE memory_id = ?1)",
        (memory_id,),
    ).fetchone()
    if round.lease is not None:
        if not isinstance(holder, (str, type(None))):
            raise Damaged(f"its lease's token is {holder!r}, not text", _LEASE_REMEDY)
        if holder != round.lease:
            raise ChatMemoryConflictError(
                f"The lease on memory {memory_id!r} was lost (it expired and another worker took it); "
                "this round was not stored",
            )
    version = 0 if version is None else stored_int(version, "its version", maximum=_MAX_VERSION)
    if round.expected_version is not None and round.expected_version != version:
        raise ChatMemoryConflictError(
            f"Memory {memory_id!r} is at version {version}, not {round.expected_version}: another writer "
            "appended since it was read; this round was not stored",
        )
    return version


def _delete(connection: sqlite3.Connection, memory_id: str) -> None:
    connection.execute("DELETE FROM agentloop_pending_approval WHERE memory_id = ?", (memory_id,))
    connection.execute("DELETE FROM agentloop_round WHERE memory_id = ?", (memory_id,))
    connection.execute("DELETE FROM agentloop_memory WHERE memory_id = ?", (memory_id,))


def _save_pending(connection: sqlite3.Connection, memory_id: str, pending_id: str, record: str) -> None:
    connection.execute(
        "INSERT OR REPLACE INTO agentloop_pending_approval VALUES (?, ?, ?, ?)",
        (memory_id, pending_id, record, time.time()),
    )


def _take_pending(connection: sqlite3.Connection, memory_id: str, pending_id: str, record: str) -> str | None:
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


def _try_acquire(
    connection: sqlite3.Connection,
    memory_id: str,
    token: str,
    ttl: float,
    read: bool,
    max_messages: int | None,
) -> StoredMemory | bool:
    now = time.time()
    taken = connection.execute(  # the usual case, a memory id nobody holds or waits for: one statement
        "INSERT INTO agentloop_lease (memory_id, token, expires_at) VALUES (?, ?, ?) "
        "ON CONFLICT (memory_id) DO NOTHING",
        (memory_id, token, now + ttl),
    ).rowcount
    if taken != 1 and not _take_lease_row(connection, memory_id, token, ttl, now):
        return False
    return _read_window(connection, memory_id, max_messages) if read else True


def _take_lease_row(
    connection: sqlite3.Connection, memory_id: str, token: str, ttl: float, now: float
) -> bool:
    """Takes the lease of a memory id that has a lease row, if it is free or expired and nobody else is
    first in line; else queues `token` (when first in line) and returns False."""
    holder, expires_at, next_token, next_expires_at = connection.execute(
        "SELECT token, expires_at, next_token, next_expires_at FROM agentloop_lease WHERE memory_id = ?",
        (memory_id,),
    ).fetchone()
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
                "UPDATE agentloop_lease SET next_token = ?, next_expires_at = ? WHERE memory_id = ?",
                (token, now + ttl, memory_id),
            )
        return False
    connection.execute(
        "UPDATE agentloop_lease SET token = ?, expires_at = ?, next_token = NULL, next_expires_at = 0 "
        "WHERE memory_id = ?",
        (token, now + ttl, memory_id),
    )
    return True


def _renew(connection: sqlite3.Connection, memory_id: str, token: str, ttl: float) -> bool:
    cursor = connection.execute(
        "UPDATE agentloop_lease SET expires_at = ? WHERE memory_id = ? AND token = ?",
        (time.time() + ttl, memory_id, token),
    )
    return cursor.rowcount == 1


def _release(connection: sqlite3.Connection, memory_id: str, token: str, last: _Round | None) -> int | None:
    """Gives the lease back; with `last`, appends that round first, in the same transaction."""
    version = None if last is None else _write_round(connection, memory_id, last)
    gone = connection.execute(  # the usual case, nobody waiting: the row goes, one statement
        "DELETE FROM agentloop_lease WHERE memory_id = ? AND token = ? AND next_token IS NULL",
        (memory_id, token),
    ).rowcount
    if gone == 1:
        return version
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
