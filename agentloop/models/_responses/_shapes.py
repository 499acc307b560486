"""What the Responses API sends back, decoded: msgspec shapes of a response, its output items and its
streamed events, and the kinds of each that agentloop reads (others are skipped unread).
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "EVENT",
    "EVENTS",
    "ITEMS",
    "ITEM_FIELDS",
    "PARTS",
    "RESPONSE",
    "SEARCH_ITEMS",
    "UNUSED_EVENTS",
    "Event",
    "Item",
    "Part",
    "Response",
    "Usage",
]

# -- wire structs (decoded with msgspec; unknown fields are ignored) ----------------------------------------


class Part(msgspec.Struct, gc=False):
    type: str = ""
    text: str | None = None
    refusal: str | None = None


class Item(msgspec.Struct, gc=False):
    type: str = ""
    id: str | None = None
    # function_call
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    # message (its parts of a kind agentloop knows are read by `_parts`)
    content: list[msgspec.Raw] | None = None
    # reasoning
    summary: list[Part] | None = None
    encrypted_content: str | None = None
    status: str | None = None
    # tool_search_call / tool_search_output: the whole item, sent back as it came
    kept: dict[str, Any] | None = None


class InputDetails(msgspec.Struct, gc=False):
    cached_tokens: int | None = None


class OutputDetails(msgspec.Struct, gc=False):
    reasoning_tokens: int | None = None


class Usage(msgspec.Struct, gc=False):
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int | None = None
    input_tokens_details: InputDetails | None = None
    output_tokens_details: OutputDetails | None = None


class Incomplete(msgspec.Struct, gc=False):
    reason: str | None = None


class Response(msgspec.Struct, gc=False):
    id: str | None = None
    model: str | None = None
    status: str | None = None
    output: list[msgspec.Raw] | None = None  # the items agentloop knows are read by `known_output_items`
    usage: Usage | None = None
    incomplete_details: Incomplete | None = None
    error: Any = None


class Event(msgspec.Struct, gc=False):
    type: str = ""
    delta: str | None = None
    output_index: int | None = None
    item: msgspec.Raw = msgspec.Raw()  # read by `known_output_items` when its kind is known
    response: Response | None = None
    # the `error` event
    code: Any = None
    message: str | None = None


RESPONSE = msgspec.json.Decoder(Response)
EVENT = msgspec.json.Decoder(Event)
ITEM = msgspec.json.Decoder(Item)
PART = msgspec.json.Decoder(Part)
_ANY = msgspec.json.Decoder()


class _Kept:
    """Decodes an item agentloop sends back as it came into an `Item` that holds it whole: a tool search's
    call and output (https://developers.openai.com/api/docs/guides/tools-tool-search): `{"type":
    "tool_search_call", "id", "call_id": null, "execution": "server", "status", "arguments": {...}}` and
    `{"type": "tool_search_output", ..., "tools": [<the function definitions found>]}`."""

    def decode(self, buf: Any, /) -> Item:
        data = _ANY.decode(buf)
        if not isinstance(data, dict):
            raise msgspec.DecodeError(f"an output item must be an object, got {type(data).__name__}")
        return Item(type=str(data.get("type") or ""), id=data.get("id"), kept=data)


SEARCH_ITEMS = ("tool_search_call", "tool_search_output")
ITEMS: dict[str, Any] = {
    "message": ITEM,
    "function_call": ITEM,
    "reasoning": ITEM,
    **dict.fromkeys(SEARCH_ITEMS, _Kept()),
}
PARTS = {"output_text": PART, "refusal": PART}
# Streamed events agentloop reads; every other kind is skipped unread (an unknown one noted once).
EVENTS = frozenset(
    {
        "response.output_text.delta",
        "response.refusal.delta",
        "response.function_call_arguments.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_part.added",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
        "response.incomplete",
        "response.failed",
        "error",
    }
)
# Documented events whose content agentloop takes from the others: skipped without a note.
UNUSED_EVENTS = frozenset(
    {
        "response.created",
        "response.in_progress",
        "response.queued",
        "response.content_part.added",
        "response.content_part.done",
        "response.output_text.done",
        "response.output_text.annotation.added",
        "response.refusal.done",
        "response.function_call_arguments.done",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.done",
    }
)
ITEM_FIELDS = ("type", "id", "summary", "encrypted_content", "status")
