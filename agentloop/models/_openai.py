"""`OpenAIChatModel`: OpenAI Chat Completions, and every server that speaks the same API.

That is OpenAI itself, Azure OpenAI (give its base URL, `query={"api-version": ...}` and an `api-key` header
if you use keys), vLLM, Ollama (`/v1`), llama.cpp server, LM Studio, Groq, Together, DeepSeek, OpenRouter...
Only the message mapping lives here; HTTP, retries and error mapping are `._http`'s.

Mapping decisions: a tool result flagged `is_error` is sent as its text (Chat Completions has no error flag);
tool `metadata` is never sent; `AiMessage.thinking` is not sent back (reasoning servers reject or ignore it);
a tool call without an id (possible with local models) gets a stable synthetic id, matched to its result by
tool name and position; a refusal is reported as the answer's text; a response with tool calls always
finishes with `FinishReason.TOOL_EXECUTION` (several servers say "stop").
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Union

import msgspec

from agentloop._values._content import Content, ImageContent, TextContent
from agentloop._values._errors import AgentLoopError, IllegalConfigurationError, ModelError
from agentloop._values._messages import (
    AiMessage,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    FinishReason,
    ResponseFormat,
    SystemMessage,
    TokenUsage,
    ToolChoice,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
    is_whole_object,
)
from agentloop._values._spec import ToolSpecification

from ._base import ModelEvent, ResponseComplete, TextDelta, ThinkingDelta, ToolCallComplete, ToolCallDelta
from ._http import RetryPolicy, Timeouts
from ._http._client import AsyncHTTPClient
from ._http._provider import HTTPChatModel, retry_policy
from ._media import media_of_results_note, web_url
from ._secrets import clean_api_key
from ._strict import strict_schema
from ._wire import check_tool_offered, check_tools_for_choice, unanswered_result

__all__ = ["OpenAIChatModel"]

OPENAI_BASE_URL = "https://api.openai.com/v1"

_RESERVED = frozenset({"messages", "tools", "tool_choice", "stream", "stream_options"})

_FINISH = {
    "stop": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "tool_calls": FinishReason.TOOL_EXECUTION,
    "function_call": FinishReason.TOOL_EXECUTION,
    "content_filter": FinishReason.CONTENT_FILTER,
}

# -- wire structs (decoded with msgspec; unknown fields are ignored) ----------------------------------------


def openai_connection(
    owner: str,
    model: str,
    http_client: Any,
    api_key: str | None,
    base_url: str | None,
    organization: str | None,
    project: str | None,
    headers: Mapping[str, str] | None,
) -> tuple[str, str | None, str, dict[str, str]]:
    """What OpenAI's two APIs (chat completions, Responses) share at construction: the arguments checked,
    the base URL and key resolved (`OPENAI_API_KEY` only with the default base URL), and the headers.

    Returns the base URL, the key (None without one), where the key came from, and the headers."""
    if not isinstance(model, str) or not model:
        raise IllegalConfigurationError(f"{owner} needs a model name, got {model!r}")
    if http_client is not None and not isinstance(http_client, AsyncHTTPClient):
        raise IllegalConfigurationError(
            "http_client must be an httpx2.AsyncClient or httpx.AsyncClient, "
            f"got {type(http_client).__name__}"
        )
    source = "api_key="
    if base_url is None:
        base_url = os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL
        if api_key is None:
            api_key, source = os.environ.get("OPENAI_API_KEY") or None, "OPENAI_API_KEY"
    api_key = clean_api_key(api_key, owner=owner, source=source)
    all_headers: dict[str, str] = {}
    if api_key:
        all_headers["authorization"] = f"Bearer {api_key}"
    if organization:
        all_headers["openai-organization"] = organization
    if project:
        all_headers["openai-project"] = project
    all_headers.update({k.lower(): v for k, v in (headers or {}).items()})
    return base_url, api_key, source, all_headers


class _Function(msgspec.Struct, gc=False):
    name: str | None = None
    arguments: Union[str, dict[str, Any], None] = None


class _ToolCall(msgspec.Struct, gc=False):
    index: int | None = None
    id: str | None = None
    function: _Function | None = None


class _Part(msgspec.Struct, gc=False):
    type: str | None = None
    text: str | None = None


class _Message(msgspec.Struct, gc=False):
    content: Union[str, list[_Part], None] = None
    refusal: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(msgspec.Struct, gc=False):
    index: int = 0
    message: _Message | None = None
    finish_reason: str | None = None


class _PromptDetails(msgspec.Struct, gc=False):
    cached_tokens: int | None = None


class _CompletionDetails(msgspec.Struct, gc=False):
    reasoning_tokens: int | None = None


class _Usage(msgspec.Struct, gc=False):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None


class _Completion(msgspec.Struct, gc=False):
    id: str | None = None
    model: str | None = None
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: Any = None


class _Delta(msgspec.Struct, gc=False):
    content: str | None = None
    refusal: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _ChunkChoice(msgspec.Struct, gc=False):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Chunk(msgspec.Struct, gc=False):
    id: str | None = None
    model: str | None = None
    choices: list[_ChunkChoice] | None = None
    usage: _Usage | None = None
    error: Any = None


_COMPLETION = msgspec.json.Decoder(_Completion)
_CHUNK = msgspec.json.Decoder(_Chunk)
_encode = msgspec.json.Encoder().encode


def _usage(usage: _Usage | None) -> TokenUsage | None:
    """Usage as the API reports it: `prompt_tokens` include the cached ones, `completion_tokens` the reasoning
    ones (OpenAI, llama.cpp and vLLM send the details; servers that do not leave them None)."""
    if usage is None:
        return None
    prompt, completion = usage.prompt_tokens_details, usage.completion_tokens_details
    return TokenUsage(
        usage.prompt_tokens or 0,
        usage.completion_tokens or 0,
        usage.total_tokens,
        cache_read_tokens=prompt.cached_tokens if prompt is not None else None,
        reasoning_tokens=completion.reasoning_tokens if completion is not None else None,
    )


def _arguments(value: str | dict[str, Any] | None) -> str:
    if value is None or value == "":
        return "{}"
    if isinstance(value, str):
        return value
    return _encode(value).decode()


def _finish(reason: str | None, has_calls: bool) -> FinishReason | None:
    if has_calls and reason in (None, "stop", "tool_calls", "function_call"):
        return FinishReason.TOOL_EXECUTION
    if reason is None:
        return None
    return _FINISH.get(reason, FinishReason.OTHER)


# -- request mapping ----------------------------------------------------------------------------------------


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


def _messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
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


def _tool(spec: ToolSpecification, strict: bool | None) -> dict[str, Any]:
    function: dict[str, Any] = {"name": spec.name}
    if spec.description:
        function["description"] = spec.description
    function["parameters"] = spec.parameters
    if strict is not None:
        function["strict"] = strict
    return {"type": "function", "function": function}


def _response_format(format: ResponseFormat) -> dict[str, Any]:
    schema = strict_schema(format.schema) if format.strict else dict(format.schema)
    json_schema: dict[str, Any] = {"name": format.name, "schema": schema, "strict": format.strict}
    if format.description:
        json_schema["description"] = format.description
    return {"type": "json_schema", "json_schema": json_schema}


def _tool_choice(choice: ToolChoice, specs: Sequence[ToolSpecification]) -> Any:
    if choice.mode == "tool":
        check_tool_offered(choice, specs)
        return {"type": "function", "function": {"name": choice.tool_name}}
    return choice.mode


# -- the model ----------------------------------------------------------------------------------------------


class OpenAIChatModel(HTTPChatModel):
    """A chat model behind an OpenAI-compatible Chat Completions endpoint.

    `model`: the model name. `api_key`: sent as a bearer token; when omitted and `base_url` is omitted too,
    `OPENAI_API_KEY` is read (a key from the environment is never sent to a base URL you chose yourself).
    `base_url`: the API root (default `OPENAI_BASE_URL` or https://api.openai.com/v1). `organization` /
    `project`: OpenAI's `OpenAI-Organization` / `OpenAI-Project` headers. `headers` / `query`: sent with every
    request. `temperature`, `max_tokens`, `top_p`, `stop`, `seed`, `parallel_tool_calls`, `response_format`
    and `parameters` (any other body field, e.g. `{"reasoning_effort": "low"}`) are defaults that
    `ChatRequest.parameters` overrides per call (a None there removes a default). `strict_tools`: send
    `strict` with every tool. `include_usage`: ask for usage when streaming. `timeout`: seconds or
    `Timeouts`. `max_retries` (default 2) and `retry`: see `RetryPolicy` (`max_retries` wins over the
    policy's). `http_client`: an `httpx2.AsyncClient` or `httpx.AsyncClient` to use (never closed by this
    model). `provider`: the name errors and logs use. `async with` or `aclose()` releases the connection pool.

    A `ChatRequest.response_format` goes out as `response_format` `json_schema`, its schema rewritten by
    `strict_schema` when strict.
    """

    supports_response_format = True
    _KEY_HINT = "pass api_key= or set OPENAI_API_KEY"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        organization: str | None = None,
        project: str | None = None,
        headers: Mapping[str, str] | None = None,
        query: Mapping[str, str] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        top_p: float | None = None,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        parallel_tool_calls: bool | None = None,
        response_format: Mapping[str, Any] | None = None,
        parameters: Mapping[str, Any] | None = None,
        strict_tools: bool | None = None,
        include_usage: bool = True,
        timeout: Timeouts | float | None = None,
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        http_client: Any = None,
        provider: str = "openai",
    ) -> None:
        base_url, api_key, _, all_headers = openai_connection(
            "OpenAIChatModel", model, http_client, api_key, base_url, organization, project, headers
        )
        defaults: dict[str, Any] = {}
        for name, value in (
            ("temperature", temperature),
            ("max_tokens", max_tokens),
            ("top_p", top_p),
            ("stop", list(stop) if stop is not None and not isinstance(stop, str) else stop),
            ("seed", seed),
            ("parallel_tool_calls", parallel_tool_calls),
            ("response_format", dict(response_format) if response_format is not None else None),
        ):
            if value is not None:
                defaults[name] = value
        for name, value in (parameters or {}).items():
            self._check_parameter(name)
            if value is not None:
                defaults[name] = value
        self.model = model
        self.strict_tools = strict_tools
        self.include_usage = include_usage
        self.defaults: Mapping[str, Any] = defaults
        self._connect(
            owner="OpenAIChatModel",
            provider=provider,
            base_url=base_url,
            headers=all_headers,
            query=query,
            timeout=timeout,
            retry=retry_policy(retry, max_retries),
            http_client=http_client,
            secrets=(api_key,),
            has_key=bool(api_key),
        )

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model!r}, base_url={self.base_url!r})"

    # -- requests -------------------------------------------------------------------------------------------

    @staticmethod
    def _check_parameter(name: str) -> None:
        if name in _RESERVED:
            raise IllegalConfigurationError(
                f"parameter {name!r} cannot be set through parameters: it comes from the ChatRequest "
                "(messages, tool_specifications, tool_choice) or from chat() / stream()"
            )

    def build_body(self, request: ChatRequest, *, stream: bool) -> dict[str, Any]:
        """The JSON body sent for `request` (public for inspection and debugging)."""
        body: dict[str, Any] = {"model": self.model, "messages": _messages(request.messages)}
        body.update(self.defaults)
        for name, value in (request.parameters or {}).items():
            self._check_parameter(name)
            if value is None:
                body.pop(name, None)
            else:
                body[name] = value
        if request.response_format is not None:
            body["response_format"] = _response_format(request.response_format)
        specs = request.tool_specifications
        if specs:
            body["tools"] = [_tool(spec, self.strict_tools) for spec in specs]
            if request.tool_choice is not None:
                body["tool_choice"] = _tool_choice(request.tool_choice, specs)
        else:
            check_tools_for_choice(request.tool_choice)
            body.pop("parallel_tool_calls", None)  # OpenAI rejects it when no tools are sent
        if stream:
            body["stream"] = True
            if self.include_usage:
                body["stream_options"] = {"include_usage": True}
        return body

    async def chat(self, request: ChatRequest) -> ChatResponse:
        """Sends `request` and returns the whole response."""
        try:
            return await self._chat(request)
        except AgentLoopError:
            raise
        except Exception as exc:  # only AgentLoopErrors leave a provider
            raise self._http.unexpected(exc) from exc

    async def _chat(self, request: ChatRequest) -> ChatResponse:
        body = self._http.encode(self.build_body(request, stream=False))
        try:
            completion = await self._http.request_json(
                "/chat/completions", body, _COMPLETION, tools=bool(request.tool_specifications)
            )
        except ModelError as error:
            raise self._refine(error) from error.__cause__
        if completion.error is not None:
            raise self._http.error_from_payload({"error": completion.error})
        choice = next((c for c in completion.choices or () if c.index == 0), None)
        if choice is None or choice.message is None:
            raise self._http.bad_response("the response has no choices")
        message = choice.message
        content = message.content
        if isinstance(content, list):
            content = "".join(part.text or "" for part in content if part.type in (None, "text"))
        text = content if content else (message.refusal or content)
        tool_calls = message.tool_calls or ()
        cut = len(tool_calls) - 1 if choice.finish_reason == "length" else -1  # the call a cut may be in
        calls = tuple(
            ToolExecutionRequest(
                call.id,
                (call.function.name if call.function else None) or "",
                _arguments(arguments) if arguments or position != cut else "",  # cut before its arguments
            )
            for position, call in enumerate(tool_calls)
            for arguments in [call.function.arguments if call.function else None]
        )
        ai_message = AiMessage(text, calls, message.reasoning_content or message.reasoning)
        return ChatResponse(
            ai_message,
            _usage(completion.usage),
            _finish(choice.finish_reason, bool(calls)),
            completion.model,
            completion.id,
        )

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        """Sends `request` and yields its events as they arrive; closing the iterator closes the response."""
        try:
            body = self._http.encode(self.build_body(request, stream=True))
            opened = self._http.open_sse("/chat/completions", body, tools=bool(request.tool_specifications))
            events = await opened.__aenter__()
        except ModelError as error:
            raise self._refine(error) from error.__cause__
        except Exception as exc:  # only AgentLoopErrors leave a provider
            raise self._http.unexpected(exc) from exc
        exc_info: tuple[Any, Any, Any] = (None, None, None)
        try:
            state = _StreamState()
            done = False
            text = state.text
            fast = False  # the short way is open once the first chunks set the response's id and model
            while not done and (batch := await events.batch()):
                for event in batch:
                    data = event.data
                    if data == "[DONE]":
                        done = True
                        break
                    if event.event == "error":
                        raise self._http.error_from_payload(data, request_id=events.request_id)
                    try:
                        chunk = _CHUNK.decode(data)
                    except (msgspec.DecodeError, RecursionError) as exc:  # RecursionError: nesting too deep
                        raise self._http.bad_response(
                            f"unreadable stream chunk ({exc}): {data[:200]!r}", request_id=events.request_id
                        ) from None
                    # The commonest chunk by far, one piece of answer text, takes the short way.
                    choices = chunk.choices
                    if fast and choices and len(choices) == 1 and chunk.usage is None and chunk.error is None:
                        choice = choices[0]
                        delta = choice.delta
                        if (
                            choice.index == 0
                            and choice.finish_reason is None
                            and delta is not None
                            and delta.content
                            and delta.tool_calls is None
                            and delta.reasoning_content is None
                            and delta.reasoning is None
                        ):
                            text.append(delta.content)
                            yield TextDelta(delta.content)
                            continue
                    if chunk.error is not None:
                        raise self._http.error_from_payload(
                            {"error": chunk.error}, request_id=events.request_id
                        )
                    for model_event in state.feed(chunk):
                        yield model_event
                    fast = state.answered and state.id is not None and state.model is not None
            if not done and state.finish_reason is None:
                raise self._http.bad_response(
                    "the stream ended before the response was complete (no finish_reason, no [DONE])",
                    request_id=events.request_id,
                )
            if not state.answered:  # as `chat()` says for an answer without choices
                raise self._http.bad_response("the stream has no choices", request_id=events.request_id)
            await events.drain()  # read the end of the body: the connection goes back to the pool
            for model_event in state.finish():
                yield model_event
        except Exception as exc:
            exc_info = (type(exc), exc, exc.__traceback__)
            if isinstance(exc, AgentLoopError):
                raise
            raise self._http.unexpected(exc) from exc  # only AgentLoopErrors leave a provider
        except BaseException as exc:
            exc_info = (type(exc), exc, exc.__traceback__)
            raise
        finally:
            await opened.__aexit__(*exc_info)


class _Call:
    """One tool call being reassembled from its deltas."""

    __slots__ = ("complete", "id", "name", "parts")

    def __init__(self, call_id: str | None, name: str | None) -> None:
        self.id = call_id
        self.name = name
        self.parts: list[str] = []
        self.complete = False

    def request(self, cut: bool = False) -> ToolExecutionRequest:
        """The call; empty arguments mean `{}` (a tool without parameters) unless the response was `cut`
        by its token limit right there (then they stay empty, so the call is refused, not run)."""
        arguments = "".join(self.parts)
        return ToolExecutionRequest(self.id, self.name or "", arguments if arguments or cut else "{}")


class _StreamState:
    """Turns Chat Completions chunks into model events and, at the end, the whole `ChatResponse`."""

    __slots__ = (
        "answered",
        "calls",
        "finish_reason",
        "id",
        "model",
        "text",
        "thinking",
        "usage",
        "wire_index",
    )

    def __init__(self) -> None:
        self.answered = False  # a chunk for choice 0 arrived
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.calls: list[_Call] = []
        self.wire_index: dict[int, int] = {}
        self.finish_reason: str | None = None
        self.usage: TokenUsage | None = None
        self.id: str | None = None
        self.model: str | None = None

    def feed(self, chunk: _Chunk) -> list[ModelEvent]:
        events: list[ModelEvent] = []
        if chunk.id and self.id is None:
            self.id = chunk.id
        if chunk.model and self.model is None:
            self.model = chunk.model
        if chunk.usage is not None:
            self.usage = _usage(chunk.usage)
        for choice in chunk.choices or ():
            if choice.index != 0:
                continue
            self.answered = True
            delta = choice.delta
            if delta is not None:
                thinking = delta.reasoning_content or delta.reasoning
                if thinking:
                    self.thinking.append(thinking)
                    events.append(ThinkingDelta(thinking))
                text = delta.content or delta.refusal
                if text:
                    self.text.append(text)
                    events.append(TextDelta(text))
                if delta.tool_calls:
                    for call in delta.tool_calls:
                        self._call_delta(call, events)
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
                self._complete(events)
        return events

    def _call_delta(self, call: _ToolCall, events: list[ModelEvent]) -> None:
        function = call.function
        name = function.name if function is not None else None
        arguments = function.arguments if function is not None else None
        piece = (
            arguments if isinstance(arguments, str) else ("" if arguments is None else _arguments(arguments))
        )
        if call.index is not None:
            wire = call.index
        elif call.id is None and self.calls:
            wire = max(self.wire_index) if self.wire_index else 0
        else:
            wire = max(self.wire_index, default=-1) + 1
        position = self.wire_index.get(wire)
        if position is not None:
            known = self.calls[position]
            if call.id and known.id and call.id != known.id:
                position = None  # same index, another id: a new call (some servers never advance the index)
        if position is None:
            self._complete(events, only_whole=True)  # a new call starts: earlier ones may be done
            position = len(self.calls)
            self.wire_index[wire] = position
            new = _Call(call.id, name)
            if piece:
                new.parts.append(piece)
            self.calls.append(new)
            events.append(ToolCallDelta(position, call.id, name, piece))
            return
        known = self.calls[position]
        if known.id is None and call.id:
            known.id = call.id
        if known.name is None and name:
            known.name = name
        if piece and not (known.complete and piece.isspace()):  # white space after a whole object: nothing
            known.parts.append(piece)
            events.append(ToolCallDelta(position, None, None, piece))

    def _complete(self, events: list[ModelEvent], *, only_whole: bool = False) -> None:
        """Reports the calls not reported yet: all of them at the end of the response; when a new call
        starts, only those whose arguments are a whole JSON object (servers may interleave the pieces of
        several calls, so a call whose arguments are still open waits for the end)."""
        for position, call in enumerate(self.calls):
            if call.complete or (only_whole and not (call.parts and is_whole_object("".join(call.parts)))):
                continue
            call.complete = True
            events.append(ToolCallComplete(position, call.request(self._cut(position))))

    def _cut(self, position: int) -> bool:
        """Whether the call at `position` may have been cut by the token limit (the last one, then)."""
        return self.finish_reason == "length" and position == len(self.calls) - 1

    def finish(self) -> list[ModelEvent]:
        events: list[ModelEvent] = []
        self._complete(events)
        requests = tuple(call.request(self._cut(position)) for position, call in enumerate(self.calls))
        message = AiMessage(
            "".join(self.text) if self.text else None,
            requests,
            "".join(self.thinking) if self.thinking else None,
        )
        response = ChatResponse(
            message, self.usage, _finish(self.finish_reason, bool(requests)), self.model, self.id
        )
        events.append(ResponseComplete(response))
        return events
