"""`OpenAIChatModel`: configuration, the body of a call, `chat()` and `stream()`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import msgspec

from agentloop._values._errors import AgentLoopError, IllegalConfigurationError, ModelError
from agentloop._values._messages import (
    AiMessage,
    ChatRequest,
    ChatResponse,
    ToolExecutionRequest,
)

from .._base import (
    ModelEvent,
    TextDelta,
    TokenCount,
)
from .._counting import openai_count
from .._http import RetryPolicy, ServerSentEvent, Timeouts
from .._http._provider import HTTPChatModel, retry_policy
from .._unknown import known_items
from .._wire import check_tools_for_choice
from ._connection import openai_connection
from ._request import RESERVED, chat_messages, response_format_payload, tool_choice_payload, tool_payload
from ._response import arguments_text, finish_reason, is_function_call, token_usage
from ._shapes import CHUNK, COMPLETION, IDLE_CHOICE, IDLE_CHUNK, TEXT_PARTS
from ._stream import StreamState

__all__ = ["OpenAIChatModel"]


_NO_EVENTS: list[ServerSentEvent | bytes] = []  # never appended to
_IDLE_EVENT = ServerSentEvent()


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
        if name in RESERVED:
            raise IllegalConfigurationError(
                f"parameter {name!r} cannot be set through parameters: it comes from the ChatRequest "
                "(messages, tool_specifications, tool_choice) or from chat() / stream()"
            )

    async def count_tokens(self, request: ChatRequest) -> TokenCount:
        """The input tokens `request` takes, counted with tiktoken (extra `tokens`) as OpenAI counts chat
        messages; an estimate (`exact=False`) without the extra or for a model tiktoken does not know."""
        body = self.build_body(request, stream=False)
        return await openai_count(self.model, request, body["messages"], body.get("tools") or [])

    def build_body(self, request: ChatRequest, *, stream: bool) -> dict[str, Any]:
        """The JSON body sent for `request` (public for inspection and debugging)."""
        body: dict[str, Any] = {"model": self.model, "messages": chat_messages(request.messages)}
        body.update(self.defaults)
        for name, value in (request.parameters or {}).items():
            self._check_parameter(name)
            if value is None:
                body.pop(name, None)
            else:
                body[name] = value
        if request.response_format is not None:
            body["response_format"] = response_format_payload(request.response_format)
        specs = request.tool_specifications
        if specs:
            body["tools"] = [tool_payload(spec, self.strict_tools) for spec in specs]
            if request.tool_choice is not None:
                body["tool_choice"] = tool_choice_payload(request.tool_choice, specs)
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
                "/chat/completions", body, COMPLETION, tools=bool(request.tool_specifications)
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
            parts = known_items(content, TEXT_PARTS, "openai", "a message content part")
            content = "".join(part.text or "" for part in parts)
        text = content if content else (message.refusal or content)
        tool_calls = [call for call in message.tool_calls or () if is_function_call(call)]
        cut = len(tool_calls) - 1 if choice.finish_reason == "length" else -1  # the call a cut may be in
        calls = tuple(
            ToolExecutionRequest(
                call.id,
                (call.function.name if call.function else None) or "",
                arguments_text(arguments) if arguments or position != cut else "",  # cut before its arguments
            )
            for position, call in enumerate(tool_calls)
            for arguments in [call.function.arguments if call.function else None]
        )
        ai_message = AiMessage(text, calls, message.reasoning_content or message.reasoning)
        return ChatResponse(
            ai_message,
            token_usage(completion.usage),
            finish_reason(choice.finish_reason, bool(calls)),
            completion.model,
            completion.id,
        )

    def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        """Sends `request` and yields its events as they arrive; closing the iterator closes the response."""
        return self._stream(request, None)

    def stream_text_to(self, request: ChatRequest, sink: Callable[[str], bool]) -> AsyncIterator[ModelEvent]:
        """`stream()`, handing each piece of answer text to `sink` instead (a TextDelta when it returns
        False): the runtime's hot path, with no event built or passed on per token."""
        return self._stream(request, sink)

    async def _stream(
        self, request: ChatRequest, sink: Callable[[str], bool] | None
    ) -> AsyncIterator[ModelEvent]:
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
            state = StreamState()
            done = False
            text = state.text
            fast = False  # the short way is open once the first chunks set the response's id and model
            events.take_payloads()  # a chunk read alone comes as its JSON's bytes, decoded once below
            while not done and (batch := await events.payload_batch()):
                for event in batch:
                    if isinstance(event, bytes):
                        data: str | bytes = event
                        if event == b"[DONE]":
                            done = True
                            break
                    else:
                        data = event.data
                        if data == "[DONE]":
                            done = True
                            break
                        if event.event == "error":
                            raise self._http.error_from_payload(data, request_id=events.request_id)
                    try:
                        chunk = CHUNK.decode(data)
                    except (msgspec.DecodeError, RecursionError) as exc:  # RecursionError: nesting too deep
                        if isinstance(data, bytes):
                            events.check_payload(data)  # not UTF-8: named as the event parser names it
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
                            if sink is None or not sink(delta.content):
                                yield TextDelta(delta.content)
                            continue
                    if chunk.error is not None:
                        raise self._http.error_from_payload(
                            {"error": chunk.error}, request_id=events.request_id
                        )
                    for model_event in state.feed(chunk):
                        yield model_event
                    fast = state.answered and state.id is not None and state.model is not None
                # Nothing of this batch stays referenced while the next read waits (a held stream keeps less).
                batch = _NO_EVENTS
                event = _IDLE_EVENT
                data = ""
                chunk = IDLE_CHUNK
                choices = delta = None
                choice = IDLE_CHOICE
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
