"""`AnthropicChatModel`: configuration, the body of a call (messages, tools), `chat()`, `stream()`,
`count_tokens()`, and the `ChatResponse`."""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Collection, Mapping, Sequence
from typing import Any

import msgspec

from agentloop._values._content import TextContent
from agentloop._values._errors import BadRequestError, IllegalConfigurationError
from agentloop._values._messages import (
    AiMessage,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    SystemMessage,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from agentloop._values._spec import ToolSpecification

from .._base import (
    DEFER_LOADING,
    ModelEvent,
    ResponseComplete,
    TextDelta,
    TokenCount,
)
from .._history_rules import has_tool_rounds, tool_rounds_as_text
from .._http import RetryPolicy, Timeouts
from .._http._provider import HTTPChatModel, retry_policy
from .._secrets import clean_api_key
from .._strict import strict_schema
from .._unknown import ignore_unknown
from .._wire import (
    add_turn,
    check_tool_offered,
    check_tools_for_choice,
    load_unfound,
    not_a_chat_message,
    unanswered_result,
)
from ._request import (
    block_wanted,
    called_and_found,
    content_block,
    portable,
    text_blocks,
    thinking_field,
    tool_choice_payload,
    tool_input,
)
from ._response import STATE_KEY, finish_reason, token_usage
from ._shapes import (
    PROVIDER,
    Block,
    Message,
    count_decoder,
    known_blocks,
    message_decoder,
    typed_decoder,
)
from ._stream import ERROR, STOP, Assembler

__all__ = ["ANTHROPIC_BASE_URL", "AnthropicChatModel"]

ANTHROPIC_BASE_URL = "https://api.anthropic.com"

_PATH = "/v1/messages"
_COUNT_PATH = "/v1/messages/count_tokens"
_COUNTED = frozenset({"model", "messages", "system", "tools", "tool_choice", "thinking"})
_OVERLOADED = (529,)  # Anthropic's "overloaded": retried like a 503
_TOOL_KEYS = frozenset({"name", "description", "input_schema", "type"})
_RESERVED = frozenset({"messages", "system", "tools", "tool_choice", "stream"})
_SIGNATURE_CACHE_SIZE = 1024
# Anthropic's tool search tool, as documented at
# https://platform.claude.com/docs/en/agents-and-tools/tool-use/tool-search-tool : tools marked
# `"defer_loading": true` stay out of the prompt until a search finds them; the answer then holds a
# `server_tool_use` block (name `tool_search_tool_bm25`, input `{"query": ...}`) and its
# `tool_search_tool_result` (`content: {"type": "tool_search_tool_search_result", "tool_references":
# [{"type": "tool_reference", "tool_name": ...}]}`), both to be sent back with the answer in the history.
_TOOL_SEARCH = {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}
_SEARCH_PREFIX = "tool_search_tool_"  # the names of both variants (bm25 and regex)


class AnthropicChatModel(HTTPChatModel):
    """Claude models through Anthropic's Messages API.

    `api_key`: sent as `x-api-key`; when omitted and `base_url` is omitted too, `ANTHROPIC_API_KEY` is read (a
    key from the environment is never sent to a base URL you chose yourself). `base_url`: the API root
    (default `ANTHROPIC_BASE_URL` or https://api.anthropic.com; requests go to `{base_url}/v1/messages`).
    `max_tokens`, `temperature`, `top_p`, `top_k`, `stop_sequences`, `thinking` (a token budget, or the API's
    own object such as `{"type": "adaptive"}`), `parallel_tool_calls=False` (sets `disable_parallel_tool_use`)
    and `parameters` (any other body field) are defaults that `ChatRequest.parameters` overrides per call (a
    None there removes a default). Tool `metadata` entries are sent only for the keys in
    `send_tool_metadata_keys` (e.g. `{"cache_control"}`), as fields of the tool's definition.

    Retries connection failures and 408/409/429/5xx/529 answers (`max_retries` and `retry` as for every
    HTTP provider: `max_retries` wins over the policy's count; `Retry-After` honoured) until the first event
    of a stream arrived, never after. `http_client`: an `httpx2.AsyncClient` or `httpx.AsyncClient` to use
    (never closed by this model). Use `async with` or `aclose()` to release the connection pool.

    A `ChatRequest.response_format` goes out as `output_config.format` (Anthropic's structured output), its
    schema rewritten by `strict_schema(..., provider="anthropic")`. For a model without structured output,
    pass `structured_output=False`: agents then ask for their output through a tool instead.

    Tools of a `ToolSearch(native=True)` go out with `defer_loading` and Anthropic's BM25 tool search tool;
    the searches of an answer (`server_tool_use`, `tool_search_tool_result`) are kept in its
    `provider_state` and sent back with it.
    """

    supports_tool_search = True

    _KEY_HINT = "pass api_key= or set ANTHROPIC_API_KEY"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_tokens: int = 4096,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        stop_sequences: Sequence[str] | None = None,
        thinking: int | Mapping[str, Any] | None = None,
        parallel_tool_calls: bool | None = None,
        send_tool_metadata_keys: Collection[str] = (),
        parameters: Mapping[str, Any] | None = None,
        anthropic_version: str = "2023-06-01",
        headers: Mapping[str, str] | None = None,
        timeout: Timeouts | float | None = None,
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        http_client: Any = None,
        structured_output: bool = True,
    ) -> None:
        self.supports_response_format = structured_output
        if not isinstance(model, str) or not model:
            raise IllegalConfigurationError(
                f"AnthropicChatModel needs a model name such as 'claude-sonnet-4-5', got {model!r}"
            )
        source = "api_key="
        if base_url is None:
            base_url = os.environ.get("ANTHROPIC_BASE_URL") or ANTHROPIC_BASE_URL
            if api_key is None:
                api_key, source = os.environ.get("ANTHROPIC_API_KEY") or None, "ANTHROPIC_API_KEY"
            api_key = clean_api_key(api_key, owner="AnthropicChatModel", source=source)
            if not api_key and base_url.rstrip("/") == ANTHROPIC_BASE_URL:
                raise IllegalConfigurationError(
                    "AnthropicChatModel needs an API key: pass api_key=... or set ANTHROPIC_API_KEY"
                )
        api_key = clean_api_key(api_key, owner="AnthropicChatModel", source=source)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise IllegalConfigurationError(f"max_tokens must be a positive int, got {max_tokens!r}")
        if isinstance(send_tool_metadata_keys, str):
            raise IllegalConfigurationError(
                "send_tool_metadata_keys takes a collection of keys, e.g. {'cache_control'}, not one string"
            )
        reserved = _TOOL_KEYS.intersection(send_tool_metadata_keys)
        if reserved:
            raise IllegalConfigurationError(
                f"send_tool_metadata_keys cannot include {sorted(reserved)}: agentloop sets those itself"
            )
        self.model = model
        self.send_tool_metadata_keys: frozenset[str] = frozenset(send_tool_metadata_keys)
        self.parallel_tool_calls = parallel_tool_calls
        defaults: dict[str, Any] = {"max_tokens": max_tokens}
        for name, value in (
            ("temperature", temperature),
            ("top_p", top_p),
            ("top_k", top_k),
            ("stop_sequences", list(stop_sequences) if stop_sequences is not None else None),
            ("thinking", thinking_field(thinking, max_tokens)),
        ):
            if value is not None:
                defaults[name] = value
        for name, value in portable(parameters or {}).items():
            if value is not None:
                defaults[name] = value
        self.defaults: Mapping[str, Any] = defaults
        all_headers = {k.lower(): v for k, v in (headers or {}).items()}
        all_headers["anthropic-version"] = anthropic_version
        if api_key:
            all_headers["x-api-key"] = api_key
        self._connect(
            owner="AnthropicChatModel",
            provider=PROVIDER,
            base_url=base_url,
            headers=all_headers,
            timeout=timeout,
            retry=retry_policy(retry, max_retries, _OVERLOADED),
            http_client=http_client,
            secrets=(api_key,),
            has_key=bool(api_key),
        )
        # Thinking blocks (with the signatures the API demands back) of the responses this model produced,
        # keyed by their tool-call ids: for messages without provider_state (stored by older releases).
        self._thinking_blocks: OrderedDict[tuple[str, ...], tuple[dict[str, Any], ...]] = OrderedDict()

    def __repr__(self) -> str:
        return f"AnthropicChatModel(model={self.model!r}, base_url={self._http.base_url!r})"

    # -- calls -----------------------------------------------------------------------------------------------

    async def chat(self, request: ChatRequest) -> ChatResponse:
        """Sends `request` and returns the whole response."""
        with self._errors():
            body = self._http.encode(self.build_body(request, stream=False))
            message = await self._http.request_json(
                _PATH, body, message_decoder, tools=bool(request.tool_specifications)
            )
            return self._response(known_blocks(message.content), message)

    def stream(self, request: ChatRequest) -> AsyncGenerator[ModelEvent, None]:
        """Sends `request` and yields its events as they arrive (`ResponseComplete` last); closing the
        iterator closes the response."""
        return self._stream(request, None)

    def stream_text_to(
        self, request: ChatRequest, sink: Callable[[str], bool]
    ) -> AsyncGenerator[ModelEvent, None]:
        """`stream()`, handing each piece of answer text to `sink` instead (a TextDelta when it returns
        False): the runtime's hot path."""
        return self._stream(request, sink)

    async def _stream(
        self, request: ChatRequest, sink: Callable[[str], bool] | None
    ) -> AsyncGenerator[ModelEvent, None]:
        with self._errors():
            body = self._http.encode(self.build_body(request, stream=True))
            async with self._http.open_sse(_PATH, body, tools=bool(request.tool_specifications)) as events:
                assembler = Assembler()
                async for sse in events:
                    name = sse.event
                    try:
                        if name == "message":  # a server that names no events: the JSON carries the type
                            name = typed_decoder.decode(sse.data).type
                        event = assembler.feed(name, sse.data)
                    except (msgspec.DecodeError, RecursionError) as exc:  # RecursionError: nesting too deep
                        raise self._http.bad_response(
                            f"unreadable {name} event ({exc}): {sse.data[:200]!r}",
                            request_id=events.request_id,
                        ) from None
                    if event is None:
                        continue
                    if event is STOP:
                        await events.drain()  # read the end of the body: the connection goes back to the pool
                        yield ResponseComplete(self._response(assembler.blocks(), assembler.message))
                        return
                    if event is ERROR:
                        raise self._http.error_from_payload(sse.data, request_id=events.request_id)
                    if sink is not None and type(event) is TextDelta and sink(event.text):
                        continue
                    yield event  # type: ignore[misc]
                raise self._http.bad_response(
                    "the event stream ended before message_stop (the response is incomplete)",
                    request_id=events.request_id,
                )

    async def count_tokens(self, request: ChatRequest) -> TokenCount:
        """The input tokens `request` takes, as Anthropic's `POST /v1/messages/count_tokens` counts them
        (system prompt, messages, tools): exact."""
        with self._errors():
            sent = self.build_body(request, stream=False)
            body = self._http.encode({k: v for k, v in sent.items() if k in _COUNTED})
            answer = await self._http.request_json(_COUNT_PATH, body, count_decoder)
            return TokenCount(tokens=answer.input_tokens, exact=True)

    # -- request ---------------------------------------------------------------------------------------------

    def build_body(self, request: ChatRequest, *, stream: bool) -> dict[str, Any]:
        """The JSON body sent for `request` (public for inspection and debugging)."""
        history = request.messages
        if not request.tool_specifications and has_tool_rounds(history):
            history = tool_rounds_as_text(history)  # the API takes tool blocks only with tools defined
        searching = any(s.metadata.get(DEFER_LOADING) is True for s in request.tool_specifications)
        system, messages = self._messages(history, searching=searching)
        body: dict[str, Any] = {"model": self.model, "messages": messages, **self.defaults}
        if system:
            body["system"] = system
        for name, value in portable(request.parameters or {}).items():
            if name in _RESERVED:
                raise IllegalConfigurationError(
                    f"parameter {name!r} cannot be set through parameters: it comes from the ChatRequest "
                    "(messages, system messages, tool_specifications, tool_choice) or from chat() / stream()"
                )
            if value is not None:
                body[name] = value
            elif name == "max_tokens":  # required by the API: back to the model's default
                body[name] = self.defaults["max_tokens"]
            else:
                body.pop(name, None)
        if request.parameters and "thinking" in request.parameters:
            thinking = thinking_field(request.parameters["thinking"], body["max_tokens"])
            if thinking is None:
                body.pop("thinking", None)
            else:
                body["thinking"] = thinking
        if request.response_format is not None:
            format = request.response_format
            schema = strict_schema(format.schema, provider="anthropic") if format.strict else format.schema
            config = dict(body.get("output_config") or {})
            config["format"] = {"type": "json_schema", "schema": schema}
            body["output_config"] = config
        specs = request.tool_specifications
        choice = request.tool_choice
        if specs:
            body["tools"] = [self._tool(spec) for spec in specs]
            if searching:
                load_unfound(body["tools"], *called_and_found(messages))
                body["tools"].append(dict(_TOOL_SEARCH))
            if choice is not None and choice.mode == "tool":
                check_tool_offered(choice, specs)
            wire_choice = tool_choice_payload(choice, self.parallel_tool_calls)
            if wire_choice is not None:
                body["tool_choice"] = wire_choice
        else:
            check_tools_for_choice(choice)
        if stream:
            body["stream"] = True
        return body

    def _tool(self, spec: ToolSpecification) -> dict[str, Any]:
        tool: dict[str, Any] = {"name": spec.name}
        if spec.description:
            tool["description"] = spec.description
        tool["input_schema"] = spec.parameters
        if spec.metadata.get(DEFER_LOADING) is True:
            tool["defer_loading"] = True
        for key in self.send_tool_metadata_keys:
            if key in spec.metadata:
                tool[key] = spec.metadata[key]
        return tool

    def _messages(
        self, history: Sequence[ChatMessage], *, searching: bool = False
    ) -> tuple[str | None, list[dict[str, Any]]]:
        """System text and the `messages` array: consecutive same-role messages merged, ids filled in; the
        tool searches of earlier answers go back only when this request searches too (`searching`: else
        the tools they found would not be defined as deferred)."""
        system: list[str] = []
        messages: list[dict[str, Any]] = []
        unnamed: list[tuple[str, str]] = []  # (tool name, made-up id) of calls that came without an id
        made_up = 0

        def add(role: str, blocks: list[dict[str, Any]]) -> None:
            add_turn(messages, role, blocks)

        for n, message in enumerate(history):
            if isinstance(message, UserMessage):
                if message.has_media:
                    add("user", [content_block(part) for part in message.contents if block_wanted(part)])
                    continue
                if not message.text.strip():
                    raise BadRequestError(
                        f"anthropic: message {n} is a user message with no text (empty or only whitespace); "
                        "the Messages API rejects empty text, and leaving the turn out would make the model "
                        "continue its previous answer instead: send some text",
                        provider=PROVIDER,
                    )
                add("user", [{"type": "text", "text": message.text}])
            elif isinstance(message, ToolExecutionResultMessage):
                tool_use_id = message.id
                if tool_use_id is None:
                    match = next((u for u in unnamed if u[0] == message.tool_name), None)
                    if match is None and unnamed:
                        match = unnamed[0]
                    if match is None:
                        raise unanswered_result(message)
                    unnamed.remove(match)
                    tool_use_id = match[1]
                block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id}
                if message.has_media:  # tool results take image and document blocks beside the text
                    block["content"] = [
                        *text_blocks(message.text),
                        *(
                            content_block(part)
                            for part in message.contents
                            if not isinstance(part, TextContent)
                        ),
                    ]
                elif message.text:
                    block["content"] = message.text
                if message.is_error:
                    block["is_error"] = True
                add("user", [block])
            elif isinstance(message, AiMessage):
                blocks: list[dict[str, Any]] = []
                calls = message.tool_execution_requests
                state = message.provider_state.get(STATE_KEY)
                if calls:
                    kept = state.get("thinking") if isinstance(state, Mapping) else None
                    if isinstance(kept, list) and kept:
                        blocks.extend(kept)
                    else:
                        known = self._thinking_blocks.get(tuple(c.id or "" for c in calls))
                        if known is not None:
                            blocks.extend(known)
                searches = state.get("searches") if searching and isinstance(state, Mapping) else None
                if isinstance(searches, list):
                    blocks.extend(searches)
                blocks.extend(text_blocks(message.text))
                unnamed = []
                for call in calls:
                    call_id = call.id
                    if call_id is None:
                        made_up += 1
                        call_id = f"toolu_agentloop_{made_up}"
                        unnamed.append((call.name, call_id))
                    blocks.append(
                        {"type": "tool_use", "id": call_id, "name": call.name, "input": tool_input(call)}
                    )
                add("assistant", blocks)
            elif isinstance(message, SystemMessage):
                if message.text:
                    system.append(message.text)
            else:
                raise not_a_chat_message("AnthropicChatModel", message)
        return ("\n\n".join(system) or None), messages

    # -- response --------------------------------------------------------------------------------------------

    def _response(self, content: Sequence[Block], message: Message) -> ChatResponse:
        texts: list[str] = []
        thoughts: list[str] = []
        calls: list[ToolExecutionRequest] = []
        thinking_blocks: list[dict[str, Any]] = []
        searches: list[dict[str, Any]] = []
        for block in content:
            kind = block.type
            if kind == "text":
                texts.append(block.text or "")
            elif kind == "tool_use":
                raw = bytes(block.input).decode() if block.input else ""
                calls.append(ToolExecutionRequest(block.id, block.name or "", raw or "{}"))
            elif kind == "thinking":
                thoughts.append(block.thinking or "")
                if block.signature:
                    thinking_blocks.append(
                        {"type": "thinking", "thinking": block.thinking or "", "signature": block.signature}
                    )
            elif kind == "redacted_thinking" and block.data:
                thinking_blocks.append({"type": "redacted_thinking", "data": block.data})
            elif kind == "server_tool_use" and (block.name or "").startswith(_SEARCH_PREFIX):
                query = msgspec.json.decode(bytes(block.input)) if block.input else {}
                searches.append({"type": kind, "id": block.id, "name": block.name, "input": query})
            elif kind == "tool_search_tool_result":
                searches.append({"type": kind, "tool_use_id": block.tool_use_id, "content": block.content})
            elif kind == "server_tool_use":  # another server tool's (web search...): its result is not kept
                ignore_unknown(PROVIDER, "a content block", kind)
        kept: dict[str, Any] = {}  # what memory stores keep and send back
        if calls and thinking_blocks:
            self._remember_thinking(tuple(c.id or "" for c in calls), tuple(thinking_blocks))
            kept["thinking"] = thinking_blocks
        if searches:
            kept["searches"] = searches
        state = {STATE_KEY: kept} if kept else {}
        ai_message = AiMessage(
            text="".join(texts) if texts else None,
            tool_execution_requests=tuple(calls),
            thinking="".join(thoughts) if thoughts else None,
            provider_state=state,
        )
        return ChatResponse(
            ai_message,
            token_usage(message.usage),
            finish_reason(message.stop_reason),
            model=message.model,
            id=message.id,
        )

    def _remember_thinking(self, key: tuple[str, ...], blocks: tuple[dict[str, Any], ...]) -> None:
        self._thinking_blocks[key] = blocks
        self._thinking_blocks.move_to_end(key)
        while len(self._thinking_blocks) > _SIGNATURE_CACHE_SIZE:
            self._thinking_blocks.popitem(last=False)
