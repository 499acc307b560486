"""Where paused rounds are recorded: the memory store when it keeps them, else this process."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Protocol, runtime_checkable

import anyio
import msgspec

from agentloop._conforms import conforms
from agentloop._memory._chat import ChatMemory, PendingApprovalStore
from agentloop._values._errors import (
    ApprovalError,
)
from agentloop._values._pending import Check, PendingApproval, check_of, compare_checks

# -- where paused rounds are recorded ----------------------------------------------------------------------


class _ProcessRecords:
    """Paused rounds of agents whose memory has no `PendingApprovalStore`: recorded in this process only.

    It remembers the last `LIMIT` paused and `LIMIT` resumed rounds. A round is resumed here only if it
    paused here: a pending id this process never issued (one paused in another process, forgotten, or a
    forgery with a made-up id and recomputed digests) is refused, and an issued one is taken once.
    """

    LIMIT = 10_000

    def __init__(self) -> None:
        self._records: OrderedDict[str, str] = OrderedDict()
        self._taken: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def save(self, pending_id: str, record: str) -> None:
        with self._lock:
            self._records[pending_id] = record
            if len(self._records) > self.LIMIT:
                self._records.popitem(last=False)

    def take(self, pending_id: str, record: str) -> tuple[str | None, bool]:
        """(the record stored, None if this process did not issue the id; whether it was already taken).
        Takes the round when its record matches."""
        with self._lock:
            if pending_id in self._taken:
                return None, True
            stored = self._records.get(pending_id)
            if stored == record:
                del self._records[pending_id]
                self._taken[pending_id] = None
                if len(self._taken) > self.LIMIT:
                    self._taken.popitem(last=False)
            return stored, False


_process_records = _ProcessRecords()


@runtime_checkable
class StoreBackedMemory(Protocol):
    """A memory kept in a store (a `MessageWindowChatMemory`): its paused rounds go to that store when the
    store is a `PendingApprovalStore`."""

    @property
    def store(self) -> Any: ...


def _store_of(memory: object) -> tuple[PendingApprovalStore | None, Any]:
    """The store that records paused rounds for `memory` (the memory itself or its `store`), and its key
    (the memory's id; None: the paused round's memory id)."""
    if memory is None:
        return None, None
    store: object = memory
    if not conforms(store, PendingApprovalStore):
        store = memory.store if conforms(memory, StoreBackedMemory) else None
        if store is None or not conforms(store, PendingApprovalStore):
            return None, None
    return store, memory.id if conforms(memory, ChatMemory) else None


async def record_pending(memory: object, pending: PendingApproval) -> None:
    store, key = _store_of(memory)
    if store is None:
        _process_records.save(pending.id, pending.record)
        return
    with anyio.CancelScope(shield=True):  # a cancelled pause must not leave a round unrecorded
        await store.save_pending_approval(
            key if key is not None else pending.memory_id, pending.id, pending.record
        )


async def claim_pending(memory: object, pending: PendingApproval) -> None:
    """Takes the paused round, once; raises when it was taken before or its record differs."""
    record = pending.record
    store, key = _store_of(memory)
    if store is None:
        stored, taken = _process_records.take(pending.id, record)
        if taken:
            raise ApprovalError(
                f"Paused round {pending.id} was already resumed; nothing ran", pending_id=pending.id
            )
        if stored is None:
            raise ApprovalError(
                f"Paused round {pending.id} did not pause in this process (or was forgotten, after "
                f"{_ProcessRecords.LIMIT} later pauses), and memory id {pending.memory_id!r} has no memory "
                "store that records paused rounds, so nothing vouches for this state; nothing ran. To resume "
                "in another process, give the agent a memory whose store records paused rounds (a "
                "SQLiteChatMemoryStore or RedisChatMemoryStore shared by the processes).",
                pending_id=pending.id,
            )
        where = "this process"
    else:
        with anyio.CancelScope(shield=True):  # taken or not, never half
            stored = await store.take_pending_approval(
                key if key is not None else pending.memory_id, pending.id, record
            )
        if stored is None:
            raise ApprovalError(
                f"Paused round {pending.id} is not recorded in the memory store of memory id "
                f"{pending.memory_id!r}: it was already resumed, its memory was deleted, or it paused with "
                "another store (an in-process store is not shared between processes); nothing ran",
                pending_id=pending.id,
            )
        where = "the memory store"
    if stored is not None and stored != record:
        try:
            found: Check | None = msgspec.json.decode(stored, type=Check)
        except msgspec.DecodeError:
            found = None
        try:
            compare_checks(pending, pending._state.check or check_of(pending._state), found)
        except ApprovalError as error:
            raise ApprovalError(
                f"{error.message} (checked against the record in {where})",
                call_id=error.call_id,
                pending_id=pending.id,
            ) from None
