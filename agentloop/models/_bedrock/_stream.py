"""ConverseStream's answer, the AWS binary event stream, decoded into agentloop events.

`ConverseStream` takes the body's bytes as the network delivers them (`messages`) and gives each complete
message's events (`events`); at the end, `response()` is what a Converse call would have answered.
Blocks are keyed by `contentBlockIndex`, never by arrival order; streamed tool input arrives as JSON
fragments, joined and announced at `contentBlockStop` (empty input is `{}`). Exceptions inside the stream
(`throttlingException`, `modelStreamErrorException`...) become `ModelError`s. `next_chunk` reads the body
within the total timeout. The answer is whole once `messageStop` and `metadata` (the usage) arrived: the
rest of the body is read only briefly (`drain`), so a body the server holds open never holds the answer.
"""

from __future__ import annotations

import time
from typing import Any, cast

import anyio
import msgspec

from agentloop._values._errors import (
    BadRequestError,
    ModelConnectionError,
    ModelError,
    ModelTimeoutError,
    RateLimitError,
    ServerError,
)
from agentloop._values._messages import ChatResponse, ToolExecutionRequest

from .._base import ModelEvent, TextDelta, ThinkingDelta, ToolCallComplete, ToolCallDelta
from .._eventstream import EventStreamDecoder, EventStreamError, EventStreamMessage
from .._http import ProviderClient, retryable
from .._unknown import ignore_unknown, keys_of
from ._response import chat_response
from ._shapes import (
    PROVIDER,
    Block,
    Reasoning,
    ReasoningText,
    ToolUse,
    Usage,
    block_delta_decoder,
    block_start_decoder,
    block_stop_decoder,
    delta_decoder,
    encode,
    exception_decoder,
    message_stop_decoder,
    metadata_decoder,
    start_decoder,
)

_EVENTS = frozenset(
    {"messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"}
)

__all__ = ["ConverseStream", "drain", "next_chunk"]

_STREAM_EXCEPTIONS: dict[str, tuple[type[ModelError], int | None]] = {
    "throttlingException": (RateLimitError, 429),
    "serviceUnavailableException": (ServerError, 503),
    "internalServerException": (ServerError, 500),
    "modelStreamErrorException": (ServerError, 424),
    "validationException": (BadRequestError, 400),
}


class ConverseStream:
    """One ConverseStream response being read: frames decoded, events mapped, blocks assembled."""

    __slots__ = ("_decoder", "_http", "_state", "request_id")

    def __init__(self, http: ProviderClient, request_id: str | None) -> None:
        self._http = http
        self.request_id = request_id
        self._decoder = EventStreamDecoder()
        self._state = _Assembler()

    @property
    def finished(self) -> bool:
        """Whether the answer is whole: `messageStop` and then `metadata` (its usage) arrived."""
        return self._state.stop_reason is not None and self._state.usage is not None

    def messages(self, chunk: bytes) -> list[EventStreamMessage]:
        """The messages `chunk` completes (none while a frame is still arriving); raises for a broken
        frame."""
        try:
            return self._decoder.feed(chunk)
        except EventStreamError as exc:
            raise self._http.bad_response(str(exc), request_id=self.request_id) from None

    def response(self, model_id: str) -> ChatResponse:
        """The whole response, once the body has ended; raises when it ended before `messageStop`."""
        state = self._state
        if self._decoder.pending or state.stop_reason is None:
            raise self._http.bad_response(
                "the event stream ended before messageStop (the response is incomplete)",
                request_id=self.request_id,
            )
        return chat_response(state.blocks(), state.stop_reason, state.usage, self.request_id, model_id)

    def events(self, message: EventStreamMessage) -> list[ModelEvent]:
        """The agentloop events of one message; raises for an exception the stream reported. (Callers
        yield each message's events before reading the next, so events before a failure still arrive.)"""
        headers = message.headers
        kind = headers.get(":message-type", "event")
        if kind == "exception":
            name = str(headers.get(":exception-type", "exception"))
            raise self._stream_error(name, message.payload)
        if kind == "error":
            raise self._stream_error(
                str(headers.get(":error-code", "error")),
                encode({"message": headers.get(":error-message")}),
            )
        event_type = str(headers.get(":event-type"))
        try:
            return self._state.feed(event_type, message.payload)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise self._http.bad_response(
                f"unreadable {event_type} event ({exc}): {message.payload[:200]!r}",
                request_id=self.request_id,
            ) from None

    def _stream_error(self, name: str, payload: bytes) -> ModelError:
        try:
            decoded = exception_decoder.decode(payload)
            detail = decoded.message or decoded.Message
        except (msgspec.DecodeError, RecursionError):
            detail = payload[:200].decode("utf-8", "replace")
        return self._http.error_from_stream_exception(
            name, detail, _STREAM_EXCEPTIONS, request_id=self.request_id
        )


async def next_chunk(
    http: ProviderClient,
    chunks: Any,
    deadline: float | None,
    request_id: str | None,
    *,
    may_retry: bool = False,
) -> bytes | None:
    """The next piece of the body (None at its end), within the total timeout when one is set. With
    `may_retry` (nothing reached the consumer yet), a broken connection is raised as `retryable`."""
    try:
        if deadline is None:
            return cast(bytes, await chunks.__anext__())
        with anyio.move_on_after(max(0.0, deadline - time.monotonic())):
            return cast(bytes, await chunks.__anext__())
    except StopAsyncIteration:
        return None
    except Exception as exc:
        error = http.broken_stream(exc, request_id=request_id)
        if may_retry and isinstance(error, ModelConnectionError):
            raise retryable(error) from exc
        raise error from exc
    total = http.timeouts.total or 0.0
    raise ModelTimeoutError(
        f"bedrock: the stream did not finish within the total timeout of {total:g}s",
        provider=PROVIDER,
        request_id=request_id,
    )


async def drain(chunks: Any, *, timeout: float = 0.1, limit: int = 65536) -> None:
    """Reads what is left of a whole answer's body (normally just its end) for at most `timeout` seconds:
    a body read to its end gives its connection back to the pool; one the server holds open costs that
    connection, never a stalled answer."""
    with anyio.move_on_after(timeout):
        try:
            async for chunk in chunks:
                limit -= len(chunk)
                if limit < 0:
                    return
        except Exception:  # the answer is whole: a failure after it changes nothing
            return


class _Open:
    """One content block while it streams."""

    __slots__ = ("call", "id", "kind", "name", "parts", "redacted", "signature")

    def __init__(self, kind: str, call: int = -1, id: str | None = None, name: str = "") -> None:
        self.kind = kind
        self.call = call
        self.id = id
        self.name = name
        self.parts: list[str] = []
        self.signature: str | None = None
        self.redacted: str | None = None


class _Assembler:
    """Turns ConverseStream events into agentloop events and, at the end, into the blocks a Converse call
    would have returned. Blocks are keyed by `contentBlockIndex`, never by arrival order."""

    __slots__ = ("_calls", "_open", "stop_reason", "usage")

    def __init__(self) -> None:
        self._open: dict[int, _Open] = {}
        self._calls = 0
        self.stop_reason: str | None = None
        self.usage: Usage | None = None

    def _call(self, index: int, use: ToolUse | None) -> _Open:
        block = _Open("tool", self._calls, use.tool_use_id if use else None, (use.name if use else "") or "")
        self._calls += 1
        self._open[index] = block
        return block

    def feed(self, name: str, payload: bytes) -> list[ModelEvent]:
        if name == "contentBlockDelta":
            event = block_delta_decoder.decode(payload)
            index = event.content_block_index
            delta = delta_decoder.decode(event.delta)
            block = self._open.get(index)
            if delta.text is not None:
                if block is None:  # text blocks start with their first delta
                    block = self._open[index] = _Open("text")
                if delta.text:
                    block.parts.append(delta.text)
                    return [TextDelta(delta.text)]
                return []
            if delta.tool_use is not None:
                events: list[ModelEvent] = []
                if block is None:
                    block = self._call(index, None)
                    events.append(ToolCallDelta(block.call, None, None, ""))
                if delta.tool_use.input:
                    block.parts.append(delta.tool_use.input)
                    events.append(ToolCallDelta(block.call, None, None, delta.tool_use.input))
                return events
            reasoning = delta.reasoning_content
            if reasoning is not None:
                if block is None:
                    block = self._open[index] = _Open("reasoning")
                if reasoning.signature:
                    block.signature = (block.signature or "") + reasoning.signature
                if reasoning.redacted_content:
                    block.redacted = (block.redacted or "") + reasoning.redacted_content
                if reasoning.text:
                    block.parts.append(reasoning.text)
                    return [ThinkingDelta(reasoning.text)]
                return []
            ignore_unknown(PROVIDER, "a content block delta", keys_of(event.delta))  # citations, newer kinds
            return []
        if name == "contentBlockStart":
            start = block_start_decoder.decode(payload)
            use = start_decoder.decode(start.start).tool_use
            if use is None:
                ignore_unknown(PROVIDER, "a content block start", keys_of(start.start))
                return []
            block = self._call(start.content_block_index, use)
            return [ToolCallDelta(block.call, block.id, block.name, "")]
        if name == "contentBlockStop":
            block = self._open.get(block_stop_decoder.decode(payload).content_block_index)
            if block is None or block.kind != "tool":
                return []
            return [ToolCallComplete(block.call, ToolExecutionRequest(block.id, block.name, _joined(block)))]
        if name == "messageStop":
            self.stop_reason = message_stop_decoder.decode(payload).stop_reason or "end_turn"
            return []
        if name == "metadata":
            self.usage = metadata_decoder.decode(payload).usage
            return []
        if name not in _EVENTS:  # event types added after this was written
            ignore_unknown(PROVIDER, "a streamed event", name)
        return []

    def blocks(self) -> list[Block]:
        """The content blocks received, in index order, as Converse would have returned them."""
        result: list[Block] = []
        for _, block in sorted(self._open.items()):
            if block.kind == "text":
                result.append(Block(text="".join(block.parts)))
            elif block.kind == "tool":
                raw = msgspec.Raw(_joined(block).encode())
                result.append(Block(tool_use=ToolUse(block.id, block.name, raw)))
            else:
                text = ReasoningText("".join(block.parts), block.signature) if block.parts else None
                reasoning = Reasoning(text, block.redacted)
                if text is None and block.redacted is None:
                    continue
                result.append(Block(reasoning_content=reasoning))
        return result


def _joined(block: _Open) -> str:
    """A toolUse block's input: its fragments joined ({} when none came, as for a tool without
    parameters)."""
    return "".join(block.parts).strip() or "{}"
