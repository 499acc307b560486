"""`GeminiChatModel`: Google's Gemini API (`generateContent`, and `streamGenerateContent` over SSE).

HTTP, retries and error mapping come from `._http`; this module only translates: agentloop messages to the
Gemini `contents` payload, and the API's JSON answer or event stream back to agentloop's response and events.

Gemini specifics handled here:
- tool calls are `functionCall` parts and results `functionResponse` parts, matched by `id` when the API gives
  one (newer versions) and by name and order otherwise; agentloop makes up ids for calls that came without,
  and sends them back on both parts so they keep matching;
- thinking models put an opaque `thoughtSignature` on the part that must be sent back on that same part in the
  next request; signatures are remembered per tool-call id (and the documented
  `skip_thought_signature_validator` is sent for a call whose signature is not known, e.g. after a restart);
- usage: `candidatesTokenCount + thoughtsTokenCount` is the output, `promptTokenCount` (cached tokens
  included) the input;
- a blocked prompt (`promptFeedback.blockReason`) or an answer stopped for safety with nothing in it raises a
  `ModelError` saying why; `MALFORMED_FUNCTION_CALL` raises a `BadResponseError`.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import msgspec

from agentloop._content import Content, TextContent
from agentloop._errors import (
    AgentLoopError,
    AuthenticationError,
    BadRequestError,
    BadResponseError,
    IllegalConfigurationError,
    ModelError,
)
from agentloop._messages import (
    AiMessage,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    FinishReason,
    SystemMessage,
    TokenUsage,
    ToolChoice,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from agentloop._spec import ToolSpecification

from ._base import ModelEvent, ResponseComplete, TextDelta, ThinkingDelta, ToolCallComplete, ToolCallDelta
from ._http import RetryPolicy, Timeouts
from ._http._provider import HTTPChatModel, retry_policy
from ._media import media_of_results_note
from ._secrets import clean_api_key
from ._wire import arguments_object, check_tool_offered

__all__ = ["GEMINI_BASE_URL", "GeminiChatModel"]

GEMINI_BASE_URL = "https://generativelanguage.googleapis.com"
SKIP_SIGNATURE = "skip_thought_signature_validator"
"""The value Google documents for a function call whose thought signature was lost (or never existed)."""

_PROVIDER = "gemini"
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

_FINISH_REASONS = {
    "STOP": FinishReason.STOP,
    "MAX_TOKENS": FinishReason.LENGTH,
    "SAFETY": FinishReason.CONTENT_FILTER,
    "RECITATION": FinishReason.CONTENT_FILTER,
    "BLOCKLIST": FinishReason.CONTENT_FILTER,
    "PROHIBITED_CONTENT": FinishReason.CONTENT_FILTER,
    "SPII": FinishReason.CONTENT_FILTER,
    "IMAGE_SAFETY": FinishReason.CONTENT_FILTER,
    "IMAGE_PROHIBITED_CONTENT": FinishReason.CONTENT_FILTER,
}
_BLOCK_HINTS = {
    "SAFETY": "the safety filters stopped it; rephrase, or relax them (safety_settings=[...])",
    "RECITATION": "it recited training data too closely; ask for a paraphrase",
    "BLOCKLIST": "it contained a term on a blocklist",
    "PROHIBITED_CONTENT": "it was flagged as prohibited content",
    "SPII": "it contained sensitive personal information",
    "IMAGE_SAFETY": "a generated image was stopped by the safety filters",
    "OTHER": "the API gave no more detail",
}


# -- wire shapes (decoding only what is used; unknown fields are ignored) ------------------------------------


class _FunctionCall(msgspec.Struct):
    name: str = ""
    args: msgspec.Raw = msgspec.Raw()
    id: str | None = None


class _Part(msgspec.Struct, rename="camel"):
    text: str | None = None
    thought: bool = False
    thought_signature: str | None = None
    function_call: _FunctionCall | None = None


class _Content(msgspec.Struct):
    parts: list[_Part] = []
    role: str | None = None


class _Candidate(msgspec.Struct, rename="camel"):
    content: _Content | None = None
    finish_reason: str | None = None
    finish_message: str | None = None
    index: int = 0


class _UsageMetadata(msgspec.Struct, rename="camel", gc=False):
    prompt_token_count: int | None = None
    candidates_token_count: int | None = None
    cached_content_token_count: int | None = None
    thoughts_token_count: int | None = None
    tool_use_prompt_token_count: int | None = None
    total_token_count: int | None = None


class _PromptFeedback(msgspec.Struct, rename="camel"):
    block_reason: str | None = None
    block_reason_message: str | None = None


class _Chunk(msgspec.Struct, rename="camel"):
    candidates: list[_Candidate] = []
    usage_metadata: _UsageMetadata | None = None
    prompt_feedback: _PromptFeedback | None = None
    model_version: str | None = None
    response_id: str | None = None
    error: Any = None


_chunk_decoder = msgspec.json.Decoder(_Chunk)
_call_ids = itertools.count(1)


# -- the model -----------------------------------------------------------------------------------------------


class GeminiChatModel(HTTPChatModel):
    """Gemini models through the Gemini API (`{base_url}/{api_version}/models/{model}:generateContent`).

    `api_key`: sent as the `x-goog-api-key` header (never in the URL); when omitted and `base_url` is omitted
    too, `GEMINI_API_KEY` (else `GOOGLE_API_KEY`) is read (a key from the environment is never sent to a base
    URL you chose yourself). `base_url`: the API root (default `GOOGLE_GEMINI_BASE_URL` or
    https://generativelanguage.googleapis.com). `api_version`: "v1beta" (function call ids, thinking and JSON
    Schema output need it).

    `max_output_tokens`, `temperature`, `top_p`, `top_k`, `stop_sequences`, `thinking` (a token budget, a
    level such as "low"/"high", or the API's own `thinkingConfig` object; thought summaries are asked for),
    `safety_settings` and `parameters` (any other `generationConfig` field, or a body field such as
    `cachedContent`) are defaults that `ChatRequest.parameters` overrides per call (None there removes one).

    Retries connection failures and 408/409/429/5xx answers (`max_retries` or `retry`; a 429's `RetryInfo`
    delay is honoured) until the first event of a stream arrived, never after. `http_client`: an
    `httpx2.AsyncClient` or `httpx.AsyncClient` to use (never closed by this model).

    A `ChatRequest.response_format` goes out as `responseMimeType: application/json` with
    `responseJsonSchema` (Gemini's native structured output, JSON Schema with `$ref` allowed). Pictures a tool
    returned go inside its `functionResponse` (`parts`) when `media_in_tool_results` (default: for Gemini 3
    models), otherwise right after the function responses.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        api_version: str = "v1beta",
        max_output_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        stop_sequences: Sequence[str] | None = None,
        thinking: int | str | Mapping[str, Any] | None = None,
        safety_settings: Sequence[Mapping[str, Any]] | None = None,
        parameters: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: Timeouts | float | None = None,
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        http_client: Any = None,
        structured_output: bool = True,
        media_in_tool_results: bool | None = None,
    ) -> None:
        self.supports_response_format = structured_output
        if not isinstance(model, str) or not model.strip():
            raise IllegalConfigurationError(
                f"GeminiChatModel needs a model name such as 'gemini-2.5-flash', got {model!r}"
            )
        model = model.strip().removeprefix("models/")
        source = "api_key="
        if base_url is None:
            base_url = os.environ.get("GOOGLE_GEMINI_BASE_URL") or GEMINI_BASE_URL
            if api_key is None:
                for variable in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
                    if os.environ.get(variable):
                        api_key, source = os.environ[variable], variable
                        break
            api_key = clean_api_key(api_key, owner="GeminiChatModel", source=source)
            if not api_key and base_url.rstrip("/") == GEMINI_BASE_URL:
                raise IllegalConfigurationError(
                    "GeminiChatModel needs an API key: pass api_key=... or set GEMINI_API_KEY"
                )
        api_key = clean_api_key(api_key, owner="GeminiChatModel", source=source)
        self._key_source = source
        if max_output_tokens is not None and (
            isinstance(max_output_tokens, bool)
            or not isinstance(max_output_tokens, int)
            or max_output_tokens < 1
        ):
            raise IllegalConfigurationError(
                f"max_output_tokens must be a positive int, got {max_output_tokens!r}"
            )
        self.model = model
        # Gemini 3 takes pictures inside a function response ("multimodal function responses"); older
        # models get them right after the responses.
        self.media_in_tool_results = (
            model.startswith("gemini-3") if media_in_tool_results is None else media_in_tool_results
        )
        self.api_version = api_version.strip("/")
        generation: dict[str, Any] = {}
        top: dict[str, Any] = {}
        for name, value in (
            ("maxOutputTokens", max_output_tokens),
            ("temperature", temperature),
            ("topP", top_p),
            ("topK", top_k),
            ("stopSequences", list(stop_sequences) if stop_sequences is not None else None),
            ("thinkingConfig", _thinking(thinking)),
        ):
            if value is not None:
                generation[name] = value
        if safety_settings is not None:
            top["safetySettings"] = [dict(s) for s in safety_settings]
        for name, value in (parameters or {}).items():
            _place(name, value, generation, top)
        self.generation_config: Mapping[str, Any] = generation
        self.body_defaults: Mapping[str, Any] = top
        all_headers = {k.lower(): v for k, v in (headers or {}).items()}
        if api_key:
            all_headers["x-goog-api-key"] = api_key
        self._has_key = bool(api_key)
        self._connect(
            owner="GeminiChatModel",
            provider=_PROVIDER,
            base_url=base_url,
            headers=all_headers,
            timeout=timeout,
            retry=retry_policy(retry, max_retries),
            http_client=http_client,
            secrets=(api_key,),
            has_key=bool(api_key),
        )

    def __repr__(self) -> str:
        return f"GeminiChatModel(model={self.model!r}, base_url={self._http.base_url!r})"

    # -- calls -----------------------------------------------------------------------------------------------

    def _path(self, stream: bool) -> str:
        method = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return f"/{self.api_version}/models/{self.model}:{method}"

    def _refine(self, error: ModelError) -> ModelError:
        """Gemini answers a wrong key with 400 INVALID_ARGUMENT ("API key not valid"): an authentication
        error, saying which key to check."""
        message = (error.provider_message or "").lower()
        if error.status_code in (400, 401, 403) and ("api key" in message or "api_key" in message):
            where = "GEMINI_API_KEY" if self._key_source == "api_key=" else self._key_source
            hint = "no API key was given" if not self._has_key else f"check the key ({where})"
            refined = AuthenticationError(
                f"{error.message}; {hint}: pass api_key= or set GEMINI_API_KEY",
                provider=error.provider,
                status_code=error.status_code,
                error_type=error.error_type,
                provider_message=error.provider_message,
                request_id=error.request_id,
            )
            refined.__cause__ = error.__cause__
            return refined
        if error.status_code in (401, 403):
            where = "GEMINI_API_KEY" if self._key_source == "api_key=" else self._key_source
            error.message += f"; check the API key ({where}) and that it may use {self.model}"
            error.args = (error.message,)
        return error

    async def chat(self, request: ChatRequest) -> ChatResponse:
        """Sends `request` and returns the whole response."""
        try:
            body = self._http.encode(self.build_body(request))
            chunk = await self._http.request_json(
                self._path(False), body, _chunk_decoder, tools=bool(request.tool_specifications)
            )
            state = _Assembler()
            state.feed(chunk)
            return state.response(None)
        except ModelError as error:
            raise self._refine(error) from error.__cause__
        except AgentLoopError:
            raise
        except Exception as exc:  # only AgentLoopErrors leave a provider
            raise self._http.unexpected(exc) from exc

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        """Sends `request` and yields its events as they arrive (`ResponseComplete` last); closing the
        iterator closes the response."""
        try:
            body = self._http.encode(self.build_body(request))
            async with self._http.open_sse(
                self._path(True), body, tools=bool(request.tool_specifications)
            ) as events:
                state = _Assembler()
                while batch := await events.batch():
                    for sse in batch:
                        try:
                            chunk = _chunk_decoder.decode(sse.data)
                        except (msgspec.DecodeError, RecursionError) as exc:  # RecursionError: too deep
                            raise self._http.bad_response(
                                f"unreadable stream chunk ({exc}): {sse.data[:200]!r}",
                                request_id=events.request_id,
                            ) from None
                        if chunk.error is not None:
                            raise self._http.error_from_payload(
                                {"error": chunk.error}, request_id=events.request_id
                            )
                        for event in state.feed(chunk):
                            yield event
                    if state.finish_reason is not None or state.blocked is not None:
                        # The last chunk: read the end of the body, so the connection goes back to the pool.
                        await events.drain()
                        break
                if state.finish_reason is None and state.blocked is None:
                    raise self._http.bad_response(
                        "the event stream ended before a finishReason (the response is incomplete)",
                        request_id=events.request_id,
                    )
                response = state.response(events.request_id)
                for event in state.completed_calls():
                    yield event
                yield ResponseComplete(response)
        except ModelError as error:
            raise self._refine(error) from error.__cause__
        except AgentLoopError:
            raise
        except Exception as exc:  # only AgentLoopErrors leave a provider
            raise self._http.unexpected(exc) from exc

    # -- request ---------------------------------------------------------------------------------------------

    def build_body(self, request: ChatRequest) -> dict[str, Any]:
        """The JSON body sent for `request` (public for inspection and debugging)."""
        system, contents = self._contents(request.messages)
        body: dict[str, Any] = {"contents": contents, **self.body_defaults}
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        generation = dict(self.generation_config)
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
            _place(name, value, generation, top)
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
        elif choice is not None and choice.mode in ("required", "tool"):
            raise IllegalConfigurationError(
                f"tool choice {choice.mode!r} needs at least one tool specification in the request"
            )
        return body

    def _contents(self, history: Sequence[ChatMessage]) -> tuple[str | None, list[dict[str, Any]]]:
        """System text and the `contents` array: consecutive same-role turns merged, call ids filled in,
        function responses in the order of their calls (Gemini pairs them by position)."""
        system: list[str] = []
        contents: list[dict[str, Any]] = []
        pending: list[tuple[str, str]] = []  # (call id, tool name) of the last model turn's calls, unanswered

        def add(role: str, parts: list[dict[str, Any]]) -> None:
            if not parts:
                return
            if contents and contents[-1]["role"] == role:
                contents[-1]["parts"].extend(parts)
            else:
                contents.append({"role": role, "parts": parts})

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
                        provider=_PROVIDER,
                    )
                add("user", [{"text": message.text}])
            elif isinstance(message, ToolExecutionResultMessage):
                call_id, name = self._answered(message, pending)
                key = "error" if message.is_error else "result"
                media = [c for c in message.contents if not isinstance(c, TextContent)]
                response: dict[str, Any] = {"id": call_id, "name": name, "response": {key: message.text}}
                if media and self.media_in_tool_results:
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
                state = message.provider_state.get(_PROVIDER) or {}
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
                raise IllegalConfigurationError(
                    f"GeminiChatModel cannot send a {type(message).__name__}: not a chat message (use "
                    "SystemMessage, UserMessage, AiMessage or ToolExecutionResultMessage)"
                )
        flush()
        return ("\n\n".join(system) or None), contents

    @staticmethod
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
        raise IllegalConfigurationError(
            f"the result of tool {message.tool_name!r} has no id and answers no tool call before it; give "
            "ToolExecutionResultMessage the id of the call it answers"
        )


# -- the answer ----------------------------------------------------------------------------------------------


class _Assembler:
    """Turns one response's chunks (one for `generateContent`, many for a stream) into agentloop events and,
    at the end, into the `ChatResponse`."""

    __slots__ = (
        "_calls",
        "_pending_signature",
        "_sent",
        "_signatures",
        "_text_signature",
        "blocked",
        "finish_message",
        "finish_reason",
        "id",
        "model_version",
        "texts",
        "thoughts",
        "usage",
    )

    def __init__(self) -> None:
        self._signatures: dict[str, str] = {}
        self._text_signature: str | None = None
        self.texts: list[str] = []
        self.thoughts: list[str] = []
        self._calls: list[ToolExecutionRequest] = []
        self._sent = 0  # calls already announced complete
        self._pending_signature: str | None = None  # a signature that came on a part before the calls
        self.finish_reason: str | None = None
        self.finish_message: str | None = None
        self.blocked: _PromptFeedback | None = None
        self.usage: _UsageMetadata | None = None
        self.id: str | None = None
        self.model_version: str | None = None

    def feed(self, chunk: _Chunk) -> list[ModelEvent]:
        """The agentloop events of one chunk."""
        events: list[ModelEvent] = []
        if chunk.usage_metadata is not None:
            self.usage = chunk.usage_metadata  # cumulative: the last one counts
        if chunk.response_id:
            self.id = chunk.response_id
        if chunk.model_version:
            self.model_version = chunk.model_version
        if chunk.prompt_feedback is not None and chunk.prompt_feedback.block_reason:
            self.blocked = chunk.prompt_feedback
        for candidate in chunk.candidates:
            if candidate.index != 0:
                continue
            if candidate.content is not None:
                for part in candidate.content.parts:
                    self._part(part, events)
            if candidate.finish_reason:
                self.finish_reason = candidate.finish_reason
                self.finish_message = candidate.finish_message
        return events

    def _part(self, part: _Part, events: list[ModelEvent]) -> None:
        call = part.function_call
        if call is not None:
            index = len(self._calls)
            call_id = call.id or f"call_gemini_{next(_call_ids)}"
            raw = bytes(call.args).decode() if call.args else ""
            request = ToolExecutionRequest(
                call_id, call.name, raw if raw.strip() not in ("", "null") else "{}"
            )
            self._calls.append(request)
            signature = part.thought_signature or self._pending_signature
            self._pending_signature = None
            if signature:
                self._signatures[call_id] = signature
            events.append(ToolCallDelta(index, call_id, call.name, request.arguments))
            events.extend(self.completed_calls())
            return
        if part.thought_signature:
            if self._calls:  # a signature after the calls: on the text that ends the answer
                self._text_signature = part.thought_signature
            else:  # kept for the first call that follows, else for the text
                self._pending_signature = part.thought_signature
        text = part.text
        if text:
            if part.thought:
                self.thoughts.append(text)
                events.append(ThinkingDelta(text))
            else:
                self.texts.append(text)
                events.append(TextDelta(text))

    def completed_calls(self) -> list[ModelEvent]:
        """`ToolCallComplete` for the calls not yet announced (Gemini sends each call whole)."""
        done: list[ModelEvent] = [
            ToolCallComplete(i, self._calls[i]) for i in range(self._sent, len(self._calls))
        ]
        self._sent = len(self._calls)
        return done

    def response(self, request_id: str | None) -> ChatResponse:
        """The whole response; raises for a blocked prompt, or an answer stopped with nothing in it."""
        if self.blocked is not None:
            block = self.blocked.block_reason or "OTHER"
            detail = f": {self.blocked.block_reason_message}" if self.blocked.block_reason_message else ""
            hint = _BLOCK_HINTS.get(block, _BLOCK_HINTS["OTHER"])
            raise ModelError(
                f"gemini: the prompt was blocked (blockReason {block}){detail}; {hint}",
                provider=_PROVIDER,
                error_type=f"prompt_blocked:{block}",
                request_id=request_id,
            )
        reason = self.finish_reason
        if reason in ("MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS"):
            detail = f": {self.finish_message}" if self.finish_message else ""
            raise BadResponseError(
                f"gemini: the model's answer ended with {reason}{detail}; it produced a function call the "
                "API could not accept (retrying often helps; simpler tool schemas help more)",
                provider=_PROVIDER,
                error_type=reason,
                request_id=request_id,
            )
        finish = _FINISH_REASONS.get(reason or "", FinishReason.OTHER) if reason else None
        if finish is FinishReason.CONTENT_FILTER and not self.texts and not self._calls:
            detail = f": {self.finish_message}" if self.finish_message else ""
            hint = _BLOCK_HINTS.get(reason or "OTHER", _BLOCK_HINTS["OTHER"])
            raise ModelError(
                f"gemini: the answer was stopped with finishReason {reason} before it said anything{detail}; "
                f"{hint}",
                provider=_PROVIDER,
                error_type=f"finish:{reason}",
                request_id=request_id,
            )
        if self._calls and finish is FinishReason.STOP:
            finish = FinishReason.TOOL_EXECUTION
        state: dict[str, Any] = {}
        if self._signatures:
            state["signatures"] = self._signatures
        text_signature = self._text_signature or self._pending_signature
        if text_signature and self.texts:
            state["text_signature"] = text_signature
        message = AiMessage(
            "".join(self.texts) if self.texts else None,
            tuple(self._calls),
            "".join(self.thoughts) if self.thoughts else None,
            {_PROVIDER: state} if state else {},
        )
        return ChatResponse(message, _token_usage(self.usage), finish, self.model_version, self.id)


# -- helpers -------------------------------------------------------------------------------------------------


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


def _place(name: str, value: Any, generation: dict[str, Any], top: dict[str, Any]) -> None:
    """Puts one parameter where the API wants it: `generationConfig` or the body."""
    if name in _RESERVED:
        raise IllegalConfigurationError(
            f"parameter {name!r} cannot be set through parameters: it comes from the ChatRequest"
        )
    if name == "thinking":
        thinking = _thinking(value)
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


def _thinking(value: Any) -> dict[str, Any] | None:
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


def _token_usage(usage: _UsageMetadata | None) -> TokenUsage | None:
    """Usage with thought tokens counted as output (Gemini reports them apart from the candidates')."""
    if usage is None or (usage.prompt_token_count is None and usage.candidates_token_count is None):
        return None
    thoughts = usage.thoughts_token_count
    prompt = (usage.prompt_token_count or 0) + (usage.tool_use_prompt_token_count or 0)
    output = (usage.candidates_token_count or 0) + (thoughts or 0)
    return TokenUsage(
        prompt,
        output,
        cache_read_tokens=usage.cached_content_token_count,
        reasoning_tokens=thoughts,
    )
