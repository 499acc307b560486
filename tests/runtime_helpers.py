"""Helpers shared by the runtime tests."""

from __future__ import annotations

import json
from typing import Any

from agentloop import AiMessage, ToolExecutionRequest, ToolExecutionResultMessage
from agentloop._values._messages import ChatMessage


def calls(
    *requests: tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str], text: str | None = None
) -> AiMessage:
    """An AiMessage asking for the given `(name, arguments[, id])` tool calls."""
    built = []
    for n, request in enumerate(requests):
        name, arguments = request[0], request[1]
        call_id = request[2] if len(request) > 2 else f"call_{name}_{n}"  # type: ignore[misc]
        built.append(ToolExecutionRequest(call_id, name, json.dumps(arguments)))
    return AiMessage(text=text, tool_execution_requests=built)


def assert_valid_for_provider(messages: list[ChatMessage]) -> None:
    """Every tool call is followed by exactly its results; no result without its call."""
    pending: list[str | None] = []
    for message in messages:
        if isinstance(message, ToolExecutionResultMessage):
            assert message.id in pending, f"result without its call: {message}"
            pending.remove(message.id)
            continue
        assert not pending, f"tool calls {pending} have no result before {message}"
        if isinstance(message, AiMessage):
            pending = [r.id for r in message.tool_execution_requests]
    assert not pending, f"tool calls {pending} have no result"
