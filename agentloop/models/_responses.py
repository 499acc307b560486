"""`OpenAIResponsesModel`: OpenAI's Responses API (`POST {base_url}/responses`).

Only the mapping lives here; HTTP, retries and error mapping are `._http`'s, as for the chat provider.

Mapping decisions:
- System messages go out as `instructions`; user and assistant turns as `input` items; a tool call as a
  `function_call` item and its result as a `function_call_output` item with the same `call_id` (the
  `ToolExecutionRequest.id` is the `call_id`, never the item's `fc_...` id).
- Reasoning items (with `encrypted_content` when `include_reasoning` asks for it, the default for reasoning
  models) are kept on the answer's `AiMessage.provider_state["openai-responses"]` with the order of the
  output items and their ids, and sent back in that order on the next call, so a reasoning model keeps its
  reasoning between rounds with `store=False` too. The state of another provider is never sent.
- Pictures and documents go as `input_image` / `input_file`; pictures and documents a tool returned go in
  its `function_call_output` (its `output` becomes a list of `input_text` / `input_image` / `input_file`).
- `AiMessage.thinking` is the reasoning summary text (ask for summaries with `reasoning_summary="auto"`).
- Usage: `input_tokens` include the cached ones (`cache_read_tokens`), `output_tokens` the reasoning ones
  (`reasoning_tokens`), as the API reports them.
- An incomplete response (`max_output_tokens`, `content_filter`) finishes with `LENGTH` / `CONTENT_FILTER`;
  `response.failed` and `error` events raise the mapped `ModelError`.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

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
)
from agentloop._values._spec import ToolSpecification

from ._base import ModelEvent, ResponseComplete, TextDelta, ThinkingDelta, ToolCallComplete, ToolCallDelta
from ._http import RetryPolicy, Timeouts
from ._http._provider import HTTPChatModel, retry_policy
from ._media import web_url
from ._openai import openai_connection
from ._strict import strict_schema
from ._wire import check_tool_offered, check_tools_for_choice, unanswered_result

__all__ = ["STATE_KEY", "OpenAIResponsesModel"]

STATE_KEY = "openai-responses"
"""The key of this provider's state in `AiMessage.provider_state`."""

_RESERVED = frozenset({"input", "instructions", "tools", "tool_choice", "stream", "text"})
_REASONING_MODEL = re.compile(r"^(o\d|gpt-5|codex)", re.IGNORECASE)

# -- wire structs (decoded with msgspec; unknown fields are ignored) ----------------------------------------


class _Part(msgspec.Struct, gc=False):
    type: str = ""
    text: str | None = None
    refusal: str | None = None


class _Item(msgspec.Struct, gc=False):
    type: str = ""
    id: str | None = None
    # function_call
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    # message
    content: list[_Part] | None = None
    # reasoning
    summary: list[_Part] | None = None
    encrypted_content: str | None = None
    status: str | None = None


class _InputDetails(msgspec.Struct, gc=False):
    cached_tokens: int | None = None


class _OutputDetails(msgspec.Struct, gc=False):
    reasoning_tokens: int | None = None


class _Usage(msgspec.Struct, gc=False):
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int | None = None
    input_tokens_details: _InputDetails | None = None
    output_tokens_details: _OutputDetails | None = None


class _Incomplete(msgspec.Struct, gc=False):
    reason: str | None = None


class _Response(msgspec.Struct, gc=False):
    id: str | None = None
    model: str | None = None
    status: str | None = None
    output: list[_Item] | None = None
    usage: _Usage | None = None
    incomplete_details: _Incomplete | None = None
    error: Any = None


class _Event(msgspec.Struct, gc=False):
    type: str = ""
    delta: str | None = None
    output_index: int | None = None
    item: _Item | None = None
    response: _Response | None = None
    # the `error` event
    code: Any = None
    message: str | None = None


_RESPONSE = msgspec.json.Decoder(_Response)
_EVENT = msgspec.json.Decoder(_Event)
_ITEM_FIELDS = ("type", "id", "summary", "encrypted_content", "status")


def _usage(usage: _Usage | None) -> TokenUsage | None:
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


def _finish(response: _Response, has_calls: bool) -> FinishReason:
    if response.status == "incomplete":
        reason = response.incomplete_details.reason if response.incomplete_details else None
        return FinishReason.CONTENT_FILTER if reason == "content_filter" else FinishReason.LENGTH
    return FinishReason.TOOL_EXECUTION if has_calls else FinishReason.STOP


def _reasoning_state(item: _Item) -> dict[str, Any]:
    """A reasoning item as kept between rounds: exactly what the API takes back as input."""
    state: dict[str, Any] = {
        "type": "reasoning",
        "id": item.id,
        "summary": [{"type": "summary_text", "text": part.text or ""} for part in item.summary or ()],
    }
    if item.encrypted_content is not None:
        state["encrypted_content"] = item.encrypted_content
    return state


class _Answer:
    """The output items of one response, folded into an `AiMessage` with this provider's state."""

    __slots__ = ("calls", "order", "text", "thinking")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.calls: list[ToolExecutionRequest] = []
        self.order: list[dict[str, Any]] = []  # the output items in order: reasoning whole, others by id

    def add(self, item: _Item, *, streamed: bool) -> ToolExecutionRequest | None:
        """Takes one finished output item; text and summaries already streamed are not taken twice."""
        kind = item.type
        if kind == "message":
            self.order.append({"type": "message", "id": item.id})
            if not streamed:
                for part in item.content or ():
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
        return None

    def message(self) -> AiMessage:
        """The answer; the item order goes with it only when it holds reasoning (which must go back with
        the items that followed it, by id)."""
        reasoned = any(entry["type"] == "reasoning" for entry in self.order)
        state = {STATE_KEY: {"output": self.order}} if reasoned else {}
        return AiMessage(
            "".join(self.text) if self.text else None,
            tuple(self.calls),
            "\n\n".join(self.thinking) if self.thinking else None,
            state,
        )


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


def _ai_items(message: AiMessage, n: int) -> list[dict[str, Any]]:
    """An answer as input items, in the order the API produced them when its state says so."""
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
            items.append({k: entry[k] for k in _ITEM_FIELDS if k in entry and entry[k] is not None})
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


def _input(messages: Sequence[ChatMessage]) -> tuple[str | None, list[dict[str, Any]]]:
    """System text (`instructions`) and the `input` items."""
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
            items.extend(_ai_items(message, n))
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


def _tool(spec: ToolSpecification, strict: bool | None) -> dict[str, Any]:
    tool: dict[str, Any] = {"type": "function", "name": spec.name}
    if spec.description:
        tool["description"] = spec.description
    tool["parameters"] = strict_schema(spec.parameters) if strict else spec.parameters
    tool["strict"] = bool(strict)
    return tool


def _text_format(format: ResponseFormat) -> dict[str, Any]:
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


def _tool_choice(choice: ToolChoice, specs: Sequence[ToolSpecification]) -> Any:
    if choice.mode == "tool":
        check_tool_offered(choice, specs)
        return {"type": "function", "name": choice.tool_name}
    return choice.mode


# -- the model ----------------------------------------------------------------------------------------------


class OpenAIResponsesModel(HTTPChatModel):
    """A chat model on OpenAI's Responses API (`"openai-responses:<model>"`).

    `model`: the model name. `api_key`: sent as a bearer token; when omitted and `base_url` is omitted too,
    `OPENAI_API_KEY` is read (a key from the environment is never sent to a base URL you chose yourself).
    `base_url`: the API root (default `OPENAI_BASE_URL` or https://api.openai.com/v1). `organization` /
    `project`, `headers`, `query`: as `OpenAIChatModel`'s. `temperature`, `top_p`, `max_output_tokens`,
    `parallel_tool_calls`, `reasoning_effort` ("minimal", "low", "medium", "high"), `reasoning_summary`
    ("auto", "concise", "detailed": streamed as thinking), `store` (default False: OpenAI keeps nothing;
    reasoning travels as encrypted content) and `parameters` (any other body field, e.g.
    `{"service_tier": "flex"}`; `previous_response_id` goes with `store=True` and only the new messages) are
    defaults that `ChatRequest.parameters` overrides per call (a None there removes one).
    `include_reasoning`: ask for reasoning items' encrypted content, to send them back on the next call
    (default: for reasoning models, o-series, gpt-5 and codex, whose names start so). `strict_tools`: send
    tools as strict (schemas rewritten by `strict_schema`). `timeout`, `max_retries`, `retry`,
    `http_client`, `provider`: as `OpenAIChatModel`'s.

    A `ChatRequest.response_format` goes out as `text.format` `json_schema`.
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
        top_p: float | None = None,
        max_output_tokens: int | None = None,
        parallel_tool_calls: bool | None = None,
        reasoning_effort: str | None = None,
        reasoning_summary: str | None = None,
        store: bool | None = False,
        include_reasoning: bool | None = None,
        parameters: Mapping[str, Any] | None = None,
        strict_tools: bool | None = None,
        timeout: Timeouts | float | None = None,
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        http_client: Any = None,
        provider: str = "openai",
    ) -> None:
        base_url, api_key, source, all_headers = openai_connection(
            "OpenAIResponsesModel", model, http_client, api_key, base_url, organization, project, headers
        )
        defaults: dict[str, Any] = {}
        reasoning: dict[str, Any] = {}
        if reasoning_effort is not None:
            reasoning["effort"] = reasoning_effort
        if reasoning_summary is not None:
            reasoning["summary"] = reasoning_summary
        if include_reasoning is None:
            include_reasoning = bool(reasoning) or bool(_REASONING_MODEL.match(model))
        for name, value in (
            ("temperature", temperature),
            ("top_p", top_p),
            ("max_output_tokens", max_output_tokens),
            ("parallel_tool_calls", parallel_tool_calls),
            ("reasoning", reasoning or None),
            ("store", store),
            ("include", ["reasoning.encrypted_content"] if include_reasoning else None),
        ):
            if value is not None:
                defaults[name] = value
        for name, value in (parameters or {}).items():
            self._check_parameter(name)
            if value is not None:
                defaults[name] = value
        self.model = model
        self.strict_tools = strict_tools
        self.defaults: Mapping[str, Any] = defaults
        self._key_source = source if api_key else None
        self._connect(
            owner="OpenAIResponsesModel",
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
        return f"OpenAIResponsesModel(model={self.model!r}, base_url={self.base_url!r})"

    # -- requests -------------------------------------------------------------------------------------------

    @staticmethod
    def _check_parameter(name: str) -> None:
        if name in _RESERVED:
            raise IllegalConfigurationError(
                f"parameter {name!r} cannot be set through parameters: it comes from the ChatRequest "
                "(messages, tool_specifications, tool_choice, response_format) or from chat() / stream()"
            )

    def build_body(self, request: ChatRequest, *, stream: bool) -> dict[str, Any]:
        """The JSON body sent for `request` (public for inspection and debugging)."""
        instructions, items = _input(request.messages)
        body: dict[str, Any] = {"model": self.model}
        if instructions is not None:
            body["instructions"] = instructions
        body["input"] = items
        body.update(self.defaults)
        for name, value in (request.parameters or {}).items():
            self._check_parameter(name)
            if value is None:
                body.pop(name, None)
            else:
                body[name] = value
        if request.response_format is not None:
            body["text"] = {"format": _text_format(request.response_format)}
        specs = request.tool_specifications
        if specs:
            body["tools"] = [_tool(spec, self.strict_tools) for spec in specs]
            if request.tool_choice is not None:
                body["tool_choice"] = _tool_choice(request.tool_choice, specs)
        else:
            check_tools_for_choice(request.tool_choice)
            body.pop("parallel_tool_calls", None)
        if stream:
            body["stream"] = True
        return body

    def _refine(self, error: ModelError) -> ModelError:
        """A 401/403 says which key to check: where the key sent came from (never the key itself), or how to
        give one."""
        if error.status_code in (401, 403) and self._key_source is not None:
            error.message += f"; the key sent was the one from {self._key_source}"
            error.args = (error.message,)
            return error
        return super()._refine(error)

    async def chat(self, request: ChatRequest) -> ChatResponse:
        """Sends `request` and returns the whole response."""
        try:
            body = self._http.encode(self.build_body(request, stream=False))
            try:
                response = await self._http.request_json(
                    "/responses", body, _RESPONSE, tools=bool(request.tool_specifications)
                )
            except ModelError as error:
                raise self._refine(error) from error.__cause__
            return self._complete(response, None)
        except AgentLoopError:
            raise
        except Exception as exc:  # only AgentLoopErrors leave a provider
            raise self._http.unexpected(exc) from exc

    def _complete(
        self, response: _Response, answer: _Answer | None, request_id: str | None = None
    ) -> ChatResponse:
        """The `ChatResponse` of a finished response (`answer`: what the stream already folded in)."""
        if response.error is not None or response.status == "failed":
            raise self._http.error_from_payload({"error": response.error or {}}, request_id=request_id)
        if answer is None:
            answer = _Answer()
            for item in response.output or ():
                answer.add(item, streamed=False)
        message = answer.message()
        return ChatResponse(
            message,
            _usage(response.usage),
            _finish(response, bool(message.tool_execution_requests)),
            response.model,
            response.id,
        )

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        """Sends `request` and yields its events as they arrive; closing the iterator closes the response."""
        try:
            body = self._http.encode(self.build_body(request, stream=True))
            opened = self._http.open_sse("/responses", body, tools=bool(request.tool_specifications))
            events = await opened.__aenter__()
        except ModelError as error:
            raise self._refine(error) from error.__cause__
        except Exception as exc:  # only AgentLoopErrors leave a provider
            raise self._http.unexpected(exc) from exc
        exc_info: tuple[Any, Any, Any] = (None, None, None)
        try:
            answer = _Answer()
            text = answer.text
            positions: dict[int, int] = {}  # output index of a function call -> its position among calls
            streamed: set[int | None] = set()  # output indexes whose text or summary came in deltas
            finished: _Response | None = None
            while finished is None and (batch := await events.batch()):
                for event in batch:
                    data = event.data
                    try:
                        decoded = _EVENT.decode(data)
                    except (msgspec.DecodeError, RecursionError) as exc:
                        raise self._http.bad_response(
                            f"unreadable stream event ({exc}): {data[:200]!r}", request_id=events.request_id
                        ) from None
                    kind = decoded.type
                    if kind == "response.output_text.delta" or kind == "response.refusal.delta":
                        if decoded.delta:
                            streamed.add(decoded.output_index)
                            text.append(decoded.delta)
                            yield TextDelta(decoded.delta)
                    elif kind == "response.function_call_arguments.delta":
                        position = positions.get(decoded.output_index or 0)
                        if position is not None and decoded.delta:
                            yield ToolCallDelta(position, None, None, decoded.delta)
                    elif kind == "response.reasoning_summary_text.delta":
                        if decoded.delta:
                            streamed.add(decoded.output_index)
                            answer.thinking.append(decoded.delta)
                            yield ThinkingDelta(decoded.delta)
                    elif kind == "response.reasoning_summary_part.added":
                        if answer.thinking:  # summary parts are paragraphs
                            answer.thinking.append("\n\n")
                            yield ThinkingDelta("\n\n")
                    elif kind == "response.output_item.added":
                        item = decoded.item
                        if item is not None and item.type == "function_call":
                            position = positions[decoded.output_index or 0] = len(positions)
                            yield ToolCallDelta(position, item.call_id, item.name, item.arguments or "")
                    elif kind == "response.output_item.done":
                        item = decoded.item
                        if item is not None:
                            texts, thoughts = len(text), len(answer.thinking)
                            call = answer.add(item, streamed=decoded.output_index in streamed)
                            for piece in text[texts:]:  # an item whose content came only whole, here
                                yield TextDelta(piece)
                            if len(answer.thinking) > thoughts:
                                whole = "\n\n".join(answer.thinking[thoughts:])
                                whole = "\n\n" + whole if thoughts else whole
                                answer.thinking[thoughts:] = [whole]
                                yield ThinkingDelta(whole)
                            if call is not None:
                                position = positions.get(decoded.output_index or 0, len(answer.calls) - 1)
                                yield ToolCallComplete(position, call)
                    elif kind in ("response.completed", "response.incomplete", "response.failed"):
                        finished = decoded.response or _Response(status="failed")
                        if kind == "response.failed" and finished.error is None:
                            finished.error = {"message": "the response failed without an error message"}
                        break
                    elif kind == "error":
                        raise self._http.error_from_payload(
                            {"error": {"message": decoded.message, "code": decoded.code}},
                            request_id=events.request_id,
                        )
            if finished is None:
                raise self._http.bad_response(
                    "the stream ended before the response was complete (no response.completed event)",
                    request_id=events.request_id,
                )
            await events.drain()  # read the end of the body: the connection goes back to the pool
            answer.thinking = ["".join(answer.thinking)] if answer.thinking else []
            yield ResponseComplete(self._complete(finished, answer, events.request_id))
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
