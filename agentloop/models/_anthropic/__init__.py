"""`AnthropicChatModel`: Claude through Anthropic's Messages API (`POST /v1/messages`), streaming or not.

HTTP, retries and error mapping come from `._http`; this module only translates: agentloop messages to the
Messages API payload, and the API's JSON answer or event stream back to agentloop's response and events.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import AsyncGenerator, Collection, Mapping, Sequence
from typing import Any

import msgspec

from agentloop._values._content import Content, ImageContent, TextContent
from agentloop._values._errors import BadRequestError, IllegalConfigurationError
from agentloop._values._messages import (
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
from agentloop._values._spec import ToolSpecification

from .._base import (
    DEFER_LOADING,
    ModelEvent,
    ResponseComplete,
    TextDelta,
    ThinkingDelta,
    TokenCount,
    ToolCallComplete,
    ToolCallDelta,
)
from .._history_rules import has_tool_rounds, tool_rounds_as_text
from .._http import RetryPolicy, Timeouts
from .._http._provider import HTTPChatModel, retry_policy
from .._media import web_url
from .._secrets import clean_api_key
from .._strict import strict_schema
from .._unknown import ignore_unknown, kind_of, known_items
from .._wire import (
    add_turn,
    arguments_object,
    check_tool_offered,
    check_tools_for_choice,
    load_unfound,
    not_a_chat_message,
    unanswered_result,
)

__all__ = ["ANTHROPIC_BASE_URL", "AnthropicChatModel"]

STATE_KEY = "anthropic"
"""The key of this provider's state in `AiMessage.provider_state`: the signed thinking blocks of an answer
with tool calls, which the API demands back verbatim when the tool loop continues with thinking enabled."""

ANTHROPIC_BASE_URL = "https://api.anthropic.com"

_PROVIDER = "anthropic"
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

_FINISH_REASONS = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "tool_use": FinishReason.TOOL_EXECUTION,
    "refusal": FinishReason.CONTENT_FILTER,
}

# Portable parameter names (as `ChatRequest.parameters` may use them) mapped to the Messages API's.
_PARAMETER_NAMES = {"stop": "stop_sequences", "max_completion_tokens": "max_tokens"}


# -- wire shapes (decoding only what is used; unknown fields and block types are ignored) --------------------


class _Usage(msgspec.Struct, gc=False):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class _Block(msgspec.Struct):
    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: msgspec.Raw = msgspec.Raw()
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None
    tool_use_id: str | None = None  # tool_search_tool_result
    content: Any = None  # tool_search_tool_result: kept as it came, to be sent back


class _Message(msgspec.Struct):
    id: str | None = None
    model: str | None = None
    content: list[msgspec.Raw] = []  # the blocks agentloop knows are read by `_blocks`
    stop_reason: str | None = None
    usage: _Usage | None = None


class _Count(msgspec.Struct, gc=False):
    input_tokens: int


class _MessageStart(msgspec.Struct):
    message: _Message


class _BlockStart(msgspec.Struct):
    index: int
    content_block: msgspec.Raw  # read by `_blocks` when its kind is known


class _Delta(msgspec.Struct, gc=False):
    type: str
    text: str | None = None
    partial_json: str | None = None
    thinking: str | None = None
    signature: str | None = None


class _BlockDelta(msgspec.Struct, gc=False):
    index: int
    delta: msgspec.Raw  # read as a `_Delta` when its kind is known


class _BlockStop(msgspec.Struct, gc=False):
    index: int


class _MessageDeltaBody(msgspec.Struct, gc=False):
    stop_reason: str | None = None


class _MessageDelta(msgspec.Struct, gc=False):
    delta: _MessageDeltaBody = msgspec.field(default_factory=_MessageDeltaBody)
    usage: _Usage | None = None


class _Typed(msgspec.Struct, gc=False):
    type: str = ""


_message_decoder = msgspec.json.Decoder(_Message)
_count_decoder = msgspec.json.Decoder(_Count)
_start_decoder = msgspec.json.Decoder(_MessageStart)
_block_start_decoder = msgspec.json.Decoder(_BlockStart)
_block_delta_decoder = msgspec.json.Decoder(_BlockDelta)
_block_stop_decoder = msgspec.json.Decoder(_BlockStop)
_message_delta_decoder = msgspec.json.Decoder(_MessageDelta)
_typed_decoder = msgspec.json.Decoder(_Typed)
_block_decoder = msgspec.json.Decoder(_Block)
_delta_decoder = msgspec.json.Decoder(_Delta)
_BLOCKS = dict.fromkeys(
    ("text", "tool_use", "thinking", "redacted_thinking", "server_tool_use", "tool_search_tool_result"),
    _block_decoder,
)
_DELTAS = dict.fromkeys(
    ("text_delta", "input_json_delta", "thinking_delta", "signature_delta"), _delta_decoder
)
_UNUSED_DELTAS = frozenset({"citations_delta"})  # documented; agentloop keeps no citations
_EVENTS = frozenset(
    {"message_start", "message_delta", "message_stop", "content_block_start", "content_block_delta"}
    | {"content_block_stop", "error", "ping"}
)


def _blocks(raws: Sequence[msgspec.Raw]) -> list[_Block]:
    """The content blocks of a kind agentloop knows; others (server tools' blocks, newer kinds) skipped."""
    return known_items(raws, _BLOCKS, "anthropic", "a content block")


# -- the model -----------------------------------------------------------------------------------------------


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
            ("thinking", _thinking(thinking, max_tokens)),
        ):
            if value is not None:
                defaults[name] = value
        for name, value in _portable(parameters or {}).items():
            if value is not None:
                defaults[name] = value
        self.defaults: Mapping[str, Any] = defaults
        all_headers = {k.lower(): v for k, v in (headers or {}).items()}
        all_headers["anthropic-version"] = anthropic_version
        if api_key:
            all_headers["x-api-key"] = api_key
        self._connect(
            owner="AnthropicChatModel",
            provider=_PROVIDER,
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
                _PATH, body, _message_decoder, tools=bool(request.tool_specifications)
            )
            return self._response(_blocks(message.content), message)

    async def stream(self, request: ChatRequest) -> AsyncGenerator[ModelEvent, None]:
        """Sends `request` and yields its events as they arrive (`ResponseComplete` last); closing the
        iterator closes the response."""
        with self._errors():
            body = self._http.encode(self.build_body(request, stream=True))
            async with self._http.open_sse(_PATH, body, tools=bool(request.tool_specifications)) as events:
                assembler = _Assembler()
                async for sse in events:
                    name = sse.event
                    try:
                        if name == "message":  # a server that names no events: the JSON carries the type
                            name = _typed_decoder.decode(sse.data).type
                        event = assembler.feed(name, sse.data)
                    except (msgspec.DecodeError, RecursionError) as exc:  # RecursionError: nesting too deep
                        raise self._http.bad_response(
                            f"unreadable {name} event ({exc}): {sse.data[:200]!r}",
                            request_id=events.request_id,
                        ) from None
                    if event is None:
                        continue
                    if event is _STOP:
                        await events.drain()  # read the end of the body: the connection goes back to the pool
                        yield ResponseComplete(self._response(assembler.blocks(), assembler.message))
                        return
                    if event is _ERROR:
                        raise self._http.error_from_payload(sse.data, request_id=events.request_id)
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
            answer = await self._http.request_json(_COUNT_PATH, body, _count_decoder)
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
        for name, value in _portable(request.parameters or {}).items():
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
            thinking = _thinking(request.parameters["thinking"], body["max_tokens"])
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
                load_unfound(body["tools"], *_called_and_found(messages))
                body["tools"].append(dict(_TOOL_SEARCH))
            if choice is not None and choice.mode == "tool":
                check_tool_offered(choice, specs)
            wire_choice = _tool_choice(choice, self.parallel_tool_calls)
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
                    add("user", [_block(part) for part in message.contents if _block_wanted(part)])
                    continue
                if not message.text.strip():
                    raise BadRequestError(
                        f"anthropic: message {n} is a user message with no text (empty or only whitespace); "
                        "the Messages API rejects empty text, and leaving the turn out would make the model "
                        "continue its previous answer instead: send some text",
                        provider=_PROVIDER,
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
                        *_text_block(message.text),
                        *(_block(part) for part in message.contents if not isinstance(part, TextContent)),
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
                blocks.extend(_text_block(message.text))
                unnamed = []
                for call in calls:
                    call_id = call.id
                    if call_id is None:
                        made_up += 1
                        call_id = f"toolu_agentloop_{made_up}"
                        unnamed.append((call.name, call_id))
                    blocks.append(
                        {"type": "tool_use", "id": call_id, "name": call.name, "input": _input(call)}
                    )
                add("assistant", blocks)
            elif isinstance(message, SystemMessage):
                if message.text:
                    system.append(message.text)
            else:
                raise not_a_chat_message("AnthropicChatModel", message)
        return ("\n\n".join(system) or None), messages

    # -- response --------------------------------------------------------------------------------------------

    def _response(self, content: Sequence[_Block], message: _Message) -> ChatResponse:
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
                ignore_unknown(_PROVIDER, "a content block", kind)
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
            _token_usage(message.usage),
            _finish_reason(message.stop_reason),
            model=message.model,
            id=message.id,
        )

    def _remember_thinking(self, key: tuple[str, ...], blocks: tuple[dict[str, Any], ...]) -> None:
        self._thinking_blocks[key] = blocks
        self._thinking_blocks.move_to_end(key)
        while len(self._thinking_blocks) > _SIGNATURE_CACHE_SIZE:
            self._thinking_blocks.popitem(last=False)


# -- streaming -----------------------------------------------------------------------------------------------


class _Stop:
    """`_Assembler.feed`'s answer to message_stop."""


class _Failed:
    """`_Assembler.feed`'s answer to an error event."""


_STOP = _Stop()
_ERROR = _Failed()


class _Open(msgspec.Struct, gc=False):
    """One content block while it streams: the block as it started, and the pieces that followed."""

    block: _Block
    parts: list[str]
    call: int = -1  # position among the response's tool calls, for tool_use blocks


class _Assembler:
    """Turns one response's stream events into agentloop events (one at most per stream event) and, at the
    end, into the content blocks and message a non-streaming call would have returned."""

    __slots__ = ("_calls", "_open", "message")

    def __init__(self) -> None:
        self.message = _Message(usage=_Usage())
        self._open: dict[int, _Open] = {}
        self._calls = 0

    def feed(self, name: str, data: str) -> ModelEvent | _Stop | _Failed | None:
        """The agentloop event for one stream event, if any."""
        if name == "content_block_delta":
            event = _block_delta_decoder.decode(data)
            current = self._open.get(event.index)
            if current is None:
                return None
            kind = kind_of(event.delta)
            if kind not in _DELTAS:
                if kind not in _UNUSED_DELTAS:
                    ignore_unknown("anthropic", "a content block delta", kind)
                return None
            delta = _delta_decoder.decode(event.delta)
            if kind == "text_delta":
                if delta.text:
                    current.parts.append(delta.text)
                    return TextDelta(delta.text)
            elif kind == "input_json_delta":
                if delta.partial_json:  # a tool call's arguments, or a tool search's query
                    current.parts.append(delta.partial_json)
                    if current.call >= 0:
                        return ToolCallDelta(current.call, None, None, delta.partial_json)
            elif kind == "thinking_delta":
                if delta.thinking:
                    current.parts.append(delta.thinking)
                    return ThinkingDelta(delta.thinking)
            elif kind == "signature_delta":
                current.block.signature = (current.block.signature or "") + (delta.signature or "")
            return None  # citations and delta types added after this was written
        if name == "content_block_start":
            start = _block_start_decoder.decode(data)
            known = _blocks((start.content_block,))
            if not known:
                return None
            block = known[0]
            current = _Open(block, [])
            self._open[start.index] = current
            if block.type in ("tool_use", "server_tool_use"):
                initial = bytes(block.input) if block.input else b""
                if initial.strip() not in (b"", b"{}"):  # arguments given whole at the start
                    current.parts.append(initial.decode())
            if block.type == "tool_use":
                current.call = self._calls
                self._calls += 1
                return ToolCallDelta(current.call, block.id, block.name, "")
            if block.type == "text" and block.text:
                current.parts.append(block.text)
                return TextDelta(block.text)
            if block.type == "thinking" and block.thinking:
                current.parts.append(block.thinking)
                return ThinkingDelta(block.thinking)
            return None
        if name == "content_block_stop":
            current = self._open.get(_block_stop_decoder.decode(data).index)
            if current is None or current.call < 0:
                return None
            block = current.block
            return ToolCallComplete(
                current.call, ToolExecutionRequest(block.id, block.name or "", _joined(current))
            )
        if name == "message_start":
            started = _start_decoder.decode(data).message
            self.message = _Message(started.id, started.model, [], None, started.usage or _Usage())
            return None
        if name == "message_delta":
            update = _message_delta_decoder.decode(data)
            if update.delta.stop_reason is not None:
                self.message.stop_reason = update.delta.stop_reason
            if update.usage is not None:
                _merge_usage(self.message, update.usage)
            return None
        if name == "message_stop":
            return _STOP
        if name == "error":
            return _ERROR
        if name not in _EVENTS:  # event types added after this was written
            ignore_unknown("anthropic", "a streamed event", name)
        return None

    def blocks(self) -> list[_Block]:
        """The content blocks received, in order, completed with what their deltas carried."""
        result = []
        for _, current in sorted(self._open.items()):
            block = current.block
            if block.type == "text":
                block.text = "".join(current.parts)
            elif block.type == "thinking":
                block.thinking = "".join(current.parts)
            elif block.type in ("tool_use", "server_tool_use"):
                block.input = msgspec.Raw(_joined(current).encode())
            result.append(block)
        return result


def _called_and_found(messages: list[dict[str, Any]]) -> tuple[list[str], set[str]]:
    """The tools the `tool_use` blocks of `messages` call, and those their tool searches found."""
    blocks = [b for m in messages if isinstance(m["content"], list) for b in m["content"]]
    called = [b["name"] for b in blocks if b.get("type") == "tool_use"]
    found: set[str] = set()
    for block in blocks:
        content = block.get("content") if block.get("type") == "tool_search_tool_result" else None
        references = content.get("tool_references") if isinstance(content, Mapping) else None
        found.update(str(r.get("tool_name")) for r in references or () if isinstance(r, Mapping))
    return called, found


def _joined(current: _Open) -> str:
    """A tool_use block's arguments: its pieces joined ({} when it streamed none, as for a tool without
    parameters)."""
    return "".join(current.parts) or "{}"


def _merge_usage(message: _Message, update: _Usage) -> None:
    usage = message.usage or _Usage()
    message.usage = _Usage(
        update.input_tokens if update.input_tokens is not None else usage.input_tokens,
        update.output_tokens if update.output_tokens is not None else usage.output_tokens,
        update.cache_creation_input_tokens
        if update.cache_creation_input_tokens is not None
        else usage.cache_creation_input_tokens,
        update.cache_read_input_tokens
        if update.cache_read_input_tokens is not None
        else usage.cache_read_input_tokens,
    )


# -- helpers -------------------------------------------------------------------------------------------------


def _block_wanted(part: Content) -> bool:
    """Empty text parts are left out: the Messages API rejects empty text blocks."""
    return not isinstance(part, TextContent) or bool(part.text.strip())


def _block(part: Content) -> dict[str, Any]:
    """One content part as a Messages API block: `text`, `image` or `document` (base64 or URL source)."""
    if isinstance(part, TextContent):
        return {"type": "text", "text": part.text}
    kind = "image" if isinstance(part, ImageContent) else "document"
    if part.data is None:
        return {"type": kind, "source": {"type": "url", "url": web_url(part, "Anthropic")}}
    return {"type": kind, "source": {"type": "base64", "media_type": part.media_type, "data": part.base64}}


def _text_block(text: str | None) -> list[dict[str, Any]]:
    # The API rejects empty and whitespace-only text blocks; an answer's empty text has nothing to lose.
    return [{"type": "text", "text": text}] if text and not text.isspace() else []


def _input(call: ToolExecutionRequest) -> Any:
    """A tool call's arguments as the JSON object `tool_use.input` must be ({} when they are not one)."""
    return arguments_object(call.arguments)


def _tool_choice(choice: ToolChoice | None, parallel: bool | None) -> dict[str, Any] | None:
    if choice is None:
        body: dict[str, Any] | None = {"type": "auto"} if parallel is False else None
    elif choice.mode == "required":
        body = {"type": "any"}
    elif choice.mode == "tool":
        body = {"type": "tool", "name": choice.tool_name}
    else:
        body = {"type": choice.mode}
    if body is not None and parallel is False and body["type"] != "none":
        body["disable_parallel_tool_use"] = True
    return body


def _thinking(value: Any, max_tokens: int) -> dict[str, Any] | None:
    """The `thinking` request field: a budget of tokens, the API's own object, or None/False for none."""
    if value is None or value is False:
        return None
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise IllegalConfigurationError(
            f"thinking must be a token budget (int) or a thinking object such as {{'type': 'adaptive'}}, "
            f"got {value!r}"
        )
    if value >= max_tokens:
        raise IllegalConfigurationError(
            f"the thinking budget ({value} tokens) must be below max_tokens ({max_tokens}): raise max_tokens"
        )
    return {"type": "enabled", "budget_tokens": value}


def _portable(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """Per-call parameters with portable names (`stop`, `max_completion_tokens`) renamed for the API."""
    result: dict[str, Any] = {}
    for name, value in parameters.items():
        name = _PARAMETER_NAMES.get(name, name)
        if name == "stop_sequences" and isinstance(value, str):
            value = [value]
        result[name] = value
    return result


def _token_usage(usage: _Usage | None) -> TokenUsage | None:
    """Usage with `input_tokens` counting cached tokens too (Anthropic reports those apart), the cache reads
    and writes kept as details."""
    if usage is None or (usage.input_tokens is None and usage.output_tokens is None):
        return None
    read, written = usage.cache_read_input_tokens, usage.cache_creation_input_tokens
    prompt = (usage.input_tokens or 0) + (read or 0) + (written or 0)
    return TokenUsage(prompt, usage.output_tokens or 0, cache_read_tokens=read, cache_write_tokens=written)


def _finish_reason(stop_reason: str | None) -> FinishReason | None:
    if stop_reason is None:
        return None
    return _FINISH_REASONS.get(stop_reason, FinishReason.OTHER)
