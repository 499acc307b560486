"""`conforms`: isinstance against a runtime-checkable Protocol, remembered per class, same answers."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from agentloop import InMemoryChatMemoryStore, MessageWindowChatMemory
from agentloop._conforms import _KEEP, _answers, conforms
from agentloop._memory._chat import ChatMemory, ExclusiveMemory, LeasingStore, VersionedChatMemoryStore


@runtime_checkable
class Closes(Protocol):
    def close(self) -> None: ...


class WithClose:
    def close(self) -> None:
        pass


class Without:
    pass


def test_answers_are_isinstance_s_and_kept_per_class() -> None:
    for value in (WithClose(), Without(), WithClose(), Without(), 3, "text"):
        assert conforms(value, Closes) is isinstance(value, Closes)
    assert _answers[(WithClose, Closes)] is True
    assert _answers[(Without, Closes)] is False


def test_the_memory_protocols_the_loop_asks_about() -> None:
    store = InMemoryChatMemoryStore()
    memory = MessageWindowChatMemory(10, store=store)
    for value, protocol in (
        (memory, ChatMemory),
        (memory, ExclusiveMemory),
        (store, VersionedChatMemoryStore),
        (store, LeasingStore),
        (lambda key: memory, ChatMemory),
    ):
        assert conforms(value, protocol) is isinstance(value, protocol)


def test_the_cache_is_bounded() -> None:
    for index in range(_KEEP + 10):
        conforms(type(f"Made{index}", (), {})(), Closes)
    assert len(_answers) <= _KEEP
