"""Decoded Chat Completions values as agentloop's: usage, tool-call arguments, finish reasons."""

from __future__ import annotations

from typing import Any

from agentloop._values._messages import (
    FinishReason,
    TokenUsage,
)

from .._unknown import ignore_unknown
from ._shapes import ToolCall, Usage, encode_json

_FINISH = {
    "stop": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "tool_calls": FinishReason.TOOL_EXECUTION,
    "function_call": FinishReason.TOOL_EXECUTION,
    "content_filter": FinishReason.CONTENT_FILTER,
}


def token_usage(usage: Usage | None) -> TokenUsage | None:
    """Usage as the API reports it: `prompt_tokens` include the cached ones, `completion_tokens` the reasoning
    ones (OpenAI, llama.cpp and vLLM send the details; servers that do not leave them None)."""
    if usage is None:
        return None
    prompt, completion = usage.prompt_tokens_details, usage.completion_tokens_details
    return TokenUsage(
        usage.prompt_tokens or 0,
        usage.completion_tokens or 0,
        usage.total_tokens,
        cache_read_tokens=prompt.cached_tokens if prompt is not None else None,
        reasoning_tokens=completion.reasoning_tokens if completion is not None else None,
    )


def arguments_text(value: str | dict[str, Any] | None) -> str:
    if value is None or value == "":
        return "{}"
    if isinstance(value, str):
        return value
    return encode_json(value).decode()


def finish_reason(reason: str | None, has_calls: bool) -> FinishReason | None:
    if has_calls and reason in (None, "stop", "tool_calls", "function_call"):
        return FinishReason.TOOL_EXECUTION
    if reason is None:
        return None
    return _FINISH.get(reason, FinishReason.OTHER)


# -- request mapping ----------------------------------------------------------------------------------------


def is_function_call(call: ToolCall) -> bool:
    """Whether `call` is a function call (the only kind agentloop runs); another kind is noted once."""
    if call.type is None or call.type == "function":
        return True
    ignore_unknown("openai", "a tool call", call.type)
    return False
