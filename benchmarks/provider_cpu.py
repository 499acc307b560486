"""CPU per streamed token of each HTTP provider's parser, without any transport.

    python benchmarks/provider_cpu.py [--profile openai-responses]

For OpenAIChatModel, OpenAIResponsesModel and AnthropicChatModel: the HTTP send is replaced by a response that
replays the provider's fake server's exact event stream (agentloop.testing; one chunk per event, as h11 hands
them over) for an answer of T distinct word tokens, and `model.stream(request)` is read to the end. Prints
each provider's fixed CPU per call (T=1), CPU per token (T=1000 against T=200) and a whole T=200 call, best of
3 runs each. No sockets, no server: differences of a fraction of a microsecond per token show. The Responses
API sends more bytes per token than Chat Completions (each `response.output_text.delta` event names its
item, output and content indexes, a sequence number and logprobs), so its parser has more to decode.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentloop import AiMessage, ChatRequest, UserMessage
from agentloop.models import AnthropicChatModel, OpenAIChatModel, OpenAIResponsesModel, _http
from agentloop.testing import FakeAnthropicServer, FakeOpenAIResponsesServer, FakeOpenAIServer
from agentloop.testing._fake_server import RecordedRequest


class _Response:
    """Just enough of an `httpx2.Response` for a streaming provider."""

    status_code = 200
    is_closed = False

    def __init__(self, chunks: tuple[bytes, ...]) -> None:
        self._chunks = chunks
        self.headers = {"content-type": "text/event-stream", "x-request-id": "req"}
        self.extensions: dict[str, Any] = {}

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk

    async def aclose(self) -> None:
        pass


def _answer(tokens: int) -> str:
    return "".join(f"w{n} " for n in range(tokens))


PROVIDERS: dict[str, tuple[Any, Any, str]] = {
    "openai-chat": (OpenAIChatModel, FakeOpenAIServer, "/v1/chat/completions"),
    "openai-responses": (OpenAIResponsesModel, FakeOpenAIResponsesServer, "/v1/responses"),
    "anthropic": (AnthropicChatModel, FakeAnthropicServer, "/v1/messages"),
}


def _call(name: str, tokens: int) -> Callable[[], Awaitable[None]]:
    model_class, server_class, path = PROVIDERS[name]
    model = model_class("model-x", base_url="http://127.0.0.1:9/v1", api_key="replay")
    request = ChatRequest([UserMessage("q")])
    body = model.build_body(request, stream=True)
    headers = {"x-api-key": "replay", "anthropic-version": "2023-06-01", "content-type": "application/json"}
    recorded = RecordedRequest("POST", path, {}, headers, b"", 0, json=body)
    chunks = server_class().render(AiMessage(_answer(tokens)), recorded).chunks
    assert chunks, f"{name}: the fake rendered no stream: {server_class().render(AiMessage('x'), recorded)}"

    async def send(self: Any, _request: Any) -> _Response:
        shard = self._acquire()
        shard.in_flight += 1
        response = _Response(chunks)
        response.extensions["agentloop.shard"] = shard
        return response

    _http.ProviderClient._send = send  # type: ignore[method-assign,assignment]

    async def call() -> None:
        count = 0
        async for _ in model.stream(request):
            count += 1
        assert count >= tokens

    return call


async def _cpu_per_call(name: str, tokens: int, n: int) -> float:
    call = _call(name, tokens)
    for _ in range(50):
        await call()
    start = time.process_time()
    for _ in range(n):
        await call()
    return (time.process_time() - start) / n * 1e6


def measure(name: str) -> tuple[float, float, float]:
    """(fixed µs per call, µs per token, µs per T=200 call); best of 3 runs each."""
    best = {
        tokens: min(asyncio.run(_cpu_per_call(name, tokens, n)) for _ in range(3))
        for tokens, n in ((1, 2000), (200, 1000), (1000, 200))
    }
    return best[1], (best[1000] - best[200]) / 800, best[200]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=sorted(PROVIDERS), help="cProfile one provider at T=200")
    parser.add_argument("--only", help="comma-separated providers to measure")
    args = parser.parse_args()
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        asyncio.run(_cpu_per_call(args.profile, 200, 500))
        profiler.disable()
        pstats.Stats(profiler).strip_dirs().sort_stats("tottime").print_stats(25)
        return
    names = args.only.split(",") if args.only else list(PROVIDERS)
    print("| provider | fixed µs/call (T=1) | µs/token | T=200 call µs |")
    print("|---|---:|---:|---:|")
    for name in names:
        fixed, token, whole = measure(name)
        print(f"| {name} | {fixed:.0f} | {token:.2f} | {whole:.0f} |")


if __name__ == "__main__":
    main()
