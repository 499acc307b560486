"""The msgspec shapes of what Chat Completions answers (unknown fields are ignored), and their decoders."""

from __future__ import annotations

from typing import Any, Union

import msgspec


class _Function(msgspec.Struct, gc=False):
    name: str | None = None
    arguments: Union[str, dict[str, Any], None] = None


class ToolCall(msgspec.Struct, gc=False):
    index: int | None = None
    id: str | None = None
    type: str | None = None  # "function"; others ("custom", newer kinds) are skipped
    function: _Function | None = None


class _Part(msgspec.Struct, gc=False):
    type: str | None = None
    text: str | None = None


class _Message(msgspec.Struct, gc=False):
    content: Union[str, list[msgspec.Raw], None] = None  # parts: the text ones are read by `_text_parts`
    refusal: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCall] | None = None


class _Choice(msgspec.Struct, gc=False):
    index: int = 0
    message: _Message | None = None
    finish_reason: str | None = None


class _PromptDetails(msgspec.Struct, gc=False):
    cached_tokens: int | None = None


class _CompletionDetails(msgspec.Struct, gc=False):
    reasoning_tokens: int | None = None


class Usage(msgspec.Struct, gc=False):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None


class _Completion(msgspec.Struct, gc=False):
    id: str | None = None
    model: str | None = None
    choices: list[_Choice] | None = None
    usage: Usage | None = None
    error: Any = None


class _Delta(msgspec.Struct, gc=False):
    content: str | None = None
    refusal: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCall] | None = None


class _ChunkChoice(msgspec.Struct, gc=False):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None


class Chunk(msgspec.Struct, gc=False):
    id: str | None = None
    model: str | None = None
    choices: list[_ChunkChoice] | None = None
    usage: Usage | None = None
    error: Any = None


IDLE_CHUNK = Chunk()
IDLE_CHOICE = _ChunkChoice()
"""What the stream reader's variables hold between two reads instead of the last chunk (never changed)."""

_PART = msgspec.json.Decoder(_Part)
TEXT_PARTS = {"text": _PART, "": _PART}  # servers that give parts no type mean text
COMPLETION = msgspec.json.Decoder(_Completion)
CHUNK = msgspec.json.Decoder(Chunk)
encode_json = msgspec.json.Encoder().encode
