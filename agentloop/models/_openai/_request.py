"""The Chat Completions request body: messages (synthetic ids for calls without one, tool pictures
in a user turn), tools, tool choice and output format."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentloop._values._content import Content, ImageContent, TextContent
from agentloop._values._errors import IllegalConfigurationError
from agentloop._values._messages import (
    AiMessage,
    ChatMessage,
    ResponseFormat,
    SystemMessage,
    ToolChoice,
    ToolExecutionResultMessage,
    UserMessage,
)
from agentloop._values._spec import ToolSpecification

from .._media import media_of_results_note, web_url
from .._strict import strict_schema
from .._wire import check_tool_offered, unanswered_result

RESERVED = frozenset({"messages", "tools", "tool_choice", "stream", "stream_options"})


def _part(part: Content) -> dict[str, Any]:
    """One content part in Chat Completions form: `text`, `image_url` (a URL or a data URL), `file`."""
    if isinstance(part, TextContent):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImageContent):
        url = part.data_url if part.data is not None else web_url(part, "Chat Completions")
        return {"type": "image_url", "image_url": {"url": url}}
    if part.data is None:
        raise IllegalConfigurationError(
            f"Chat Completions takes a document as its bytes, not a URL ({part.url!r}): download it and "
            "give DocumentContent(data=...), or use OpenAIResponsesModel (which takes document URLs)"
        )
    return {"type": "file", "file": {"filename": part.filename, "file_data": part.data_url}}


def _media_turn(results: list[ToolExecutionResultMessage]) -> dict[str, Any]:
    """The user turn carrying the pictures of `results` (tool messages take text only)."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": media_of_results_note(results)}]
    parts.extend(
        _part(part) for result in results for part in result.contents if not isinstance(part, TextContent)
    )
    return {"role": "user", "content": parts}


def chat_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Messages in Chat Completions form; calls without ids get synthetic ones, matched to their results.
    Pictures a tool returned follow its results in a user turn (tool messages take text only)."""
    out: list[dict[str, Any]] = []
    unanswered: list[tuple[str, str]] = []  # (synthetic id, tool name) of calls that came without an id
    with_media: list[ToolExecutionResultMessage] = []  # results whose pictures wait for the user turn
    for n, message in enumerate(messages):
        if with_media and not isinstance(message, ToolExecutionResultMessage):
            out.append(_media_turn(with_media))
            with_media = []
        if isinstance(message, UserMessage):
            if message.contents:
                out.append({"role": "user", "content": [_part(part) for part in message.contents]})
            else:
                out.append({"role": "user", "content": message.text})
        elif isinstance(message, SystemMessage):
            out.append({"role": "system", "content": message.text})
        elif isinstance(message, AiMessage):
            entry: dict[str, Any] = {"role": "assistant", "content": message.text}
            if message.tool_execution_requests:
                unanswered = []
                calls = []
                for i, call in enumerate(message.tool_execution_requests):
                    call_id = call.id
                    if not call_id:
                        call_id = f"call_{n}_{i}"
                        unanswered.append((call_id, call.name))
                    function = {"name": call.name, "arguments": call.arguments or "{}"}
                    calls.append({"id": call_id, "type": "function", "function": function})
                entry["tool_calls"] = calls
            elif message.text is None:
                entry["content"] = ""
            out.append(entry)
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
            out.append({"role": "tool", "tool_call_id": call_id, "content": message.text})
            if message.has_media:
                with_media.append(message)
        else:
            raise IllegalConfigurationError(
                f"not a chat message: {type(message).__name__}; ChatRequest.messages takes SystemMessage, "
                "UserMessage, AiMessage and ToolExecutionResultMessage"
            )
    if with_media:
        out.append(_media_turn(with_media))
    return out


def tool_payload(spec: ToolSpecification, strict: bool | None) -> dict[str, Any]:
    function: dict[str, Any] = {"name": spec.name}
    if spec.description:
        function["description"] = spec.description
    function["parameters"] = spec.parameters
    if strict is not None:
        function["strict"] = strict
    return {"type": "function", "function": function}


def response_format_payload(format: ResponseFormat) -> dict[str, Any]:
    schema = strict_schema(format.schema) if format.strict else dict(format.schema)
    json_schema: dict[str, Any] = {"name": format.name, "schema": schema, "strict": format.strict}
    if format.description:
        json_schema["description"] = format.description
    return {"type": "json_schema", "json_schema": json_schema}


def tool_choice_payload(choice: ToolChoice, specs: Sequence[ToolSpecification]) -> Any:
    if choice.mode == "tool":
        check_tool_offered(choice, specs)
        return {"type": "function", "function": {"name": choice.tool_name}}
    return choice.mode


# -- the model ----------------------------------------------------------------------------------------------
