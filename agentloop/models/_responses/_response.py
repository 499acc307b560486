"""The output items of one Responses answer folded into an `AiMessage` (reasoning kept, by id, in its
provider state), with its usage and finish reason."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from agentloop._values._messages import AiMessage, FinishReason, TokenUsage, ToolExecutionRequest

from .._unknown import known_items
from ._shapes import ITEMS, PARTS, SEARCH_ITEMS, Item, Response, Usage

__all__ = ["STATE_KEY", "Answer", "finish_reason", "known_output_items", "token_usage"]

STATE_KEY = "openai-responses"
"""The key of this provider's state in `AiMessage.provider_state`."""


def token_usage(usage: Usage | None) -> TokenUsage | None:
    if usage is None:
        return None
    cached = usage.input_tokens_details.cached_tokens if usage.input_tokens_details else None
    reasoning = usage.output_tokens_details.reasoning_tokens if usage.output_tokens_details else None
    return TokenUsage(
        usage.input_tokens,
        usage.output_tokens,
        usage.total_tokens,
        cache_read_tokens=cached,
        reasoning_tokens=reasoning,
    )


def finish_reason(response: Response, has_calls: bool) -> FinishReason:
    if response.status == "incomplete":
        reason = response.incomplete_details.reason if response.incomplete_details else None
        return FinishReason.CONTENT_FILTER if reason == "content_filter" else FinishReason.LENGTH
    return FinishReason.TOOL_EXECUTION if has_calls else FinishReason.STOP


def known_output_items(raws: Sequence[msgspec.Raw]) -> list[Item]:
    """The output items of a kind agentloop knows (message, function_call, reasoning); others are skipped."""
    return known_items(raws, ITEMS, STATE_KEY, "an output item")


def _reasoning_state(item: Item) -> dict[str, Any]:
    """A reasoning item as kept between rounds: exactly what the API takes back as input."""
    state: dict[str, Any] = {
        "type": "reasoning",
        "id": item.id,
        "summary": [{"type": "summary_text", "text": part.text or ""} for part in item.summary or ()],
    }
    if item.encrypted_content is not None:
        state["encrypted_content"] = item.encrypted_content
    return state


class Answer:
    """The output items of one response, folded into an `AiMessage` with this provider's state."""

    __slots__ = ("calls", "order", "text", "thinking")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.calls: list[ToolExecutionRequest] = []
        self.order: list[dict[str, Any]] = []  # the output items in order: reasoning whole, others by id

    def add(self, item: Item, *, streamed: bool) -> ToolExecutionRequest | None:
        """Takes one finished output item; text and summaries already streamed are not taken twice."""
        kind = item.type
        if kind == "message":
            self.order.append({"type": "message", "id": item.id})
            if not streamed:
                for part in known_items(item.content or (), PARTS, STATE_KEY, "a message content part"):
                    piece = part.text if part.type == "output_text" else part.refusal
                    if piece:
                        self.text.append(piece)
        elif kind == "function_call":
            call = ToolExecutionRequest(item.call_id, item.name or "", item.arguments or "{}")
            self.calls.append(call)
            self.order.append({"type": "function_call", "id": item.id, "call_id": item.call_id})
            return call
        elif kind == "reasoning":
            self.order.append(_reasoning_state(item))
            if not streamed:
                self.thinking.extend(part.text for part in item.summary or () if part.text)
        elif kind in SEARCH_ITEMS and item.kept is not None:
            self.order.append(item.kept)
        return None

    def message(self) -> AiMessage:
        """The answer; the item order goes with it only when it holds reasoning (which must go back with
        the items that followed it, by id) or tool searches (which must go back whole)."""
        reasoned = any(entry["type"] == "reasoning" or entry["type"] in SEARCH_ITEMS for entry in self.order)
        state = {STATE_KEY: {"output": self.order}} if reasoned else {}
        return AiMessage(
            "".join(self.text) if self.text else None,
            tuple(self.calls),
            "\n\n".join(self.thinking) if self.thinking else None,
            state,
        )
