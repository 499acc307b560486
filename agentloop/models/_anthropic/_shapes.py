"""The msgspec shapes of what the Messages API answers (only what is used; unknown fields and block
types are ignored), and their decoders."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from .._unknown import known_items

PROVIDER = "anthropic"


# -- wire shapes (decoding only what is used; unknown fields and block types are ignored) --------------------


class Usage(msgspec.Struct, gc=False):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class Block(msgspec.Struct):
    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: msgspec.Raw = msgspec.Raw()
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None
    tool_use_id: str | None = None  # tool_search_tool_result
    content: Any = None  # tool_search_tool_result: kept as it came, to be sent back


class Message(msgspec.Struct):
    id: str | None = None
    model: str | None = None
    content: list[msgspec.Raw] = []  # the blocks agentloop knows are read by `known_blocks`
    stop_reason: str | None = None
    usage: Usage | None = None


class _Count(msgspec.Struct, gc=False):
    input_tokens: int


class _MessageStart(msgspec.Struct):
    message: Message


class _BlockStart(msgspec.Struct):
    index: int
    content_block: msgspec.Raw  # read by `known_blocks` when its kind is known


class _Delta(msgspec.Struct, gc=False):
    type: str
    text: str | None = None
    partial_json: str | None = None
    thinking: str | None = None
    signature: str | None = None


class _BlockDelta(msgspec.Struct, gc=False):
    index: int
    delta: msgspec.Raw  # read as a `_Delta` when its kind is known


class _BlockStop(msgspec.Struct, gc=False):
    index: int


class _MessageDeltaBody(msgspec.Struct, gc=False):
    stop_reason: str | None = None


class _MessageDelta(msgspec.Struct, gc=False):
    delta: _MessageDeltaBody = msgspec.field(default_factory=_MessageDeltaBody)
    usage: Usage | None = None


class _Typed(msgspec.Struct, gc=False):
    type: str = ""


message_decoder = msgspec.json.Decoder(Message)
count_decoder = msgspec.json.Decoder(_Count)
start_decoder = msgspec.json.Decoder(_MessageStart)
block_start_decoder = msgspec.json.Decoder(_BlockStart)
block_delta_decoder = msgspec.json.Decoder(_BlockDelta)
block_stop_decoder = msgspec.json.Decoder(_BlockStop)
message_delta_decoder = msgspec.json.Decoder(_MessageDelta)
typed_decoder = msgspec.json.Decoder(_Typed)
_block_decoder = msgspec.json.Decoder(Block)
delta_decoder = msgspec.json.Decoder(_Delta)
_BLOCKS = dict.fromkeys(
    ("text", "tool_use", "thinking", "redacted_thinking", "server_tool_use", "tool_search_tool_result"),
    _block_decoder,
)
DELTAS = dict.fromkeys(("text_delta", "input_json_delta", "thinking_delta", "signature_delta"), delta_decoder)
UNUSED_DELTAS = frozenset({"citations_delta"})  # documented; agentloop keeps no citations
EVENTS = frozenset(
    {"message_start", "message_delta", "message_stop", "content_block_start", "content_block_delta"}
    | {"content_block_stop", "error", "ping"}
)


def known_blocks(raws: Sequence[msgspec.Raw]) -> list[Block]:
    """The content blocks of a kind agentloop knows; others (server tools' blocks, newer kinds) skipped."""
    return known_items(raws, _BLOCKS, "anthropic", "a content block")


# -- the model -----------------------------------------------------------------------------------------------
