"""CPU of agentloop's own layers, without any transport: where its cost over the floor comes from.

    python benchmarks/replay.py [--profile]

The HTTP send is replaced by a response that replays the fake server's exact SSE events, one chunk per
event (as h11 hands them over), for agentloop (`OpenAIChatModel` + `Agent.stream`) and for the floor's loop.
Prints, for each, the fixed CPU per session (T=1), the CPU per token (T=1000 against T=200) and a whole
T=200 session. No sockets, no server process, no noise from the other core: differences of a few
microseconds show, so an optimisation can be judged in seconds. `--profile` prints agentloop's top
functions (cProfile, T=200).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import pstats
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import fakeserver  # noqa: E402
from contenders import floor  # noqa: E402

from agentloop import Agent, tool  # noqa: E402
from agentloop.models import OpenAIChatModel, _http  # noqa: E402


def sse_chunks(raw: bytes) -> list[bytes]:
    """The HTTP chunks of a pre-encoded chunked response (head stripped)."""
    body = raw.split(b"\r\n\r\n", 1)[1]
    chunks: list[bytes] = []
    while True:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return chunks
        chunks.append(rest[:size])
        body = rest[size + 2 :]


def replies(tokens: int) -> tuple[list[bytes], list[bytes]]:
    """Request 1's chunks (3 tool calls) and request 2's (the T-token answer)."""
    head, tail = fakeserver.text_reply(tokens, 0)
    return sse_chunks(fakeserver.tool_call_reply(3)), sse_chunks(head + tail)


class _Response:
    """Just enough of an `httpx2.Response` for a streaming provider."""

    status_code = 200
    is_closed = False

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks
        self.headers = {"content-type": "text/event-stream", "x-request-id": "req"}
        self.extensions: dict[str, Any] = {}

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk

    async def aclose(self) -> None:
        pass


async def get_value(key: str) -> str:
    """Returns the value stored under a key."""
    return "value-" + key


_TOOL = tool(get_value)


def _agentloop_session(tokens: int) -> Callable[[], Awaitable[None]]:
    first, second = replies(tokens)

    async def send(self: Any, request: Any) -> _Response:
        shard = self._acquire()
        shard.in_flight += 1
        response = _Response(second if b'"role":"tool"' in request.content else first)
        response.extensions["agentloop.shard"] = shard
        return response

    _http.ProviderClient._send = send  # type: ignore[method-assign,assignment]
    model = OpenAIChatModel(model="gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key="replay")
    agent = Agent(model, tools=[_TOOL])

    async def session() -> None:
        stream = agent.stream("q")
        count = 0
        async for _ in stream:
            count += 1
        assert count == tokens and len(stream.result.tool_executions) == 3

    return session


class _FloorClient:
    def __init__(self, first: list[bytes], second: list[bytes]) -> None:
        self.first, self.second = first, second

    @contextlib.asynccontextmanager
    async def stream(self, method: str, url: str, content: bytes, headers: Any) -> AsyncIterator[_Response]:
        yield _Response(self.second if b'"role":"tool"' in content else self.first)


def _floor_session(tokens: int) -> Callable[[], Awaitable[None]]:
    client = _FloorClient(*replies(tokens))
    contender = floor.Contender("http://127.0.0.1:9/v1", get_value)

    async def session() -> None:
        state = floor._Session()
        count = 0
        async for _ in contender._run(client, "q", state):  # type: ignore[arg-type]
            count += 1
        assert count == tokens and state.executions == 3

    return session


Maker = Callable[[int], Callable[[], Awaitable[None]]]


async def _cpu_per_session(make: Maker, tokens: int, n: int) -> float:
    session = make(tokens)
    for _ in range(100):
        await session()
    start = time.process_time()
    for _ in range(n):
        await session()
    return (time.process_time() - start) / n * 1e6


def measure(make: Maker) -> tuple[float, float, float]:
    """(fixed µs per session, µs per token, µs per T=200 session); best of 3 runs each."""
    best = {
        tokens: min(asyncio.run(_cpu_per_session(make, tokens, n)) for _ in range(3))
        for tokens, n in ((1, 3000), (200, 3000), (1000, 600))
    }
    return best[1], (best[1000] - best[200]) / 800, best[200]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true", help="cProfile agentloop at T=200")
    args = parser.parse_args()
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        asyncio.run(_cpu_per_session(_agentloop_session, 200, 1000))
        profiler.disable()
        pstats.Stats(profiler).strip_dirs().sort_stats("tottime").print_stats(30)
        return
    rows = {"floor": measure(_floor_session), "agentloop": measure(_agentloop_session)}
    print("| | fixed µs/session (T=1) | µs/token | T=200 session µs |")
    print("|---|---:|---:|---:|")
    for name, (fixed, token, whole) in rows.items():
        print(f"| {name} | {fixed:.0f} | {token:.2f} | {whole:.0f} |")


if __name__ == "__main__":
    main()
