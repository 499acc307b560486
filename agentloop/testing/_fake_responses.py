"""`FakeOpenAIResponsesServer`: an OpenAI Responses API server on 127.0.0.1 answering with scripted messages.

Scripted `AiMessage`s (or strings, or `ChatResponse`s to set usage and finish reason) are encoded as OpenAI
encodes them: one `response` object when the request has no `stream`, otherwise typed server-sent events
(`response.created`, `response.in_progress`, then per output item `response.output_item.added`, its
content events — `response.reasoning_summary_part.added` / `response.reasoning_summary_text.delta` for a
reasoning item's summary, `response.content_part.added` / `response.output_text.delta` for a message,
`response.function_call_arguments.delta` / `.done` for a function call — and `response.output_item.done`,
and last `response.completed` or `response.incomplete`). No `[DONE]`: the stream ends after the last event.

An `AiMessage.thinking` becomes a reasoning item (its summary; with `encrypted_content` when the request
`include`s `reasoning.encrypted_content`), output before the answer. Requests are checked as OpenAI checks
them: every `function_call` answered by a `function_call_output` with its `call_id`, a reasoning item sent
back followed by the item that followed it and, with `store` false, carrying the encrypted content this
server issued; strict tool and output schemas within OpenAI's strict rules.

Tool search: with function tools sent `"defer_loading": true` beside `{"type": "tool_search"}`, a scripted
call of a deferred tool that no earlier search in the input found is preceded by the search that finds it (a
`tool_search_call` with the tool's name as query and a `tool_search_output` holding the definitions of the
deferred tools whose name holds it); an input that calls a deferred tool no search in it found is refused.

    with FakeOpenAIResponsesServer(["Hello!"]) as server:
        model = OpenAIResponsesModel("gpt-5-mini", base_url=server.base_url, api_key="test")
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from typing import Any

from agentloop._values._messages import AiMessage, ChatResponse, FinishReason, TokenUsage

from ._fake_answers import output_tokens, scripted_response
from ._fake_openai import FakeOpenAIServer
from ._fake_search import deferred_names, find, unloaded_calls
from ._fake_server import RecordedRequest, Reply, encode_sse, split_evenly, split_text
from ._schema_rules import schema_problem

__all__ = ["FakeOpenAIResponsesServer"]

_ids = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):032x}"


def encrypted(reasoning_id: str) -> str:
    """The encrypted content this fake issues for reasoning item `reasoning_id` (checked when it returns)."""
    return f"gAAAA-fake-{reasoning_id}"


class FakeOpenAIResponsesServer(FakeOpenAIServer):
    """Speaks the OpenAI Responses API (`POST {base_url}/responses`); see the module docstring.

    `responses`: `AiMessage`, `str`, `ChatResponse` or `Reply` items (or callables of the request returning
    one), answered in order. `text_pieces` / `argument_pieces`: into how many deltas answer text is split
    (None: word by word) and each call's arguments. Errors: `FakeOpenAIResponsesServer.error(...)`, as
    `FakeOpenAIServer.error`.
    """

    def __init__(
        self,
        responses: Iterable[Any] = (),
        *,
        model: str = "gpt-5-mini",
        argument_pieces: int = 3,
        keep_alive: bool = True,
        validate: bool = True,
    ) -> None:
        super().__init__(
            responses, model=model, argument_pieces=argument_pieces, keep_alive=keep_alive, validate=validate
        )

    def render(self, item: Any, request: RecordedRequest) -> Reply:
        if isinstance(item, Reply):
            return item
        if not request.path.endswith("/responses") or request.method != "POST":
            return self.error(
                404, f"Unknown request URL: {request.method} {request.path}.", code="unknown_url"
            )
        body = request.json
        if not isinstance(body, dict):
            return self.error(400, "We could not parse the JSON body of your request.")
        if self.validate:
            problem = check_request(body)
            if problem:
                return self.error(400, problem, param=problem.partition("'")[2].partition("'")[0] or None)
        response = scripted_response(item, "FakeOpenAIResponsesServer")
        items = self._items(response.ai_message, body)
        head = self._head(response, body)
        if body.get("stream"):
            return self._events(head, items, response, body)
        return Reply.json(self._done(head, items, response, body), headers=(("x-request-id", _id("req")),))

    # -- what the response holds --------------------------------------------------------------------------

    def _items(self, message: AiMessage, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The output items of `message`, complete: reasoning, message, function calls."""
        items: list[dict[str, Any]] = []
        if message.thinking is not None:
            reasoning_id = _id("rs")
            summary = [{"type": "summary_text", "text": message.thinking}] if message.thinking else []
            reasoning: dict[str, Any] = {"id": reasoning_id, "type": "reasoning", "summary": summary}
            if "reasoning.encrypted_content" in (body.get("include") or ()):
                reasoning["encrypted_content"] = encrypted(reasoning_id)
            items.append(reasoning)
        if message.text is not None:
            items.append(
                {
                    "id": _id("msg"),
                    "type": "message",
                    "status": "completed",
                    "content": [
                        {"type": "output_text", "annotations": [], "logprobs": [], "text": message.text}
                    ],
                    "role": "assistant",
                }
            )
        items += _searches(message, body)
        for n, call in enumerate(message.tool_execution_requests):
            items.append(
                {
                    "id": _id("fc"),
                    "type": "function_call",
                    "status": "completed",
                    "arguments": call.arguments,
                    "call_id": call.id or f"call_{n}",
                    "name": call.name,
                }
            )
        return items

    def _head(self, response: ChatResponse, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": response.id or _id("resp"),
            "object": "response",
            "created_at": int(time.time()),
            "status": "in_progress",
            "background": False,
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": response.model or body.get("model") or self.model,
            "output": [],
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": body.get("text") or {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_p": body.get("top_p", 1.0),
            "truncation": "disabled",
            "usage": None,
            "user": None,
            "metadata": {},
        }

    def _usage(self, response: ChatResponse, body: dict[str, Any]) -> dict[str, Any]:
        usage = response.token_usage or _estimate(response.ai_message, body)
        return {
            "input_tokens": usage.input_tokens,
            "input_tokens_details": {"cached_tokens": usage.cache_read_tokens or 0},
            "output_tokens": usage.output_tokens,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens or 0},
            "total_tokens": usage.total_tokens
            if usage.total_tokens is not None
            else usage.input_tokens + usage.output_tokens,
        }

    def _done(
        self, head: dict[str, Any], items: list[dict[str, Any]], response: ChatResponse, body: dict[str, Any]
    ) -> dict[str, Any]:
        done = {**head, "output": items, "usage": self._usage(response, body), "status": "completed"}
        if response.finish_reason in (FinishReason.LENGTH, FinishReason.CONTENT_FILTER):
            reason = (
                "content_filter"
                if response.finish_reason is FinishReason.CONTENT_FILTER
                else "max_output_tokens"
            )
            done["status"] = "incomplete"
            done["incomplete_details"] = {"reason": reason}
        return done

    # -- the event stream ---------------------------------------------------------------------------------

    def _events(
        self, head: dict[str, Any], items: list[dict[str, Any]], response: ChatResponse, body: dict[str, Any]
    ) -> Reply:
        sequence = itertools.count()
        events: list[bytes] = []

        def emit(kind: str, **data: Any) -> None:
            events.append(encode_sse({"type": kind, "sequence_number": next(sequence), **data}, event=kind))

        emit("response.created", response=head)
        emit("response.in_progress", response=head)
        for index, item in enumerate(items):
            kind = item["type"]
            item_id = item["id"]
            where = {"item_id": item_id, "output_index": index}
            if kind == "reasoning":
                emit("response.output_item.added", output_index=index, item={**item, "summary": []})
                for n, part in enumerate(item["summary"]):
                    emit(
                        "response.reasoning_summary_part.added",
                        **where,
                        summary_index=n,
                        part={"type": "summary_text", "text": ""},
                    )
                    for piece in split_text(part["text"]):
                        emit("response.reasoning_summary_text.delta", **where, summary_index=n, delta=piece)
                    emit("response.reasoning_summary_text.done", **where, summary_index=n, text=part["text"])
                    emit("response.reasoning_summary_part.done", **where, summary_index=n, part=part)
            elif kind == "message":
                text = item["content"][0]["text"]
                emit(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "content": []},
                )
                empty = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
                emit("response.content_part.added", **where, content_index=0, part=empty)
                for piece in split_text(text):
                    emit("response.output_text.delta", **where, content_index=0, delta=piece, logprobs=[])
                emit("response.output_text.done", **where, content_index=0, text=text, logprobs=[])
                emit("response.content_part.done", **where, content_index=0, part=item["content"][0])
            elif kind in ("tool_search_call", "tool_search_output"):
                emit("response.output_item.added", output_index=index, item={**item, "status": "in_progress"})
            else:
                emit(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "arguments": ""},
                )
                for piece in split_evenly(item["arguments"], self.argument_pieces):
                    if piece:
                        emit("response.function_call_arguments.delta", **where, delta=piece)
                emit("response.function_call_arguments.done", **where, arguments=item["arguments"])
            emit("response.output_item.done", output_index=index, item=item)
        done = self._done(head, items, response, body)
        emit("response.completed" if done["status"] == "completed" else "response.incomplete", response=done)
        return Reply.sse(events, headers=(("x-request-id", _id("req")),))

    @staticmethod
    def failed(message: str, *, code: str = "server_error") -> Reply:
        """A stream that starts and then fails (`response.failed`), as OpenAI reports errors mid-response."""
        head: dict[str, Any] = {
            "id": _id("resp"),
            "object": "response",
            "status": "in_progress",
            "output": [],
            "error": None,
        }
        failed = {**head, "status": "failed", "error": {"code": code, "message": message}}
        return Reply.sse(
            [
                encode_sse(
                    {"type": "response.created", "sequence_number": 0, "response": head},
                    event="response.created",
                ),
                encode_sse(
                    {"type": "response.failed", "sequence_number": 1, "response": failed},
                    event="response.failed",
                ),
            ],
            headers=(("x-request-id", _id("req")),),
        )


def _searches(message: AiMessage, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool searches the answer makes before its calls: `tool_search_call` and `tool_search_output`
    items, as the API outputs them (execution "server", no call_id)."""
    tools = body.get("tools") or []
    deferred = deferred_names(tools)
    if not deferred or not any(isinstance(t, dict) and t.get("type") == "tool_search" for t in tools):
        return []
    loaded = _loaded(body.get("input"))
    definitions = {t["name"]: t for t in tools if isinstance(t, dict) and t.get("name") in deferred}
    items: list[dict[str, Any]] = []
    for name in unloaded_calls((c.name for c in message.tool_execution_requests), deferred, loaded):
        found = find(name, deferred)
        loaded.update(found)
        common = {"call_id": None, "execution": "server", "status": "completed"}
        items.append({"id": _id("tsc"), "type": "tool_search_call", **common, "arguments": {"query": name}})
        tools_found = [definitions[n] for n in found]
        items.append({"id": _id("tso"), "type": "tool_search_output", **common, "tools": tools_found})
    return items


def _loaded(inputs: Any) -> set[str]:
    """The deferred tools the `tool_search_output` items of `inputs` loaded."""
    names: set[str] = set()
    for item in inputs if isinstance(inputs, list) else ():
        if isinstance(item, dict) and item.get("type") == "tool_search_output":
            names.update(str(t.get("name")) for t in item.get("tools") or () if isinstance(t, dict))
    return names


def _check_tools(tools: Any) -> str | None:
    searched = False
    for n, tool in enumerate(tools or ()):
        if isinstance(tool, dict) and tool.get("type") == "tool_search":
            searched = True
            continue
        if not isinstance(tool, dict) or tool.get("type") != "function" or not tool.get("name"):
            return f"Missing required parameter: 'tools[{n}].name'."
        if "defer_loading" in tool and not isinstance(tool["defer_loading"], bool):
            return f"Invalid type for 'tools[{n}].defer_loading': expected a boolean."
        if tool.get("strict"):
            problem = schema_problem(tool.get("parameters"), "openai")
            if problem:
                return f"Invalid schema for function '{tool['name']}': {problem}"
    if deferred_names(tools) and not searched:
        return "Tools with defer_loading require the tool_search tool in 'tools'."
    return None


def _check_search_item(item: dict[str, Any], n: int, deferred: list[str], loaded: set[str]) -> str | None:
    """A tool search item sent back: a call with its arguments, or an output of deferred tools (which it
    loads)."""
    if item["type"] == "tool_search_call":
        if not isinstance(item.get("arguments"), dict):
            return f"Invalid type for 'input[{n}].arguments': expected an object."
        return None
    tools = item.get("tools")
    if not isinstance(tools, list):
        return f"Missing required parameter: 'input[{n}].tools'."
    for tool in tools:
        name = tool.get("name") if isinstance(tool, dict) else None
        if name not in deferred:
            return f"Invalid 'input[{n}].tools': {name!r} is not a deferred tool of this request."
        loaded.add(name)
    return None


def _estimate(message: AiMessage, body: dict[str, Any]) -> TokenUsage:
    """Deterministic token counts: words of the input in, tokens of the answer out."""
    words = len(str(body.get("instructions") or "").split())
    inputs = body.get("input")
    for entry in inputs if isinstance(inputs, list) else [{"content": inputs}]:
        content = entry.get("content") if isinstance(entry, dict) else None
        if isinstance(content, str):
            words += len(content.split())
    out = output_tokens(message)
    return TokenUsage(input_tokens=words + 3, output_tokens=out)


_PART_TYPES = ("input_text", "input_image", "input_file")


def _check_part(part: Any, where: str) -> str | None:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind not in _PART_TYPES and kind != "output_text":
        return f"Invalid value for '{where}.type': {kind!r}. Supported values are: {', '.join(_PART_TYPES)}."
    if kind == "input_image":
        url = part.get("image_url")
        if not part.get("file_id") and not (
            isinstance(url, str) and url.startswith(("http://", "https://", "data:image/"))
        ):
            return (
                f"Invalid '{where}.image_url'. Expected a valid URL, but got a value with an invalid format."
            )
    if kind == "input_file":
        data = part.get("file_data")
        if data is not None and not part.get("filename"):
            return f"Missing required parameter: '{where}.filename'."
        if data is None and not part.get("file_url") and not part.get("file_id"):
            return f"Missing required parameter: '{where}.file_data'."
    return None


def check_request(body: dict[str, Any]) -> str | None:
    """The message OpenAI would answer with 400 for this Responses request body, or None if it is valid."""
    if not body.get("model"):
        return "Missing required parameter: 'model'."
    inputs = body.get("input")
    if isinstance(inputs, str):
        return None
    if not isinstance(inputs, list):
        return "Invalid type for 'input': expected a string or an array of input items."
    tools = body.get("tools")
    problem = _check_tools(tools)
    if problem:
        return problem
    deferred = deferred_names(tools)
    loaded: set[str] = set()  # deferred tools the searches in the input found so far
    format = (body.get("text") or {}).get("format")
    if isinstance(format, dict) and format.get("type") == "json_schema":
        if not format.get("name"):
            return "Missing required parameter: 'text.format.name'."
        if format.get("strict"):
            problem = schema_problem(format.get("schema"), "openai")
            if problem:
                return f"Invalid schema for response_format '{format['name']}': {problem}"
    calls: dict[str, bool] = {}  # call_id -> answered
    store = body.get("store", True)
    for n, item in enumerate(inputs):
        if not isinstance(item, dict):
            return f"Invalid type for 'input[{n}]': expected an object."
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                return (
                    f"Invalid value: '{role}'. Supported values are: 'assistant', 'system', 'developer', and "
                    "'user'."
                )
            unanswered = [c for c, done in calls.items() if not done]
            if unanswered:
                return f"No tool output found for function call {unanswered[0]}."
            content = item.get("content")
            if isinstance(content, list):
                for m, part in enumerate(content):
                    problem = _check_part(part, f"input[{n}].content[{m}]")
                    if problem:
                        return problem
            elif not isinstance(content, str):
                return f"Invalid type for 'input[{n}].content': expected a string or an array."
        elif kind == "function_call":
            call_id = item.get("call_id")
            if not call_id or not item.get("name") or not isinstance(item.get("arguments"), str):
                return f"Missing required parameter: 'input[{n}].call_id'."
            if item["name"] in deferred and item["name"] not in loaded:
                return (
                    f"Invalid 'input[{n}]': function call to deferred tool {item['name']!r}, which no "
                    "tool_search_output in the input loaded."
                )
            calls[call_id] = False
        elif kind in ("tool_search_call", "tool_search_output"):
            problem = _check_search_item(item, n, deferred, loaded)
            if problem:
                return problem
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if call_id not in calls:
                return f"No tool call found for function call output with call_id {call_id}."
            calls[call_id] = True
            output = item.get("output")
            if isinstance(output, list):
                for m, part in enumerate(output):
                    problem = _check_part(part, f"input[{n}].output[{m}]")
                    if problem:
                        return problem
            elif not isinstance(output, str):
                return f"Invalid type for 'input[{n}].output': expected a string or an array."
        elif kind == "reasoning":
            reasoning_id = item.get("id")
            following = inputs[n + 1] if n + 1 < len(inputs) else None
            if not isinstance(following, dict) or (
                following.get("type", "message") == "message" and following.get("role") == "user"
            ):
                return (
                    f"Item '{reasoning_id}' of type 'reasoning' was provided without its required following "
                    "item."
                )
            if not store and item.get("encrypted_content") != encrypted(str(reasoning_id)):
                return (
                    f"Item with id '{reasoning_id}' not found. Items are not persisted when `store` is set "
                    "to false. Try again with `store` set to true, or remove this item from your input."
                )
        else:
            return f"Invalid value for 'input[{n}].type': {kind!r}."
    unanswered = [c for c, done in calls.items() if not done]
    if unanswered:
        return f"No tool output found for function call {unanswered[0]}."
    return None
