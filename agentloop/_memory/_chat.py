"""Chat memory: the conversation an agent keeps per memory id, always valid to send to a provider.

A tool round (the AiMessage that asked for tools and every result) is added as one unit and evicted as one
unit, so the messages handed to a provider never hold a tool call without its result or the reverse.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager, nullcontext
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol, runtime_checkable

import anyio

from .._conforms import conforms
from .._values._errors import ChatMemoryConflictError
from .._values._messages import AiMessage, ChatMessage, SystemMessage, ToolExecutionResultMessage, UserMessage

__all__ = [
    "ChatMemory",
    "ChatMemoryStore",
    "InMemoryChatMemoryStore",
    "MemoryLease",
    "MessageWindowChatMemory",
    "PendingApprovalStore",
    "StoredMemory",
    "VersionedChatMemoryStore",
    "exclusive_access",
]


@runtime_checkable
class ChatMemoryStore(Protocol):
    """Where memories keep their messages, keyed by memory id: the simple protocol (LangChain4j's shape).

    A store that also implements `VersionedChatMemoryStore` gets append-only, versioned writes instead.
    """

    async def get_messages(self, memory_id: Any) -> list[ChatMessage]:
        """The stored messages of `memory_id` (empty when none)."""
        ...

    async def update_messages(self, memory_id: Any, messages: list[ChatMessage]) -> None:
        """Replaces the stored messages of `memory_id`."""
        ...

    async def delete_messages(self, memory_id: Any) -> None:
        """Forgets `memory_id`."""
        ...


class StoredMemory(NamedTuple):
    """What `VersionedChatMemoryStore.load` read: the messages (system message first) and their version."""

    messages: list[ChatMessage]
    version: int


@runtime_checkable
class VersionedChatMemoryStore(Protocol):
    """A store of append-only rounds: each `append` adds one unit and bumps the version by one.

    The window is applied when reading, so concurrent writers never overwrite each other; a write carries the
    version it was based on and is refused (`ChatMemoryConflictError`) when the memory moved on. A store
    shared between processes also has `lease(memory_id, *, read=False, max_messages=None)`: an async context
    manager yielding a `MemoryLease` that serialises invocations on one memory id across processes (see
    docs/memory.md).
    """

    async def load(self, memory_id: Any, *, max_messages: int | None = None) -> StoredMemory:
        """The newest system message, then the stored rounds, oldest first. With `max_messages`, at least
        the newest rounds a window of that size needs (back to a round that starts with a user message)."""
        ...

    async def append(
        self,
        memory_id: Any,
        messages: Sequence[ChatMessage],
        *,
        expected_version: int | None = None,
        lease: str | None = None,
    ) -> int:
        """Appends `messages` as one round, atomically; returns the new version. A `SystemMessage` replaces
        the stored one. Refused when `expected_version` (if given) is not the current version, or `lease`
        (if given) is no longer held."""
        ...

    async def delete_messages(self, memory_id: Any) -> None:
        """Forgets `memory_id`."""
        ...


class MemoryLease:
    """What a shared store's `lease()` yields while this worker holds a memory id: the `token` its writes
    carry, and (with `lease(..., read=True)`) the window read in the same step that took the lease.

    A store that can also append a round and give the lease back in one step overrides `append_and_release`;
    this default says it cannot, and the memory appends and releases as two steps.
    """

    __slots__ = ("loaded", "token")

    def __init__(self, token: str, loaded: StoredMemory | None = None) -> None:
        self.token = token
        self.loaded = loaded

    async def append_and_release(
        self, messages: Sequence[ChatMessage], *, expected_version: int | None
    ) -> int | None:
        """Appends `messages` as one round (as `append(..., lease=token)`) and gives the lease back, in one
        atomic step; returns the new version, or None when the store cannot (nothing was done)."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(token={self.token!r})"


@runtime_checkable
class PendingApprovalStore(Protocol):
    """An optional capability of a memory store: it records the rounds that wait for a person's approval.

    The runtime saves a paused round's check record (an opaque string) when it pauses, and takes it back,
    atomically and once, when a resume starts: so in every process sharing the store a round is resumed at
    most once, and only with the names, arguments and results it paused with (docs/approval.md).
    """

    async def save_pending_approval(self, memory_id: Any, pending_id: str, record: str) -> None:
        """Records `record` under (`memory_id`, `pending_id`)."""
        ...

    async def take_pending_approval(self, memory_id: Any, pending_id: str, record: str) -> str | None:
        """Atomically: returns the record stored under the key (None when there is none) and deletes it when
        it equals `record`; a different record is left in place."""
        ...


class _Log:
    """One memory id in an `InMemoryChatMemoryStore`: its rounds, version and system message."""

    __slots__ = ("rows", "system", "version")

    def __init__(self) -> None:
        self.rows: list[tuple[ChatMessage, ...]] = []
        self.system: SystemMessage | None = None
        self.version = 0


def split_round(messages: Sequence[ChatMessage]) -> tuple[SystemMessage | None, list[ChatMessage]]:
    """A round as stored: its newest system message apart, the other messages in order."""
    system: SystemMessage | None = None
    rest: list[ChatMessage] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            system = message
        else:
            rest.append(message)
    return system, rest


def needs_more(count: int, saw_user: bool, max_messages: int | None) -> bool:
    """While reading rounds newest first: True until a window of `max_messages` has all it can use."""
    return max_messages is None or count < max_messages or not saw_user


class InMemoryChatMemoryStore:
    """A versioned store in a dict: fast, lost when the process ends, private to this process.

    It keeps only the rounds the largest window read from it (for any memory id, a read before the first
    write too) can show, so memory use stays bounded; a smaller read later, such as a one-message probe
    of the version, drops nothing. It records paused approval rounds too (`PendingApprovalStore`), for
    this process only.
    """

    __slots__ = ("_logs", "_pending", "_window")

    def __init__(self) -> None:
        self._logs: dict[Any, _Log] = {}
        self._pending: dict[tuple[Any, str], str] = {}
        self._window = 0  # the largest window read so far: rounds no such window needs are dropped

    async def load(self, memory_id: Any, *, max_messages: int | None = None) -> StoredMemory:
        if max_messages is not None and max_messages > self._window:
            self._window = max_messages
        log = self._logs.get(memory_id)
        if log is None:
            return StoredMemory([], 0)
        start = self._start(log, max_messages)
        head: list[ChatMessage] = [log.system] if log.system is not None else []
        return StoredMemory(head + [m for row in log.rows[start:] for m in row], log.version)

    async def append(
        self,
        memory_id: Any,
        messages: Sequence[ChatMessage],
        *,
        expected_version: int | None = None,
        lease: str | None = None,
    ) -> int:
        log = self._logs.get(memory_id)
        version = 0 if log is None else log.version
        if expected_version is not None and expected_version != version:
            raise ChatMemoryConflictError(
                f"Memory {memory_id!r} is at version {version}, not {expected_version}: another writer "
                "appended since it was read",
                store=repr(self),
            )
        if log is None:
            log = self._logs[memory_id] = _Log()
        system, rest = split_round(messages)
        if system is not None:
            log.system = system
        if rest:
            log.rows.append(tuple(rest))
            if self._window:
                del log.rows[: self._start(log, self._window)]
        log.version += 1
        return log.version

    @staticmethod
    def _start(log: _Log, max_messages: int | None) -> int:
        """Index of the oldest round a window of `max_messages` may show."""
        count, saw_user, index = 0, False, len(log.rows)
        while index > 0 and needs_more(count, saw_user, max_messages):
            index -= 1
            row = log.rows[index]
            count += len(row)
            saw_user = saw_user or isinstance(row[0], UserMessage)
        return index

    async def get_messages(self, memory_id: Any) -> list[ChatMessage]:
        return (await self.load(memory_id)).messages

    async def update_messages(self, memory_id: Any, messages: list[ChatMessage]) -> None:
        log = self._logs.setdefault(memory_id, _Log())
        log.system, rest = split_round(messages)
        log.rows = [tuple(rest)] if rest else []
        log.version += 1

    async def delete_messages(self, memory_id: Any) -> None:
        self._logs.pop(memory_id, None)
        for key in [key for key in self._pending if key[0] == memory_id]:
            del self._pending[key]

    async def save_pending_approval(self, memory_id: Any, pending_id: str, record: str) -> None:
        self._pending[memory_id, pending_id] = record

    async def take_pending_approval(self, memory_id: Any, pending_id: str, record: str) -> str | None:
        stored = self._pending.get((memory_id, pending_id))
        if stored == record:
            del self._pending[memory_id, pending_id]
        return stored

    def __repr__(self) -> str:
        return f"InMemoryChatMemoryStore(memory_ids={len(self._logs)})"


@runtime_checkable
class ChatMemory(Protocol):
    """The conversation of one memory id. `add` takes one unit (a user message, a tool round, an answer).

    A memory may also have `exclusive()`: an async context manager the agent holds for a whole invocation
    so invocations on one memory run one after another (across processes for a shared store). Without it
    the agent uses a lock of this process, per memory object. And it may have `add_final(messages)`, which
    the runtime calls instead of `add` for the last unit an invocation writes (its answer), inside
    `exclusive()`: a memory over a shared store stores it and gives the hold back in one step.
    """

    @property
    def id(self) -> Any:
        """The memory id this memory belongs to."""
        ...

    async def messages(self) -> list[ChatMessage]:
        """The messages to send to the model, oldest first; always valid for a provider."""
        ...

    async def add(self, messages: Sequence[ChatMessage]) -> None:
        """Appends `messages` as one unit (the runtime calls it once per completed round)."""
        ...

    async def clear(self) -> None:
        """Forgets every message."""
        ...


ChatMemoryProvider = Callable[[Any], ChatMemory]
"""A function from memory id to that id's `ChatMemory` (one memory per user or conversation)."""


class _Hold:
    """This task's exclusive access to one memory id: the store's lease, the version last seen, the window
    read with the lease (until a read uses it), how deep `exclusive()` is nested, and whether the lease was
    already given back with the invocation's last round."""

    __slots__ = ("depth", "lease", "preloaded", "released", "version")

    def __init__(self, lease: MemoryLease | None, max_messages: int | None) -> None:
        self.lease = lease
        self.version: int | None = None
        loaded = None if lease is None else lease.loaded
        self.preloaded = None if loaded is None else (max_messages, loaded)
        self.depth = 0
        self.released = False

    def take_preloaded(self, max_messages: int) -> StoredMemory | None:
        """The window read with the lease, once, if it was read for `max_messages`."""
        preloaded, self.preloaded = self.preloaded, None
        return preloaded[1] if preloaded is not None and preloaded[0] == max_messages else None

    def check_writable(self, memory_id: Any) -> None:
        if self.released:
            raise ChatMemoryConflictError(
                f"Memory {memory_id!r}: this invocation already wrote its last round (add_final) and gave "
                "the memory id back, so this write was refused; write every other round before it, with add()"
            )


_Key = tuple[int, Any]  # (id of the store, memory id)
_holds: ContextVar[Mapping[_Key, _Hold]] = ContextVar("agentloop_memory_holds", default=MappingProxyType({}))
_locks: dict[_Key, tuple[anyio.Lock, list[int]]] = {}


@contextmanager
def holding_nothing() -> Iterator[None]:
    """Code in this block holds no memory id, whatever the task that started it held (a background task
    started by an invocation outlives its holds, and must take a memory id afresh to write to it)."""
    token = _holds.set(MappingProxyType({}))
    try:
        yield
    finally:
        _holds.reset(token)


@asynccontextmanager
async def _local_lock(key: _Key) -> AsyncIterator[None]:
    """A lock of this process per key, dropped when nobody holds or waits for it."""
    entry = _locks.get(key)
    if entry is None:
        entry = _locks[key] = (anyio.Lock(fast_acquire=True), [0])  # free: taken without a turn of the loop
    lock, users = entry
    users[0] += 1
    try:
        async with lock:
            yield
    finally:
        users[0] -= 1
        if users[0] == 0:
            del _locks[key]


@contextmanager
def _holding(holds: Mapping[_Key, _Hold], key: _Key, hold: _Hold) -> Iterator[None]:
    """Marks `key` held by this task (and the tasks it starts) while the block runs."""
    reset = _holds.set(MappingProxyType({**holds, key: hold}))
    try:
        yield
    finally:
        _holds.reset(reset)


@runtime_checkable
class ExclusiveMemory(Protocol):
    """A memory that holds its own exclusive access (a lease in a shared store, for instance)."""

    def exclusive(self) -> AbstractAsyncContextManager[object]:
        """Held by an invocation for its whole run: no other invocation on this memory interleaves."""
        ...


@runtime_checkable
class FinalCommitMemory(Protocol):
    """A memory that commits an invocation's last unit with `add_final` (it may hand the memory id back
    with it, as a leased window does)."""

    async def add_final(self, messages: Sequence[ChatMessage]) -> None: ...


@runtime_checkable
class LeasingStore(Protocol):
    """A store whose memory ids are leased to one holder at a time, across processes."""

    def lease(self, memory_id: Any, *, read: bool = False, max_messages: int | None = None) -> Any:
        """An async context manager holding the lease (its value: the lease token)."""
        ...


def exclusive_access(memory: ChatMemory | None) -> AbstractAsyncContextManager[object]:
    """What an invocation holds so that no other invocation on `memory` interleaves with it: the memory's
    own `exclusive()` when it has one, else a lock of this process per memory object."""
    if memory is None:
        return nullcontext()
    if conforms(memory, ExclusiveMemory):
        return memory.exclusive()
    return _local_lock((id(memory), None))


class MessageWindowChatMemory:
    """Keeps the most recent `max_messages` messages, evicting whole units from the oldest.

    A system message is never evicted (a newer one replaces it). A tool round is evicted as a unit, and the
    window starts with a user message, so it is valid for every provider. When the newest exchange alone is
    longer than `max_messages`, it is kept whole (with the user message that started it) rather than split.

    Over a `VersionedChatMemoryStore` (every store agentloop ships) rounds are appended and the window is
    applied when reading; over a plain `ChatMemoryStore` the windowed list is written back whole.
    """

    __slots__ = ("_id", "_key", "_store", "_versioned", "max_messages")

    def __init__(
        self,
        max_messages: int = 100,
        *,
        id: Any = "default",
        store: ChatMemoryStore | VersionedChatMemoryStore | None = None,
    ) -> None:
        if max_messages < 1:
            raise ValueError(f"max_messages must be at least 1, got {max_messages}")
        self.max_messages = max_messages
        self._id = id
        self._store: Any = store if store is not None else InMemoryChatMemoryStore()
        self._versioned = conforms(self._store, VersionedChatMemoryStore)
        self._key = (builtins.id(self._store), id)

    @classmethod
    def provider(
        cls, max_messages: int = 100, *, store: ChatMemoryStore | VersionedChatMemoryStore | None = None
    ) -> Callable[[Any], MessageWindowChatMemory]:
        """A memory provider for `Agent(memory=...)`: one window per memory id, all in one store.

        Its windows keep nothing of their own (the store holds the messages), so an agent makes one per
        invocation rather than keeping one per memory id it has served."""
        shared: Any = store if store is not None else InMemoryChatMemoryStore()
        return WindowProvider(cls, max_messages, shared)

    @property
    def id(self) -> Any:
        return self._id

    @property
    def store(self) -> Any:
        return self._store

    def exclusive(self) -> AbstractAsyncContextManager[None]:
        """Holds this memory id for the caller alone: a lock per store and memory id in this process and,
        for a store shared between processes, the store's lease (renewed while held). Re-entrant."""
        return self._exclusive(read=True)

    @asynccontextmanager
    async def _exclusive(self, *, read: bool) -> AsyncIterator[None]:
        """`exclusive()`; with `read`, a shared store reads the window in the step that takes the lease."""
        holds = _holds.get()
        held = holds.get(self._key)
        if held is not None:
            held.depth += 1
            try:
                yield
            finally:
                held.depth -= 1
            return
        async with _local_lock(self._key):
            store = self._store
            if not conforms(store, LeasingStore):
                with _holding(holds, self._key, _Hold(None, None)):
                    yield
                return
            window = self.max_messages
            async with store.lease(self._id, read=read and self._versioned, max_messages=window) as token:
                with _holding(holds, self._key, _Hold(token, window)):
                    yield

    async def messages(self) -> list[ChatMessage]:
        if not self._versioned:
            return await self._store.get_messages(self._id)  # type: ignore[no-any-return]
        hold = _holds.get().get(self._key)
        loaded = hold.take_preloaded(self.max_messages) if hold is not None else None
        if loaded is None:
            loaded = await self._store.load(self._id, max_messages=self.max_messages)
        if hold is not None:
            hold.version = loaded.version
        return _evict(loaded.messages, self.max_messages)

    async def add(self, messages: Sequence[ChatMessage]) -> None:
        await self._add(messages, final=False)

    async def add_final(self, messages: Sequence[ChatMessage]) -> None:
        """`add` for the last unit of an invocation (the runtime calls it for the answer): over a shared
        store it is appended and the lease given back in one step. Nothing may be added after it in the
        same hold."""
        await self._add(messages, final=True)

    async def _add(self, messages: Sequence[ChatMessage], *, final: bool) -> None:
        if not self._versioned:
            await self._replace(messages)
            return
        hold = _holds.get().get(self._key)
        if hold is None:  # outside an invocation: hold the id for this one write
            async with self._exclusive(read=False):
                await self._add(messages, final=True)
            return
        hold.check_writable(self._id)
        hold.preloaded = None
        if final and hold.lease is not None and hold.depth == 0:
            version = await hold.lease.append_and_release(messages, expected_version=hold.version)
            if version is not None:
                hold.version, hold.released = version, True
                return
        lease = None if hold.lease is None else hold.lease.token
        hold.version = await self._store.append(
            self._id, messages, expected_version=hold.version, lease=lease
        )

    async def _replace(self, messages: Sequence[ChatMessage]) -> None:
        current: list[ChatMessage] = await self._store.get_messages(self._id)
        for message in messages:
            if isinstance(message, SystemMessage):
                current = [m for m in current if not isinstance(m, SystemMessage)]
                current.insert(0, message)
            else:
                current.append(message)
        await self._store.update_messages(self._id, _evict(current, self.max_messages))

    async def clear(self) -> None:
        hold = _holds.get().get(self._key)
        if hold is None and self._versioned:
            async with self._exclusive(read=False):
                await self.clear()
            return
        if hold is not None:
            hold.check_writable(self._id)
            hold.preloaded = None
        await self._store.delete_messages(self._id)
        if hold is not None:
            hold.version = None

    def __repr__(self) -> str:
        return f"MessageWindowChatMemory(id={self._id!r}, max_messages={self.max_messages})"


class WindowProvider:
    """`MessageWindowChatMemory.provider(...)`: a window of `max_messages` per memory id over one store.

    Windows of the class itself hold no state of their own (messages live in the store; the lock and lease
    of a memory id are keyed by store and id), so `stateless` windows need not be kept between invocations:
    `Agent` makes one per invocation and so holds nothing per memory id. A subclass may keep state in its
    objects, so its windows are kept per id as any provider's are."""

    __slots__ = ("max_messages", "stateless", "store", "window")

    def __init__(self, window: type[MessageWindowChatMemory], max_messages: int, store: Any) -> None:
        self.window = window
        self.max_messages = max_messages
        self.store = store
        self.stateless = window is MessageWindowChatMemory

    def __call__(self, memory_id: Any) -> MessageWindowChatMemory:
        return self.window(self.max_messages, id=memory_id, store=self.store)

    def __repr__(self) -> str:
        return f"{self.window.__name__}.provider({self.max_messages}, store={self.store!r})"


def _evict(messages: list[ChatMessage], max_messages: int) -> list[ChatMessage]:
    """Drops whole units from the oldest until at most `max_messages` remain (the newest unit is kept).

    The kept window starts with a user message, as every provider accepts (Anthropic requires it): leading
    answers are dropped, or, when no user message is left, the one that started the kept exchange stays.
    """
    system = [m for m in messages if isinstance(m, SystemMessage)]
    units = _units([m for m in messages if not isinstance(m, SystemMessage)])
    count = len(system) + sum(len(u) for u in units)
    start = 0
    while start < len(units) - 1 and count > max_messages:
        count -= len(units[start])
        start += 1
    if not _is_user(units, start):
        later = next((i for i in range(start, len(units)) if _is_user(units, i)), None)
        earlier = next((i for i in range(start - 1, -1, -1) if _is_user(units, i)), None)
        if later is not None:
            start = later
        elif earlier is not None:
            units = [units[earlier], *units[start:]]
            start = 0
    return system + [m for unit in units[start:] for m in unit]


def _is_user(units: list[list[ChatMessage]], index: int) -> bool:
    return index < len(units) and isinstance(units[index][0], UserMessage)


def _units(messages: list[ChatMessage]) -> list[list[ChatMessage]]:
    """Splits messages into eviction units: a tool round is an AiMessage with calls plus its results."""
    units: list[list[ChatMessage]] = []
    for message in messages:
        if isinstance(message, ToolExecutionResultMessage):
            previous = units[-1] if units else None
            if previous and isinstance(previous[0], AiMessage) and previous[0].tool_execution_requests:
                previous.append(message)
            # A result with no call before it is an orphan: it is dropped, never sent.
            continue
        units.append([message])
    return units
