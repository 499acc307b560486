"""`FallbackChatModel` over real sockets: an OpenAI-compatible primary (the fake OpenAI server) and an
Anthropic fallback (the fake Anthropic server). The next model is tried only while nothing was delivered."""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentloop import (
    Agent,
    AiMessage,
    AuthenticationError,
    BadRequestError,
    ChatRequest,
    ChatResponse,
    IllegalConfigurationError,
    ModelConnectionError,
    ServerError,
    UserMessage,
)
from agentloop.models import (
    AnthropicChatModel,
    ChatModel,
    ClosableModel,
    FallbackChatModel,
    OpenAIChatModel,
    ResponseComplete,
    TextDelta,
)
from agentloop.testing import FakeAnthropicServer, FakeOpenAIServer

REQUEST = ChatRequest([UserMessage("Say hello")])
_SEEN: dict[int, int] = {}


def sent(server: Any) -> list[Any]:
    """The requests `server` received during this test."""
    return server.requests[_SEEN[id(server)] :]


@pytest.fixture(scope="module")
def started() -> Iterator[tuple[FakeOpenAIServer, FakeAnthropicServer]]:
    with FakeOpenAIServer() as primary, FakeAnthropicServer() as fallback:
        yield primary, fallback


@pytest.fixture
def servers(
    started: tuple[FakeOpenAIServer, FakeAnthropicServer],
) -> Iterator[tuple[FakeOpenAIServer, FakeAnthropicServer]]:
    for server in started:
        _SEEN[id(server)] = len(server.requests)
    yield started
    for server in started:
        assert not server.unanswered and not server.pending, "a scripted reply was not used"


def _models(
    primary: FakeOpenAIServer | str, fallback: FakeAnthropicServer, **options: Any
) -> FallbackChatModel:
    base_url = primary if isinstance(primary, str) else primary.base_url
    first = OpenAIChatModel(
        "gpt-primary", base_url=base_url, api_key="sk-test", temperature=0.1, max_retries=0
    )
    second = AnthropicChatModel(
        "claude-fallback", base_url=fallback.base_url, api_key="sk-ant-test", max_tokens=77, max_retries=0
    )
    return FallbackChatModel(first, second, **options)


async def _call(model: FallbackChatModel, mode: str, delivered: list[str] | None = None) -> ChatResponse:
    if mode == "chat":
        return await model.chat(REQUEST)
    response = None
    async for event in model.stream(REQUEST):
        if isinstance(event, TextDelta) and delivered is not None:
            delivered.append(event.text)
        if isinstance(event, ResponseComplete):
            response = event.response
    assert response is not None
    return response


@pytest.mark.parametrize("mode", ["chat", "stream"])
async def test_a_failing_primary_falls_back_each_model_with_its_own_settings(
    mode: str, servers: tuple[FakeOpenAIServer, FakeAnthropicServer]
) -> None:
    primary, fallback = servers
    primary.add(FakeOpenAIServer.error(503, "The engine is currently overloaded"))
    fallback.add("Hello from Claude")
    model = _models(primary, fallback)
    response = await _call(model, mode)
    assert response.text == "Hello from Claude"
    assert response.model == "claude-fallback"  # says which model answered
    [sent_primary], [sent_fallback] = sent(primary), sent(fallback)
    assert sent_primary.json["model"] == "gpt-primary" and sent_primary.json["temperature"] == 0.1
    assert sent_fallback.json["model"] == "claude-fallback" and sent_fallback.json["max_tokens"] == 77
    await model.aclose()


@pytest.mark.parametrize("mode", ["chat", "stream"])
async def test_a_connection_cut_before_the_first_token_falls_back(
    mode: str, servers: tuple[FakeOpenAIServer, FakeAnthropicServer]
) -> None:
    primary, fallback = servers
    if mode == "stream":  # the first chunk only says role=assistant: no token reached the consumer
        primary.add("Hello from GPT", disconnect_after_chunks=1)
    else:
        primary.add("Hello from GPT", disconnect_after_bytes=20)
    fallback.add("Hello from Claude")
    model = _models(primary, fallback)
    delivered: list[str] = []
    response = await _call(model, mode, delivered)
    assert response.text == "Hello from Claude" and response.model == "claude-fallback"
    if mode == "stream":
        assert "".join(delivered) == "Hello from Claude"  # nothing of the primary's answer
    await model.aclose()


async def test_a_connection_cut_after_the_first_token_is_raised_without_fallback(
    servers: tuple[FakeOpenAIServer, FakeAnthropicServer],
) -> None:
    primary, fallback = servers
    primary.add("Hello there from GPT", disconnect_after_chunks=2)  # role chunk, then one piece of text
    model = _models(primary, fallback)
    delivered: list[str] = []
    with pytest.raises(ModelConnectionError):
        await _call(model, "stream", delivered)
    assert delivered and "".join(delivered) in "Hello there from GPT"
    assert sent(fallback) == []
    await model.aclose()


@pytest.mark.parametrize("mode", ["chat", "stream"])
async def test_a_refused_connection_falls_back(mode: str, servers: tuple[FakeOpenAIServer, Any]) -> None:
    _, fallback = servers
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    fallback.add("Hello from Claude")
    model = _models(f"http://127.0.0.1:{port}/v1", fallback)
    response = await _call(model, mode)
    assert response.text == "Hello from Claude"
    await model.aclose()


@pytest.mark.parametrize("mode", ["chat", "stream"])
@pytest.mark.parametrize(("status", "error"), [(400, BadRequestError), (401, AuthenticationError)])
async def test_the_requests_own_faults_do_not_fall_back(
    mode: str, status: int, error: type[Exception], servers: tuple[FakeOpenAIServer, FakeAnthropicServer]
) -> None:
    primary, fallback = servers
    primary.add(FakeOpenAIServer.error(status, "Invalid value for 'messages'"))
    model = _models(primary, fallback)
    with pytest.raises(error, match="Invalid value"):
        await _call(model, mode)
    assert sent(fallback) == []
    await model.aclose()


@pytest.mark.parametrize("mode", ["chat", "stream"])
async def test_sticky_keeps_the_model_that_answered_last(
    mode: str, servers: tuple[FakeOpenAIServer, FakeAnthropicServer]
) -> None:
    primary, fallback = servers
    primary.add(FakeOpenAIServer.error(500, "boom"))
    fallback.add("first").add("second")
    sticky = _models(primary, fallback, sticky=True)
    assert (await _call(sticky, mode)).text == "first"
    assert sticky.model == "claude-fallback"
    assert (await _call(sticky, mode)).text == "second"
    assert len(sent(primary)) == 1  # the second call went straight to the fallback
    # Not sticky: every call starts with the primary again.
    primary.add(FakeOpenAIServer.error(500, "boom")).add("back to GPT")
    fallback.add("third")
    plain = _models(primary, fallback)
    assert (await _call(plain, mode)).text == "third"
    assert (await _call(plain, mode)).model == "gpt-primary"
    await sticky.aclose()
    await plain.aclose()


@pytest.mark.parametrize("mode", ["chat", "stream"])
async def test_when_every_model_fails_the_last_failure_is_raised(
    mode: str, servers: tuple[FakeOpenAIServer, FakeAnthropicServer]
) -> None:
    primary, fallback = servers
    primary.add(FakeOpenAIServer.error(503, "primary down"))
    fallback.add(FakeAnthropicServer.error(529, "Overloaded"))
    model = _models(primary, fallback)
    with pytest.raises(ServerError, match="Overloaded"):
        await _call(model, mode)
    await model.aclose()


async def test_an_agent_on_a_fallback_model(servers: tuple[FakeOpenAIServer, FakeAnthropicServer]) -> None:
    primary, fallback = servers
    primary.add(FakeOpenAIServer.error(429, "Rate limit reached")).add(FakeOpenAIServer.error(429, "again"))
    fallback.add("Streamed from Claude").add("Answered by Claude")
    agent = Agent(_models(primary, fallback))
    tokens = [token async for token in agent.stream("hi")]
    assert "".join(tokens) == "Streamed from Claude"
    result = await agent.chat("hi again")
    assert result.content == "Answered by Claude"
    assert result.final_response is not None and result.final_response.model == "claude-fallback"


def test_bad_configurations_are_refused() -> None:
    model = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(IllegalConfigurationError, match="at least one fallback"):
        FallbackChatModel(model)
    with pytest.raises(IllegalConfigurationError, match="not a ChatModel"):
        FallbackChatModel(model, "gpt-4o")  # type: ignore[arg-type]
    with pytest.raises(IllegalConfigurationError, match="exception classes"):
        FallbackChatModel(model, model, on=("ServerError",))  # type: ignore[arg-type]


class _Answering:
    """A `ChatModel` (chat and stream) that cannot be closed."""

    async def chat(self, request: ChatRequest) -> ChatResponse:
        return ChatResponse(AiMessage("Hi."))

    async def stream(self, request: ChatRequest) -> Any:
        yield ResponseComplete(await self.chat(request))


class _Closable(_Answering):
    """A `ClosableModel` too."""

    def __init__(self) -> None:
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1


def test_each_model_must_be_a_chat_model() -> None:
    class OnlyChat:
        async def chat(self, request: ChatRequest) -> ChatResponse:
            return ChatResponse(AiMessage("Hi."))

    assert isinstance(_Answering(), ChatModel) and not isinstance(OnlyChat(), ChatModel)
    FallbackChatModel(_Answering(), _Closable())  # any object with both methods: the Protocol is structural
    with pytest.raises(
        IllegalConfigurationError,
        match=re.escape("model 1 (OnlyChat) is not a ChatModel (it needs chat(request) and stream(request))"),
    ):
        FallbackChatModel(_Answering(), OnlyChat())  # type: ignore[arg-type]


async def test_aclose_closes_each_closable_model() -> None:
    first, plain, last = _Closable(), _Answering(), _Closable()
    assert isinstance(first, ClosableModel) and not isinstance(plain, ClosableModel)
    chain = FallbackChatModel(first, plain, last)
    async with chain:
        assert (await chain.chat(REQUEST)).ai_message.text == "Hi."
    assert (first.closed, last.closed) == (1, 1)


async def test_the_documented_example_runs() -> None:
    """The snippet of docs/models.md's `FallbackChatModel` section, run as a reader would paste it."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text()
    section = text.split("## `FallbackChatModel`", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert snippet is not None
    code = compile(snippet.group(1), "docs/models.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        outcome = eval(code, {"__name__": "docs"})
        if inspect.iscoroutine(outcome):
            await outcome
    assert output.getvalue() == "Hello from the fallback. - claude-sonnet-4-5\n"
