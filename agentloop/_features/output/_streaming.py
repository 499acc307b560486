"""Partial outputs while an answer streams: the output's JSON parsed as it grows.

Reading the parser's document and validating it as a partial output costs time in proportion to the output
(a Python `str` cannot grow in place: every partial of a growing field is a new copy), so a partial is not
built for every chunk. A value that begins or ends (a field, a list item) shows at once; a string that only
grew waits until the output grew by `FLOOR` characters or a share of its size (`SHARE`) since the last
partial, or `INTERVAL` seconds went by. So the cost per chunk stays the same from a few KB to a MB (issue
39), and a model streaming at reading speed still shows its progress at least every `INTERVAL`.
The final, validated output always comes last.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import (
    TYPE_CHECKING,
    Any,
)

from agentloop._partial_json import PartialJSON
from agentloop._runtime._hooks import NOT_FOUND
from agentloop._values._events import PartialOutput
from agentloop.models._base import ModelEvent, TextDelta, ToolCallDelta

if TYPE_CHECKING:
    from agentloop._features.output._answers import OutputRun

from agentloop._features.output._partial import PartialTracker

SHARE = 128
"""A partial is built once the output grew by 1/SHARE of its size since the last one was built."""

FLOOR = 64
"""... and by at least this many characters when only a string grew (a value that began or ended, a new
key or list item, always shows at once)."""

INTERVAL = 0.05
"""... or once this many seconds went by since then (a slow stream still shows its progress)."""


class Watch:
    """Model events passing by; the output's JSON (a tool call's arguments, or the text) is parsed as it
    streams and every partial value that grew is sent as a `PartialOutput`."""

    __slots__ = (
        "_built_at",
        "_events",
        "_grown",
        "_index",
        "_last",
        "_member",
        "_parser",
        "_seen",
        "_size",
        "_text",
        "_tools",
        "_tracker",
        "_typed",
        "attempt",
        "round",
    )

    def __init__(
        self,
        events: AsyncIterator[ModelEvent],
        run: OutputRun,
        round: int,
        typed: Callable[[Any], Awaitable[None]] | None,
        attempt: int,
    ) -> None:
        self._events = events
        self._typed = typed
        self.round = round
        self.attempt = attempt
        self._text = run.mode != "tool"  # the text is the output: not passed on
        schema = run.schema
        self._text = self._text and schema is not None
        self._tools = {m.tool_name: m for m in schema.members} if typed and schema is not None else {}
        self._member = schema.whole if self._text and typed and schema is not None else None
        self._tracker = PartialTracker(self._member) if self._member is not None else None
        self._index: int | None = None  # the output call being watched (tool mode)
        self._parser = PartialJSON()
        self._seen: dict[str, int] = {}  # the shape of the last partial sent (see `_feed`)
        self._last: Any = NOT_FOUND  # the last partial sent
        self._size = 0  # characters of the output's text so far
        self._grown = 0  # ... of which arrived since the last partial was built
        self._built_at = 0.0  # when (time.monotonic()) it was built

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> ModelEvent:
        while True:
            event = await self._events.__anext__()
            kind = type(event)
            if kind is TextDelta and self._text:
                if self._member is not None:
                    await self._feed(event.text)  # type: ignore[union-attr]
                continue
            if kind is ToolCallDelta and self._tools:
                delta: Any = event
                if self._index is None and delta.name in self._tools:
                    self._index = delta.index
                    self._member = self._tools[delta.name]
                    self._tracker = PartialTracker(self._member)
                if delta.index == self._index and delta.arguments:
                    await self._feed(delta.arguments)
            return event

    async def _feed(self, piece: str) -> None:
        parser = self._parser
        size = len(piece)
        self._size += size
        self._grown += size
        if not parser.feed(piece) or parser.done:  # the whole value comes with the final result
            return
        now = time.monotonic()
        if (
            not parser.reshaped
            and self._grown < max(self._size / SHARE, FLOOR)
            and now - self._built_at < INTERVAL
        ):
            return  # a string grew, not enough yet: the next chunks bring it along
        self._grown, self._built_at = 0, now
        tracker = self._tracker
        assert tracker is not None and self._typed is not None
        partial = tracker.update(parser.value)
        if partial is None:
            return
        value, used = partial
        # Its fields, and for a list its length: a partial that would have fewer than the last one waits.
        shape = {key: len(item) if isinstance(item, list) else -1 for key, item in used.items()}
        seen = self._seen
        if any(shape.get(key, -2) < size for key, size in seen.items()) or _same(value, self._last):
            return
        self._seen, self._last = shape, value
        await self._typed(PartialOutput(value, self.round, self.attempt))


def _same(value: Any, last: Any) -> bool:
    """Whether a partial equals the last one sent; cheap: a list field is compared by length and last item
    (the items before it were whole, and stay as they were)."""
    import pydantic

    if type(value) is not type(last):
        return False
    if isinstance(value, pydantic.BaseModel):
        value, last = value.__dict__, last.__dict__
    if not isinstance(value, dict):
        return _same_item(value, last)
    if value.keys() != last.keys():
        return False
    return all(_same_item(item, last[key]) for key, item in value.items())


def _same_item(item: Any, last: Any) -> bool:
    if isinstance(item, list) and isinstance(last, list):
        return len(item) == len(last) and (not item or item[-1] == last[-1])
    return bool(item == last)
