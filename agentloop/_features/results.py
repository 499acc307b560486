"""Long tool results kept aside: `Agent(tool_result_limit=N)` / `@tool(result_limit=N)` (tokens).

A result longer than its limit reaches the model as its beginning plus a note naming an id; the whole text
stays on the agent (this process, the newest `CAPACITY` results) and the model reads on with the
`read_tool_result(id, offset, limit)` tool the agent then offers.
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from collections.abc import Iterable

import msgspec

from .._runtime._seam import Middleware, NextToolCall, ToolCall
from .._tools._decorator import tool
from .._tools._tool import Tool
from .._tools._toolset import resolve_tools
from .._values._records import ToolExecution

__all__ = ["READER_NAME", "ResultShelf"]

READER_NAME = "read_tool_result"
CAPACITY = 256
_CHARS_PER_TOKEN = 4


class ResultShelf(Middleware):
    """The agent's kept-aside results and the `read_tool_result` tool that reads them."""

    def __init__(self, default_limit: int | None) -> None:
        self.default_limit = default_limit
        self._kept: OrderedDict[str, str] = OrderedDict()

        @tool(name=READER_NAME)
        def read_tool_result(id: str, offset: int = 0, limit: int = 2000) -> str:
            """Reads more of a tool result that was too long to show whole: `id` from the note at the end of
            the shown part, `offset` the first character to read, `limit` how many characters."""
            return self.read(id, offset, limit)

        self.reader: Tool = resolve_tools([read_tool_result]).get(READER_NAME)  # type: ignore[assignment]

    def applies(self, tools: Iterable[Tool]) -> bool:
        """True when some result may be kept aside: a default limit, or a tool with its own."""
        return self.default_limit is not None or any(t.result_limit is not None for t in tools)

    async def wrap_tool_call(self, call: ToolCall, call_next: NextToolCall) -> ToolExecution:
        execution = await call_next(call)
        limit = call.tool.result_limit if call.tool is not None else None
        limit = self.default_limit if limit is None else limit
        text = execution.result
        if limit is None or execution.is_error or call.request.name == READER_NAME:
            return execution
        shown = limit * _CHARS_PER_TOKEN
        if math.ceil(len(text) / _CHARS_PER_TOKEN) <= limit:
            return execution
        key = f"tr_{os.urandom(6).hex()}"
        self._kept[key] = text
        while len(self._kept) > CAPACITY:
            self._kept.popitem(last=False)
        note = (
            f"\n[This result is {len(text)} characters long; the first {shown} are shown. Read on with "
            f'{READER_NAME}(id="{key}", offset={shown}, limit={shown}).]'
        )
        return msgspec.structs.replace(execution, result=text[:shown] + note)

    def read(self, key: str, offset: int, limit: int) -> str:
        """`limit` characters of the kept result `key` from `offset`, with a note when more follows."""
        text = self._kept.get(key)
        if text is None:
            raise ValueError(
                f"no kept result has the id {key!r}: results are kept in the process that ran the tool, the "
                f"newest {CAPACITY} of them; call the tool again"
            )
        if offset < 0 or limit < 1:
            raise ValueError("offset must be >= 0 and limit >= 1")
        self._kept.move_to_end(key)
        part = text[offset : offset + limit]
        end = offset + len(part)
        if end < len(text):
            part += f"\n[characters {offset}-{end} of {len(text)}; more with offset={end}.]"
        return part
