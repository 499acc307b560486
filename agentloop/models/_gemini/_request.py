"""The `generateContent` request body: agentloop messages, tools, parameters and output format in the
Gemini API's shape.

- consecutive same-role turns are merged; function responses go in the order of their calls (Gemini pairs
  them by position);
- tool calls are `functionCall` parts and results `functionResponse` parts, matched by `id` when the API
  gave one and by name and order otherwise; ids are made up for calls that came without, and sent on both
  parts so they keep matching;
- a call's `thoughtSignature` (kept in `AiMessage.provider_state["gemini"]`) goes back on that same part;
  the documented `skip_thought_signature_validator` is sent for a first call whose signature is not known
  (e.g. after a restart);
- pictures and documents go as bytes (`inlineData`) or URIs (`fileData`), inside a function response for the
  models that take them there (Gemini 3), else right after the responses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentloop._values._content import Content, TextContent
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
from .._wire import (
    add_turn,
    arguments_object,
    check_tool_offered,
    check_tools_for_choice,
    not_a_chat_message,
    unanswered_result,
)
from ._shapes import PROVIDER

__all__ = ["SKIP_SIGNATURE", "build_body", "generation_defaults", "place", "thinking_config"]

SKIP_SIGNATURE = "skip_thought_signature_validator"
"""The value Google documents for a function call whose thought signature was lost (or never existed)."""

_RESERVED = frozenset({"contents", "systemInstruction", "system_instruction", "tools", "toolConfig"})

# Parameters that belong in `generationConfig`: portable and snake_case names mapped to the API's.
_GENERATION = {
    "temperature": "temperature",
    "top_p": "topP",
    "topP": "topP",
    "top_k": "topK",
    "topK": "topK",
    "max_tokens": "maxOutputTokens",
    "max_completion_tokens": "maxOutputTokens",
    "max_output_tokens": "maxOutputTokens",
    "maxOutputTokens": "maxOutputTokens",
    "stop": "stopSequences",
    "stop_sequences": "stopSequences",
    "stopSequences": "stopSequences",
    "seed": "seed",
    "presence_penalty": "presencePenalty",
    "presencePenalty": "presencePenalty",
    "frequency_penalty": "frequencyPenalty",
    "frequencyPenalty": "frequencyPenalty",
    "candidate_count": "candidateCount",
    "candidateCount": "candidateCount",
    "thinking_config": "thinkingConfig",
    "thinkingConfig": "thinkingConfig",
    "media_resolution": "mediaResolution",
    "mediaResolution": "mediaResolution",
    "response_logprobs": "responseLogprobs",
    "responseLogprobs": "responseLogprobs",
}
_TOP_LEVEL = {"safety_settings": "safetySettings", "cached_content": "cachedContent"}


def generation_defaults(
    max_output_tokens: int | None,
    temperature: float | None,
    top_p: float | None,
    top_k: int | None,
    stop_sequences: Sequence[str] | None,
    thinking: int | str | Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The model's default `generationConfig`, from its arguments (those not given are left out)."""
    generation: dict[str, Any] = {}
    for name, value in (
        ("maxOutputTokens", max_output_tokens),
        ("temperature", temperature),
        ("topP", top_p),
        ("topK", top_k),
        ("stopSequences", list(stop_sequences) if stop_sequences is not None else None),
        ("thinkingConfig", thinking_config(thinking)),
    ):
        if value is not None:
            generation[name] = value
    return generation


def build_body(
    request: ChatRequest,
    *,
    generation_config: Mapping[str, Any],
    body_defaults: Mapping[str, Any],
    media_in_tool_results: bool,
) -> dict[str, Any]:
    """The JSON body sent for `request`, the model's defaults overridden by `request.parameters`."""
    system, contents = _contents(request.messages, media_in_tool_results)
    body: dict[str, Any] = {"contents": contents, **body_defaults}
    if system:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    generation = dict(generation_config)
    top: dict[str, Any] = {}
    for name, value in (request.parameters or {}).items():
        if name in _RESERVED:
            raise IllegalConfigurationError(
                f"parameter {name!r} cannot be set through parameters: it comes from the ChatRequest "
                "(messages, system messages, tool_specifications, tool_choice)"
            )
        if value is None:
            key = _GENERATION.get(name) or _TOP_LEVEL.get(name, name)
            generation.pop(key, None)
            body.pop(key, None)
            continue
        place(name, value, generation, top)
    body.update(top)
    if request.response_format is not None:
        generation["responseMimeType"] = "application/json"
        schema = {k: v for k, v in request.response_format.schema.items() if k != "$schema"}
        generation["responseJsonSchema"] = schema
        generation.pop("responseSchema", None)  # the API takes one of the two, never both
    if generation:
        body["generationConfig"] = generation
    specs = request.tool_specifications
    choice = request.tool_choice
    if specs:
        body["tools"] = [{"functionDeclarations": [_declaration(spec) for spec in specs]}]
        if choice is not None:
            body["toolConfig"] = {"functionCallingConfig": _tool_choice(choice, specs)}
    else:
        check_tools_for_choice(choice)
    return body


def _contents(
    history: Sequence[ChatMessage], media_in_tool_results: bool
) -> tuple[str | None, list[dict[str, Any]]]:
    """System text and the `contents` array: consecutive same-role turns merged, call ids filled in,
    function responses in the order of their calls (Gemini pairs them by position)."""
    system: list[str] = []
    contents: list[dict[str, Any]] = []
    pending: list[tuple[str, str]] = []  # (call id, tool name) of the last model turn's calls, unanswered

    def add(role: str, parts: list[dict[str, Any]]) -> None:
        add_turn(contents, role, parts, "parts")

    order: dict[str, int] = {}  # position of each call of the last model turn
    answers: list[tuple[int, dict[str, Any]]] = []  # function responses, put in call order on flush
    deferred: list[dict[str, Any]] = []  # pictures of tool results, sent after all the responses
    with_media: list[ToolExecutionResultMessage] = []  # the results they came with

    def flush() -> None:
        if answers:
            answers.sort(key=lambda answer: answer[0])  # stable: unknown calls keep their order
            add("user", [part for _, part in answers])
            answers.clear()
        if deferred:
            add("user", [{"text": media_of_results_note(with_media)}, *deferred])
            deferred.clear()
            with_media.clear()

    for n, message in enumerate(history):
        if isinstance(message, UserMessage):
            flush()
            if message.has_media:
                add("user", [_part(content) for content in message.contents if _wanted(content)])
                continue
            if not message.text.strip():
                raise BadRequestError(
                    f"gemini: message {n} is a user message with no text (empty or only whitespace); the "
                    "Gemini API rejects empty parts: send some text",
                    provider=PROVIDER,
                )
            add("user", [{"text": message.text}])
        elif isinstance(message, ToolExecutionResultMessage):
            call_id, name = _answered(message, pending)
            key = "error" if message.is_error else "result"
            media = [c for c in message.contents if not isinstance(c, TextContent)]
            response: dict[str, Any] = {"id": call_id, "name": name, "response": {key: message.text}}
            if media and media_in_tool_results:
                response["parts"] = [_part(content) for content in media]
            elif media:
                # Function responses of models before Gemini 3 carry JSON only: the pictures follow
                # them, in the same user turn, after a line saying which call each came from (the
                # result's text names them already).
                with_media.append(ToolExecutionResultMessage(call_id, name, "", contents=media))
                deferred.extend(_part(content) for content in media)
            answers.append((order.get(call_id, len(order)), {"functionResponse": response}))
        elif isinstance(message, AiMessage):
            flush()
            state = message.provider_state.get(PROVIDER) or {}
            signatures = state.get("signatures") or {}
            parts: list[dict[str, Any]] = []
            if message.text:
                text_part: dict[str, Any] = {"text": message.text}
                if state.get("text_signature"):
                    text_part["thoughtSignature"] = state["text_signature"]
                parts.append(text_part)
            pending = []
            order = {}
            for i, call in enumerate(message.tool_execution_requests):
                call_id = call.id or f"call_{n}_{i}"
                pending.append((call_id, call.name))
                order[call_id] = i
                part: dict[str, Any] = {
                    "functionCall": {"id": call_id, "name": call.name, "args": _args(call)}
                }
                signature = signatures.get(call_id)
                if signature is None and i == 0:
                    signature = SKIP_SIGNATURE
                if signature is not None:
                    part["thoughtSignature"] = signature
                parts.append(part)
            add("model", parts)
        elif isinstance(message, SystemMessage):
            if message.text:
                system.append(message.text)
        else:
            raise not_a_chat_message("GeminiChatModel", message)
    flush()
    return ("\n\n".join(system) or None), contents


def _answered(message: ToolExecutionResultMessage, pending: list[tuple[str, str]]) -> tuple[str, str]:
    """(call id, name) of the call `message` answers (taken off `pending`): by id, else by name."""
    if message.id is not None:
        for entry in pending:
            if entry[0] == message.id:
                pending.remove(entry)
                return entry
        return message.id, message.tool_name
    for entry in pending:
        if entry[1] == message.tool_name:
            pending.remove(entry)
            return entry
    raise unanswered_result(message)


def _wanted(content: Content) -> bool:
    """Whether a part goes out (empty text parts are refused by the API and say nothing)."""
    return not isinstance(content, TextContent) or bool(content.text)


def _part(content: Content) -> dict[str, Any]:
    """One user part: text, a picture or a document, as bytes (`inlineData`) or a URI (`fileData`: http(s),
    gs://, or a Files API URI)."""
    if isinstance(content, TextContent):
        return {"text": content.text}
    if content.data is not None:
        return {"inlineData": {"mimeType": content.media_type, "data": content.base64}}
    if content.url is not None and content.url.lower().startswith("s3://"):
        raise IllegalConfigurationError(
            f"gemini cannot fetch {content.url!r}: it takes pictures and documents as bytes, http(s) URLs or "
            "gs:// URIs (s3:// URIs are Bedrock's); give data= or another URL"
        )
    file: dict[str, Any] = {"fileUri": content.url}
    if content.media_type:
        file["mimeType"] = content.media_type
    return {"fileData": file}


def place(name: str, value: Any, generation: dict[str, Any], top: dict[str, Any]) -> None:
    """Puts one parameter where the API wants it: `generationConfig` or the body."""
    if name in _RESERVED:
        raise IllegalConfigurationError(
            f"parameter {name!r} cannot be set through parameters: it comes from the ChatRequest"
        )
    if name == "thinking":
        thinking = thinking_config(value)
        if thinking is not None:
            generation["thinkingConfig"] = thinking
        return
    key = _GENERATION.get(name)
    if key is not None:
        if key == "stopSequences" and isinstance(value, str):
            value = [value]
        generation[key] = value
    else:
        top[_TOP_LEVEL.get(name, name)] = value


def thinking_config(value: Any) -> dict[str, Any] | None:
    """The `thinkingConfig`: a token budget, a level ("low", "high"...), or the API's own object."""
    if value is None or value is False:
        return None
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        return {"thinkingLevel": value, "includeThoughts": True}
    if value is True:
        return {"includeThoughts": True}
    if not isinstance(value, int) or value < -1:
        raise IllegalConfigurationError(
            "thinking must be a token budget (int, -1 for dynamic), a level such as 'low' or 'high', or a "
            f"thinkingConfig object, got {value!r}"
        )
    return {"thinkingBudget": value, "includeThoughts": value != 0}


def _declaration(spec: ToolSpecification) -> dict[str, Any]:
    declaration: dict[str, Any] = {"name": spec.name}
    if spec.description:
        declaration["description"] = spec.description
    parameters = spec.parameters
    if parameters and (parameters.get("properties") or parameters.get("type") != "object"):
        declaration["parametersJsonSchema"] = parameters
    return declaration


def _tool_choice(choice: ToolChoice, specs: Sequence[ToolSpecification]) -> dict[str, Any]:
    if choice.mode == "tool":
        check_tool_offered(choice, specs)
        return {"mode": "ANY", "allowedFunctionNames": [choice.tool_name]}
    return {"mode": {"auto": "AUTO", "required": "ANY", "none": "NONE"}[choice.mode]}


def _args(call: ToolExecutionRequest) -> Any:
    """A call's arguments as the JSON object `functionCall.args` must be ({} when they are not one)."""
    return arguments_object(call.arguments)
