"""A loopback fake of the OpenAI Chat Completions streaming API, in its own process, for the benchmarks.

Raw asyncio protocol code, every response pre-encoded once per scenario, so a session costs the server a
small fraction of what it costs any client. The reply is chosen by the request's messages: no tool results
-> K streamed tool calls; K correct tool results -> the final text (T chunks + usage); anything else -> 400.

    python benchmarks/fakeserver.py [--port 0]      # prints "PORT <n>", serves until stdin closes

Control endpoints: `GET /_stats` (requests, connections accepted, CPU seconds, streams held), `POST /_release`
(finishes every stream held open by a `/hold<H>` scenario).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import signal
import socket
import sys
from functools import lru_cache

from _workload import (
    FINAL_INPUT_TOKENS,
    FIRST_USAGE,
    TOOL_NAME,
    Scenario,
    text_tokens,
    tool_arguments,
    tool_key,
    tool_result,
)

_TOOL_ROLE = re.compile(rb'"role"\s*:\s*"tool"')
_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ncache-control: no-cache\r\n"
    b"x-request-id: req_bench\r\ntransfer-encoding: chunked\r\n\r\n"
)
_END = b"0\r\n\r\n"
_ARG_PIECE = 5  # tool-call arguments are streamed in pieces of this many characters


def _event(payload: object) -> bytes:
    """One SSE event as one HTTP chunk."""
    data = b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def _chunk(delta: dict[str, object] | None, finish: str | None = None, usage: object = None) -> bytes:
    body: dict[str, object] = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "gpt-4o-mini",
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return _event(body)


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _done() -> bytes:
    data = b"data: [DONE]\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


@lru_cache(maxsize=64)
def tool_call_reply(tools: int) -> bytes:
    """Request 1's whole response: K tool calls, arguments in several deltas each."""
    parts = [_HEAD, _chunk({"role": "assistant", "content": None})]
    for index in range(tools):
        call = {
            "index": index,
            "id": f"call_{index}",
            "type": "function",
            "function": {"name": TOOL_NAME, "arguments": ""},
        }
        parts.append(_chunk({"tool_calls": [call]}))
        arguments = tool_arguments(index)
        for start in range(0, len(arguments), _ARG_PIECE):
            piece = arguments[start : start + _ARG_PIECE]
            parts.append(_chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    parts.append(_chunk({}, "tool_calls"))
    parts.append(_chunk(None, usage=_usage(*FIRST_USAGE)))
    parts += [_done(), _END]
    return b"".join(parts)


@lru_cache(maxsize=64)
def text_reply(tokens: int, split_after: int) -> tuple[bytes, bytes]:
    """Request 2's response as (head, tail): the head ends after `split_after` tokens (0: all in head)."""
    events = [_chunk({"role": "assistant", "content": ""})]
    events += [_chunk({"content": token}) for token in text_tokens(tokens)]
    events.append(_chunk({}, "stop"))
    events.append(_chunk(None, usage=_usage(FINAL_INPUT_TOKENS, tokens)))
    events += [_done(), _END]
    cut = 1 + split_after if split_after else len(events)
    return _HEAD + b"".join(events[:cut]), b"".join(events[cut:])


def _plain(status: str, body: bytes, content_type: bytes = b"application/json") -> bytes:
    return b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (
        status.encode(),
        content_type,
        len(body),
        body,
    )


def _error(message: str) -> bytes:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error"}}).encode()
    return _plain("400 Bad Request", body)


@lru_cache(maxsize=64)
def _expected_results(tools: int) -> tuple[bytes, ...]:
    return tuple(tool_result(tool_key(i)).encode() for i in range(tools))


class Server:
    """State shared by every connection: counters and the streams held open."""

    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0
        self.connections = 0
        self.held: dict[Connection, bytes] = {}

    def stats(self) -> bytes:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        body = {
            "requests": self.requests,
            "connections": self.connections,
            "errors": self.errors,
            "cpu": usage.ru_utime + usage.ru_stime,
            "held": len(self.held),
            "maxrss_kb": usage.ru_maxrss,
        }
        return _plain("200 OK", json.dumps(body).encode())

    def release(self) -> bytes:
        held, self.held = self.held, {}
        for connection, tail in held.items():
            connection.write(tail)
        return _plain("200 OK", json.dumps({"released": len(held)}).encode())


class Connection(asyncio.Protocol):
    """One client connection: HTTP/1.1 keep-alive, content-length or chunked request bodies."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.connections += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.held.pop(self, None)
        self.transport = None

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            request = self._take_request()
            if request is None:
                return
            self._respond(*request)

    def _take_request(self) -> tuple[bytes, bytes, bytes] | None:
        """Removes one complete request (method, target, body) from the buffer, or returns None."""
        buffer = self.buffer
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            return None
        head = bytes(buffer[:end]).split(b"\r\n")
        method, target, _ = head[0].split(b" ", 2)
        length = 0
        chunked = False
        for line in head[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        start = end + 4
        if not chunked:
            if len(buffer) < start + length:
                return None
            body = bytes(buffer[start : start + length])
            del buffer[: start + length]
            return method, target, body
        body_parts: list[bytes] = []
        position = start
        while True:
            line_end = buffer.find(b"\r\n", position)
            if line_end < 0:
                return None
            size = int(bytes(buffer[position:line_end]).split(b";")[0], 16)
            chunk_start = line_end + 2
            if len(buffer) < chunk_start + size + 2:
                return None
            if size == 0:
                trailer_end = buffer.find(b"\r\n", chunk_start)
                if trailer_end < 0:
                    return None
                del buffer[: trailer_end + 2]
                return method, target, b"".join(body_parts)
            body_parts.append(bytes(buffer[chunk_start : chunk_start + size]))
            position = chunk_start + size + 2

    def _respond(self, method: bytes, target: bytes, body: bytes) -> None:
        server = self.server
        path = target.decode("latin-1")
        if path == "/_stats":
            self.write(server.stats())
            return
        if path == "/_release":
            self.write(server.release())
            return
        if method != b"POST" or not path.endswith("/chat/completions"):
            self.write(_plain("404 Not Found", b'{"error": {"message": "not found"}}'))
            return
        server.requests += 1
        try:
            scenario = Scenario.from_path(path)
        except ValueError as exc:
            server.errors += 1
            self.write(_error(str(exc)))
            return
        results = len(_TOOL_ROLE.findall(body))
        if results == 0:
            if TOOL_NAME.encode() not in body:
                server.errors += 1
                self.write(_error(f"request 1 does not offer the tool {TOOL_NAME!r}"))
                return
            self.write(tool_call_reply(scenario.tools))
            return
        expected = _expected_results(scenario.tools)
        if results != scenario.tools or not all(result in body for result in expected):
            server.errors += 1
            self.write(
                _error(f"expected {scenario.tools} tool results {expected!r}, got {results} tool messages")
            )
            return
        if scenario.hold:
            head, tail = text_reply(scenario.tokens, scenario.hold)
            self.write(head)
            server.held[self] = tail
        elif scenario.pause_ms:
            head, tail = text_reply(scenario.tokens, 1)
            self.write(head)
            asyncio.get_running_loop().call_later(scenario.pause_ms / 1000, self.write, tail)
        else:
            self.write(text_reply(scenario.tokens, 0)[0])


def raise_open_files_limit() -> int:
    """Raises the soft limit on open files to the hard limit; returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


async def serve(port: int) -> None:
    raise_open_files_limit()
    loop = asyncio.get_running_loop()
    state = Server()
    listener = await loop.create_server(
        lambda: Connection(state), "127.0.0.1", port, backlog=4096, reuse_address=True, family=socket.AF_INET
    )
    bound = listener.sockets[0].getsockname()[1]
    print(f"PORT {bound}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    def on_stdin() -> None:
        if not os.read(sys.stdin.fileno(), 4096):
            stop.set()

    if not sys.stdin.isatty():
        loop.add_reader(sys.stdin.fileno(), on_stdin)
    async with listener:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    asyncio.run(serve(parser.parse_args().port))


if __name__ == "__main__":
    main()
