"""A server that cannot be reached: the error names the server's kind and URL, says what to check, and keeps
the transport failure as its cause."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from agentloop import Agent, ChatRequest, ModelConnectionError, UserMessage
from agentloop.models import AnthropicChatModel, OpenAIChatModel, infer_model
from agentloop.models._http import describe_server

HELLO = ChatRequest([UserMessage("hi")])


@pytest.fixture
def dead_url() -> Iterator[str]:
    """A URL on 127.0.0.1 where nothing listens (the port is held bound, never listened on)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{holder.getsockname()[1]}/v1"


def assert_transport_cause(error: BaseException) -> None:
    cause = error.__cause__
    assert cause is not None and type(cause).__name__ == "ConnectError", repr(cause)


async def test_a_custom_base_url_is_an_openai_compatible_server_not_openai(dead_url: str) -> None:
    async with OpenAIChatModel(
        "m", base_url=dead_url, api_key="sk-secret-key-123456", max_retries=0
    ) as model:
        with pytest.raises(ModelConnectionError) as caught:
            await model.chat(HELLO)
    message = str(caught.value)
    assert f"could not connect to OpenAI-compatible server at {dead_url} (" in message
    assert "check that the server is running and listening there, and that base_url is right" in message
    assert "sk-secret-key-123456" not in message
    assert_transport_cause(caught.value)


async def test_the_stream_and_the_agent_keep_the_url_and_the_cause(dead_url: str) -> None:
    model = OpenAIChatModel("m", base_url=dead_url, max_retries=1)
    with pytest.raises(ModelConnectionError, match="OpenAI-compatible server at http") as caught:
        async for _ in model.stream(HELLO):
            pass
    assert_transport_cause(caught.value)
    stream = Agent(model).stream("hi")
    with pytest.raises(ModelConnectionError, match="OpenAI-compatible server at http") as caught:
        async for _ in stream:
            pass
    assert_transport_cause(caught.value)  # kept through the runtime's re-raise, retries included
    with pytest.raises(ModelConnectionError) as caught:
        await Agent(model).chat("hi")
    assert_transport_cause(caught.value)
    await model.aclose()


async def test_ollama_says_how_to_start_it(dead_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_BASE_URL", dead_url)
    model = infer_model("ollama:qwen3")
    assert isinstance(model, OpenAIChatModel)
    async with model:
        with pytest.raises(ModelConnectionError) as caught:
            await model.chat(HELLO)
    message = str(caught.value)
    assert f"could not connect to Ollama server (OpenAI-compatible) at {dead_url}" in message
    assert "is Ollama running (`ollama serve`)? Set OLLAMA_BASE_URL" in message


async def test_anthropic_custom_url(dead_url: str) -> None:
    url = dead_url.removesuffix("/v1")
    async with AnthropicChatModel("claude-x", base_url=url, api_key="k", max_retries=0) as model:
        with pytest.raises(ModelConnectionError, match=f"Anthropic-compatible server at {url} ") as caught:
            await model.chat(HELLO)
    assert_transport_cause(caught.value)


@pytest.mark.parametrize(
    ("provider", "url", "described"),
    [
        ("openai", "https://api.openai.com/v1", "the OpenAI API at https://api.openai.com/v1"),
        ("anthropic", "https://api.anthropic.com", "the Anthropic API at https://api.anthropic.com"),
        ("openai", "http://gpu-box:8000/v1", "OpenAI-compatible server at http://gpu-box:8000/v1"),
        ("groq", "https://example.test/openai/v1", "groq server at https://example.test/openai/v1"),
        ("openai", "http://user:pw@proxy.test/v1", "OpenAI-compatible server at http://***@proxy.test/v1"),
    ],
)
def test_server_descriptions(provider: str, url: str, described: str) -> None:
    assert describe_server(provider, url) == described


async def test_a_404_names_the_url_the_request_went_to() -> None:
    from agentloop import NotFoundError
    from agentloop.testing import FakeOpenAIServer

    with FakeOpenAIServer([FakeOpenAIServer.error(404, "The model `m` does not exist")]) as server:
        model = OpenAIChatModel("m", base_url=server.base_url + "?api-version=1", api_key="k")
        async with model:
            with pytest.raises(NotFoundError) as caught:
                await model.chat(HELLO)
    message = str(caught.value)
    assert "The model `m` does not exist" in message and "check the model name and the base URL" in message
    assert message.endswith(f"(the request went to {server.base_url}/chat/completions)")  # no query string
