"""Token usage details (cache reads and writes, reasoning) from both providers, `Result.cost`, and the
`agentloop` loggers."""

from __future__ import annotations

import importlib
import logging
import threading
from typing import Any

import pytest

from agentloop import (
    Agent,
    AiMessage,
    ChatRequest,
    ChatResponse,
    IllegalConfigurationError,
    TokenUsage,
    ToolExecutionRequest,
    UserMessage,
    tool,
)
from agentloop._features import pricing as pricing_module
from agentloop.models import AnthropicChatModel, OpenAIChatModel
from agentloop.models._http import RetryPolicy
from agentloop.testing import FakeAnthropicServer, FakeOpenAIServer

KEY = "sk-test-0123456789abcdef-secret"
QUESTION = ChatRequest([UserMessage("Hi")])


def _openai(server: FakeOpenAIServer, **options: Any) -> OpenAIChatModel:
    options.setdefault("max_retries", 0)
    return OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key=KEY, **options)


async def _final(model: Any, request: ChatRequest) -> ChatResponse:
    response = None
    async for event in model.stream(request):
        response = getattr(event, "response", response)
    assert response is not None
    return response


# -- usage details ------------------------------------------------------------------------------------------


def test_usage_details_add_up_without_inventing_counts() -> None:
    reported = TokenUsage(100, 10, cache_read_tokens=80, reasoning_tokens=4)
    silent = TokenUsage(50, 5)
    written = TokenUsage(30, 3, cache_write_tokens=20)
    assert silent + silent == TokenUsage(100, 10)  # nobody reported details: still unknown, not 0
    total = sum([reported, silent, written])
    assert total == TokenUsage(180, 18, 198, cache_read_tokens=80, cache_write_tokens=20, reasoning_tokens=4)


@pytest.mark.parametrize("streaming", [False, True], ids=["chat", "stream"])
async def test_openai_cached_and_reasoning_tokens_are_kept(streaming: bool) -> None:
    usage = TokenUsage(1200, 300, cache_read_tokens=1024, reasoning_tokens=256)
    with FakeOpenAIServer([ChatResponse(AiMessage("Hi."), usage)]) as server:
        async with _openai(server) as model:
            response = await (_final(model, QUESTION) if streaming else model.chat(QUESTION))
        sent = server.requests[0].json
    assert response.token_usage == TokenUsage(1200, 300, 1500, cache_read_tokens=1024, reasoning_tokens=256)
    if streaming:
        assert sent["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("streaming", [False, True], ids=["chat", "stream"])
async def test_anthropic_cache_reads_and_writes_are_kept_and_counted_as_input(streaming: bool) -> None:
    usage = TokenUsage(1200, 30, cache_read_tokens=1000, cache_write_tokens=150)
    with FakeAnthropicServer([ChatResponse(AiMessage("Hi."), usage)]) as server:
        async with AnthropicChatModel("claude-test", base_url=server.base_url, api_key=KEY) as model:
            response = await (_final(model, QUESTION) if streaming else model.chat(QUESTION))
    # On the wire input_tokens was 50: Anthropic counts cache reads and writes apart.
    assert response.token_usage == TokenUsage(1200, 30, cache_read_tokens=1000, cache_write_tokens=150)


async def test_an_invocation_sums_the_details_of_its_calls() -> None:
    @tool
    def ping() -> str:
        """Pings."""
        return "pong"

    first = ChatResponse(
        AiMessage(None, [ToolExecutionRequest("c1", "ping", "{}")]),
        TokenUsage(500, 20, cache_read_tokens=0, reasoning_tokens=8),
    )
    second = ChatResponse(AiMessage("Done."), TokenUsage(540, 10, cache_read_tokens=500, reasoning_tokens=2))
    with FakeOpenAIServer([first, second]) as server:
        async with _openai(server) as model:
            result = await Agent(model, tools=[ping]).chat("Ping")
    assert result.token_usage == TokenUsage(1040, 30, 1070, cache_read_tokens=500, reasoning_tokens=10)


# -- cost ---------------------------------------------------------------------------------------------------


async def test_cost_from_a_pricing_function_sums_every_model_call() -> None:
    seen: list[tuple[TokenUsage, str | None, str | None]] = []

    def pricing(usage: TokenUsage, model: str | None, provider: str | None) -> float:
        seen.append((usage, model, provider))
        return usage.input_tokens * 1e-6 + usage.output_tokens * 4e-6

    @tool
    def ping() -> str:
        """Pings."""
        return "pong"

    first = ChatResponse(AiMessage(None, [ToolExecutionRequest("c1", "ping", "{}")]), TokenUsage(1000, 100))
    second = ChatResponse(AiMessage("Done."), TokenUsage(2000, 50))
    with FakeOpenAIServer([first, second]) as server:
        async with _openai(server) as model:
            result = await Agent(model, tools=[ping], pricing=pricing).chat("Ping")
    assert result.cost == pytest.approx(1000e-6 + 400e-6 + 2000e-6 + 200e-6)
    assert [(u.input_tokens, m, p) for u, m, p in seen] == [
        (1000, "gpt-4o-mini", "openai"),
        (2000, "gpt-4o-mini", "openai"),
    ]


async def test_cost_is_none_when_a_call_has_no_price_or_pricing_is_off() -> None:
    prices = iter([0.01, None])
    with FakeOpenAIServer(["a", "b"]) as server:
        async with _openai(server) as model:
            priced = await Agent(model, pricing=lambda usage, model, provider: next(prices)).chat("x")
            off = await Agent(model, pricing=False).chat("y")
    assert priced.cost == pytest.approx(0.01)
    assert off.cost is None
    assert next(prices, "spent") is None  # the second call's price was asked and was unknown
    partial = ChatResponse(AiMessage("z"), TokenUsage(1, 1), model="m")
    unknown = pricing_module.cost_of([partial, partial], (lambda u, m, p: None, None, "m"))
    assert unknown is None


def test_a_bad_pricing_setting_is_refused() -> None:
    from agentloop.testing import TestModel

    with pytest.raises(IllegalConfigurationError, match="pricing must be a function"):
        Agent(TestModel(), pricing="cheap")  # type: ignore[arg-type]


async def test_genai_prices_loads_in_a_thread_and_prices_known_models(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    genai_prices = pytest.importorskip("genai_prices", reason="pip install 'agentloop-runtime[prices]'")
    loaded_in: list[threading.Thread] = []
    real_import = importlib.import_module

    def recording_import(name: str, *args: Any) -> Any:
        if name == "genai_prices":
            loaded_in.append(threading.current_thread())
        return real_import(name, *args)

    monkeypatch.setattr(pricing_module, "_module", [])
    monkeypatch.setattr(pricing_module, "_loader", [])
    monkeypatch.setattr(pricing_module.importlib, "import_module", recording_import)
    usage = TokenUsage(10_000, 1_000, cache_read_tokens=4_000)
    with FakeOpenAIServer([ChatResponse(AiMessage("Hi."), usage)]) as server:
        async with _openai(server) as model:
            result = await Agent(model, pricing=True).chat("Hi")
    [loader] = pricing_module._loader
    loader.join(10)  # the invocation did not wait for it
    assert loaded_in == [loader] and loader is not threading.main_thread()
    expected = genai_prices.calc_price(
        genai_prices.Usage(input_tokens=10_000, output_tokens=1_000, cache_read_tokens=4_000),
        "gpt-4o-mini",
        provider_id="openai",
    ).total_price
    assert result.cost == pytest.approx(float(expected))
    assert result.cost > 0
    # A model genai-prices does not know (a self-hosted one) has no price.
    assert pricing_module.genai_prices(usage, "my-finetune-7b", "llama.cpp") is None


async def test_default_pricing_uses_genai_prices_only_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentloop.testing import TestModel

    monkeypatch.setattr(pricing_module, "_installed", [False])
    assert (await Agent(TestModel()).chat("Hi")).cost is None
    with pytest.raises(IllegalConfigurationError, match=r"pip install 'agentloop-runtime\[prices\]'"):
        Agent(TestModel(), pricing=True)


# -- logging ------------------------------------------------------------------------------------------------


async def test_logs_model_calls_tool_calls_and_retries_without_secrets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @tool
    def lookup(city: str) -> str:
        """Looks a city up."""
        if city == "Atlantis":
            raise ValueError(f"secret archive of {city}")
        return "found"

    calls = [
        ToolExecutionRequest("c1", "lookup", '{"city": "Oslo"}'),
        ToolExecutionRequest("c2", "lookup", '{"city": "Atlantis"}'),
    ]
    with FakeOpenAIServer(
        [FakeOpenAIServer.error(503, "Overloaded"), AiMessage(None, calls), "Done."]
    ) as server:
        retry = RetryPolicy(max_retries=1, initial_delay=0.01, jitter=0.0)
        async with _openai(server, retry=retry, max_retries=None) as model:
            with caplog.at_level(logging.DEBUG, logger="agentloop"):
                await Agent(model, tools=[lookup], name="finder").chat("Where?")
    records = [r for r in caplog.records if r.name.startswith("agentloop")]
    messages = [r.getMessage() for r in records]
    assert any(r.levelno == logging.INFO and "retrying" in r.getMessage() for r in records)
    model_calls = [m for m in messages if "model call" in m]
    assert len(model_calls) == 2 and "finder" in model_calls[0] and "tool calls=2" in model_calls[0]
    assert any("tool lookup (call c1) finished" in m for m in messages)
    [failure] = [r for r in records if "(call c2) failed" in r.getMessage()]
    assert failure.levelno == logging.INFO and "ValueError" in failure.getMessage()
    text = "\n".join(messages)
    assert KEY not in text and "secret archive" not in text
