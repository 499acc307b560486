"""`FakeOpenAIServer`: an OpenAI Chat Completions server on 127.0.0.1 that answers with scripted messages.

Scripted `AiMessage`s (or plain strings, or `ChatResponse`s to set usage and finish reason) are encoded the
way OpenAI encodes them: one JSON completion when the request has no `stream`, otherwise server-sent events
(a role chunk, the text in several content deltas, each tool call as a first delta with id, type and name
followed by its arguments in pieces, a finish-reason chunk, a usage chunk when
`stream_options.include_usage` is set, and `data: [DONE]`). Thinking goes out as `reasoning_content`
deltas, as DeepSeek, vLLM and llama.cpp send it. Errors use OpenAI's error body and carry an `x-request-id`.
Requests are checked like OpenAI checks them (every tool call answered by a tool message, and so on), so a
client that sends an invalid conversation gets the same 400 it would get from the real API.

    with FakeOpenAIServer(["Hello!", AiMessage(tool_execution_requests=[...])]) as server:
        model = OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key="test")
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from typing import Any

from agentloop._values._messages import AiMessage, ChatResponse, FinishReason, TokenUsage

from ._fake_answers import output_tokens, scripted_response
from ._fake_server import FakeServer, RecordedRequest, Reply, encode_sse, split_evenly, split_text
from ._schema_rules import schema_problem

__all__ = ["FakeOpenAIServer"]

_FINISH = {
    FinishReason.STOP: "stop",
    FinishReason.LENGTH: "length",
    FinishReason.TOOL_EXECUTION: "tool_calls",
    FinishReason.CONTENT_FILTER: "content_filter",
    FinishReason.OTHER: "stop",
}
_ids = itertools.count(1)


def _request_id() -> str:
    return f"req_{next(_ids):024x}"


class FakeOpenAIServer(FakeServer):
    """Speaks OpenAI Chat Completions (`POST {base_url}/chat/completions`); see the module docstring.

    `responses`: `AiMessage`, `str`, `ChatResponse` or `Reply` items (or callables of the request returning
    one), answered in order. `model`: the model name reported back when the request names none.
    `argument_pieces`: how many deltas each tool call's arguments are split into when streaming.
    """

    base_path = "/v1"

    def __init__(
        self,
        responses: Iterable[Any] = (),
        *,
        model: str = "gpt-4o-mini",
        argument_pieces: int = 3,
        keep_alive: bool = True,
        validate: bool = True,
    ) -> None:
        super().__init__(responses, keep_alive=keep_alive)
        self.model = model
        self.argument_pieces = argument_pieces
        self.validate = validate

    # -- errors ---------------------------------------------------------------------------------------------

    @staticmethod
    def error(
        status: int,
        message: str,
        *,
        type: str | None = None,
        code: str | None = None,
        param: str | None = None,
        headers: Iterable[tuple[str, str]] = (),
        request_id: str | None = None,
    ) -> Reply:
        """An error answer in OpenAI's format.

        `FakeOpenAIServer.error(429, "Rate limit reached", headers=[("retry-after", "1")])`
        """
        default_type = {
            400: "invalid_request_error",
            401: "invalid_request_error",
            403: "invalid_request_error",
            404: "invalid_request_error",
            429: "rate_limit_exceeded",
        }
        kind = type or default_type.get(status, "server_error" if status >= 500 else "invalid_request_error")
        body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
        return Reply.json(
            body, status=status, headers=(("x-request-id", request_id or _request_id()), *headers)
        )

    # -- rendering ------------------------------------------------------------------------------------------

    def render(self, item: Any, request: RecordedRequest) -> Reply:
        if isinstance(item, Reply):
            return item
        if not request.path.endswith("/chat/completions") or request.method != "POST":
            return self.error(
                404, f"Unknown request URL: {request.method} {request.path}.", code="unknown_url"
            )
        body = request.json
        if not isinstance(body, dict):
            return self.error(400, "We could not parse the JSON body of your request.")
        if self.validate:
            problem = _check_request(body)
            if problem:
                return self.error(400, problem)
        response = scripted_response(item, "FakeOpenAIServer")
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return self._sse(response, body, include_usage)
        return self._json(response, body)

    def _usage(self, response: ChatResponse, body: dict[str, Any]) -> dict[str, Any]:
        usage = response.token_usage or _estimate(response.ai_message, body)
        total = (
            usage.total_tokens if usage.total_tokens is not None else usage.input_tokens + usage.output_tokens
        )
        wire: dict[str, Any] = {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": total,
        }
        # The details go out when the script sets them (OpenAI and llama.cpp send them; older servers don't).
        if usage.cache_read_tokens is not None:
            wire["prompt_tokens_details"] = {"cached_tokens": usage.cache_read_tokens, "audio_tokens": 0}
        if usage.reasoning_tokens is not None:
            wire["completion_tokens_details"] = {
                "reasoning_tokens": usage.reasoning_tokens,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            }
        return wire

    def _finish(self, response: ChatResponse) -> str:
        if response.finish_reason is not None:
            return _FINISH[response.finish_reason]
        return "tool_calls" if response.ai_message.tool_execution_requests else "stop"

    def _json(self, response: ChatResponse, body: dict[str, Any]) -> Reply:
        message = response.ai_message
        wire: dict[str, Any] = {
            "role": "assistant",
            "content": message.text,
            "refusal": None,
            "annotations": [],
        }
        if message.thinking is not None:
            wire["reasoning_content"] = message.thinking
        if message.tool_execution_requests:
            wire["tool_calls"] = [
                {
                    "id": call.id or f"call_{n}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for n, call in enumerate(message.tool_execution_requests)
            ]
        completion = {
            "id": response.id or f"chatcmpl-{next(_ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": response.model or body.get("model") or self.model,
            "choices": [
                {"index": 0, "message": wire, "logprobs": None, "finish_reason": self._finish(response)}
            ],
            "usage": self._usage(response, body),
            "service_tier": "default",
            "system_fingerprint": "fp_fake",
        }
        return Reply.json(completion, headers=(("x-request-id", _request_id()),))

    def _sse(self, response: ChatResponse, body: dict[str, Any], include_usage: bool) -> Reply:
        message = response.ai_message
        head = {
            "id": response.id or f"chatcmpl-{next(_ids)}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": response.model or body.get("model") or self.model,
            "service_tier": "default",
            "system_fingerprint": "fp_fake",
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            data = {
                **head,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            }
            if include_usage:
                data["usage"] = None
            return encode_sse(data)

        calls = message.tool_execution_requests
        first: dict[str, Any] = {"role": "assistant", "content": None if calls and not message.text else ""}
        first["refusal"] = None
        events = [chunk(first)]
        if message.thinking:
            events.extend(chunk({"reasoning_content": piece}) for piece in split_text(message.thinking))
        if message.text:
            events.extend(chunk({"content": piece}) for piece in split_text(message.text))
        for index, call in enumerate(calls):
            start = {
                "index": index,
                "id": call.id or f"call_{index}",
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            events.append(chunk({"tool_calls": [start]}))
            for piece in split_evenly(call.arguments, self.argument_pieces):
                events.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
        events.append(chunk({}, self._finish(response)))
        if include_usage:
            events.append(encode_sse({**head, "choices": [], "usage": self._usage(response, body)}))
        events.append(encode_sse("[DONE]"))
        return Reply.sse(events, headers=(("x-request-id", _request_id()),))


def _estimate(message: AiMessage, body: dict[str, Any]) -> TokenUsage:
    """Deterministic token counts: words of the request in, tokens of the answer out."""
    words = 0
    for entry in body.get("messages") or ():
        content = entry.get("content") if isinstance(entry, dict) else None
        if isinstance(content, str):
            words += len(content.split())
    out = output_tokens(message)
    return TokenUsage(input_tokens=words + 3, output_tokens=out)


_UNANSWERED = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
    "'tool_call_id'. The following tool_call_ids did not have response messages: "
)


def _check_response_format(format: Any) -> str | None:
    """`response_format`: text, json_object, or a named json_schema (within the strict rules when strict)."""
    if format is None:
        return None
    kind = format.get("type") if isinstance(format, dict) else None
    if kind in ("text", "json_object"):
        return None
    if kind != "json_schema":
        return "Invalid value for 'response_format.type': expected 'text', 'json_object' or 'json_schema'."
    spec = format.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not spec["name"]:
        return "Missing required parameter: 'response_format.json_schema.name'."
    if spec.get("strict"):
        problem = schema_problem(spec.get("schema"), "openai")
        if problem:
            return f"Invalid schema for response_format '{spec['name']}': {problem}"
    return None


def _check_request(body: dict[str, Any]) -> str | None:
    """The message OpenAI would answer with 400 for this request body, or None if it is valid."""
    if not body.get("model"):
        return "you must provide a model parameter"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return (
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty one."
        )
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not tools:
            return "Invalid 'tools': empty array. Expected an array with minimum length 1."
        for n, entry in enumerate(tools):
            function = entry.get("function") if isinstance(entry, dict) else None
            if (
                not isinstance(entry, dict)
                or entry.get("type") != "function"
                or not isinstance(function, dict)
            ):
                return f"Invalid value for 'tools[{n}]': expected a function tool."
            if not isinstance(function.get("name"), str) or not function["name"]:
                return f"Missing required parameter: 'tools[{n}].function.name'."
    elif body.get("tool_choice") is not None:
        return "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified."
    elif body.get("parallel_tool_calls") is not None:
        return "Invalid value for 'parallel_tool_calls': only allowed when 'tools' are specified."
    problem = _check_response_format(body.get("response_format"))
    if problem:
        return problem
    pending: list[str] = []
    for n, entry in enumerate(messages):
        role = entry.get("role") if isinstance(entry, dict) else None
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return f"Invalid value for 'messages[{n}].role': {role!r}."
        if role != "tool" and pending:
            return _UNANSWERED + ", ".join(pending)
        if role == "assistant":
            for call in entry.get("tool_calls") or ():
                if not call.get("id"):
                    return f"Missing required parameter: 'messages[{n}].tool_calls[0].id'."
                pending.append(call["id"])
        elif role == "tool":
            call_id = entry.get("tool_call_id")
            if call_id not in pending:
                return (
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                    f"with 'tool_calls' (messages[{n}].tool_call_id={call_id!r})."
                )
            pending.remove(call_id)
        elif not isinstance(entry.get("content"), (str, list)):
            return f"Invalid value for 'messages[{n}].content': expected a string."
    if pending:
        return _UNANSWERED + ", ".join(pending)
    return None
