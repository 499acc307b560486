"""Persistent chat memory stores: `SQLiteChatMemoryStore` (stdlib, one machine) and `RedisChatMemoryStore`
(extra `agentloop-runtime[redis]`, many machines). Both plug into
`MessageWindowChatMemory.provider(store=...)`.

Importing this package does not import `redis`; the Redis store loads it when constructed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._errors import ChatMemoryConflictError, ChatMemoryStoreError
from ._sqlite import SQLiteChatMemoryStore

if TYPE_CHECKING:
    from ._redis import RedisChatMemoryStore

__all__ = ["ChatMemoryConflictError", "ChatMemoryStoreError", "RedisChatMemoryStore", "SQLiteChatMemoryStore"]


def __getattr__(name: str) -> Any:
    if name == "RedisChatMemoryStore":
        from ._redis import RedisChatMemoryStore

        return RedisChatMemoryStore
    raise AttributeError(f"module 'agentloop.stores' has no attribute {name!r}")
