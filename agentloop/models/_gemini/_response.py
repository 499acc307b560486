"""Gemini's answer as agentloop events and a `ChatResponse`: the same `Assembler` reads the one chunk of
`generateContent` and the many of a stream.

- tool calls are `functionCall` parts, each whole in one chunk; calls without an id get one made up;
- thinking models put an opaque `thoughtSignature` on a part; signatures are kept in
  `AiMessage.provider_state["gemini"]` per tool-call id (and for the closing text), to be sent back;
- usage: `candidatesTokenCount + thoughtsTokenCount` is the output, `promptTokenCount` (cached tokens
  included) the input;
- a blocked prompt (`promptFeedback.blockReason`) or an answer stopped for safety with nothing in it raises a
  `ModelError` saying why; `MALFORMED_FUNCTION_CALL` raises a `BadResponseError`.
"""

from __future__ import annotations

import itertools
from typing import Any

from agentloop._values._errors import BadResponseError, ModelError
from agentloop._values._messages import (
    AiMessage,
    ChatResponse,
    FinishReason,
    TokenUsage,
    ToolExecutionRequest,
)

from .._base import ModelEvent, TextDelta, ThinkingDelta, ToolCallComplete, ToolCallDelta
from ._shapes import PROVIDER, Chunk, Part, PromptFeedback, UsageMetadata

__all__ = ["Assembler", "token_usage"]

_FINISH_REASONS = {
    "STOP": FinishReason.STOP,
    "MAX_TOKENS": FinishReason.LENGTH,
    "SAFETY": FinishReason.CONTENT_FILTER,
    "RECITATION": FinishReason.CONTENT_FILTER,
    "BLOCKLIST": FinishReason.CONTENT_FILTER,
    "PROHIBITED_CONTENT": FinishReason.CONTENT_FILTER,
    "SPII": FinishReason.CONTENT_FILTER,
    "IMAGE_SAFETY": FinishReason.CONTENT_FILTER,
    "IMAGE_PROHIBITED_CONTENT": FinishReason.CONTENT_FILTER,
}
_BLOCK_HINTS = {
    "SAFETY": "the safety filters stopped it; rephrase, or relax them (safety_settings=[...])",
    "RECITATION": "it recited training data too closely; ask for a paraphrase",
    "BLOCKLIST": "it contained a term on a blocklist",
    "PROHIBITED_CONTENT": "it was flagged as prohibited content",
    "SPII": "it contained sensitive personal information",
    "IMAGE_SAFETY": "a generated image was stopped by the safety filters",
    "OTHER": "the API gave no more detail",
}
_call_ids = itertools.count(1)


class Assembler:
    """Turns one response's chunks (one for `generateContent`, many for a stream) into agentloop events and,
    at the end, into the `ChatResponse`."""

    __slots__ = (
        "_calls",
        "_pending_signature",
        "_sent",
        "_signatures",
        "_text_signature",
        "blocked",
        "finish_message",
        "finish_reason",
        "id",
        "model_version",
        "texts",
        "thoughts",
        "usage",
    )

    def __init__(self) -> None:
        self._signatures: dict[str, str] = {}
        self._text_signature: str | None = None
        self.texts: list[str] = []
        self.thoughts: list[str] = []
        self._calls: list[ToolExecutionRequest] = []
        self._sent = 0  # calls already announced complete
        self._pending_signature: str | None = None  # a signature that came on a part before the calls
        self.finish_reason: str | None = None
        self.finish_message: str | None = None
        self.blocked: PromptFeedback | None = None
        self.usage: UsageMetadata | None = None
        self.id: str | None = None
        self.model_version: str | None = None

    def feed(self, chunk: Chunk) -> list[ModelEvent]:
        """The agentloop events of one chunk."""
        events: list[ModelEvent] = []
        if chunk.usage_metadata is not None:
            self.usage = chunk.usage_metadata  # cumulative: the last one counts
        if chunk.response_id:
            self.id = chunk.response_id
        if chunk.model_version:
            self.model_version = chunk.model_version
        if chunk.prompt_feedback is not None and chunk.prompt_feedback.block_reason:
            self.blocked = chunk.prompt_feedback
        for candidate in chunk.candidates:
            if candidate.index != 0:
                continue
            if candidate.content is not None:
                for part in candidate.content.parts:
                    self._part(part, events)
            if candidate.finish_reason:
                self.finish_reason = candidate.finish_reason
                self.finish_message = candidate.finish_message
        return events

    def _part(self, part: Part, events: list[ModelEvent]) -> None:
        call = part.function_call
        if call is not None:
            index = len(self._calls)
            call_id = call.id or f"call_gemini_{next(_call_ids)}"
            raw = bytes(call.args).decode() if call.args else ""
            request = ToolExecutionRequest(
                call_id, call.name, raw if raw.strip() not in ("", "null") else "{}"
            )
            self._calls.append(request)
            signature = part.thought_signature or self._pending_signature
            self._pending_signature = None
            if signature:
                self._signatures[call_id] = signature
            events.append(ToolCallDelta(index, call_id, call.name, request.arguments))
            events.extend(self.completed_calls())
            return
        if part.thought_signature:
            if self._calls:  # a signature after the calls: on the text that ends the answer
                self._text_signature = part.thought_signature
            else:  # kept for the first call that follows, else for the text
                self._pending_signature = part.thought_signature
        text = part.text
        if text:
            if part.thought:
                self.thoughts.append(text)
                events.append(ThinkingDelta(text))
            else:
                self.texts.append(text)
                events.append(TextDelta(text))

    def completed_calls(self) -> list[ModelEvent]:
        """`ToolCallComplete` for the calls not yet announced (Gemini sends each call whole)."""
        done: list[ModelEvent] = [
            ToolCallComplete(i, self._calls[i]) for i in range(self._sent, len(self._calls))
        ]
        self._sent = len(self._calls)
        return done

    def response(self, request_id: str | None) -> ChatResponse:
        """The whole response; raises for a blocked prompt, or an answer stopped with nothing in it."""
        if self.blocked is not None:
            block = self.blocked.block_reason or "OTHER"
            detail = f": {self.blocked.block_reason_message}" if self.blocked.block_reason_message else ""
            hint = _BLOCK_HINTS.get(block, _BLOCK_HINTS["OTHER"])
            raise ModelError(
                f"gemini: the prompt was blocked (blockReason {block}){detail}; {hint}",
                provider=PROVIDER,
                error_type=f"prompt_blocked:{block}",
                request_id=request_id,
            )
        reason = self.finish_reason
        if reason in ("MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS"):
            detail = f": {self.finish_message}" if self.finish_message else ""
            raise BadResponseError(
                f"gemini: the model's answer ended with {reason}{detail}; it produced a function call the "
                "API could not accept (retrying often helps; simpler tool schemas help more)",
                provider=PROVIDER,
                error_type=reason,
                request_id=request_id,
            )
        finish = _FINISH_REASONS.get(reason or "", FinishReason.OTHER) if reason else None
        if finish is FinishReason.CONTENT_FILTER and not self.texts and not self._calls:
            detail = f": {self.finish_message}" if self.finish_message else ""
            hint = _BLOCK_HINTS.get(reason or "OTHER", _BLOCK_HINTS["OTHER"])
            raise ModelError(
                f"gemini: the answer was stopped with finishReason {reason} before it said anything{detail}; "
                f"{hint}",
                provider=PROVIDER,
                error_type=f"finish:{reason}",
                request_id=request_id,
            )
        if self._calls and finish is FinishReason.STOP:
            finish = FinishReason.TOOL_EXECUTION
        state: dict[str, Any] = {}
        if self._signatures:
            state["signatures"] = self._signatures
        text_signature = self._text_signature or self._pending_signature
        if text_signature and self.texts:
            state["text_signature"] = text_signature
        message = AiMessage(
            "".join(self.texts) if self.texts else None,
            tuple(self._calls),
            "".join(self.thoughts) if self.thoughts else None,
            {PROVIDER: state} if state else {},
        )
        return ChatResponse(message, token_usage(self.usage), finish, self.model_version, self.id)


def token_usage(usage: UsageMetadata | None) -> TokenUsage | None:
    """Usage with thought tokens counted as output (Gemini reports them apart from the candidates')."""
    if usage is None or (usage.prompt_token_count is None and usage.candidates_token_count is None):
        return None
    thoughts = usage.thoughts_token_count
    prompt = (usage.prompt_token_count or 0) + (usage.tool_use_prompt_token_count or 0)
    output = (usage.candidates_token_count or 0) + (thoughts or 0)
    return TokenUsage(
        prompt,
        output,
        cache_read_tokens=usage.cached_content_token_count,
        reasoning_tokens=thoughts,
    )
