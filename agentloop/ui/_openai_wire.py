"""What `openai_app` sends: an agent's run as a Chat Completions object or `chat.completion.chunk` stream,
and as a Responses object or its event stream, in the shapes OpenAI's own API sends them.

The answer is the text the model wrote in every round of the run (the rounds that called tools, then the
final one), rounds separated by a blank line, the same streamed or not; the usage is the whole run's.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from .. import FinishReason, PartialResponse, Result, TokenStream, TokenUsage
from ._record import error_text

__all__ = ["RunFailed", "chat_chunks", "chat_completion", "finished_response", "response_events", "run_text"]

_encode = msgspec.json.Encoder().encode

_PAUSED = (
    "A tool call of this agent waits for a person's approval, which the OpenAI API cannot carry: serve the "
    "agent with agentloop.ui.vercel_ai_app or ag_ui_app, or give it an approval_handler"
)


class RunFailed(Exception):
    """The run failed; `message` is what the client may be told (never a secret or a traceback)."""


def new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(12)}"


async def run_text(stream: TokenStream[Any]) -> AsyncIterator[str]:
    """The answer's text as it streams; afterwards `stream.result` holds the run. `RunFailed` when the run
    fails or pauses for an approval."""
    last_round, wrote = -1, False
    try:
        async with stream:  # a client gone (the generator closed) stops the run
            async for event in stream.events():
                if isinstance(event, PartialResponse) and event.text:
                    if wrote and event.round != last_round:
                        yield "\n\n"
                    last_round, wrote = event.round, True
                    yield event.text
        result = stream.result
    except Exception as error:  # a model or tool failure: the client gets a message, the log the rest
        raise RunFailed(error_text(error)) from error
    if result.finish_reason is FinishReason.APPROVAL_REQUIRED:
        raise RunFailed(_PAUSED)
    if result.content is None and result.tool_executions:  # an immediate-return tool ended the run
        yield ("\n\n" if wrote else "") + result.tool_executions[-1].result


def _chat_finish(result: Result[Any]) -> str:
    return {FinishReason.LENGTH: "length", FinishReason.CONTENT_FILTER: "content_filter"}.get(
        result.finish_reason or FinishReason.STOP, "stop"
    )


def chat_usage(usage: TokenUsage | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens or 0},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens or 0},
    }


def _response_usage(usage: TokenUsage | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cache_read_tokens or 0},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens or 0},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def chat_completion(model: str, text: str, result: Result[Any]) -> dict[str, Any]:
    """The `chat.completion` object of a finished run."""
    return {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None, "annotations": []},
                "logprobs": None,
                "finish_reason": _chat_finish(result),
            }
        ],
        "usage": chat_usage(result.token_usage),
    }


def _data(chunk: Any) -> str:
    return f"data: {_encode(chunk).decode()}\n\n"


async def chat_chunks(stream: TokenStream[Any], model: str, include_usage: bool) -> AsyncIterator[str]:
    """The run as `chat.completion.chunk` SSE events (the role first, then the text, then the finish reason,
    then, when asked, a usage chunk with no choices), ending with `data: [DONE]`; a failure is an
    `{"error": ...}` event (the SDKs raise it) and ends the stream."""
    head = {"id": new_id("chatcmpl-"), "object": "chat.completion.chunk", "created": int(time.time())}
    head |= {"model": model, "system_fingerprint": None}
    extra = {"usage": None} if include_usage else {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _data(head | {"choices": [choice]} | extra)

    yield chunk({"role": "assistant", "content": "", "refusal": None})
    try:
        async for text in run_text(stream):
            yield chunk({"content": text})
    except RunFailed as error:
        yield _data({"error": {"message": str(error), "type": "server_error", "param": None, "code": None}})
        return
    result = stream.result
    yield chunk({}, _chat_finish(result))
    if include_usage:
        yield _data(head | {"choices": [], "usage": chat_usage(result.token_usage)})
    yield "data: [DONE]\n\n"


def _message(item_id: str, text: str | None) -> dict[str, Any]:
    done = text is not None
    content: list[dict[str, Any]] = (
        [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}] if done else []
    )
    return {
        "id": item_id,
        "type": "message",
        "status": "completed" if done else "in_progress",
        "role": "assistant",
        "content": content,
    }


def response_object(
    response_id: str,
    model: str,
    created: int,
    *,
    status: str = "completed",
    output: list[dict[str, Any]] | None = None,
    result: Result[Any] | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """A `response` object: in progress, completed (with `output` and the run's usage), incomplete (the
    model hit its length limit or a content filter) or failed (with `error`)."""
    incomplete = None
    if result is not None and result.finish_reason in (FinishReason.LENGTH, FinishReason.CONTENT_FILTER):
        status = "incomplete"
        reason = "max_output_tokens" if result.finish_reason is FinishReason.LENGTH else "content_filter"
        incomplete = {"reason": reason}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": {"code": "server_error", "message": error} if error is not None else None,
        "incomplete_details": incomplete,
        "instructions": None,
        "max_output_tokens": None,
        "model": model,
        "output": output or [],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "temperature": None,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": None,
        "truncation": "disabled",
        "usage": _response_usage(result.token_usage) if result is not None else None,
        "user": None,
        "metadata": {},
    }


def finished_response(model: str, text: str, result: Result[Any]) -> dict[str, Any]:
    """The `response` object of a finished run (not streamed)."""
    return response_object(
        new_id("resp_"), model, int(time.time()), output=[_message(new_id("msg_"), text)], result=result
    )


async def response_events(stream: TokenStream[Any], model: str) -> AsyncIterator[str]:
    """The run as Responses stream events, in OpenAI's order: `response.created`, `response.in_progress`,
    the message's `output_item.added` / `content_part.added`, `output_text.delta`s, then the `.done`s and
    `response.completed` (or `response.failed`), each numbered by `sequence_number`."""
    response_id, item_id, created = new_id("resp_"), new_id("msg_"), int(time.time())
    number = 0

    def event(kind: str, **fields: Any) -> str:
        nonlocal number
        number += 1
        data = _encode({"type": kind, "sequence_number": number - 1, **fields}).decode()
        return f"event: {kind}\ndata: {data}\n\n"

    where = {"item_id": item_id, "output_index": 0, "content_index": 0}
    yield event(
        "response.created", response=response_object(response_id, model, created, status="in_progress")
    )
    yield event(
        "response.in_progress", response=response_object(response_id, model, created, status="in_progress")
    )
    yield event("response.output_item.added", output_index=0, item=_message(item_id, None))
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    yield event("response.content_part.added", **where, part=part)
    pieces: list[str] = []
    try:
        async for text in run_text(stream):
            pieces.append(text)
            yield event("response.output_text.delta", **where, delta=text, logprobs=[])
    except RunFailed as error:
        failed = response_object(response_id, model, created, status="failed", error=str(error))
        yield event("response.failed", response=failed)
        return
    text = "".join(pieces)
    item = _message(item_id, text)
    yield event("response.output_text.done", **where, text=text, logprobs=[])
    yield event("response.content_part.done", **where, part=item["content"][0])
    yield event("response.output_item.done", output_index=0, item=item)
    done = response_object(response_id, model, created, output=[item], result=stream.result)
    yield event(f"response.{done['status']}", response=done)
