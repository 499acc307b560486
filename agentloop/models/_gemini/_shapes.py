"""What the Gemini API sends back, decoded: the msgspec shape of a `GenerateContentResponse` (one answer of
`generateContent`, or one chunk of `streamGenerateContent`).

Only the fields agentloop uses are declared; unknown fields are ignored, so new API fields break nothing.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["PROVIDER", "Chunk", "Part", "PromptFeedback", "UsageMetadata", "chunk_decoder", "part_decoder"]

PROVIDER = "gemini"
"""The provider name in errors, traces and prices, and the key of `AiMessage.provider_state`."""


class _FunctionCall(msgspec.Struct):
    name: str = ""
    args: msgspec.Raw = msgspec.Raw()
    id: str | None = None


class Part(msgspec.Struct, rename="camel"):
    text: str | None = None
    thought: bool = False
    thought_signature: str | None = None
    function_call: _FunctionCall | None = None


class _Content(msgspec.Struct):
    parts: list[msgspec.Raw] = []  # each read by `part_decoder`
    role: str | None = None


class _Candidate(msgspec.Struct, rename="camel"):
    content: _Content | None = None
    finish_reason: str | None = None
    finish_message: str | None = None
    index: int = 0


class UsageMetadata(msgspec.Struct, rename="camel", gc=False):
    prompt_token_count: int | None = None
    candidates_token_count: int | None = None
    cached_content_token_count: int | None = None
    thoughts_token_count: int | None = None
    tool_use_prompt_token_count: int | None = None
    total_token_count: int | None = None


class PromptFeedback(msgspec.Struct, rename="camel"):
    block_reason: str | None = None
    block_reason_message: str | None = None


class Chunk(msgspec.Struct, rename="camel"):
    candidates: list[_Candidate] = []
    usage_metadata: UsageMetadata | None = None
    prompt_feedback: PromptFeedback | None = None
    model_version: str | None = None
    response_id: str | None = None
    error: Any = None


chunk_decoder = msgspec.json.Decoder(Chunk)
part_decoder = msgspec.json.Decoder(Part)
