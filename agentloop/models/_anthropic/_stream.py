"""The Messages API event stream read into agentloop events, and into the content a non-streaming
call would have returned."""

from __future__ import annotations

import msgspec

from agentloop._values._messages import (
    ToolExecutionRequest,
)

from .._base import (
    ModelEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallComplete,
    ToolCallDelta,
)
from .._unknown import ignore_unknown, kind_of
from ._shapes import (
    DELTAS,
    EVENTS,
    UNUSED_DELTAS,
    Block,
    Message,
    Usage,
    block_delta_decoder,
    block_start_decoder,
    block_stop_decoder,
    delta_decoder,
    known_blocks,
    message_delta_decoder,
    start_decoder,
)


class _Stop:
    """`Assembler.feed`'s answer to message_stop."""


class _Failed:
    """`Assembler.feed`'s answer to an error event."""


STOP = _Stop()
ERROR = _Failed()


class _Open(msgspec.Struct, gc=False):
    """One content block while it streams: the block as it started, and the pieces that followed."""

    block: Block
    parts: list[str]
    call: int = -1  # position among the response's tool calls, for tool_use blocks


class Assembler:
    """Turns one response's stream events into agentloop events (one at most per stream event) and, at the
    end, into the content blocks and message a non-streaming call would have returned."""

    __slots__ = ("_calls", "_open", "message")

    def __init__(self) -> None:
        self.message = Message(usage=Usage())
        self._open: dict[int, _Open] = {}
        self._calls = 0

    def feed(self, name: str, data: str) -> ModelEvent | _Stop | _Failed | None:
        """The agentloop event for one stream event, if any."""
        if name == "content_block_delta":
            event = block_delta_decoder.decode(data)
            current = self._open.get(event.index)
            if current is None:
                return None
            kind = kind_of(event.delta)
            if kind not in DELTAS:
                if kind not in UNUSED_DELTAS:
                    ignore_unknown("anthropic", "a content block delta", kind)
                return None
            delta = delta_decoder.decode(event.delta)
            if kind == "text_delta":
                if delta.text:
                    current.parts.append(delta.text)
                    return TextDelta(delta.text)
            elif kind == "input_json_delta":
                if delta.partial_json:  # a tool call's arguments, or a tool search's query
                    current.parts.append(delta.partial_json)
                    if current.call >= 0:
                        return ToolCallDelta(current.call, None, None, delta.partial_json)
            elif kind == "thinking_delta":
                if delta.thinking:
                    current.parts.append(delta.thinking)
                    return ThinkingDelta(delta.thinking)
            elif kind == "signature_delta":
                current.block.signature = (current.block.signature or "") + (delta.signature or "")
            return None  # citations and delta types added after this was written
        if name == "content_block_start":
            start = block_start_decoder.decode(data)
            known = known_blocks((start.content_block,))
            if not known:
                return None
            block = known[0]
            current = _Open(block, [])
            self._open[start.index] = current
            if block.type in ("tool_use", "server_tool_use"):
                initial = bytes(block.input) if block.input else b""
                if initial.strip() not in (b"", b"{}"):  # arguments given whole at the start
                    current.parts.append(initial.decode())
            if block.type == "tool_use":
                current.call = self._calls
                self._calls += 1
                return ToolCallDelta(current.call, block.id, block.name, "")
            if block.type == "text" and block.text:
                current.parts.append(block.text)
                return TextDelta(block.text)
            if block.type == "thinking" and block.thinking:
                current.parts.append(block.thinking)
                return ThinkingDelta(block.thinking)
            return None
        if name == "content_block_stop":
            current = self._open.get(block_stop_decoder.decode(data).index)
            if current is None or current.call < 0:
                return None
            block = current.block
            return ToolCallComplete(
                current.call, ToolExecutionRequest(block.id, block.name or "", _joined(current))
            )
        if name == "message_start":
            started = start_decoder.decode(data).message
            self.message = Message(started.id, started.model, [], None, started.usage or Usage())
            return None
        if name == "message_delta":
            update = message_delta_decoder.decode(data)
            if update.delta.stop_reason is not None:
                self.message.stop_reason = update.delta.stop_reason
            if update.usage is not None:
                _merge_usage(self.message, update.usage)
            return None
        if name == "message_stop":
            return STOP
        if name == "error":
            return ERROR
        if name not in EVENTS:  # event types added after this was written
            ignore_unknown("anthropic", "a streamed event", name)
        return None

    def blocks(self) -> list[Block]:
        """The content blocks received, in order, completed with what their deltas carried."""
        result = []
        for _, current in sorted(self._open.items()):
            block = current.block
            if block.type == "text":
                block.text = "".join(current.parts)
            elif block.type == "thinking":
                block.thinking = "".join(current.parts)
            elif block.type in ("tool_use", "server_tool_use"):
                block.input = msgspec.Raw(_joined(current).encode())
            result.append(block)
        return result


def _joined(current: _Open) -> str:
    """A tool_use block's arguments: its pieces joined ({} when it streamed none, as for a tool without
    parameters)."""
    return "".join(current.parts) or "{}"


def _merge_usage(message: Message, update: Usage) -> None:
    usage = message.usage or Usage()
    message.usage = Usage(
        update.input_tokens if update.input_tokens is not None else usage.input_tokens,
        update.output_tokens if update.output_tokens is not None else usage.output_tokens,
        update.cache_creation_input_tokens
        if update.cache_creation_input_tokens is not None
        else usage.cache_creation_input_tokens,
        update.cache_read_input_tokens
        if update.cache_read_input_tokens is not None
        else usage.cache_read_input_tokens,
    )
