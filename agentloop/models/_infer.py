"""`infer_model`: a chat model from a string such as "openai:gpt-4o-mini", configured from the environment."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial

from agentloop._values._errors import IllegalConfigurationError

from ._base import ChatModel
from ._compatible import COMPATIBLE, Compatible

__all__ = ["infer_model"]


def _require(variable: str, prefix: str) -> str:
    value = os.environ.get(variable)
    if not value:
        raise IllegalConfigurationError(
            f"{prefix!r} models need an API key: set the environment variable {variable}, "
            "or build the model yourself with an api_key= argument"
        )
    return value


def _openai(name: str) -> ChatModel:
    from ._openai import OPENAI_BASE_URL, OpenAIChatModel

    base_url = os.environ.get("OPENAI_BASE_URL")
    # A custom OPENAI_BASE_URL (a local vLLM, LM Studio...) may need no key; OpenAI itself always does.
    api_key = os.environ.get("OPENAI_API_KEY") or None
    if api_key is None and not base_url:
        _require("OPENAI_API_KEY", "openai")
    return OpenAIChatModel(name, api_key=api_key, base_url=base_url or OPENAI_BASE_URL)


def _openai_responses(name: str) -> ChatModel:
    from ._responses import OpenAIResponsesModel

    if not os.environ.get("OPENAI_API_KEY") and not os.environ.get("OPENAI_BASE_URL"):
        _require("OPENAI_API_KEY", "openai-responses")
    model: ChatModel = OpenAIResponsesModel(name)  # reads OPENAI_API_KEY and OPENAI_BASE_URL itself
    return model


def _compatible(provider: Compatible, name: str) -> ChatModel:
    """An `OpenAIChatModel` for one of the named OpenAI-compatible providers."""
    from ._openai import OpenAIChatModel

    base_url = os.environ.get(provider.base_url_variable) or provider.base_url
    api_key = os.environ.get(provider.key_variable) or None
    if api_key is None and provider.key_required:
        _require(provider.key_variable, provider.name)
    return OpenAIChatModel(name, api_key=api_key, base_url=base_url, provider=provider.name)


def _anthropic(name: str) -> ChatModel:
    from ._anthropic import AnthropicChatModel

    base_url = os.environ.get("ANTHROPIC_BASE_URL") or None
    api_key = os.environ.get("ANTHROPIC_API_KEY") or None
    if api_key is None and base_url is None:
        _require("ANTHROPIC_API_KEY", "anthropic")
    model: ChatModel = AnthropicChatModel(name, api_key=api_key, base_url=base_url)
    return model


def _gemini(name: str) -> ChatModel:
    from ._gemini import GeminiChatModel

    base_url = os.environ.get("GOOGLE_GEMINI_BASE_URL") or None
    api_key = os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY") or None
    if api_key is None and base_url is None:
        _require("GEMINI_API_KEY", "gemini")
    model: ChatModel = GeminiChatModel(name, api_key=api_key, base_url=base_url)
    return model


def _bedrock(name: str) -> ChatModel:
    from ._bedrock import BedrockChatModel

    model: ChatModel = BedrockChatModel(name)  # region, endpoint and credentials as the AWS SDKs find them
    return model


def _local(name: str) -> ChatModel:
    from ._local import LocalChatModel

    model: ChatModel = LocalChatModel(model_path=name or None)
    return model


_PROVIDERS: dict[str, Callable[[str], ChatModel]] = {
    "openai": _openai,
    "openai-responses": _openai_responses,
    "anthropic": _anthropic,
    "gemini": _gemini,
    "bedrock": _bedrock,
    **{provider.name: partial(_compatible, provider) for provider in COMPATIBLE},
    "local": _local,
}


def infer_model(model: str | ChatModel) -> ChatModel:
    """The chat model `model` names, or `model` itself when it already is one.

    "openai:<model>" (OPENAI_API_KEY, optional OPENAI_BASE_URL; with a base URL the key is optional),
    "openai-responses:<model>" (the Responses API; same variables), "anthropic:<model>" (ANTHROPIC_API_KEY,
    optional ANTHROPIC_BASE_URL, same rule), the OpenAI-compatible providers of `COMPATIBLE` ("ollama:",
    "vllm:", "llamacpp:", "openrouter:", "groq:", "deepseek:", "mistral:", "together:"; each at its base
    URL or `<NAME>_BASE_URL`, with its key variable), "gemini:<model>" (GEMINI_API_KEY, optional
    GOOGLE_GEMINI_BASE_URL, same rule), "bedrock:<model-id>" (region, endpoint and credentials found as the
    AWS SDKs find them; extra `bedrock`), "local" or "local:<path to a GGUF file>" (the embedded model).
    """
    if not isinstance(model, str):
        if isinstance(model, ChatModel):
            return model
        raise IllegalConfigurationError(
            f"expected a model string such as 'openai:gpt-4o-mini' or a ChatModel, got {type(model).__name__}"
        )
    prefix, colon, name = model.strip().partition(":")
    prefix = prefix.strip().lower()
    name = name.strip()
    known = ", ".join(f"'{p}:'" for p in _PROVIDERS)
    factory = _PROVIDERS.get(prefix)
    if factory is None:
        guess = ""
        if not colon:
            lowered = model.lower()
            if lowered.startswith(("gpt", "o1", "o3", "o4", "chatgpt")):
                guess = f" (did you mean 'openai:{model}'?)"
            elif lowered.startswith("claude"):
                guess = f" (did you mean 'anthropic:{model}'?)"
            elif lowered.startswith("gemini"):
                guess = f" (did you mean 'gemini:{model}'?)"
        raise IllegalConfigurationError(
            f"unknown model string {model!r}{guess}: start it with one of {known}, e.g. 'openai:gpt-4o-mini'"
        )
    if not name and prefix != "local":
        raise IllegalConfigurationError(
            f"model string {model!r} names no model: write '{prefix}:<model name>'"
        )
    return factory(name)
