"""An incremental server-sent events (SSE) parser: bytes in, at any chunk boundary; events out.

It follows the WHATWG event-stream rules (lines end with CRLF, LF or CR; `:` starts a comment; one space after
the colon is dropped; `data` lines of one event are joined with "\\n"; a blank line dispatches the event; a
leading byte-order mark is ignored), so splitting the same bytes at different places always gives the same
events. Anything that is not valid UTF-8 raises `BadResponseError`, and so does a line longer than
`max_line_bytes`; nothing else is ever raised.

API (stable, shared by every HTTP provider):

- `ServerSentEvent(event="message", data="", id=None, retry=None)`: one dispatched event (frozen Struct).
- `SSEDecoder(*, max_line_bytes=16 MiB, provider=None)`: `feed(chunk: bytes) -> list[ServerSentEvent]`
  for the events completed by `chunk`; `feed_payloads(chunk)` the same, but a chunk that is one whole
  one-line `data:` event gives its data as undecoded bytes; `close() -> None` at the end of the stream (an
  unterminated event is discarded, as the standard says).
- `iter_sse(chunks: AsyncIterable[bytes], ...) -> AsyncIterator[ServerSentEvent]`: the same as an async
  generator, for `async for event in iter_sse(response.aiter_bytes())`.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

import msgspec

from agentloop._values._errors import BadResponseError

__all__ = ["SSEDecoder", "ServerSentEvent", "iter_sse"]

_DEFAULT_MAX_LINE = 16 * 1024 * 1024
_BOM = "\ufeff"


class ServerSentEvent(msgspec.Struct, frozen=True, gc=False):
    """One event of an event stream.

    `event` is the event type ("message" when the server named none), `data` the data lines joined with "\\n",
    `id` the last event id seen so far in the stream (None if none), `retry` the reconnection time in
    milliseconds when this event carried a valid `retry` field.
    """

    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None


class SSEDecoder:
    """Turns the bytes of an event stream, split anywhere, into `ServerSentEvent`s. Not thread-safe."""

    __slots__ = (
        "_buffer",
        "_clean",
        "_data",
        "_event",
        "_first_line",
        "_last_id",
        "_max_line",
        "_provider",
        "_retry",
        "_size",
        "_skip_lf",
    )

    def __init__(self, *, max_line_bytes: int = _DEFAULT_MAX_LINE, provider: str | None = None) -> None:
        self._buffer: list[bytes] = []  # pieces of the line not ended yet
        self._size = 0  # their total length
        self._skip_lf = False  # the previous chunk ended with CR: a LF starting the next one is part of it
        self._first_line = True
        self._max_line = max_line_bytes
        self._provider = provider
        self._event: str | None = None
        self._data: list[str] = []
        self._last_id: str | None = None
        self._retry: int | None = None
        self._clean = True  # no line or event under way: the fast path may take the next chunk

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events that `chunk` completes (often none, sometimes several)."""
        # `find` rather than `in`: `b"\r" in chunk` first tries `b"\r"` as an integer, and the TypeError it
        # makes and discards costs more than the search (~2,000 instructions a chunk, 1.4% of a session).
        if self._clean and chunk[:6] == b"data: " and chunk[-2:] == b"\n\n" and chunk.find(b"\r") < 0:
            # What providers send token by token: whole one-line `data:` events, most often one.
            end = len(chunk) - 2
            if chunk.find(b"\n", 6) == end and end <= self._max_line:
                try:
                    data = chunk[6:end].decode("utf-8")
                except UnicodeDecodeError:
                    pass  # the general path reports it
                else:
                    self._first_line = False
                    return [ServerSentEvent("message", data, self._last_id, None)]
            else:
                simple = self._simple(chunk)
                if simple is not None:
                    return simple
        elif self._clean and chunk[:6] == b"data: " and chunk[-4:] == b"\r\n\r\n":
            # One `data:` line ended with CRLFs: what Google's APIs send per token.
            end = len(chunk) - 4
            if chunk.find(b"\r", 6) == end and chunk.find(b"\n", 6) == end + 1 and end <= self._max_line:
                try:
                    data = chunk[6:end].decode("utf-8")
                except UnicodeDecodeError:
                    pass  # the general path reports it
                else:
                    self._first_line = False
                    return [ServerSentEvent("message", data, self._last_id, None)]
        elif self._clean and chunk[:7] == b"event: " and chunk[-2:] == b"\n\n" and chunk.find(b"\r") < 0:
            # One `event:` line and one `data:` line: what OpenAI Responses and Anthropic send per token.
            named = self._named(chunk)
            if named is not None:
                return named
        self._clean = False  # stays False if the general path raises half-way
        events = self._general(chunk)
        self._clean = (
            not self._buffer
            and not self._data
            and self._event is None
            and self._retry is None
            and not self._skip_lf
        )
        return events

    def feed_payloads(self, chunk: bytes) -> list[ServerSentEvent | bytes]:
        """`feed`, except that a chunk that is exactly one whole one-line `data:` event (what
        OpenAI-compatible servers send per token) gives that event's data as undecoded bytes, with no event
        object: the caller's JSON decoder reads them as they are and checks their UTF-8 itself."""
        # `feed`'s first test, repeated here rather than shared: this runs once a token, and a call costs.
        if self._clean and chunk[:6] == b"data: " and chunk[-2:] == b"\n\n" and chunk.find(b"\r") < 0:
            end = len(chunk) - 2
            if chunk.find(b"\n", 6) == end and end <= self._max_line:
                self._first_line = False
                return [chunk[6:end]]
        return self.feed(chunk)  # type: ignore[return-value]  # (list is invariant; every item is an event)

    def check_payload(self, payload: bytes) -> None:
        """Raises the `BadResponseError` the general path raises for a `data:` line whose data is `payload`,
        if it is not valid UTF-8: a payload's reader calls it when its JSON decoder rejected the payload,
        so that the error names the problem as it always did."""
        try:
            payload.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadResponseError(
                f"event stream is not valid UTF-8 ({exc.reason} at byte {exc.start + 6} of a line)",
                provider=self._provider,
            ) from None

    def _general(self, chunk: bytes) -> list[ServerSentEvent]:
        if not chunk:  # before the CR check: an empty read between a CR and its LF changes nothing
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
                if not chunk:
                    return []
        if chunk.find(b"\n") < 0 and chunk.find(b"\r") < 0:
            # The current line goes on. Keep the piece: joining the line on every piece would copy a long
            # line again and again (quadratic time for a line sent in many small reads).
            self._buffer.append(chunk)
            self._size += len(chunk)
            if self._size > self._max_line:
                self._buffer, self._size = [], 0
                raise BadResponseError(
                    f"event stream line longer than {self._max_line} bytes", provider=self._provider
                )
            return []
        buffer = b"".join(self._buffer) + chunk if self._buffer else chunk
        self._buffer, self._size = [], 0
        lines = buffer.splitlines()  # bytes.splitlines splits on exactly CRLF, LF and CR
        last = buffer[-1]
        if last == 13:  # b"\r"
            self._skip_lf = True
        elif last != 10:  # b"\n"
            tail = lines.pop()
            if len(tail) > self._max_line:
                raise BadResponseError(
                    f"event stream line longer than {self._max_line} bytes", provider=self._provider
                )
            self._buffer, self._size = [tail], len(tail)
        events: list[ServerSentEvent] = []
        for raw in lines:
            event = self._line(raw)
            if event is not None:
                events.append(event)
        return events

    def _named(self, chunk: bytes) -> list[ServerSentEvent] | None:
        """The event of a chunk that is exactly `event: <name>\\ndata: <data>\\n\\n`, or None to take the
        general path. Same result as the general path, fewer steps."""
        newline = chunk.find(b"\n", 7)
        end = len(chunk) - 2
        if (
            chunk[newline + 1 : newline + 7] != b"data: "
            or chunk.find(b"\n", newline + 7) != end
            or newline > self._max_line
            or end - newline - 1 > self._max_line
        ):
            return None
        try:
            name = chunk[7:newline].decode("utf-8")
            data = chunk[newline + 7 : end].decode("utf-8")
        except UnicodeDecodeError:
            return None  # the general path reports it
        self._first_line = False
        return [ServerSentEvent(name or "message", data, self._last_id, None)]

    def _simple(self, chunk: bytes) -> list[ServerSentEvent] | None:
        """The events of a chunk made only of whole one-line `data:` events (ending with a blank line, no CR),
        or None to take the general path. Same result as the general path, fewer steps."""
        if len(chunk) > self._max_line:
            return None
        events = []
        for part in chunk[:-2].split(b"\n\n"):
            if part[:6] != b"data: " or part.find(b"\n") >= 0:
                return None
            try:
                data = part[6:].decode("utf-8")
            except UnicodeDecodeError:
                return None  # the general path reports it
            events.append(ServerSentEvent("message", data, self._last_id, None))
        self._first_line = False
        return events

    def close(self) -> None:
        """Ends the stream: a pending event that no blank line terminated is dropped (per the standard)."""
        self._buffer, self._size = [], 0
        self._skip_lf = False
        self._event = None
        self._data = []
        self._retry = None
        self._clean = True

    def _line(self, raw: bytes) -> ServerSentEvent | None:
        if not raw:
            self._first_line = False
            return self._dispatch()
        if len(raw) > self._max_line:
            raise BadResponseError(
                f"event stream line longer than {self._max_line} bytes", provider=self._provider
            )
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadResponseError(
                f"event stream is not valid UTF-8 ({exc.reason} at byte {exc.start} of a line)",
                provider=self._provider,
            ) from None
        if self._first_line:
            self._first_line = False
            if line.startswith(_BOM):
                line = line[1:]
                if not line:
                    return None
        if line[0] == ":":
            return None  # comment (keep-alive pings such as ": OPENROUTER PROCESSING")
        field, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id":
            if "\0" not in value:
                self._last_id = value
        elif field == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        data, event, retry = self._data, self._event, self._retry
        self._data = []
        self._event = None
        self._retry = None
        if not data:
            return None
        return ServerSentEvent(event or "message", "\n".join(data), self._last_id, retry)


async def iter_sse(
    chunks: AsyncIterable[bytes], *, max_line_bytes: int = _DEFAULT_MAX_LINE, provider: str | None = None
) -> AsyncIterator[ServerSentEvent]:
    """Yields the events of the byte stream `chunks` as soon as each is complete."""
    decoder = SSEDecoder(max_line_bytes=max_line_bytes, provider=provider)
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
    decoder.close()
