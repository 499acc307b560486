"""What the runtime hands to a tool besides the model's arguments: `ToolContext` and `ToolMemoryId`.

Both are injected: they never appear in a tool's JSON schema and the model can never set them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import anyio
import anyio.from_thread
import msgspec

from ._messages import ToolExecutionRequest

__all__ = ["ToolContext", "ToolMemoryId"]

_NO_CONTEXT: Mapping[str, Any] = MappingProxyType({})


class ToolMemoryId:
    """Marks a parameter that receives the invocation's memory id: `user: Annotated[str, ToolMemoryId]`.

    The class itself or an instance (`ToolMemoryId()`) both work as the marker.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "ToolMemoryId()"


class ToolContext(msgspec.Struct, frozen=True):
    """Everything a tool may want to know about the call it serves; declare `ctx: ToolContext` to get it.

    `context` is the mapping given to `chat(..., context=...)` (look keys up with `ctx["tenant"]` or
    `ctx.get("tenant")`). `deadline` is the invocation's absolute deadline on the `anyio.current_time()`
    clock, or None; `remaining_time()` turns it into seconds left. A frozen msgspec Struct: one is built
    per call, so it must be cheap.
    """

    invocation_id: str
    memory_id: Any = None
    context: Mapping[str, Any] = _NO_CONTEXT
    request: ToolExecutionRequest | None = None
    round: int = 0
    deadline: float | None = None

    def remaining_time(self) -> float | None:
        """Seconds left before the invocation's deadline (negative once passed), None without a deadline.

        Works from async tools and from sync tools running in a worker thread.
        """
        if self.deadline is None:
            return None
        return self.deadline - _current_time()

    def get(self, key: str, default: Any = None) -> Any:
        """`context[key]`, or `default` when the key is absent."""
        return self.context.get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self.context[key]

    def __contains__(self, key: object) -> bool:
        return key in self.context


def new_invocation_id() -> str:
    """The id of an invocation nobody named (`Agent(id_factory=...)` names them otherwise): a random UUID
    as 32 hex digits, unique across processes, so paused rounds and durable records never collide. The one
    scheme of the agent's loop and of `execute_tool_calls`."""
    return uuid.uuid4().hex


def _current_time() -> float:
    try:
        return anyio.current_time()
    except RuntimeError:
        # A sync tool runs in a worker thread, which has no event loop: ask the loop that started it.
        return anyio.from_thread.run_sync(anyio.current_time)
