"""Chat memory: the conversation an agent keeps per memory id, always valid to send to a provider.

A tool round (the AiMessage that asked for tools and every result) is added as one unit and evicted as one
unit, so the messages handed to a provider never hold a tool call without its result or the reverse.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from ._messages import AiMessage, ChatMessage, SystemMessage, ToolExecutionResultMessage, UserMessage

__all__ = [
    "ChatMemory",
    "ChatMemoryStore",
    "InMemoryChatMemoryStore",
    "MessageWindowChatMemory",
    "PendingApprovalStore",
]


@runtime_checkable
class ChatMemoryStore(Protocol):
    """Where memories keep their messages (in process now; databases later). Keyed by memory id."""

    async def get_messages(self, memory_id: Any) -> list[ChatMessage]:
        """The stored messages of `memory_id` (empty when none)."""
        ...

    async def update_messages(self, memory_id: Any, messages: list[ChatMessage]) -> None:
        """Replaces the stored messages of `memory_id`."""
        ...

    async def delete_messages(self, memory_id: Any) -> None:
        """Forgets `memory_id`."""
        ...


@runtime_checkable
class PendingApprovalStore(Protocol):
    """An optional capability of a `ChatMemoryStore`: it records the rounds that wait for a person's approval.

    The runtime saves a paused round's check record (an opaque string) when it pauses, and takes it back,
    atomically and once, when a resume starts: so in every process sharing the store a round is resumed at
    most once, and only with the names, arguments and results it paused with.
    """

    async def save_pending_approval(self, memory_id: Any, pending_id: str, record: str) -> None:
        """Records `record` under (`memory_id`, `pending_id`)."""
        ...

    async def take_pending_approval(self, memory_id: Any, pending_id: str, record: str) -> str | None:
        """Atomically: returns the record stored under the key (None when there is none) and deletes it when
        it equals `record`; a different record is left in place."""
        ...


class InMemoryChatMemoryStore:
    """A `ChatMemoryStore` in a dict: fast, lost when the process ends. Records paused approval rounds too
    (`PendingApprovalStore`), for this process only."""

    __slots__ = ("_messages", "_pending")

    def __init__(self) -> None:
        self._messages: dict[Any, list[ChatMessage]] = {}
        self._pending: dict[tuple[Any, str], str] = {}

    async def get_messages(self, memory_id: Any) -> list[ChatMessage]:
        return list(self._messages.get(memory_id, ()))

    async def update_messages(self, memory_id: Any, messages: list[ChatMessage]) -> None:
        self._messages[memory_id] = list(messages)

    async def delete_messages(self, memory_id: Any) -> None:
        self._messages.pop(memory_id, None)

    async def save_pending_approval(self, memory_id: Any, pending_id: str, record: str) -> None:
        self._pending[memory_id, pending_id] = record

    async def take_pending_approval(self, memory_id: Any, pending_id: str, record: str) -> str | None:
        stored = self._pending.get((memory_id, pending_id))
        if stored == record:
            del self._pending[memory_id, pending_id]
        return stored

    def __repr__(self) -> str:
        return f"InMemoryChatMemoryStore(memory_ids={len(self._messages)})"


@runtime_checkable
class ChatMemory(Protocol):
    """The conversation of one memory id. `add` takes one unit (a user message, a tool round, an answer)."""

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


class MessageWindowChatMemory:
    """Keeps the most recent `max_messages` messages, evicting whole units from the oldest.

    A system message is never evicted (a newer one replaces it). A tool round is evicted as a unit, and the
    window starts with a user message, so it is valid for every provider. When the newest exchange alone is
    longer than `max_messages`, it is kept whole (with the user message that started it) rather than split.
    """

    __slots__ = ("_id", "_store", "max_messages")

    def __init__(
        self, max_messages: int = 100, *, id: Any = "default", store: ChatMemoryStore | None = None
    ) -> None:
        if max_messages < 1:
            raise ValueError(f"max_messages must be at least 1, got {max_messages}")
        self.max_messages = max_messages
        self._id = id
        self._store: ChatMemoryStore = store if store is not None else InMemoryChatMemoryStore()

    @classmethod
    def provider(
        cls, max_messages: int = 100, *, store: ChatMemoryStore | None = None
    ) -> Callable[[Any], MessageWindowChatMemory]:
        """A memory provider for `Agent(memory=...)`: one window per memory id, all in one store."""
        shared = store if store is not None else InMemoryChatMemoryStore()
        return lambda memory_id: cls(max_messages, id=memory_id, store=shared)

    @property
    def id(self) -> Any:
        return self._id

    @property
    def store(self) -> ChatMemoryStore:
        return self._store

    async def messages(self) -> list[ChatMessage]:
        return await self._store.get_messages(self._id)

    async def add(self, messages: Sequence[ChatMessage]) -> None:
        current = await self._store.get_messages(self._id)
        for message in messages:
            if isinstance(message, SystemMessage):
                current = [m for m in current if not isinstance(m, SystemMessage)]
                current.insert(0, message)
            else:
                current.append(message)
        await self._store.update_messages(self._id, _evict(current, self.max_messages))

    async def clear(self) -> None:
        await self._store.delete_messages(self._id)

    def __repr__(self) -> str:
        return f"MessageWindowChatMemory(id={self._id!r}, max_messages={self.max_messages})"


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
