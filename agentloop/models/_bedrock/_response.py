"""A Converse answer (or the blocks a ConverseStream assembled) as an agentloop `ChatResponse`.

- `toolUse` blocks become tool calls (streamed input kept as the text that came);
- reasoning becomes the message's thinking; signed or redacted reasoning is kept in
  `AiMessage.provider_state["bedrock"]` to be sent back with the calls it preceded;
- usage: `inputTokens` plus cache reads and writes is the input (Bedrock reports them apart);
- `malformed_tool_use` / `malformed_model_output` raise `BadResponseError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from agentloop._values._errors import BadResponseError
from agentloop._values._messages import (
    AiMessage,
    ChatResponse,
    FinishReason,
    TokenUsage,
    ToolExecutionRequest,
)

from ._shapes import PROVIDER, Block, Usage, encode

__all__ = ["chat_response", "token_usage"]

_FINISH_REASONS = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "tool_use": FinishReason.TOOL_EXECUTION,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "guardrail_intervened": FinishReason.CONTENT_FILTER,
    "content_filtered": FinishReason.CONTENT_FILTER,
}


def chat_response(
    content: Sequence[Block],
    stop_reason: str | None,
    usage: Usage | None,
    request_id: str | None,
    model_id: str,
) -> ChatResponse:
    """The `ChatResponse` of an answer's content blocks, stop reason and usage."""
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[ToolExecutionRequest] = []
    reasoning: list[dict[str, Any]] = []
    for block in content:
        if block.text is not None:
            texts.append(block.text)
        elif block.tool_use is not None:
            use = block.tool_use
            if isinstance(use.input, msgspec.Raw):  # streamed: the text as it came
                arguments = bytes(use.input).decode()
            else:
                arguments = encode(use.input).decode() if isinstance(use.input, dict) else "{}"
            calls.append(ToolExecutionRequest(use.tool_use_id, use.name, arguments))
        elif block.reasoning_content is not None:
            found = block.reasoning_content
            if found.reasoning_text is not None:
                thoughts.append(found.reasoning_text.text)
                if found.reasoning_text.signature:
                    reasoning.append(
                        {
                            "reasoningContent": {
                                "reasoningText": {
                                    "text": found.reasoning_text.text,
                                    "signature": found.reasoning_text.signature,
                                }
                            }
                        }
                    )
            elif found.redacted_content:
                reasoning.append({"reasoningContent": {"redactedContent": found.redacted_content}})
    if stop_reason in ("malformed_tool_use", "malformed_model_output"):
        raise BadResponseError(
            f"bedrock: the model's answer ended with {stop_reason}: it produced output Converse could "
            "not parse (retrying often helps; simpler tool schemas help more)",
            provider=PROVIDER,
            error_type=stop_reason,
            request_id=request_id,
        )
    message = AiMessage(
        "".join(texts) if texts else None,
        tuple(calls),
        "".join(thoughts) if thoughts else None,
        {PROVIDER: {"reasoning": reasoning}} if reasoning else {},
    )
    finish = _FINISH_REASONS.get(stop_reason, FinishReason.OTHER) if stop_reason else None
    return ChatResponse(message, token_usage(usage), finish, model_id, request_id)


def token_usage(usage: Usage | None) -> TokenUsage | None:
    """Usage with `input_tokens` counting cache reads and writes too (Bedrock reports those apart)."""
    if usage is None or (usage.input_tokens is None and usage.output_tokens is None):
        return None
    read, written = usage.cache_read_input_tokens, usage.cache_write_input_tokens
    prompt = (usage.input_tokens or 0) + (read or 0) + (written or 0)
    return TokenUsage(prompt, usage.output_tokens or 0, cache_read_tokens=read, cache_write_tokens=written)
