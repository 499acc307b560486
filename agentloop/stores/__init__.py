"""Persistent chat memory stores: `SQLiteChatMemoryStore` (stdlib, one machine) and `RedisChatMemoryStore`
(extra `agentloop-runtime[redis]`, many machines). Both plug into
`MessageWindowChatMemory.provider(store=...)`.

`encode(obj, kind=None)` / `decode(data, kind=None)` write and read agentloop's storage format (messages,
requests, responses, tool specifications and executions in a versioned envelope; docs/memory.md), with
`CodecError` for data they cannot read and `RecordedToolError` for a stored tool error.

Importing this package does not import `redis`; the Redis store loads it when constructed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import ChatMemoryConflictError, ChatMemoryStoreError, CodecError, RecordedToolError, decode, encode
from .._public import publish, publish_one
from ._sqlite import SQLiteChatMemoryStore

if TYPE_CHECKING:
    from ._redis import RedisChatMemoryStore

__all__ = [
    "ChatMemoryConflictError",
    "ChatMemoryStoreError",
    "CodecError",
    "RecordedToolError",
    "RedisChatMemoryStore",
    "SQLiteChatMemoryStore",
    "decode",
    "encode",
]


publish(globals(), __all__, __name__)


def __getattr__(name: str) -> Any:
    if name == "RedisChatMemoryStore":
        from ._redis import RedisChatMemoryStore

        return publish_one(RedisChatMemoryStore, __name__)
    from .._hints import missing_name

    raise missing_name(__name__, name)
