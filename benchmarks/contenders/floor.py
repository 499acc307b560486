"""The floor: the least code that does this workload correctly in Python, on httpx2 + msgspec.

A hand-written loop with no framework: stream a request, yield text deltas from an async generator as they
are decoded, gather the tool calls, run them concurrently, send the results, repeat. Anything a runtime
adds on top of this (events, validation, memory, cancellation scopes) is overhead this one does not pay.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx2
import msgspec
from _workload import TOOL_DESCRIPTION, TOOL_NAME

from contenders import Outcome

LABEL = "floor (httpx2 + msgspec)"
PACKAGES = ("httpx2", "msgspec")


class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str = ""


class _ToolCall(msgspec.Struct):
    index: int
    id: str | None = None
    function: _Function | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(msgspec.Struct):
    delta: _Delta
    finish_reason: str | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Chunk(msgspec.Struct):
    choices: list[_Choice] = []
    usage: _Usage | None = None


class _Arguments(msgspec.Struct):
    key: str


_decode_chunk = msgspec.json.Decoder(_Chunk).decode
_decode_arguments = msgspec.json.Decoder(_Arguments).decode
_encode = msgspec.json.Encoder().encode
_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": TOOL_DESCRIPTION,
            "parameters": {
                "type": "object",
                "properties": {"key": {"type": "string"}},
                "required": ["key"],
            },
        },
    }
]
_HEADERS = {"authorization": "Bearer bench", "content-type": "application/json"}


_SHARD_STREAMS = 64


class _Shards:
    """httpx2 clients, each given at most 64 sessions at once, created as concurrency demands.

    httpcore2's pool scans every connection it holds on each request, so one client streaming n responses
    at once costs O(n) per request and O(n^2) to open them; small shards keep 10,000 idle streams cheap.
    Up to 64 sessions in flight this is exactly one client.
    """

    def __init__(self) -> None:
        self.clients: list[httpx2.AsyncClient] = []
        self.busy: list[int] = []

    def acquire(self) -> int:
        busy = self.busy
        for index, count in enumerate(busy):
            if count < _SHARD_STREAMS:
                busy[index] = count + 1
                return index
        self.clients.append(
            httpx2.AsyncClient(
                limits=httpx2.Limits(max_connections=None, max_keepalive_connections=_SHARD_STREAMS),
                timeout=httpx2.Timeout(600.0, connect=10.0),
                verify=False,  # plain HTTP on loopback: skip building a TLS context per shard
            )
        )
        busy.append(1)
        return len(busy) - 1

    def release(self, index: int) -> None:
        self.busy[index] -= 1


class Contender:
    def __init__(self, base_url: str, tool: Callable[[str], Awaitable[str]]) -> None:
        self._url = base_url + "/chat/completions"
        self._tool = tool
        self._shards = _Shards()

    async def session(self, question: str, on_delta: Callable[[str], None]) -> Outcome:
        state = _Session()
        shard = self._shards.acquire()
        try:
            async for token in self._run(self._shards.clients[shard], question, state):
                on_delta(token)
        finally:
            self._shards.release(shard)
        return Outcome(state.executions, state.output_tokens)

    async def _run(self, client: httpx2.AsyncClient, question: str, state: _Session) -> AsyncIterator[str]:
        messages: list[object] = [{"role": "user", "content": question}]
        while True:
            body = _encode(
                {
                    "model": "gpt-4o-mini",
                    "messages": messages,
                    "tools": _TOOLS,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
            )
            text: list[str] = []
            calls: dict[int, list[str]] = {}  # index -> [id, name, arguments...]
            async with client.stream("POST", self._url, content=body, headers=_HEADERS) as response:
                if response.status_code != 200:
                    await response.aread()
                    raise RuntimeError(f"HTTP {response.status_code}: {response.text}")
                pending = b""
                async for data in response.aiter_bytes():
                    events = (pending + data).split(b"\n\n")
                    pending = events.pop()
                    for event in events:
                        if not event.startswith(b"data: ") or event == b"data: [DONE]":
                            continue
                        chunk = _decode_chunk(event[6:])
                        if chunk.usage is not None:
                            state.output_tokens += chunk.usage.completion_tokens
                        for choice in chunk.choices:
                            delta = choice.delta
                            if delta.content:
                                text.append(delta.content)
                                yield delta.content
                            if delta.tool_calls:
                                for call in delta.tool_calls:
                                    parts = calls.get(call.index)
                                    if parts is None:
                                        parts = calls[call.index] = [call.id or "", ""]
                                    if call.function is not None:
                                        if call.function.name:
                                            parts[1] = call.function.name
                                        parts.append(call.function.arguments)
            if not calls:
                return
            ordered = [calls[index] for index in sorted(calls)]
            arguments = ["".join(parts[2:]) for parts in ordered]
            results = await asyncio.gather(*(self._tool(_decode_arguments(a).key) for a in arguments))
            state.executions += len(results)
            messages.append(
                {
                    "role": "assistant",
                    "content": "".join(text) or None,
                    "tool_calls": [
                        {"id": p[0], "type": "function", "function": {"name": p[1], "arguments": a}}
                        for p, a in zip(ordered, arguments, strict=True)
                    ],
                }
            )
            messages += [
                {"role": "tool", "tool_call_id": p[0], "content": result}
                for p, result in zip(ordered, results, strict=True)
            ]

    async def aclose(self) -> None:
        for client in self._shards.clients:
            await client.aclose()


class _Session:
    __slots__ = ("executions", "output_tokens")

    def __init__(self) -> None:
        self.executions = 0
        self.output_tokens = 0
