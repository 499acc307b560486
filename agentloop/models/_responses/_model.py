"""`OpenAIResponsesModel`: the class, its calls and its stream (the mapping is in `_request`, `_shapes`,
`_response`)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import msgspec

from agentloop._values._errors import AgentLoopError, IllegalConfigurationError, ModelError
from agentloop._values._messages import (
    ChatRequest,
    ChatResponse,
)

from .._base import (
    ModelEvent,
    ResponseComplete,
    TextDelta,
    ThinkingDelta,
    TokenCount,
    ToolCallComplete,
    ToolCallDelta,
)
from .._counting import openai_count
from .._http import RetryPolicy, Timeouts
from .._http._provider import HTTPChatModel, retry_policy
from .._openai import openai_connection
from .._unknown import ignore_unknown, kind_of
from .._wire import check_tools_for_choice
from ._request import input_items, load_unfound_calls, searches, text_format, tool_choice_entry, tool_entry
from ._response import STATE_KEY, Answer, finish_reason, known_output_items, token_usage
from ._shapes import EVENT, EVENTS, RESPONSE, UNUSED_EVENTS, Response

__all__ = ["OpenAIResponsesModel"]

_RESERVED = frozenset({"input", "instructions", "tools", "tool_choice", "stream", "text"})
_REASONING_MODEL = re.compile(r"^(o\d|gpt-5|codex)", re.IGNORECASE)

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

    A `ChatRequest.response_format` goes out as `text.format` `json_schema`. Tools of a
    `ToolSearch(native=True)` go out with `defer_loading` and the hosted `tool_search` tool; the
    `tool_search_call` / `tool_search_output` items of an answer are kept in its `provider_state` and sent
    back with it.
    """

    supports_response_format = True
    supports_tool_search = True
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

    async def count_tokens(self, request: ChatRequest) -> TokenCount:
        """The input tokens `request` takes, counted with tiktoken (extra `tokens`) as OpenAI counts messages;
        an estimate (`exact=False`) without the extra or for a model tiktoken does not know."""
        body = self.build_body(request, stream=False)
        instructions = body.get("instructions")
        items = ([{"role": "system", "content": instructions}] if instructions else []) + body["input"]
        # deferred tools (ToolSearch(native=True)) are not in the prompt until a search finds them
        tools = [t for t in body.get("tools") or [] if not t.get("defer_loading")]
        return await openai_count(self.model, request, items, tools)

    def build_body(self, request: ChatRequest, *, stream: bool) -> dict[str, Any]:
        """The JSON body sent for `request` (public for inspection and debugging)."""
        searching = searches(request.tool_specifications)
        instructions, items = input_items(request.messages, searching=searching)
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
            body["text"] = {"format": text_format(request.response_format)}
        specs = request.tool_specifications
        if specs:
            body["tools"] = [tool_entry(spec, self.strict_tools) for spec in specs]
            if searching:  # hosted tool search over the deferred tools (ToolSearch(native=True))
                load_unfound_calls(body["tools"], items)
                body["tools"].append({"type": "tool_search"})
            if request.tool_choice is not None:
                body["tool_choice"] = tool_choice_entry(request.tool_choice, specs)
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
                    "/responses", body, RESPONSE, tools=bool(request.tool_specifications)
                )
            except ModelError as error:
                raise self._refine(error) from error.__cause__
            return self._complete(response, None)
        except AgentLoopError:
            raise
        except Exception as exc:  # only AgentLoopErrors leave a provider
            raise self._http.unexpected(exc) from exc

    def _complete(
        self, response: Response, answer: Answer | None, request_id: str | None = None
    ) -> ChatResponse:
        """The `ChatResponse` of a finished response (`answer`: what the stream already folded in)."""
        if response.error is not None or response.status == "failed":
            raise self._http.error_from_payload({"error": response.error or {}}, request_id=request_id)
        if answer is None:
            answer = Answer()
            for item in known_output_items(response.output or ()):
                answer.add(item, streamed=False)
        message = answer.message()
        return ChatResponse(
            message,
            token_usage(response.usage),
            finish_reason(response, bool(message.tool_execution_requests)),
            response.model,
            response.id,
        )

    def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        """Sends `request` and yields its events as they arrive; closing the iterator closes the response."""
        return self._stream(request, None)

    def stream_text_to(self, request: ChatRequest, sink: Callable[[str], bool]) -> AsyncIterator[ModelEvent]:
        """`stream()`, handing each piece of answer text to `sink` instead (a TextDelta when it returns
        False): the runtime's hot path."""
        return self._stream(request, sink)

    async def _stream(
        self, request: ChatRequest, sink: Callable[[str], bool] | None
    ) -> AsyncIterator[ModelEvent]:
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
            answer = Answer()
            text = answer.text
            positions: dict[int, int] = {}  # output index of a function call -> its position among calls
            streamed: set[int | None] = set()  # output indexes whose text or summary came in deltas
            finished: Response | None = None
            while finished is None and (batch := await events.batch()):
                for event in batch:
                    data = event.data
                    try:
                        kind = kind_of(data)
                        if kind not in EVENTS:
                            if kind not in UNUSED_EVENTS:
                                ignore_unknown(STATE_KEY, "a streamed event", kind)
                            continue
                        decoded = EVENT.decode(data)
                        items = known_output_items((decoded.item,)) if decoded.item else ()
                    except (msgspec.DecodeError, RecursionError) as exc:
                        raise self._http.bad_response(
                            f"unreadable stream event ({exc}): {data[:200]!r}", request_id=events.request_id
                        ) from None
                    item = items[0] if items else None
                    if kind == "response.output_text.delta" or kind == "response.refusal.delta":
                        if decoded.delta:
                            streamed.add(decoded.output_index)
                            text.append(decoded.delta)
                            if sink is None or not sink(decoded.delta):
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
                        if item is not None and item.type == "function_call":
                            position = positions[decoded.output_index or 0] = len(positions)
                            yield ToolCallDelta(position, item.call_id, item.name, item.arguments or "")
                    elif kind == "response.output_item.done":
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
                        finished = decoded.response or Response(status="failed")
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
