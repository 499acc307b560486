"""Chat models: the `ChatModel` protocol, its stream events, and the providers.

Providers are imported lazily: `import agentloop.models` stays cheap, and the local model's heavy runtime
loads only when `LocalChatModel` is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .._public import publish, publish_one
from ._base import (
    ChatModel,
    ClosableModel,
    GenerationProgress,
    LocallyNamedModel,
    ModelEvent,
    ModelWithDefaults,
    NamedModel,
    ProviderModel,
    RemoteModel,
    ResponseComplete,
    StructuredOutputModel,
    TextDelta,
    TextSinkModel,
    ThinkingDelta,
    TokenCount,
    TokenCountingModel,
    ToolCallComplete,
    ToolCallDelta,
    WrapperModel,
)

if TYPE_CHECKING:
    from ._anthropic import AnthropicChatModel
    from ._bedrock import BedrockChatModel
    from ._fallback import FallbackChatModel
    from ._gemini import GeminiChatModel
    from ._http._config import RetryPolicy, Timeouts
    from ._infer import infer_model
    from ._local import LocalChatModel, LocalModelWeightsError
    from ._openai import OpenAIChatModel
    from ._responses import OpenAIResponsesModel
    from ._strict import strict_schema

__all__ = [
    "AnthropicChatModel",
    "BedrockChatModel",
    "ChatModel",
    "ClosableModel",
    "FallbackChatModel",
    "GeminiChatModel",
    "GenerationProgress",
    "LocalChatModel",
    "LocalModelWeightsError",
    "LocallyNamedModel",
    "ModelEvent",
    "ModelWithDefaults",
    "NamedModel",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "ProviderModel",
    "RemoteModel",
    "ResponseComplete",
    "RetryPolicy",
    "StructuredOutputModel",
    "TextDelta",
    "TextSinkModel",
    "ThinkingDelta",
    "Timeouts",
    "TokenCount",
    "TokenCountingModel",
    "ToolCallComplete",
    "ToolCallDelta",
    "WrapperModel",
    "infer_model",
    "strict_schema",
]

_LAZY = {
    "OpenAIChatModel": "._openai",
    "OpenAIResponsesModel": "._responses",
    "AnthropicChatModel": "._anthropic",
    "FallbackChatModel": "._fallback",
    "GeminiChatModel": "._gemini",
    "BedrockChatModel": "._bedrock",
    "LocalChatModel": "._local",
    "LocalModelWeightsError": "._local",
    "RetryPolicy": "._http._config",
    "Timeouts": "._http._config",
    "infer_model": "._infer",
    "strict_schema": "._strict",
}


publish(globals(), __all__, __name__)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        from .._hints import missing_name

        raise missing_name(__name__, name)
    value = publish_one(getattr(importlib.import_module(module, __name__), name), __name__)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
