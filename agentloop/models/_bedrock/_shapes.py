"""What Bedrock sends back, decoded: msgspec shapes of Converse answers and ConverseStream events.

Only the fields agentloop uses are declared; unknown fields are ignored, so new API fields break nothing.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "PROVIDER",
    "Block",
    "Reasoning",
    "ReasoningText",
    "ToolUse",
    "Usage",
    "block_decoder",
    "block_delta_decoder",
    "block_start_decoder",
    "block_stop_decoder",
    "converse_decoder",
    "delta_decoder",
    "encode",
    "exception_decoder",
    "message_stop_decoder",
    "metadata_decoder",
    "start_decoder",
]

PROVIDER = "bedrock"
"""The provider name in errors, traces and prices, and the key of `AiMessage.provider_state`."""


class Usage(msgspec.Struct, rename="camel", gc=False):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_write_input_tokens: int | None = None


class ToolUse(msgspec.Struct, rename="camel"):
    tool_use_id: str | None = None
    name: str = ""
    input: Any = None


class ReasoningText(msgspec.Struct):
    text: str = ""
    signature: str | None = None


class Reasoning(msgspec.Struct, rename="camel"):
    reasoning_text: ReasoningText | None = None
    redacted_content: str | None = None


class Block(msgspec.Struct, rename="camel"):
    text: str | None = None
    tool_use: ToolUse | None = None
    reasoning_content: Reasoning | None = None


class _Message(msgspec.Struct):
    content: list[msgspec.Raw] = []  # each read by `block_decoder`


class _Output(msgspec.Struct):
    message: _Message | None = None


class _Converse(msgspec.Struct, rename="camel"):
    output: _Output | None = None
    stop_reason: str | None = None
    usage: Usage | None = None


class _ToolInput(msgspec.Struct):
    input: str = ""


class _ReasoningDelta(msgspec.Struct, rename="camel"):
    text: str | None = None
    signature: str | None = None
    redacted_content: str | None = None


class _Delta(msgspec.Struct, rename="camel"):
    text: str | None = None
    tool_use: _ToolInput | None = None
    reasoning_content: _ReasoningDelta | None = None


class _BlockDelta(msgspec.Struct, rename="camel"):
    delta: msgspec.Raw  # read by `delta_decoder`
    content_block_index: int = 0


class _Start(msgspec.Struct, rename="camel"):
    tool_use: ToolUse | None = None


class _BlockStart(msgspec.Struct, rename="camel"):
    start: msgspec.Raw  # read by `start_decoder`
    content_block_index: int = 0


class _BlockStop(msgspec.Struct, rename="camel"):
    content_block_index: int = 0


class _MessageStop(msgspec.Struct, rename="camel"):
    stop_reason: str | None = None


class _Metadata(msgspec.Struct):
    usage: Usage | None = None


class _Exception(msgspec.Struct):
    message: str | None = None
    Message: str | None = None  # some AWS errors capitalise it


converse_decoder = msgspec.json.Decoder(_Converse)
block_decoder = msgspec.json.Decoder(Block)
delta_decoder = msgspec.json.Decoder(_Delta)
start_decoder = msgspec.json.Decoder(_Start)
block_delta_decoder = msgspec.json.Decoder(_BlockDelta)
block_start_decoder = msgspec.json.Decoder(_BlockStart)
block_stop_decoder = msgspec.json.Decoder(_BlockStop)
message_stop_decoder = msgspec.json.Decoder(_MessageStop)
metadata_decoder = msgspec.json.Decoder(_Metadata)
exception_decoder = msgspec.json.Decoder(_Exception)
encode = msgspec.json.Encoder().encode
