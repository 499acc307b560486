"""`infer_model`: model strings resolved from the environment, with clear errors."""

from __future__ import annotations

import pytest

from agentloop import ChatRequest, IllegalConfigurationError, UserMessage
from agentloop.models import infer_model
from agentloop.models._compatible import COMPATIBLE, Compatible
from agentloop.models._openai import OpenAIChatModel
from agentloop.testing import ScriptedChatModel
from agentloop.testing._fake_openai import FakeOpenAIServer

ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    *(variable for p in COMPATIBLE for variable in (p.key_variable, p.base_url_variable)),
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def test_openai_uses_the_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-key-0123456789abcdef")
    model = infer_model("openai:gpt-4o-mini")
    assert isinstance(model, OpenAIChatModel)
    assert model.model == "gpt-4o-mini"
    assert model.base_url == "https://api.openai.com/v1"
    assert "sk-env" not in repr(model)


def test_openai_without_a_key_names_the_variable() -> None:
    with pytest.raises(IllegalConfigurationError, match="OPENAI_API_KEY"):
        infer_model("openai:gpt-4o-mini")


async def test_openai_base_url_and_key_from_the_environment_reach_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FakeOpenAIServer(["hello"]) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-env-key-0123456789abcdef")
        model = infer_model("openai:gpt-4.1-nano")
        assert isinstance(model, OpenAIChatModel)
        async with model:
            response = await model.chat(ChatRequest([UserMessage("hi")]))
    assert response.text == "hello"
    request = server.requests[0]
    assert request.json["model"] == "gpt-4.1-nano"
    assert request.headers["authorization"] == "Bearer sk-env-key-0123456789abcdef"


async def test_openai_compatible_base_url_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeOpenAIServer(["local answer"]) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        async with infer_model("openai:qwen2.5") as model:  # type: ignore[attr-defined]
            assert (await model.chat(ChatRequest([UserMessage("hi")]))).text == "local answer"
    assert "authorization" not in server.requests[0].headers


def test_ollama_defaults_to_localhost_and_sends_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-go-to-ollama-000000")
    model = infer_model("ollama:qwen3")
    assert isinstance(model, OpenAIChatModel)
    assert model.base_url == "http://localhost:11434/v1"
    assert model.model == "qwen3"
    assert model.provider == "ollama"
    assert "authorization" not in model._http._headers


async def test_ollama_base_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeOpenAIServer(["from ollama"]) as server:
        monkeypatch.setenv("OLLAMA_BASE_URL", server.base_url)
        async with infer_model("ollama:llama3.2:3b") as model:  # type: ignore[attr-defined]
            assert model.model == "llama3.2:3b"  # the tag after the second colon is part of the name
            assert (await model.chat(ChatRequest([UserMessage("hi")]))).text == "from ollama"


def test_anthropic_reads_its_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    anthropic = pytest.importorskip("agentloop.models._anthropic")
    with pytest.raises(IllegalConfigurationError, match="ANTHROPIC_API_KEY"):
        infer_model("anthropic:claude-sonnet-4-5")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env-0123456789abcdef")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/anthropic")
    model = infer_model("anthropic:claude-sonnet-4-5")
    assert isinstance(model, anthropic.AnthropicChatModel)
    assert model.model == "claude-sonnet-4-5"
    assert "http://127.0.0.1:9/anthropic" in repr(model)
    assert "sk-ant-env" not in repr(model)


def test_local_model_strings() -> None:
    local = pytest.importorskip("agentloop.models._local")
    assert isinstance(infer_model("local"), local.LocalChatModel)


def test_a_chat_model_is_returned_as_it_is() -> None:
    model = ScriptedChatModel(["hi"])
    assert infer_model(model) is model


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "cohere:command-r",
            "unknown model string 'cohere:command-r': start it with one of "
            "'openai:', 'openai-responses:', 'anthropic:', 'gemini:', 'bedrock:', 'ollama:', 'vllm:', "
            "'llamacpp:', 'openrouter:', 'groq:', 'deepseek:', 'mistral:', 'together:', 'local:'",
        ),
        ("gpt-4o", "did you mean 'openai:gpt-4o'"),
        ("claude-3-5-haiku", "did you mean 'anthropic:claude-3-5-haiku'"),
        ("openai:", "names no model: write 'openai:<model name>'"),
        ("ollama:  ", "names no model"),
    ],
)
def test_bad_model_strings_explain_what_to_write(text: str, message: str) -> None:
    with pytest.raises(IllegalConfigurationError) as caught:
        infer_model(text)
    assert message in str(caught.value)


def test_other_objects_are_rejected() -> None:
    with pytest.raises(IllegalConfigurationError, match="got int"):
        infer_model(42)  # type: ignore[arg-type]


@pytest.mark.parametrize("provider", COMPATIBLE, ids=[p.name for p in COMPATIBLE])
def test_each_compatible_provider_has_its_base_url_and_key_variable(
    provider: Compatible, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-must-not-travel-000000")
    if provider.key_required:
        with pytest.raises(IllegalConfigurationError, match=provider.key_variable):
            infer_model(f"{provider.name}:some-model")
        monkeypatch.setenv(provider.key_variable, "key-0123456789abcdef")
    model = infer_model(f"{provider.name}:some/model:tag")
    assert isinstance(model, OpenAIChatModel)
    assert (model.model, model.base_url, model.provider) == (
        "some/model:tag",
        provider.base_url,
        provider.name,
    )
    sent = model._http._headers.get("authorization")
    assert sent == ("Bearer key-0123456789abcdef" if provider.key_required else None)


@pytest.mark.parametrize("provider", COMPATIBLE, ids=[p.name for p in COMPATIBLE])
async def test_each_compatible_provider_reaches_its_server_with_its_key(
    provider: Compatible, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with FakeOpenAIServer([f"hello from {provider.title}"]) as server:
        monkeypatch.setenv(provider.base_url_variable, server.base_url)
        monkeypatch.setenv(provider.key_variable, "key-0123456789abcdef")
        async with infer_model(f"{provider.name}:m") as model:  # type: ignore[attr-defined]
            response = await model.chat(ChatRequest([UserMessage("hi")]))
    assert response.text == f"hello from {provider.title}"
    assert server.requests[0].headers["authorization"] == "Bearer key-0123456789abcdef"
    assert server.requests[0].json["model"] == "m"


def test_docs_list_the_compatible_providers_as_the_code_does() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text()
    section = page.split("### OpenAI-compatible providers", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("| ").split(" | ") for line in section.splitlines() if line.startswith("| `")]
    assert rows == [
        [
            f"`{p.name}:`",
            p.title,
            f"`{p.base_url}`",
            f"`{p.key_variable}`",
            "required" if p.key_required else "optional",
        ]
        for p in COMPATIBLE
    ]
