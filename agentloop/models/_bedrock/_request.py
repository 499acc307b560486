"""The Converse request body: agentloop messages, tools, parameters and output format in Bedrock's shape.

- tool calls are `toolUse` blocks and results `toolResult` blocks, matched by `toolUseId` (ids are made up
  for calls that came without, and given to the results that answer them by name);
- consecutive same-role messages are merged: Bedrock demands alternating roles;
- reasoning kept in `AiMessage.provider_state["bedrock"]` goes back verbatim before the tool calls it
  preceded, as Claude on Bedrock demands;
- pictures and documents go as bytes or S3 locations, inside a tool result for the models that take them
  there, else right after the results.
"""

from __future__ import annotations

import mimetypes
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agentloop._values._content import IMAGE_MEDIA_TYPES, Content, DocumentContent, ImageContent, TextContent
from agentloop._values._errors import BadRequestError, IllegalConfigurationError
from agentloop._values._messages import (
    AiMessage,
    ChatMessage,
    ChatRequest,
    SystemMessage,
    ToolChoice,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from agentloop._values._spec import ToolSpecification

from .._media import media_of_results_note
from .._strict import strict_schema
from .._wire import (
    add_turn,
    arguments_object,
    check_tool_offered,
    check_tools_for_choice,
    not_a_chat_message,
    unanswered_result,
)
from ._shapes import PROVIDER, encode

__all__ = ["build_body", "inference_defaults", "place", "thinking_fields"]

_RESERVED = frozenset({"messages", "system", "toolConfig", "modelId"})
_INFERENCE = {
    "max_tokens": "maxTokens",
    "max_completion_tokens": "maxTokens",
    "maxTokens": "maxTokens",
    "temperature": "temperature",
    "top_p": "topP",
    "topP": "topP",
    "stop": "stopSequences",
    "stop_sequences": "stopSequences",
    "stopSequences": "stopSequences",
}


def inference_defaults(
    max_tokens: int | None,
    temperature: float | None,
    top_p: float | None,
    stop_sequences: Sequence[str] | None,
) -> dict[str, Any]:
    """The model's default `inferenceConfig`, from its arguments (those not given are left out)."""
    inference: dict[str, Any] = {}
    for name, value in (
        ("maxTokens", max_tokens),
        ("temperature", temperature),
        ("topP", top_p),
        ("stopSequences", list(stop_sequences) if stop_sequences is not None else None),
    ):
        if value is not None:
            inference[name] = value
    return inference


def build_body(
    request: ChatRequest,
    *,
    inference_config: Mapping[str, Any],
    body_defaults: Mapping[str, Any],
    media_in_tool_results: bool,
) -> dict[str, Any]:
    """The JSON body sent for `request`, the model's defaults overridden by `request.parameters`."""
    system, messages, uses_tools = _messages(request.messages, media_in_tool_results)
    body: dict[str, Any] = {"messages": messages}
    if system:
        body["system"] = [{"text": text} for text in system]
    inference = dict(inference_config)
    top = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in body_defaults.items()}
    for name, value in (request.parameters or {}).items():
        if value is None:
            key = _INFERENCE.get(name, name)
            inference.pop(key, None)
            top.pop(key, None)
            continue
        if name == "thinking":
            extra = dict(top.get("additionalModelRequestFields") or {})
            extra["thinking"] = thinking_fields(value)
            top["additionalModelRequestFields"] = extra
            continue
        place(name, value, inference, top)
    if inference:
        body["inferenceConfig"] = inference
    body.update(top)
    if request.response_format is not None:
        format = request.response_format
        schema = strict_schema(format.schema, provider="anthropic") if format.strict else format.schema
        definition: dict[str, Any] = {"schema": encode(schema).decode(), "name": format.name}
        if format.description:
            definition["description"] = format.description
        body["outputConfig"] = {
            "textFormat": {"type": "json_schema", "structure": {"jsonSchema": definition}}
        }
    specs = request.tool_specifications
    choice = request.tool_choice
    if specs and (choice is None or choice.mode != "none" or uses_tools):
        config: dict[str, Any] = {"tools": [_tool(spec) for spec in specs]}
        wire = _tool_choice(choice, specs)
        if wire is not None:
            config["toolChoice"] = wire
        body["toolConfig"] = config
    elif not specs:
        check_tools_for_choice(choice)
    return body


def _messages(
    history: Sequence[ChatMessage], media_in_tool_results: bool
) -> tuple[list[str], list[dict[str, Any]], bool]:
    """System texts, the `messages` array (consecutive same-role messages merged, as Bedrock demands
    alternating roles), and whether any tool blocks are in it."""
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    unnamed: list[tuple[str, str]] = []
    uses_tools = False
    names: dict[str, int] = {}  # document names used so far: Bedrock wants them unique
    deferred: list[dict[str, Any]] = []  # pictures of tool results, for models that take none there
    with_media: list[ToolExecutionResultMessage] = []  # the results they came with

    def flush() -> None:
        if deferred:
            add("user", [{"text": media_of_results_note(with_media)}, *deferred])
            deferred.clear()
            with_media.clear()

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        add_turn(messages, role, blocks)

    for n, message in enumerate(history):
        if isinstance(message, UserMessage):
            flush()
            if message.has_media:
                add("user", [_block(c, names) for c in message.contents if _wanted(c)])
                continue
            if not message.text.strip():
                raise BadRequestError(
                    f"bedrock: message {n} is a user message with no text (empty or only whitespace); "
                    "Converse rejects blank text: send some text",
                    provider=PROVIDER,
                )
            add("user", [{"text": message.text}])
        elif isinstance(message, ToolExecutionResultMessage):
            uses_tools = True
            tool_use_id = message.id
            if tool_use_id is None:
                match = next((u for u in unnamed if u[1] == message.tool_name), None)
                if match is None:
                    raise unanswered_result(message)
                unnamed.remove(match)
                tool_use_id = match[0]
            result: dict[str, Any] = {
                "toolUseId": tool_use_id,
                "content": [{"text": message.text}] if message.text else [],
            }
            media = [_block(c, names) for c in message.contents if not isinstance(c, TextContent)]
            if media and media_in_tool_results:
                result["content"].extend(media)
            elif media:  # after all the results, in the same user turn, saying where they came from
                with_media.append(message)
                deferred.extend(media)
            if message.is_error:
                result["status"] = "error"
            add("user", [{"toolResult": result}])
        elif isinstance(message, AiMessage):
            flush()
            blocks: list[dict[str, Any]] = []
            calls = message.tool_execution_requests
            if calls:  # the reasoning that led to the calls goes back with them, verbatim
                state = message.provider_state.get(PROVIDER) or {}
                blocks.extend(state.get("reasoning") or ())
            if message.text and not message.text.isspace():
                blocks.append({"text": message.text})
            unnamed = []
            for i, call in enumerate(calls):
                uses_tools = True
                call_id = call.id
                if call_id is None:
                    call_id = f"tooluse_agentloop_{n}_{i}"
                    unnamed.append((call_id, call.name))
                blocks.append({"toolUse": {"toolUseId": call_id, "name": call.name, "input": _input(call)}})
            add("assistant", blocks)
        elif isinstance(message, SystemMessage):
            if message.text and message.text.strip():
                system.append(message.text)
        else:
            raise not_a_chat_message("BedrockChatModel", message)
    flush()
    return system, messages, uses_tools


def _block(content: Content, names: dict[str, int]) -> dict[str, Any]:
    """One content block: text, an image or a document, as bytes or an S3 location."""
    if isinstance(content, TextContent):
        return {"text": content.text}
    kind = "image" if isinstance(content, ImageContent) else "document"
    if content.data is not None:
        source: dict[str, Any] = {"bytes": content.base64}
    elif content.url is not None and content.url.lower().startswith("s3://"):
        source = {"s3Location": {"uri": content.url}}
    else:
        raise IllegalConfigurationError(
            f"bedrock: a {kind} at {content.url!r} cannot be sent: Converse takes {kind}s as bytes or "
            f"as s3:// locations only; download it and pass data= (e.g. {type(content).__name__}"
            "(data=...)) or put it in S3"
        )
    media_type = content.media_type or mimetypes.guess_type(content.url or "")[0]
    if kind == "image":
        if media_type not in IMAGE_MEDIA_TYPES:
            raise IllegalConfigurationError(
                f"bedrock: cannot tell the format of the image at {content.url!r}: give media_type="
            )
        return {"image": {"format": media_type.split("/", 1)[1], "source": source}}
    assert isinstance(content, DocumentContent)
    return {"document": {"format": "pdf", "name": _document_name(content.filename, names), "source": source}}


def _wanted(content: Content) -> bool:
    """Whether a part goes out (Converse refuses blank text blocks, and they say nothing)."""
    return not isinstance(content, TextContent) or bool(content.text.strip())


def _document_name(filename: str, used: dict[str, int]) -> str:
    """A document name Bedrock accepts (letters, digits, single spaces, hyphens, parentheses, brackets; no
    dots, so no extension), unique within the request."""
    stem = filename.rsplit(".", 1)[0] if "." in filename else filename
    cleaned = re.sub(r"[^A-Za-z0-9\s\-()\[\]]", "-", stem)
    cleaned = re.sub(r"\s+", " ", cleaned).strip() or "document"
    cleaned = cleaned[:200]
    count = used.get(cleaned, 0) + 1
    used[cleaned] = count
    return cleaned if count == 1 else f"{cleaned} ({count})"


def place(name: str, value: Any, inference: dict[str, Any], top: dict[str, Any]) -> None:
    """Puts one parameter where Converse wants it: `inferenceConfig` or the body."""
    if name in _RESERVED:
        raise IllegalConfigurationError(
            f"parameter {name!r} cannot be set through parameters: it comes from the ChatRequest (messages, "
            "system messages, tool_specifications, tool_choice) or from the model"
        )
    key = _INFERENCE.get(name)
    if key is not None:
        if key == "stopSequences" and isinstance(value, str):
            value = [value]
        inference[key] = value
    else:
        top[name] = value


def thinking_fields(value: Any) -> dict[str, Any]:
    """The `thinking` field of `additionalModelRequestFields`: a token budget or the model's own object."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise IllegalConfigurationError(
            f"thinking must be a token budget (int) or a thinking object for the model, got {value!r}"
        )
    return {"type": "enabled", "budget_tokens": value}


def _tool(spec: ToolSpecification) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": spec.name}
    if spec.description:
        tool["description"] = spec.description
    tool["inputSchema"] = {"json": spec.parameters}
    return {"toolSpec": tool}


def _tool_choice(choice: ToolChoice | None, specs: Sequence[ToolSpecification]) -> dict[str, Any] | None:
    if choice is None or choice.mode in ("auto", "none"):
        return None  # Converse has no "none": the tools are left out instead, unless the history uses them
    if choice.mode == "required":
        return {"any": {}}
    check_tool_offered(choice, specs)
    return {"tool": {"name": choice.tool_name}}


def _input(call: ToolExecutionRequest) -> Any:
    """A call's arguments as the JSON object `toolUse.input` must be ({} when they are not one)."""
    return arguments_object(call.arguments)
