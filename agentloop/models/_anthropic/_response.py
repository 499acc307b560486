"""Decoded Messages API values as agentloop's: usage, finish reasons, and the provider-state key."""

from __future__ import annotations

from agentloop._values._messages import (
    FinishReason,
    TokenUsage,
)

from ._shapes import (
    Usage,
)

STATE_KEY = "anthropic"
"""The key of this provider's state in `AiMessage.provider_state`: the signed thinking blocks of an answer
with tool calls, which the API demands back verbatim when the tool loop continues with thinking enabled."""


_FINISH_REASONS = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "tool_use": FinishReason.TOOL_EXECUTION,
    "refusal": FinishReason.CONTENT_FILTER,
}


def token_usage(usage: Usage | None) -> TokenUsage | None:
    """Usage with `input_tokens` counting cached tokens too (Anthropic reports those apart), the cache reads
    and writes kept as details."""
    if usage is None or (usage.input_tokens is None and usage.output_tokens is None):
        return None
    read, written = usage.cache_read_input_tokens, usage.cache_creation_input_tokens
    prompt = (usage.input_tokens or 0) + (read or 0) + (written or 0)
    return TokenUsage(prompt, usage.output_tokens or 0, cache_read_tokens=read, cache_write_tokens=written)


def finish_reason(stop_reason: str | None) -> FinishReason | None:
    if stop_reason is None:
        return None
    return _FINISH_REASONS.get(stop_reason, FinishReason.OTHER)
