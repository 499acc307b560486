"""What `useChat` POSTs (`{id, messages, trigger, messageId, ...}`): a new turn, or an approval answer.

UI messages are `{id, role, parts}`; parts this reads: `text`, `step-start`, and tool parts (`tool-<name>`
or `dynamic-tool`) with their `state`. Everything else (reasoning, files, data parts, sources) is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import ChatMessage, ToolExecutionRequest, UserMessage
from ._history import assistant_turn, call_id, media, tool_result_text, user_message

__all__ = ["Answer", "BadRequest", "NewTurn", "read_chat_request"]


class BadRequest(ValueError):
    """The request body is not what the protocol sends; the message says what and where."""


@dataclass(frozen=True)
class NewTurn:
    """A user message to answer, after the conversation before it."""

    question: UserMessage
    history: list[ChatMessage]
    chat_id: str | None


@dataclass(frozen=True)
class Answer:
    """The page's decisions on waiting calls: `(approval id, approved, reason)`. Nothing else of the page's
    messages is read: the paused run's conversation is the server's."""

    decisions: list[tuple[str, bool, str | None]]
    chat_id: str | None
    message_id: str


def _user(parts: list[Any], where: str) -> UserMessage | None:
    """A user message's text and file parts (pictures, PDFs) as one message."""
    found: list[Any] = []
    for n, part in enumerate(parts):
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            found.append(part["text"])
        elif part.get("type") == "file":
            url, kind, name = part.get("url"), part.get("mediaType"), part.get("filename")
            if not isinstance(url, str) or not isinstance(kind, str):
                raise BadRequest(f"{where}.parts[{n}]: a file part needs `url` and `mediaType` (strings)")
            try:
                found.append(media(url, kind, name if isinstance(name, str) else None))
            except ValueError as error:
                raise BadRequest(f"{where}.parts[{n}]: {error}") from None
    return user_message(found)


def _is_tool(part: dict[str, Any]) -> bool:
    kind = part.get("type")
    return isinstance(kind, str) and (kind == "dynamic-tool" or kind.startswith("tool-"))


def _tool_name(part: dict[str, Any]) -> str:
    if part["type"] == "dynamic-tool":
        name = part.get("toolName")
        return name if isinstance(name, str) else ""
    return str(part["type"])[len("tool-") :]


def _arguments(value: Any) -> str:
    if value is None:
        return "{}"
    return tool_result_text(value) if not isinstance(value, str) else value


def _assistant(parts: list[Any]) -> list[ChatMessage]:
    steps: list[tuple[str, list[tuple[ToolExecutionRequest, str, bool]]]] = []
    text: list[str] = []
    calls: list[tuple[ToolExecutionRequest, str, bool]] = []
    for part in parts:
        kind = part.get("type")
        if kind == "step-start":
            steps.append(("".join(text), calls))
            text, calls = [], []
        elif kind == "text" and isinstance(part.get("text"), str):
            text.append(part["text"])
        elif _is_tool(part) and isinstance(part.get("toolCallId"), str):
            state = part.get("state")
            request = ToolExecutionRequest(
                call_id(part["toolCallId"]), _tool_name(part), _arguments(part.get("input"))
            )
            if state == "output-available":
                calls.append((request, tool_result_text(part.get("output")), False))
            elif state == "output-error":
                calls.append((request, str(part.get("errorText") or "error"), True))
            elif state == "output-denied":
                approval = part.get("approval") or {}
                reason = approval.get("reason") if isinstance(approval, dict) else None
                calls.append((request, reason or "The user denied this call; it did not run.", True))
            # a call without its outcome is left out: the history stays valid for every provider
    steps.append(("".join(text), calls))
    return assistant_turn(steps)


def to_messages(messages: list[Any]) -> list[ChatMessage]:
    """UI messages as agentloop messages: user text, assistant text and finished tool calls; system messages
    are dropped (the server sets the instructions)."""
    out: list[ChatMessage] = []
    for n, message in enumerate(messages):
        role, parts = message["role"], message["parts"]
        if role == "user":
            said = _user(parts, f"messages[{n}]")
            if said is not None:
                out.append(said)
        elif role == "assistant":
            out += _assistant(parts)
    return out


def _check(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("`messages` must be a non-empty list of UI messages ({id, role, parts})")
    for n, message in enumerate(messages):
        if not isinstance(message, dict):
            raise BadRequest(
                f"messages[{n}] must be an object {{id, role, parts}}, got {type(message).__name__}"
            )
        if message.get("role") not in ("user", "assistant", "system"):
            raise BadRequest(
                f"messages[{n}].role must be 'user', 'assistant' or 'system', got {message.get('role')!r}"
            )
        parts = message.get("parts")
        if not isinstance(parts, list) or not all(
            isinstance(p, dict) and isinstance(p.get("type"), str) for p in parts
        ):
            raise BadRequest(
                f"messages[{n}].parts must be a list of parts, each an object with a string `type`"
            )
    return messages


def read_chat_request(body: Any) -> NewTurn | Answer:
    """The body of a `useChat` request: a new user turn, or the answer to waiting calls (the last message is
    the assistant's, and some of its tool parts are in state `approval-responded`)."""
    if not isinstance(body, dict):
        raise BadRequest("The body must be a JSON object {id, messages, trigger, messageId}")
    messages = _check(body.get("messages"))
    chat_id = body.get("id") if isinstance(body.get("id"), str) else None
    last = messages[-1]
    if last["role"] == "assistant":
        decisions: list[tuple[str, bool, str | None]] = []
        for part in last["parts"]:
            if _is_tool(part) and part.get("state") == "approval-responded":
                approval = part.get("approval")
                if not isinstance(approval, dict) or not isinstance(approval.get("id"), str):
                    raise BadRequest("A tool part in state 'approval-responded' must carry approval.id")
                approved = approval.get("approved")
                if not isinstance(approved, bool):
                    raise BadRequest(f"approval {approval['id']!r}: `approved` must be true or false")
                reason = approval.get("reason")
                decisions.append(
                    (approval["id"], approved, reason if isinstance(reason, str) and reason else None)
                )
        if not decisions:
            raise BadRequest(
                "The last message is the assistant's but answers no approval: send a user message, or answer "
                "the waiting tool calls (addToolApprovalResponse)"
            )
        return Answer(decisions, chat_id, str(last.get("id") or ""))
    if last["role"] != "user":
        raise BadRequest("The last message must be the user's (or the assistant's, answering approvals)")
    question = _user(last["parts"], f"messages[{len(messages) - 1}]")
    if question is None:
        raise BadRequest("The last user message has no text or file part")
    return NewTurn(question, to_messages(messages[:-1]), chat_id)
