"""Offline chat models and fake provider servers, for testing agents without a network or an API key.

`ScriptedChatModel` replays answers you script, `FunctionChatModel` answers with your function, `TestModel`
calls every tool with generated arguments. `FakeOpenAIServer`, `FakeOpenAIResponsesServer`,
`FakeAnthropicServer`, `FakeGeminiServer` and `FakeBedrockServer` speak the providers' HTTP protocols on
127.0.0.1, for testing the real provider clients; they load on first use. `Cassette` records a real
provider's HTTP exchanges once and replays them offline (the `testing` extra, for PyYAML).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._examples import example_arguments
from ._function import FunctionChatModel
from ._scripted import ScriptedChatModel
from ._test_model import TestModel

if TYPE_CHECKING:
    from ._cassette import Cassette, CassetteError
    from ._fake_anthropic import FakeAnthropicServer
    from ._fake_bedrock import FakeBedrockServer
    from ._fake_gemini import FakeGeminiServer
    from ._fake_openai import FakeOpenAIServer
    from ._fake_responses import FakeOpenAIResponsesServer
    from ._fake_server import FakeServer, RecordedRequest, Reply

__all__ = [
    "Cassette",
    "CassetteError",
    "FakeAnthropicServer",
    "FakeBedrockServer",
    "FakeGeminiServer",
    "FakeOpenAIResponsesServer",
    "FakeOpenAIServer",
    "FakeServer",
    "FunctionChatModel",
    "RecordedRequest",
    "Reply",
    "ScriptedChatModel",
    "TestModel",
    "example_arguments",
]

_LAZY = {
    "Cassette": "._cassette",
    "CassetteError": "._cassette",
    "FakeOpenAIServer": "._fake_openai",
    "FakeOpenAIResponsesServer": "._fake_responses",
    "FakeAnthropicServer": "._fake_anthropic",
    "FakeGeminiServer": "._fake_gemini",
    "FakeBedrockServer": "._fake_bedrock",
    "FakeServer": "._fake_server",
    "RecordedRequest": "._fake_server",
    "Reply": "._fake_server",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        from .._hints import missing_name

        raise missing_name(__name__, name)
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
