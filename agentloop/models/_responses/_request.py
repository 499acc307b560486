"""The Responses request body's parts: `input` items from the chat messages (reasoning sent back in
order), tools, the text format and the tool choice."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentloop._values._content import Content, ImageContent, TextContent
from agentloop._values._errors import IllegalConfigurationError
from agentloop._values._messages import (
    AiMessage,
    ChatMessage,
    ResponseFormat,
    SystemMessage,
    ToolChoice,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from agentloop._values._spec import ToolSpecification

from .._base import DEFER_LOADING
from .._media import web_url
from .._strict import strict_schema
from .._wire import check_tool_offered, load_unfound, unanswered_result
from ._response import STATE_KEY
from ._shapes import ITEM_FIELDS, SEARCH_ITEMS

__all__ = ["input_items", "load_unfound_calls", "searches", "text_format", "tool_choice_entry", "tool_entry"]


# -- request mapping ----------------------------------------------------------------------------------------


def _input_part(part: Content) -> dict[str, Any]:
    if isinstance(part, TextContent):
        return {"type": "input_text", "text": part.text}
    if isinstance(part, ImageContent):
        url = part.data_url if part.data is not None else web_url(part, "OpenAI Responses")
        return {"type": "input_image", "image_url": url, "detail": "auto"}
    if part.data is None:
        return {"type": "input_file", "file_url": web_url(part, "OpenAI Responses")}
    return {"type": "input_file", "filename": part.filename, "file_data": part.data_url}


def _call_item(call: ToolExecutionRequest, item_id: str | None) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments or "{}",
    }
    if item_id:
        item["id"] = item_id
    return item


def _assistant(text: str, item_id: str | None) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}]
    if item_id:
        return {
            "type": "message",
            "role": "assistant",
            "id": item_id,
            "status": "completed",
            "content": content,
        }
    return {"role": "assistant", "content": text}


def _ai_items(message: AiMessage, n: int, searching: bool) -> list[dict[str, Any]]:
    """An answer as input items, in the order the API produced them when its state says so (its tool
    searches only when this request searches too: else the tools they found are not deferred)."""
    calls = list(message.tool_execution_requests)
    for i, call in enumerate(calls):
        if not call.id:  # a call without an id (a hand-written history): its result finds it by position
            calls[i] = ToolExecutionRequest(f"call_{n}_{i}", call.name, call.arguments)
    text = message.text
    items: list[dict[str, Any]] = []
    state = message.provider_state.get(STATE_KEY)
    order = state.get("output") if isinstance(state, Mapping) else None
    for entry in order if isinstance(order, list) else ():
        kind = entry.get("type") if isinstance(entry, Mapping) else None
        if kind == "reasoning":
            items.append({k: entry[k] for k in ITEM_FIELDS if k in entry and entry[k] is not None})
        elif kind in SEARCH_ITEMS and searching:
            items.append(dict(entry))
        elif kind == "message" and text:
            items.append(_assistant(text, entry.get("id")))
            text = None
        elif kind == "function_call":
            found = next((c for c in calls if c.id == entry.get("call_id")), None)
            if found is not None:
                items.append(_call_item(found, entry.get("id")))
                calls.remove(found)
    if text:
        items.append(_assistant(text, None))
    items.extend(_call_item(call, None) for call in calls)
    return items


def _output(message: ToolExecutionResultMessage) -> str | list[dict[str, Any]]:
    """A tool result's `output`: its text, or a list of parts when the tool returned pictures."""
    if not message.has_media:
        return message.text
    parts: list[dict[str, Any]] = [{"type": "input_text", "text": message.text}] if message.text else []
    parts.extend(_input_part(part) for part in message.contents if not isinstance(part, TextContent))
    return parts


def input_items(
    messages: Sequence[ChatMessage], *, searching: bool = False
) -> tuple[str | None, list[dict[str, Any]]]:
    """System text (`instructions`) and the `input` items (`searching`: the request has deferred tools and
    the `tool_search` tool, so earlier tool searches go back)."""
    system: list[str] = []
    items: list[dict[str, Any]] = []
    unanswered: list[tuple[str, str]] = []  # (synthetic call id, tool name) of calls that came without an id
    for n, message in enumerate(messages):
        if isinstance(message, UserMessage):
            if message.contents:
                content: Any = [_input_part(part) for part in message.contents]
            else:
                content = message.text
            items.append({"role": "user", "content": content})
        elif isinstance(message, SystemMessage):
            if message.text:
                system.append(message.text)
        elif isinstance(message, AiMessage):
            unanswered = [
                (f"call_{n}_{i}", call.name)
                for i, call in enumerate(message.tool_execution_requests)
                if not call.id
            ]
            items.extend(_ai_items(message, n, searching))
        elif isinstance(message, ToolExecutionResultMessage):
            call_id = message.id
            if not call_id:
                match = next((u for u in unanswered if u[1] == message.tool_name), None)
                if match is None and unanswered:
                    match = unanswered[0]
                if match is None:
                    raise unanswered_result(message)
                unanswered.remove(match)
                call_id = match[0]
            items.append({"type": "function_call_output", "call_id": call_id, "output": _output(message)})
        else:
            raise IllegalConfigurationError(
                f"not a chat message: {type(message).__name__}; ChatRequest.messages takes SystemMessage, "
                "UserMessage, AiMessage and ToolExecutionResultMessage"
            )
    return ("\n\n".join(system) or None), items


def tool_entry(spec: ToolSpecification, strict: bool | None) -> dict[str, Any]:
    tool: dict[str, Any] = {"type": "function", "name": spec.name}
    if spec.description:
        tool["description"] = spec.description
    tool["parameters"] = strict_schema(spec.parameters) if strict else spec.parameters
    tool["strict"] = bool(strict)
    if spec.metadata.get(DEFER_LOADING) is True:  # found by the `tool_search` tool (ToolSearch(native=True))
        tool["defer_loading"] = True
    return tool


def load_unfound_calls(tools: list[dict[str, Any]], items: list[dict[str, Any]]) -> None:
    """Sends as loaded each deferred tool that a `function_call` of `items` names and no
    `tool_search_output` of `items` found (see `load_unfound`)."""
    called = [i["name"] for i in items if i.get("type") == "function_call"]
    found = [
        str(t.get("name"))
        for i in items
        if i.get("type") == "tool_search_output"
        for t in i.get("tools") or ()
        if isinstance(t, Mapping)
    ]
    load_unfound(tools, called, found)


def searches(specs: Sequence[ToolSpecification]) -> bool:
    """True when `specs` hold deferred tools: the request then carries the `tool_search` tool."""
    return any(s.metadata.get(DEFER_LOADING) is True for s in specs)


def text_format(format: ResponseFormat) -> dict[str, Any]:
    schema = strict_schema(format.schema) if format.strict else dict(format.schema)
    wire: dict[str, Any] = {
        "type": "json_schema",
        "name": format.name,
        "schema": schema,
        "strict": format.strict,
    }
    if format.description:
        wire["description"] = format.description
    return wire


def tool_choice_entry(choice: ToolChoice, specs: Sequence[ToolSpecification]) -> Any:
    if choice.mode == "tool":
        check_tool_offered(choice, specs)
        return {"type": "function", "name": choice.tool_name}
    return choice.mode
