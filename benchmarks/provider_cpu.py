"""CPU per streamed token of each HTTP provider's parser, without any transport.

    python benchmarks/provider_cpu.py [--profile openai-responses]

For OpenAIChatModel, OpenAIResponsesModel, AnthropicChatModel, GeminiChatModel and BedrockChatModel: the HTTP
send is replaced by a response that replays the provider's fake server's exact event stream
(agentloop.testing; one chunk per event, as h11 hands them over) for an answer of T distinct word tokens, and
`model.stream(request)` is read to the end. Prints each provider's fixed CPU per call (T=1), CPU per token
(T=1000 against T=200) and a whole T=200 call, best of 3 runs each. No sockets, no server: differences of a
fraction of a microsecond per token show. The Responses API sends more bytes per token than Chat Completions
(each `response.output_text.delta` event names its item, output and content indexes, a sequence number and
logprobs), so its parser has more to decode. Bedrock's fixed cost includes SigV4 signing (botocore) on every
call; its stream is AWS's binary event stream (one frame per token, padded by Bedrock, two CRCs each).
`benchmarks/provider_cpu_sockets.py` measures the same over real loopback sockets (transport included)."""

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
from agentloop.models import (
    AnthropicChatModel,
    BedrockChatModel,
    GeminiChatModel,
    OpenAIChatModel,
    OpenAIResponsesModel,
    _http,
)
from agentloop.testing import (
    FakeAnthropicServer,
    FakeBedrockServer,
    FakeGeminiServer,
    FakeOpenAIResponsesServer,
    FakeOpenAIServer,
)
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
    "gemini": (GeminiChatModel, FakeGeminiServer, "/v1beta/models/model-x:streamGenerateContent"),
    "bedrock": (BedrockChatModel, FakeBedrockServer, "/model/model-x/converse-stream"),
}
_BEDROCK = FakeBedrockServer(verify_signatures=False)  # never started: it only renders the stream


def _model(name: str) -> Any:
    model_class = PROVIDERS[name][0]
    if name == "bedrock":
        return BedrockChatModel(
            "model-x",
            region=_BEDROCK.region,
            endpoint_url="http://127.0.0.1:9",
            aws_access_key_id=_BEDROCK.access_key,
            aws_secret_access_key=_BEDROCK.secret_key,
        )
    if name == "gemini":
        return GeminiChatModel("model-x", base_url="http://127.0.0.1:9", api_key="replay")
    return model_class("model-x", base_url="http://127.0.0.1:9/v1", api_key="replay")


def _server(name: str) -> Any:
    if name == "bedrock":
        return _BEDROCK
    if name == "gemini":
        return FakeGeminiServer(words_per_chunk=1)
    return PROVIDERS[name][1]()


def _call(name: str, tokens: int) -> Callable[[], Awaitable[None]]:
    path = PROVIDERS[name][2]
    model = _model(name)
    request = ChatRequest([UserMessage("q")])
    if name in ("gemini", "bedrock"):
        body = model.build_body(request)
    else:
        body = model.build_body(request, stream=True)
    scope = f"{_BEDROCK.access_key}/20260101/{_BEDROCK.region}/bedrock/aws4_request"
    headers = {
        "x-api-key": "replay",
        "x-goog-api-key": "replay",
        "anthropic-version": "2023-06-01",
        "content-type": "application/json",
        "authorization": f"AWS4-HMAC-SHA256 Credential={scope}, SignedHeaders=host, Signature=0",
    }
    recorded = RecordedRequest("POST", path, {"alt": "sse"}, headers, b"", 0, json=body)
    server = _server(name)
    chunks = server.render(AiMessage(_answer(tokens)), recorded).chunks
    assert chunks, f"{name}: the fake rendered no stream: {server.render(AiMessage('x'), recorded)}"

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
