"""`FakeAnthropicServer`: an Anthropic Messages API server on 127.0.0.1 that answers with scripted messages.

Scripted `AiMessage`s (or plain strings, or `ChatResponse`s to set usage and stop reason) are encoded the way
the Messages API encodes them: one JSON message when the request has no `stream`, otherwise the documented
event sequence (`message_start` with usage, then per content block `content_block_start`, its deltas and
`content_block_stop` - thinking with a `signature_delta`, text as `text_delta`s, each tool call's input as
`input_json_delta` pieces - a `ping`, `message_delta` with the stop reason and output usage, `message_stop`).
Errors use Anthropic's body (`{"type": "error", "error": {...}}`) and every answer carries a `request-id`.
Requests are checked as the API checks them (headers, tool_use answered by tool_result, thinking signatures
returned intact...), so a client that sends an invalid request gets the 400 it would get from Anthropic.

Tool search: with tools sent `"defer_loading": true` beside a tool search tool, a scripted call of a deferred
tool that no earlier search in the history found is preceded by the search that finds it (a
`server_tool_use` with the tool's name as query and its `tool_search_tool_result`, whose `tool_reference`s
name the deferred tools holding the query); a request whose history calls a deferred tool no search in it
found is refused, as the API refuses a tool it does not know.

    with FakeAnthropicServer(["Hello!", AiMessage(tool_execution_requests=[...])]) as server:
        model = AnthropicChatModel("claude-sonnet-4-5", base_url=server.base_url, api_key="test")
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from agentloop._values._messages import AiMessage, ChatResponse, FinishReason, TokenUsage

from ._fake_answers import arguments_object, output_tokens, scripted_response
from ._fake_search import deferred_names, find, unloaded_calls
from ._fake_server import FakeServer, RecordedRequest, Reply, encode_sse, split_evenly, split_text
from ._schema_rules import schema_problem

__all__ = ["FakeAnthropicServer"]

_STOP_REASONS = {
    FinishReason.STOP: "end_turn",
    FinishReason.LENGTH: "max_tokens",
    FinishReason.TOOL_EXECUTION: "tool_use",
    FinishReason.CONTENT_FILTER: "refusal",
    FinishReason.OTHER: "pause_turn",
}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_REQUEST_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "tools",
        "tool_choice",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "metadata",
        "thinking",
        "service_tier",
        "container",
        "mcp_servers",
        "context_management",
        "output_format",
        "output_config",
    }
)
# What `/v1/messages/count_tokens` accepts (no max_tokens, no stream, no sampling parameters).
_COUNT_FIELDS = frozenset(
    {"model", "messages", "system", "tools", "tool_choice", "thinking", "mcp_servers", "context_management"}
)
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_SEARCH_TOOLS = {
    "tool_search_tool_bm25_20251119": "tool_search_tool_bm25",
    "tool_search_tool_regex_20251119": "tool_search_tool_regex",
}
_ids = itertools.count(1)
_Json = dict[str, Any]


def _request_id() -> str:
    return f"req_{next(_ids):024x}"


def signature_of(thinking: str) -> str:
    """The signature this fake puts on a thinking block (and demands back with it)."""
    return base64.b64encode(hashlib.sha256(b"fake-thinking:" + thinking.encode()).digest()).decode()


class FakeAnthropicServer(FakeServer):
    """Speaks Anthropic's Messages API (`POST {base_url}/v1/messages`); see the module docstring.

    `responses`: `AiMessage`, `str`, `ChatResponse` or `Reply` items (or callables of the request returning
    one), answered in order. `model`: reported back when the request names none. `argument_pieces`: how many
    `input_json_delta` events each tool call's input is split into. `api_key`: when set, other keys get 401.
    `validate`: check requests as the API does.
    """

    base_path = ""

    def __init__(
        self,
        responses: Iterable[Any] = (),
        *,
        model: str = "claude-sonnet-4-5",
        argument_pieces: int = 3,
        api_key: str | None = None,
        keep_alive: bool = True,
        validate: bool = True,
    ) -> None:
        super().__init__(responses, keep_alive=keep_alive)
        self.model = model
        self.argument_pieces = argument_pieces
        self.api_key = api_key
        self.validate = validate

    # -- errors -------------------------------------------------------------------------------------------

    @staticmethod
    def error(
        status: int,
        message: str,
        *,
        type: str | None = None,
        headers: Iterable[tuple[str, str]] = (),
        request_id: str | None = None,
    ) -> Reply:
        """An error answer in Anthropic's format.

        `FakeAnthropicServer.error(529, "Overloaded", headers=[("retry-after", "1")])`
        """
        rid = request_id or _request_id()
        kind = type or _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        body = {"type": "error", "error": {"type": kind, "message": message}, "request_id": rid}
        return Reply.json(body, status=status, headers=(("request-id", rid), *headers))

    def stream_error(
        self, error_type: str, message: str, *, after: AiMessage | str | None = None, model: str | None = None
    ) -> Reply:
        """A 200 event stream that sends `after` (a partial answer, if any) and then an `error` event, as the
        API does when it fails mid-stream (e.g. `overloaded_error`). No `message_stop` follows."""
        partial = ChatResponse(AiMessage(after) if isinstance(after, str) else after or AiMessage())
        events = self._events(partial, {"model": model or self.model}, finished=False)
        error = {"type": "error", "error": {"type": error_type, "message": message}}
        events.append(encode_sse(error, event="error"))
        return Reply.sse(events, headers=(("request-id", _request_id()),))

    # -- rendering ----------------------------------------------------------------------------------------

    def answer_directly(self, request: RecordedRequest) -> Reply | None:
        """`POST /v1/messages/count_tokens`, answered without a script: the input tokens this fake reports
        as usage when the same request is sent to `/v1/messages`."""
        if request.method != "POST" or request.path.rstrip("/") != "/v1/messages/count_tokens":
            return None
        refused = self._check_headers(request)
        if refused is not None:
            return refused
        body = request.json
        if not isinstance(body, dict):
            return self.error(400, "There was an issue with your request body: it is not a JSON object")
        extra = sorted(set(body) - _COUNT_FIELDS)
        if extra:
            return self.error(400, f"{extra[0]}: Extra inputs are not permitted")
        if not body.get("model") or not isinstance(body.get("messages"), list):
            return self.error(400, "model and messages: Field required")
        words = _words(body.get("system")) + sum(_words(m) for m in body["messages"])
        return Reply.json({"input_tokens": words + 3}, headers=(("request-id", _request_id()),))

    def _check_headers(self, request: RecordedRequest) -> Reply | None:
        key = request.headers.get("x-api-key")
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if not key and scheme.lower() == "bearer":  # newer SDKs send the key as a bearer token
            key = token.strip()
        if not key:
            return self.error(401, "x-api-key header is required")
        if self.api_key is not None and key != self.api_key:
            return self.error(401, "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            return self.error(400, "anthropic-version: header is required")
        return None

    def render(self, item: Any, request: RecordedRequest) -> Reply:
        if isinstance(item, Reply):
            return item
        if request.method != "POST" or request.path.rstrip("/") != "/v1/messages":
            return self.error(404, f"Not found: {request.method} {request.path}", type="not_found_error")
        refused = self._check_headers(request)
        if refused is not None:
            return refused
        body = request.json
        if not isinstance(body, dict):
            return self.error(400, "There was an issue with your request body: it is not a JSON object")
        if self.validate:
            problem = _check_request(body)
            if problem:
                return self.error(400, problem)
        response = scripted_response(item, "FakeAnthropicServer")
        headers = (("request-id", _request_id()),)
        if body.get("stream"):
            return Reply.sse(self._events(response, body), headers=headers)
        return Reply.json(self._message(response, body), headers=headers)

    def _usage(self, response: ChatResponse, body: dict[str, Any]) -> TokenUsage:
        return response.token_usage or _estimate(response.ai_message, body)

    def _stop_reason(self, response: ChatResponse) -> str:
        if response.finish_reason is not None:
            return _STOP_REASONS[response.finish_reason]
        return "tool_use" if response.ai_message.tool_execution_requests else "end_turn"

    def _searches(self, message: AiMessage, body: dict[str, Any]) -> list[tuple[_Json, _Json]]:
        """The tool searches the answer makes before its calls: (`server_tool_use`, its result) pairs."""
        tools = body.get("tools")
        search = next(
            (t["name"] for t in tools or () if isinstance(t, dict) and t.get("type") in _SEARCH_TOOLS), None
        )
        deferred = deferred_names(tools)
        if search is None or not deferred:
            return []
        loaded = _referenced(body.get("messages"))
        pairs = []
        for name in unloaded_calls((c.name for c in message.tool_execution_requests), deferred, loaded):
            found = find(name, deferred)
            loaded.update(found)
            use_id = f"srvtoolu_{next(_ids):020x}"
            references = [{"type": "tool_reference", "tool_name": n} for n in found]
            pairs.append(
                (
                    {"type": "server_tool_use", "id": use_id, "name": search, "input": {"query": name}},
                    {
                        "type": "tool_search_tool_result",
                        "tool_use_id": use_id,
                        "content": {"type": "tool_search_tool_search_result", "tool_references": references},
                    },
                )
            )
        return pairs

    def _message(self, response: ChatResponse, body: dict[str, Any]) -> dict[str, Any]:
        message = response.ai_message
        content: list[dict[str, Any]] = []
        if message.thinking:
            content.append(
                {
                    "type": "thinking",
                    "thinking": message.thinking,
                    "signature": signature_of(message.thinking),
                }
            )
        if message.text:
            content.append({"type": "text", "text": message.text})
        for use, result in self._searches(message, body):
            content += [use, result]
        for n, call in enumerate(message.tool_execution_requests):
            content.append(
                {
                    "type": "tool_use",
                    "id": _tool_id(call.id, n),
                    "name": call.name,
                    "input": arguments_object(call, "tool_use input"),
                }
            )
        usage = self._usage(response, body)
        return {
            "id": response.id or f"msg_{next(_ids):024x}",
            "type": "message",
            "role": "assistant",
            "model": response.model or body.get("model") or self.model,
            "content": content,
            "stop_reason": self._stop_reason(response),
            "stop_sequence": None,
            "usage": {**_input_usage(usage), "output_tokens": usage.output_tokens},
        }

    def _events(self, response: ChatResponse, body: dict[str, Any], *, finished: bool = True) -> list[bytes]:
        message = response.ai_message
        usage = self._usage(response, body)
        start: dict[str, Any] = {
            "id": response.id or f"msg_{next(_ids):024x}",
            "type": "message",
            "role": "assistant",
            "model": response.model or body.get("model") or self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**_input_usage(usage), "output_tokens": 1},
        }
        events = [encode_sse({"type": "message_start", "message": start}, event="message_start")]
        index = 0

        def block(opening: dict[str, Any], deltas: Iterable[dict[str, Any]]) -> None:
            nonlocal index
            events.append(
                encode_sse(
                    {"type": "content_block_start", "index": index, "content_block": opening},
                    event="content_block_start",
                )
            )
            if index == 0:  # where the API sends its first ping
                events.append(encode_sse({"type": "ping"}, event="ping"))
            for delta in deltas:
                events.append(
                    encode_sse(
                        {"type": "content_block_delta", "index": index, "delta": delta},
                        event="content_block_delta",
                    )
                )
            events.append(
                encode_sse({"type": "content_block_stop", "index": index}, event="content_block_stop")
            )
            index += 1

        if message.thinking:
            pieces = [{"type": "thinking_delta", "thinking": p} for p in split_text(message.thinking)]
            pieces.append({"type": "signature_delta", "signature": signature_of(message.thinking)})
            block({"type": "thinking", "thinking": "", "signature": ""}, pieces)
        if message.text:
            block(
                {"type": "text", "text": ""},
                ({"type": "text_delta", "text": p} for p in split_text(message.text)),
            )
        for use, result in self._searches(message, body):  # the query streams as input_json_delta pieces
            query = json.dumps(use["input"])
            halves = split_evenly(query, 2)
            block({**use, "input": {}}, ({"type": "input_json_delta", "partial_json": h} for h in halves))
            block(result, ())
        for n, call in enumerate(message.tool_execution_requests):
            opening = {"type": "tool_use", "id": _tool_id(call.id, n), "name": call.name, "input": {}}
            parts = ["", *split_evenly(call.arguments, self.argument_pieces)]
            block(opening, ({"type": "input_json_delta", "partial_json": p} for p in parts))
        if index == 0:
            events.append(encode_sse({"type": "ping"}, event="ping"))
        if finished:
            delta = {
                "type": "message_delta",
                "delta": {"stop_reason": self._stop_reason(response), "stop_sequence": None},
                "usage": {"output_tokens": usage.output_tokens},
            }
            events.append(encode_sse(delta, event="message_delta"))
            events.append(encode_sse({"type": "message_stop"}, event="message_stop"))
        return events


def _input_usage(usage: TokenUsage) -> dict[str, int]:
    """The input side of `usage` as Anthropic reports it: cache reads and writes apart from `input_tokens`
    (sent when the script sets them)."""
    read, written = usage.cache_read_tokens, usage.cache_write_tokens
    wire = {"input_tokens": usage.input_tokens - (read or 0) - (written or 0)}
    if written is not None:
        wire["cache_creation_input_tokens"] = written
    if read is not None:
        wire["cache_read_input_tokens"] = read
    return wire


def _tool_id(given: str | None, n: int) -> str:
    return given or f"toolu_{next(_ids):020x}{n}"


def _words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(_words(v) for v in value)
    if isinstance(value, dict):
        return sum(_words(value.get(k)) for k in ("text", "content", "thinking"))
    return 0


def _estimate(message: AiMessage, body: dict[str, Any]) -> TokenUsage:
    """Deterministic token counts: words of the request in, tokens of the answer out."""
    words = _words(body.get("system")) + sum(_words(m) for m in body.get("messages") or ())
    out = output_tokens(message)
    return TokenUsage(input_tokens=words + 3, output_tokens=out)


# -- request validation (the messages the real API answers with, or close to them) ---------------------------


def _check_request(body: dict[str, Any]) -> str | None:
    """The message Anthropic would answer with 400 for this request body, or None if it is valid."""
    extra = sorted(set(body) - _REQUEST_FIELDS)
    if extra:
        return f"{extra[0]}: Extra inputs are not permitted"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        return "max_tokens: Field required (a positive integer)"
    system = body.get("system")
    if system is not None and not isinstance(system, (str, list)):
        return "system: Input should be a valid string or a list of text blocks"
    problem = _check_tools(body) or _check_output_config(body.get("output_config"))
    if problem:
        return problem
    thinking = body.get("thinking")
    thinking_on = isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget >= max_tokens:
            return "`max_tokens` must be greater than `thinking.budget_tokens`"
    return _check_messages(body.get("messages"), thinking_on, deferred_names(body.get("tools")))


def _check_output_config(config: Any) -> str | None:
    """Structured output (`output_config.format`): a JSON schema within the API's rules."""
    if config is None:
        return None
    if not isinstance(config, dict):
        return "output_config: Input should be a valid dictionary"
    format = config.get("format")
    if format is None:
        return None
    if not isinstance(format, dict) or format.get("type") != "json_schema":
        return "output_config.format.type: Input should be 'json_schema'"
    problem = schema_problem(format.get("schema"), "anthropic")
    return f"output_config.format.schema: {problem}" if problem else None


def _check_tools(body: dict[str, Any]) -> str | None:
    tools = body.get("tools")
    if tools is None:
        if body.get("tool_choice") is not None:
            return "tool_choice: tool_choice may only be specified while providing tools"
        messages = body.get("messages")
        blocks = [
            b
            for m in (messages if isinstance(messages, list) else ())
            if isinstance(m, dict) and isinstance(m.get("content"), list)
            for b in m["content"]
        ]
        if any(isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result") for b in blocks):
            return "Requests which include `tool_use` or `tool_result` blocks must define tools."
        return None
    if not isinstance(tools, list):
        return "tools: Input should be a valid list"
    names = set()
    searched = False
    for n, tool in enumerate(tools):
        if not isinstance(tool, dict):
            return f"tools.{n}: Input should be a valid dictionary"
        name = tool.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            return f"tools.{n}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
        if name in names:
            return f"tools: Tool names must be unique (duplicate {name!r})"
        names.add(name)
        if tool.get("type") in _SEARCH_TOOLS:
            if name != _SEARCH_TOOLS[tool["type"]]:
                return f"tools.{n}.name: Input should be {_SEARCH_TOOLS[tool['type']]!r}"
            searched = True
            continue
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            return f"tools.{n}.input_schema.type: Input should be 'object'"
        unknown = sorted(
            set(tool) - {"name", "description", "input_schema", "cache_control", "type", "defer_loading"}
        )
        if unknown:
            return f"tools.{n}.{unknown[0]}: Extra inputs are not permitted"
        if "defer_loading" in tool and not isinstance(tool["defer_loading"], bool):
            return f"tools.{n}.defer_loading: Input should be a valid boolean"
    if deferred_names(tools) and not searched:
        return (
            "tools: tools with defer_loading need a tool search tool (tool_search_tool_bm25_20251119 or "
            "tool_search_tool_regex_20251119) in the same request"
        )
    if not searched and _has_searches(body.get("messages")):
        return "messages: server_tool_use blocks of a tool search need its tool search tool in tools"
    choice = body.get("tool_choice")
    if choice is not None:
        if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
            return "tool_choice: Input tag does not match the expected tags: 'auto', 'any', 'tool', 'none'"
        if choice["type"] == "tool" and choice.get("name") not in names:
            return f"tool_choice: Tool '{choice.get('name')}' not found in provided tools"
    return None


def _referenced(messages: Any) -> set[str]:
    """The deferred tools the tool searches in `messages` found (their `tool_reference`s)."""
    names: set[str] = set()
    for block in _blocks_of(messages):
        if block.get("type") == "tool_search_tool_result":
            content = block.get("content")
            for ref in content.get("tool_references") or () if isinstance(content, dict) else ():
                if isinstance(ref, dict) and isinstance(ref.get("tool_name"), str):
                    names.add(ref["tool_name"])
    return names


def _has_searches(messages: Any) -> bool:
    return any(b.get("type") == "server_tool_use" for b in _blocks_of(messages))


def _blocks_of(messages: Any) -> list[dict[str, Any]]:
    return [
        b
        for m in (messages if isinstance(messages, list) else ())
        if isinstance(m, dict) and isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict)
    ]


def _check_search_block(block: _Json, where: str, uses: set[str], deferred: Sequence[str]) -> str | None:
    """A tool search block sent back: a `server_tool_use` of a search tool, or its result naming deferred
    tools (which it loads)."""
    if block["type"] == "server_tool_use":
        if not isinstance(block.get("id"), str) or not isinstance(block.get("input"), dict):
            return f"{where}: server_tool_use blocks need an id and an input object"
        if block.get("name") not in _SEARCH_TOOLS.values():
            return f"{where}.name: unknown server tool {block.get('name')!r}"
        uses.add(block["id"])
        return None
    if block.get("tool_use_id") not in uses:
        return f"{where}: tool_search_tool_result without its server_tool_use ({block.get('tool_use_id')})"
    content = block.get("content")
    if not isinstance(content, dict) or content.get("type") != "tool_search_tool_search_result":
        return f"{where}.content.type: Input should be 'tool_search_tool_search_result'"
    for ref in content.get("tool_references") or ():
        if not isinstance(ref, dict) or ref.get("type") != "tool_reference":
            return f"{where}.content.tool_references: Input should be tool_reference blocks"
        if ref.get("tool_name") not in deferred:
            return f"{where}: Tool reference '{ref.get('tool_name')}' not found in available tools"
    return None


def _check_messages(messages: Any, thinking_on: bool, deferred: Sequence[str] = ()) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    pending: list[str] = []
    uses: set[str] = set()  # server_tool_use ids so far
    loaded: set[str] = set()  # deferred tools found by the searches so far
    for n, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return f"messages.{n}.role: Input should be 'user' or 'assistant'"
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or (not blocks and n < len(messages) - 1):
            return (
                f"messages.{n}: all messages must have non-empty content except for the optional final "
                "assistant message"
            )
        if pending:
            answered = [
                b.get("tool_use_id") for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"
            ]
            missing = [i for i in pending if i not in answered]
            if message["role"] != "user" or missing:
                return (
                    f"messages.{n}: `tool_use` ids were found without `tool_result` blocks immediately "
                    f"after: {', '.join(missing or pending)}. Each `tool_use` block must have a "
                    "corresponding `tool_result` block in the next message."
                )
            first_other = next(
                (i for i, b in enumerate(blocks) if b.get("type") != "tool_result"), len(blocks)
            )
            if any(b.get("type") == "tool_result" for b in blocks[first_other:]):
                return f"messages.{n}: `tool_result` blocks must come first in the content of a user message"
        previous_ids = pending
        pending = []
        for m, block in enumerate(blocks):
            where = f"messages.{n}.content.{m}"
            if not isinstance(block, dict):
                return f"{where}: Input should be a valid dictionary"
            kind = block.get("type")
            if kind == "text":
                if not isinstance(block.get("text"), str) or not block["text"]:
                    return f"{where}: text content blocks must be non-empty"
            elif kind == "tool_use":
                if message["role"] != "assistant":
                    return f"{where}: tool_use blocks are only allowed in assistant messages"
                if not isinstance(block.get("id"), str) or not isinstance(block.get("input"), dict):
                    return f"{where}: tool_use blocks need an id and an input object"
                if block.get("name") in deferred and block["name"] not in loaded:
                    return (
                        f"{where}: tool_use of deferred tool {block['name']!r}, which no tool search in the "
                        "conversation loaded (its tool_search_tool_result must be sent back)"
                    )
                pending.append(block["id"])
            elif kind in ("server_tool_use", "tool_search_tool_result"):
                if message["role"] != "assistant":
                    return f"{where}: {kind} blocks are only allowed in assistant messages"
                problem = _check_search_block(block, where, uses, deferred)
                if problem:
                    return problem
                if kind == "tool_search_tool_result":
                    loaded |= _referenced([{"content": [block]}])
            elif kind == "tool_result":
                if message["role"] != "user":
                    return f"{where}: tool_result blocks are only allowed in user messages"
                if block.get("tool_use_id") not in previous_ids:
                    return (
                        f"{where}: unexpected `tool_use_id` found in `tool_result` blocks: "
                        f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                        "`tool_use` block in the previous message."
                    )
            elif kind == "thinking":
                if message["role"] != "assistant":
                    return f"{where}: thinking blocks are only allowed in assistant messages"
                if block.get("signature") != signature_of(str(block.get("thinking", ""))):
                    return f"{where}: Invalid `signature` in `thinking` block"
            elif kind not in ("redacted_thinking", "image", "document"):
                return f"{where}.type: Input tag '{kind}' found using 'type' does not match the expected tags"
        if (
            thinking_on
            and message["role"] == "assistant"
            and pending
            and n == _last_assistant(messages)
            and blocks[0].get("type") not in ("thinking", "redacted_thinking")
        ):
            return (
                f"messages.{n}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
                f"`{blocks[0].get('type')}`. When `thinking` is enabled, a final `assistant` message must "
                "start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` "
                "blocks)."
            )
    if pending:
        return (
            "messages: `tool_use` ids were found without `tool_result` blocks immediately after: "
            f"{', '.join(pending)}. Each `tool_use` block must have a corresponding `tool_result` block in "
            "the next message."
        )
    return None


def _last_assistant(messages: list[Any]) -> int:
    return max(
        (i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"),
        default=-1,
    )
