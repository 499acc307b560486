"""History rules some providers enforce with a 400, checked (or repaired) before anything is sent.

- Bedrock and Anthropic reject tool calls and results in the history of a request that declares no tools
  ("The toolConfig field must be defined when using toolUse and toolResult content blocks"; Anthropic:
  requests with `tool_use` / `tool_result` blocks must define tools). An agent without tools, or a web page
  whose history holds an earlier agent's tool parts, sends exactly that. `tool_rounds_as_text` repairs it
  without losing anything the model could read: each call becomes a line of the assistant's text, each
  result a line of the user's turn that follows, in order. (Declaring the tools instead would need their
  schemas, and Bedrock has no tool choice "none", so the model could call them again.)
- Bedrock rejects a conversation whose first message is not the user's; `first_turn_is_user` refuses it with
  an error that says how to fix it (inventing a user turn would put words in the user's mouth).
- Gemini rejects a function call turn that does not follow a user turn or a function response turn ("Please
  ensure that function call turn comes immediately after a user turn or after a function response turn"):
  `calls_follow_the_user` refuses a history whose first turn is the model's tool calls.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentloop._values._content import TextContent
from agentloop._values._errors import BadRequestError
from agentloop._values._messages import (
    AiMessage,
    ChatMessage,
    SystemMessage,
    ToolExecutionResultMessage,
    UserMessage,
)

__all__ = ["calls_follow_the_user", "first_turn_is_user", "has_tool_rounds", "tool_rounds_as_text"]


def has_tool_rounds(messages: Sequence[ChatMessage]) -> bool:
    """Whether `messages` hold a tool call or a tool result."""
    return any(
        isinstance(m, ToolExecutionResultMessage) or (isinstance(m, AiMessage) and m.tool_execution_requests)
        for m in messages
    )


def tool_rounds_as_text(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """`messages` with every tool call written into its assistant message's text and every tool result as a
    user message (its text, and any pictures or documents it returned), for a request with no tools."""
    rendered: list[ChatMessage] = []
    for message in messages:
        if isinstance(message, AiMessage) and message.tool_execution_requests:
            lines = [message.text] if message.text and message.text.strip() else []
            lines += [
                f"[called tool {c.name} with {c.arguments or '{}'}]" for c in message.tool_execution_requests
            ]
            rendered.append(AiMessage("\n".join(lines), (), message.thinking))
        elif isinstance(message, ToolExecutionResultMessage):
            kind = "error from" if message.is_error else "result of"
            label = f"[{kind} tool {message.tool_name}]: {message.text}"
            media = [c for c in message.contents if not isinstance(c, TextContent)]
            rendered.append(UserMessage(label, media) if media else UserMessage(label))
        else:
            rendered.append(message)
    return rendered


def first_turn_is_user(messages: Sequence[ChatMessage], provider: str) -> None:
    """Raises `BadRequestError` when the first message that is not a system message is not the user's."""
    first = next((m for m in messages if not isinstance(m, SystemMessage)), None)
    if first is not None and not isinstance(first, UserMessage):
        raise BadRequestError(
            f"{provider}: the conversation starts with {type(first).__name__}, but the API requires it to "
            "start with a user message; start message_history (or ChatRequest.messages) with a UserMessage, "
            "e.g. drop a greeting the assistant said before the user's first message",
            provider=provider,
        )


def calls_follow_the_user(messages: Sequence[ChatMessage], provider: str) -> None:
    """Raises `BadRequestError` when the first message that is not a system message is an assistant's tool
    calls (no user turn before them)."""
    first = next((m for m in messages if not isinstance(m, SystemMessage)), None)
    if isinstance(first, AiMessage) and first.tool_execution_requests:
        raise BadRequestError(
            f"{provider}: the conversation starts with the assistant's tool calls, but the API requires a "
            "function call turn to follow a user turn; put the UserMessage that led to them first",
            provider=provider,
        )
