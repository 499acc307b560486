"""Pieces of the Messages API request body: content blocks, tool choice, thinking, portable parameters."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentloop._values._content import Content, ImageContent, TextContent
from agentloop._values._errors import IllegalConfigurationError
from agentloop._values._messages import (
    ToolChoice,
    ToolExecutionRequest,
)

from .._media import web_url
from .._wire import (
    arguments_object,
)

# Portable parameter names (as `ChatRequest.parameters` may use them) mapped to the Messages API's.
_PARAMETER_NAMES = {"stop": "stop_sequences", "max_completion_tokens": "max_tokens"}


def called_and_found(messages: list[dict[str, Any]]) -> tuple[list[str], set[str]]:
    """The tools the `tool_use` blocks of `messages` call, and those their tool searches found."""
    blocks = [b for m in messages if isinstance(m["content"], list) for b in m["content"]]
    called = [b["name"] for b in blocks if b.get("type") == "tool_use"]
    found: set[str] = set()
    for block in blocks:
        content = block.get("content") if block.get("type") == "tool_search_tool_result" else None
        references = content.get("tool_references") if isinstance(content, Mapping) else None
        found.update(str(r.get("tool_name")) for r in references or () if isinstance(r, Mapping))
    return called, found


def block_wanted(part: Content) -> bool:
    """Empty text parts are left out: the Messages API rejects empty text blocks."""
    return not isinstance(part, TextContent) or bool(part.text.strip())


def content_block(part: Content) -> dict[str, Any]:
    """One content part as a Messages API block: `text`, `image` or `document` (base64 or URL source)."""
    if isinstance(part, TextContent):
        return {"type": "text", "text": part.text}
    kind = "image" if isinstance(part, ImageContent) else "document"
    if part.data is None:
        return {"type": kind, "source": {"type": "url", "url": web_url(part, "Anthropic")}}
    return {"type": kind, "source": {"type": "base64", "media_type": part.media_type, "data": part.base64}}


def text_blocks(text: str | None) -> list[dict[str, Any]]:
    # The API rejects empty and whitespace-only text blocks; an answer's empty text has nothing to lose.
    return [{"type": "text", "text": text}] if text and not text.isspace() else []


def tool_input(call: ToolExecutionRequest) -> Any:
    """A tool call's arguments as the JSON object `tool_use.input` must be ({} when they are not one)."""
    return arguments_object(call.arguments)


def tool_choice_payload(choice: ToolChoice | None, parallel: bool | None) -> dict[str, Any] | None:
    if choice is None:
        body: dict[str, Any] | None = {"type": "auto"} if parallel is False else None
    elif choice.mode == "required":
        body = {"type": "any"}
    elif choice.mode == "tool":
        body = {"type": "tool", "name": choice.tool_name}
    else:
        body = {"type": choice.mode}
    if body is not None and parallel is False and body["type"] != "none":
        body["disable_parallel_tool_use"] = True
    return body


def thinking_field(value: Any, max_tokens: int) -> dict[str, Any] | None:
    """The `thinking` request field: a budget of tokens, the API's own object, or None/False for none."""
    if value is None or value is False:
        return None
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise IllegalConfigurationError(
            f"thinking must be a token budget (int) or a thinking object such as {{'type': 'adaptive'}}, "
            f"got {value!r}"
        )
    if value >= max_tokens:
        raise IllegalConfigurationError(
            f"the thinking budget ({value} tokens) must be below max_tokens ({max_tokens}): raise max_tokens"
        )
    return {"type": "enabled", "budget_tokens": value}


def portable(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """Per-call parameters with portable names (`stop`, `max_completion_tokens`) renamed for the API."""
    result: dict[str, Any] = {}
    for name, value in parameters.items():
        name = _PARAMETER_NAMES.get(name, name)
        if name == "stop_sequences" and isinstance(value, str):
            value = [value]
        result[name] = value
    return result
