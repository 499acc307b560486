"""`message_history=`: a conversation the caller keeps, given to one `chat()`/`stream()` call instead of a
memory, checked so the model request it starts is one every provider accepts.

The rules are the ones memory keeps by construction: every tool call of an `AiMessage` is answered by
exactly one `ToolExecutionResultMessage` right after it (any order among them), and no result stands without
its call. The system message comes from the agent (`Agent(system_message=...)`), not from the history.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._values._errors import IllegalConfigurationError
from .._values._messages import AiMessage, ChatMessage, SystemMessage, ToolExecutionResultMessage, UserMessage

__all__ = ["checked_history"]

_FIX = "pass the messages of earlier results (`result.new_messages`), which always pair calls and results"


def checked_history(messages: object) -> tuple[ChatMessage, ...]:
    """`messages` as a tuple, or `IllegalConfigurationError` naming the first message that breaks a rule."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise IllegalConfigurationError(
            "message_history must be a list of messages (UserMessage, AiMessage, "
            f"ToolExecutionResultMessage), got {type(messages).__name__}"
        )
    open_calls: dict[str | None, str] = {}  # id -> tool name of the calls still waiting for their result
    for index, message in enumerate(messages):
        where = f"message_history[{index}]"
        if isinstance(message, ToolExecutionResultMessage):
            if message.id not in open_calls:
                raise IllegalConfigurationError(
                    f"{where} is the result of tool call {message.id!r} ({message.tool_name}), but no "
                    "AiMessage just before it made that call; a result must follow the AiMessage with its "
                    f"call. {_FIX}"
                )
            del open_calls[message.id]
            continue
        if open_calls:
            raise IllegalConfigurationError(_unanswered(open_calls, f"before {where}"))
        if isinstance(message, AiMessage):
            for request in message.tool_execution_requests:
                if request.id in open_calls:
                    raise IllegalConfigurationError(
                        f"{where} makes two tool calls with the id {request.id!r}; each call needs its own id"
                    )
                open_calls[request.id] = request.name
        elif isinstance(message, SystemMessage):
            raise IllegalConfigurationError(
                f"{where} is a SystemMessage; the system message comes from the agent "
                "(Agent(system_message=...)), so leave it out of message_history"
            )
        elif not isinstance(message, UserMessage):
            raise IllegalConfigurationError(
                f"{where} is a {type(message).__name__}, not a message; message_history holds UserMessage, "
                "AiMessage and ToolExecutionResultMessage objects"
            )
    if open_calls:
        raise IllegalConfigurationError(_unanswered(open_calls, "at the end of message_history"))
    return tuple(messages)


def _unanswered(open_calls: dict[str | None, str], where: str) -> str:
    calls = ", ".join(f"{name} (id {call_id!r})" for call_id, name in open_calls.items())
    return (
        f"Tool calls without a result {where}: {calls}; every tool call needs its ToolExecutionResultMessage "
        f"right after the AiMessage that made it (providers reject the request otherwise). {_FIX}"
    )
