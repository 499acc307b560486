"""What every provider fake does with the answers it is scripted with, whatever its wire format.

`scripted_response(item, owner)`: a scripted `str`, `AiMessage` or `ChatResponse` as the `ChatResponse` to
answer with. `output_tokens(message)`: the deterministic output token count reported when the script sets no
usage. `arguments_object(call, field)`: a scripted call's arguments as the JSON object APIs that take them as
an object send (byte for byte).
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentloop._values._messages import AiMessage, ChatResponse

from ._fake_server import split_text

__all__ = ["arguments_object", "output_tokens", "scripted_response"]


def scripted_response(item: Any, owner: str) -> ChatResponse:
    """`item` as a `ChatResponse`: a str is the answer's text, an `AiMessage` the answer; `owner` (the fake's
    name) is said in the `TypeError` for anything else."""
    if isinstance(item, str):
        return ChatResponse(AiMessage(item))
    if isinstance(item, AiMessage):
        return ChatResponse(item)
    if isinstance(item, ChatResponse):
        return item
    raise TypeError(f"{owner} scripts AiMessage, str, ChatResponse or Reply, not {item!r}")


def output_tokens(message: AiMessage) -> int:
    """Deterministic output tokens of an answer: its word-sized pieces of text and thinking, and for each
    tool call one plus a quarter of its arguments' length."""
    out = len(split_text(message.text or "")) + len(split_text(message.thinking or ""))
    out += sum(1 + len(call.arguments) // 4 for call in message.tool_execution_requests)
    return out


def arguments_object(call: Any, field: str) -> msgspec.Raw:
    """A scripted call's arguments as the JSON object sent in `field` ("tool_use input"...), byte for byte;
    a `TypeError` when they are not an object."""
    text = call.arguments.strip() or "{}"
    if not isinstance(msgspec.json.decode(text), dict):
        raise TypeError(f"{field} must be a JSON object, {call.name!r} has {call.arguments!r}")
    return msgspec.Raw(text.encode())
