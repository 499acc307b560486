"""A scriptable HTTP/1.1 server on 127.0.0.1, for testing HTTP model providers over real sockets.

It runs in a background thread, so it works the same from sync code, asyncio and trio, and from a user's own
tests. It records every request, answers with scripted replies in order, keeps connections alive (so
connection pooling is real), and injects the faults providers must survive: error statuses with any headers,
slow headers, trickled chunks, a disconnect after N chunks or bytes, a reset before any response, a stream
held open until the client leaves.

API (stable; provider fakes such as `FakeOpenAIServer` subclass `FakeServer`):

- `Reply(status=200, headers=(), body=b"", chunks=None, *, headers_delay=0, chunk_delay=0,
  disconnect_after_chunks=None, disconnect_after_bytes=None, reset=False, hold_open=False)`: one scripted
  answer. `chunks` (bytes each) are sent with chunked transfer encoding, one HTTP chunk each; otherwise `body`
  with a Content-Length. Builders (each also takes fault fields as keywords): `Reply.json(obj, status=200,
  headers=())`, `Reply.sse(events, headers=())`, `Reply.stream(chunks, status=200, content_type=...,
  headers=())`, `Reply.connection_reset()`; `reply.with_faults(**fields)` returns a copy.
- `FakeServer(replies=(), *, keep_alive=True)`: `with` / `async with` (or `start()` / `stop()`);
  `.base_url`, `.url(path)`, `.port`; `.add(item, **faults) -> self` queues one reply (`faults` are `Reply`
  fields applied to what the item renders to); `.requests` (list of `RecordedRequest`), `.connections_opened`,
  `.open_connections`, `.unanswered` (requests that found no scripted reply). An item is a `Reply`, a callable
  `(RecordedRequest) -> item`, or anything the subclass's `render(item, request) -> Reply` understands.
  `base_path` (class attribute) is appended to the base URL (e.g. "/v1").
- `RecordedRequest`: `method`, `path`, `query`, `headers` (lower-case names), `body`, `json` (parsed or
  None), `connection` (index of the TCP connection it came on), `disconnected` / `completed`
  (`threading.Event`s: the client left before the reply was complete / the reply was fully sent),
  `await wait_disconnected()` (bound it with `anyio.fail_after`).
- `encode_sse(data, *, event=None, id=None) -> bytes` (data: str, bytes, or a JSON-able object) and
  `split_text(text) -> list[str]` (word-sized tokens), `split_evenly(text, parts) -> list[str]`.
"""

from __future__ import annotations

import dataclasses
import http
import re
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, BinaryIO
from urllib.parse import parse_qsl, urlsplit

import anyio
import anyio.to_thread
import msgspec

__all__ = [
    "FakeServer",
    "RecordedRequest",
    "Reply",
    "encode_sse",
    "split_evenly",
    "split_text",
]

_POLL = 0.02
_MAX_HEAD = 64 * 1024


@dataclass(frozen=True)
class Reply:
    """One scripted answer, and the faults to inject while sending it.

    `headers_delay`: seconds before the status line (slow headers). `chunk_delay`: seconds before each chunk
    (one number, or one per chunk). `disconnect_after_chunks` / `disconnect_after_bytes`: close the connection
    after sending that many chunks / body bytes, without finishing the body. `reset`: reset the connection
    before sending anything. `hold_open`: after the last chunk keep the response open (unfinished) until the
    client disconnects.
    """

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    chunks: tuple[bytes, ...] | None = None
    headers_delay: float = 0.0
    chunk_delay: float | tuple[float, ...] = 0.0
    disconnect_after_chunks: int | None = None
    disconnect_after_bytes: int | None = None
    reset: bool = False
    hold_open: bool = False

    @classmethod
    def json(
        cls, obj: Any, *, status: int = 200, headers: Iterable[tuple[str, str]] = (), **faults: Any
    ) -> Reply:
        """A JSON body (`obj` encoded with msgspec; bytes are sent as they are)."""
        body = obj if isinstance(obj, bytes) else msgspec.json.encode(obj)
        return cls(status, (("content-type", "application/json"), *headers), body, **faults)

    @classmethod
    def stream(
        cls,
        chunks: Iterable[bytes],
        *,
        status: int = 200,
        content_type: str = "application/octet-stream",
        headers: Iterable[tuple[str, str]] = (),
        **faults: Any,
    ) -> Reply:
        """A body sent with chunked transfer encoding, one HTTP chunk per item of `chunks`."""
        return cls(status, (("content-type", content_type), *headers), chunks=tuple(chunks), **faults)

    @classmethod
    def sse(
        cls, events: Iterable[bytes | str], *, headers: Iterable[tuple[str, str]] = (), **faults: Any
    ) -> Reply:
        """An event stream: each item is one already encoded event (see `encode_sse`), sent as one chunk."""
        chunks = tuple(e.encode() if isinstance(e, str) else e for e in events)
        return cls.stream(
            chunks,
            content_type="text/event-stream; charset=utf-8",
            headers=(("cache-control", "no-cache"), *headers),
            **faults,
        )

    @classmethod
    def connection_reset(cls) -> Reply:
        """No answer at all: the connection is reset as soon as the request has arrived."""
        return cls(reset=True)

    def with_faults(self, **changes: Any) -> Reply:
        """A copy with some fields changed (e.g. `chunk_delay=0.01, disconnect_after_chunks=3`)."""
        return dataclasses.replace(self, **changes)

    def header(self, name: str) -> str | None:
        """The value of header `name` (case-insensitive), or None."""
        name = name.lower()
        return next((v for k, v in self.headers if k.lower() == name), None)


@dataclass(eq=False)
class RecordedRequest:
    """One request the server received."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    connection: int
    json: Any = None
    disconnected: threading.Event = field(default_factory=threading.Event, repr=False)
    completed: threading.Event = field(default_factory=threading.Event, repr=False)

    async def wait_disconnected(self) -> None:
        """Waits, without blocking the event loop, until the client dropped this request's connection.

        Bound the wait yourself: `with anyio.fail_after(5): await request.wait_disconnected()`.
        """
        while not self.disconnected.is_set():
            await anyio.to_thread.run_sync(self.disconnected.wait, 0.05, abandon_on_cancel=True)


class _ClientGone(Exception):
    """The client closed the connection while we were answering."""


class _Abort(Exception):
    """A scripted fault ended the connection."""


class FakeServer:
    """A loopback HTTP/1.1 server answering with scripted replies (see the module docstring)."""

    base_path: str = ""

    def __init__(self, replies: Iterable[Any] = (), *, keep_alive: bool = True) -> None:
        self.keep_alive = keep_alive
        self._lock = threading.Lock()
        self._queue: deque[tuple[Any, dict[str, Any]]] = deque((item, {}) for item in replies)
        self._requests: list[RecordedRequest] = []
        self._unanswered: list[RecordedRequest] = []
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._sockets: set[socket.socket] = set()
        self._connections = 0
        self.port = 0

    # -- script -----------------------------------------------------------------------------------------

    def add(self, item: Any, **faults: Any) -> FakeServer:
        """Queues one reply; `faults` are `Reply` fields applied to whatever `item` renders to."""
        unknown = set(faults) - {f.name for f in dataclasses.fields(Reply)}
        if unknown:
            raise TypeError(f"unknown Reply fields: {sorted(unknown)}")
        with self._lock:
            self._queue.append((item, faults))
        return self

    def render(self, item: Any, request: RecordedRequest) -> Reply:
        """Turns a scripted item into a `Reply`. Subclasses add their provider's message types."""
        if isinstance(item, Reply):
            return item
        raise TypeError(
            f"{type(self).__name__} cannot send {type(item).__name__} items; script Reply objects"
        )

    # -- inspection -------------------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def unanswered(self) -> list[RecordedRequest]:
        """Requests that arrived when no scripted reply was left (they got a 500)."""
        with self._lock:
            return list(self._unanswered)

    @property
    def pending(self) -> int:
        """How many scripted replies have not been used yet."""
        with self._lock:
            return len(self._queue)

    @property
    def connections_opened(self) -> int:
        """TCP connections accepted so far (fewer than requests means keep-alive reuse)."""
        with self._lock:
            return self._connections

    @property
    def open_connections(self) -> int:
        """TCP connections open right now."""
        with self._lock:
            return len(self._sockets)

    @property
    def base_url(self) -> str:
        if not self.port:
            raise RuntimeError("the server is not running; use `with server:` or call start()")
        return f"http://127.0.0.1:{self.port}{self.base_path}"

    def url(self, path: str = "") -> str:
        """The absolute URL of `path` under `base_url`."""
        return f"{self.base_url}/{path.lstrip('/')}" if path else self.base_url

    # -- lifecycle --------------------------------------------------------------------------------------

    def start(self) -> FakeServer:
        """Binds a free port on 127.0.0.1 and starts serving in a background thread."""
        if self._listener is not None:
            raise RuntimeError("the server is already running")
        self._stop.clear()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        listener.setblocking(False)
        self._listener = listener
        self.port = listener.getsockname()[1]
        thread = threading.Thread(
            target=self._accept_loop, name=f"{type(self).__name__}:{self.port}", daemon=True
        )
        self._threads.append(thread)
        thread.start()
        return self

    def stop(self) -> None:
        """Stops serving, drops open connections and waits for the server threads."""
        self._stop.set()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in list(self._threads):
            if thread is not threading.current_thread():
                thread.join(timeout=5.0)
        self._threads.clear()
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> FakeServer:
        return self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        with anyio.CancelScope(shield=True):  # the threads must stop even when the test is being cancelled
            await anyio.to_thread.run_sync(self.stop)

    def __repr__(self) -> str:
        where = f"127.0.0.1:{self.port}" if self.port else "stopped"
        return f"{type(self).__name__}({where}, {len(self.requests)} requests, {self.pending} replies left)"

    # -- serving ----------------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        while not self._stop.is_set():
            ready, _, _ = select.select([listener], [], [], _POLL * 5)
            if not ready:
                continue
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, OSError):
                continue
            sock.setblocking(True)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                index = self._connections
                self._connections += 1
                self._sockets.add(sock)
            thread = threading.Thread(target=self._serve, args=(sock, index), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, sock: socket.socket, index: int) -> None:
        reader = sock.makefile("rb")
        try:
            while not self._stop.is_set():
                request = self._read_request(reader, index)
                if request is None:
                    return
                reply = self._reply_for(request)
                try:
                    keep = self._send(sock, reply, request)
                except _ClientGone:
                    request.disconnected.set()
                    return
                except _Abort:
                    return
                if not keep:
                    return
        except (OSError, ValueError):
            return
        finally:
            with self._lock:
                self._sockets.discard(sock)
            try:
                reader.close()
                sock.close()
            except OSError:
                pass

    def _read_request(self, reader: BinaryIO, index: int) -> RecordedRequest | None:
        line = reader.readline(_MAX_HEAD)
        while line in (b"\r\n", b"\n"):
            line = reader.readline(_MAX_HEAD)
        if not line:
            return None
        method, target, _version = line.decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while True:
            raw = reader.readline(_MAX_HEAD)
            if raw in (b"\r\n", b"\n", b""):
                break
            name, _, value = raw.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(reader.readline(_MAX_HEAD).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while reader.readline(_MAX_HEAD) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                parts.append(reader.read(size))
                reader.readline(_MAX_HEAD)
            body = b"".join(parts)
        else:
            body = reader.read(int(headers.get("content-length", "0") or 0))
        url = urlsplit(target)
        parsed: Any = None
        if body:
            try:
                parsed = msgspec.json.decode(body)
            except msgspec.DecodeError:
                parsed = None
        request = RecordedRequest(
            method=method,
            path=url.path,
            query=dict(parse_qsl(url.query, keep_blank_values=True)),
            headers=headers,
            body=body,
            connection=index,
            json=parsed,
        )
        if headers.get("connection", "").lower() == "close":
            request.headers["connection"] = "close"
        with self._lock:
            self._requests.append(request)
        return request

    def answer_directly(self, request: RecordedRequest) -> Reply | None:
        """The reply to `request` when it needs no scripted one (a provider's token-counting endpoint), else
        None: subclasses override it; scripted replies are left for the requests that need them."""
        return None

    def _reply_for(self, request: RecordedRequest) -> Reply:
        direct = self.answer_directly(request)
        if direct is not None:
            return direct
        with self._lock:
            entry = self._queue.popleft() if self._queue else None
            if entry is None:
                self._unanswered.append(request)
        if entry is None:
            message = f"{type(self).__name__}: no scripted reply left for {request.method} {request.path}"
            return Reply.json({"error": {"message": message, "type": "fake_server_error"}}, status=500)
        item, faults = entry
        try:
            while callable(item) and not isinstance(item, Reply):
                item = item(request)
            reply = self.render(item, request)
        except Exception as exc:  # a broken script must show up in the test, not hang it
            message = f"{type(self).__name__} could not render {item!r}: {type(exc).__name__}: {exc}"
            return Reply.json({"error": {"message": message, "type": "fake_server_error"}}, status=500)
        return reply.with_faults(**faults) if faults else reply

    def _send(self, sock: socket.socket, reply: Reply, request: RecordedRequest) -> bool:
        if reply.reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            raise _Abort
        if reply.headers_delay:
            self._pause(sock, reply.headers_delay)
        keep = self.keep_alive and request.headers.get("connection") != "close"
        try:
            phrase = http.HTTPStatus(reply.status).phrase
        except ValueError:
            phrase = "Unknown"
        lines = [f"HTTP/1.1 {reply.status} {phrase}"]
        names = {k.lower() for k, _ in reply.headers}
        lines.extend(f"{k}: {v}" for k, v in reply.headers)
        if reply.chunks is None:
            lines.append(f"content-length: {len(reply.body)}")
        else:
            lines.append("transfer-encoding: chunked")
        if "connection" not in names:
            lines.append("connection: keep-alive" if keep else "connection: close")
        if "date" not in names:
            lines.append(f"date: {time.strftime('%a, %d %b %Y %H:%M:%S GMT', time.gmtime())}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        budget = reply.disconnect_after_bytes
        if reply.chunks is None:
            if budget is not None and budget < len(reply.body):
                self._write(sock, head + reply.body[:budget])
                raise _Abort
            self._write(sock, head + reply.body)
            request.completed.set()
            return keep
        self._write(sock, head)
        delays = reply.chunk_delay
        sent = 0
        chunks = [c for c in reply.chunks if c]
        for number, chunk in enumerate(chunks):
            if reply.disconnect_after_chunks is not None and number >= reply.disconnect_after_chunks:
                raise _Abort
            delay = (
                delays
                if isinstance(delays, (int, float))
                else (delays[number] if number < len(delays) else 0)
            )
            if delay:
                self._pause(sock, float(delay))
            if budget is not None and sent + len(chunk) > budget:
                self._write(sock, b"%x\r\n" % len(chunk) + chunk[: budget - sent])
                raise _Abort
            self._write(sock, b"%x\r\n%b\r\n" % (len(chunk), chunk))
            sent += len(chunk)
        if reply.disconnect_after_chunks is not None and len(chunks) > reply.disconnect_after_chunks:
            raise _Abort
        if reply.hold_open:
            while not self._stop.is_set():
                self._pause(sock, 3600.0)
            raise _Abort
        self._write(sock, b"0\r\n\r\n")
        request.completed.set()
        return keep

    def _write(self, sock: socket.socket, data: bytes) -> None:
        try:
            sock.sendall(data)
        except OSError as exc:
            raise _ClientGone from exc

    def _pause(self, sock: socket.socket, seconds: float) -> None:
        """Sleeps `seconds` (or until the server stops), noticing if the client hangs up meanwhile."""
        deadline = time.monotonic() + seconds
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            readable, _, _ = select.select([sock], [], [], min(left, _POLL * 5))
            if readable:
                try:
                    peek = sock.recv(1, socket.MSG_PEEK)
                except OSError as exc:
                    raise _ClientGone from exc
                if not peek:
                    raise _ClientGone
                time.sleep(min(left, _POLL))  # data from the client mid-reply: not a hang-up; keep waiting
        raise _Abort


# -- helpers for provider fakes ---------------------------------------------------------------------------

_encoder = msgspec.json.Encoder()
_TOKEN = re.compile(r"\s*\S+\s*|\s+")


def encode_sse(data: Any, *, event: str | None = None, id: str | None = None) -> bytes:
    """One event-stream event: `data` as is when str/bytes, else as JSON; multi-line data on several lines."""
    if isinstance(data, bytes):
        text = data.decode()
    elif isinstance(data, str):
        text = data
    else:
        text = _encoder.encode(data).decode()
    lines = []
    if event is not None:
        lines.append(f"event: {event}")
    if id is not None:
        lines.append(f"id: {id}")
    lines.extend(f"data: {line}" for line in text.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()


def split_text(text: str) -> list[str]:
    """`text` cut into word-sized tokens (each word with its surrounding spaces); joined they give `text`."""
    return _TOKEN.findall(text) or ([text] if text else [])


def split_evenly(text: str, parts: int) -> list[str]:
    """`text` cut into at most `parts` pieces of about equal length (at least one piece, maybe empty)."""
    if parts <= 1 or len(text) <= 1:
        return [text]
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)]
