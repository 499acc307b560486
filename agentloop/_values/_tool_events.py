"""What a running tool reports before it finishes: its progress and, for a streaming tool, its values.

Apart from the other events because `ToolContext` (which sends them) sits below the events module.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["ToolOutputDelta", "ToolProgress"]


class ToolProgress(msgspec.Struct, frozen=True):
    """A running tool reported its progress (`await ctx.report_progress(progress, total, message)`).

    `progress` grows with each report; `total` is what it counts up to when the tool knows (None otherwise).
    Delivered only while the invocation streams; with `chat()` a report goes nowhere (or to the MCP client
    when the tool is served over MCP)."""

    call_id: str
    tool_name: str
    progress: float
    total: float | None = None
    message: str | None = None


class ToolOutputDelta(msgspec.Struct, frozen=True):
    """A value a streaming tool (an `async def` generator) yielded while it runs; its last one is its
    result, what the model reads (and what `ToolExecuted` carries)."""

    call_id: str
    tool_name: str
    value: Any
