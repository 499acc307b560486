"""Messages as the GenAI conventions record them (`gen_ai.input.messages` and friends): JSON text of
role-and-parts objects. Only built when content capture is on."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from agentloop._values._messages import (
    AiMessage,
    ChatMessage,
    ChatResponse,
    FinishReason,
    SystemMessage,
    ToolExecutionResultMessage,
    UserMessage,
)
from agentloop._values._spec import ToolSpecification

__all__ = ["finish_reason", "input_messages", "output_messages", "system_instructions", "tool_definitions"]

_encode = msgspec.json.Encoder().encode

_FINISH = {
    FinishReason.STOP: "stop",
    FinishReason.LENGTH: "length",
    FinishReason.TOOL_EXECUTION: "tool_call",
    FinishReason.CONTENT_FILTER: "content_filter",
    FinishReason.OTHER: "error",
}


def finish_reason(reason: FinishReason | None) -> str:
    """A finish reason in the conventions' words (`stop`, `length`, `tool_call`, `content_filter`; others
    as agentloop names them, such as `approval_required`)."""
    if reason is None:
        return "stop"
    return _FINISH.get(reason) or reason.value


def _parts(message: AiMessage) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if message.thinking:
        parts.append({"type": "reasoning", "content": message.thinking})
    if message.text:
        parts.append({"type": "text", "content": message.text})
    for call in message.tool_execution_requests:
        parts.append(
            {"type": "tool_call", "id": call.id, "name": call.name, "arguments": _arguments(call.arguments)}
        )
    return parts


def _arguments(text: str) -> Any:
    try:
        return msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return text


def input_messages(messages: Iterable[ChatMessage]) -> str:
    """The conversation sent to the model, system messages left out (they go to `system_instructions`)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, UserMessage):
            out.append({"role": "user", "parts": [{"type": "text", "content": message.text}]})
        elif isinstance(message, AiMessage):
            out.append({"role": "assistant", "parts": _parts(message)})
        elif isinstance(message, ToolExecutionResultMessage):
            part = {"type": "tool_call_response", "id": message.id, "response": message.text}
            out.append({"role": "tool", "parts": [part]})
    return _encode(out).decode()


def system_instructions(messages: Iterable[ChatMessage]) -> str | None:
    """The system messages of a request, or None when it has none."""
    parts = [{"type": "text", "content": m.text} for m in messages if isinstance(m, SystemMessage)]
    return _encode(parts).decode() if parts else None


def output_messages(response: ChatResponse) -> str:
    """The model's answer."""
    entry = {
        "role": "assistant",
        "parts": _parts(response.ai_message),
        "finish_reason": finish_reason(response.finish_reason),
    }
    return _encode([entry]).decode()


def tool_definitions(specifications: Sequence[ToolSpecification]) -> str:
    """The tools offered to the model."""
    tools = [
        {"type": "function", "name": s.name, "description": s.description, "parameters": s.parameters}
        for s in specifications
    ]
    return _encode(tools).decode()
