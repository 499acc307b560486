"""A name looked up in the wrong public module says where it lives (`from agentloop import ChatModel` ->
`from agentloop.models import ChatModel`), a misspelt one gets the closest names, and none of it costs
`import agentloop` anything."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

PUBLIC = [
    "agentloop",
    *(
        f"agentloop.{name}"
        for name in ["models", "middleware", "stores", "mcp", "otel", "dbos", "testing", "ui"]
    ),
]


def failure(statement: str) -> BaseException:
    with pytest.raises(Exception) as caught:
        exec(statement, {})
    return caught.value


def test_from_agentloop_import_chatmodel_names_its_module() -> None:
    error = failure("from agentloop import ChatModel")
    assert isinstance(error, ImportError)
    assert "did you mean `from agentloop.models import ChatModel`" in str(error)  # or agentloop.abc


@pytest.mark.parametrize(
    ("statement", "hint"),
    [
        ("from agentloop import FakeOpenAIServer", "from agentloop.testing import FakeOpenAIServer"),
        ("from agentloop import UsageLimits", "from agentloop.middleware import UsageLimits"),
        ("from agentloop import SQLiteChatMemoryStore", "from agentloop.stores import SQLiteChatMemoryStore"),
        ("from agentloop.models import Agent", "from agentloop import Agent"),
        ("from agentloop.testing import OpenAIChatModel", "from agentloop.models import OpenAIChatModel"),
        ("from agentloop.middleware import TestModel", "from agentloop.testing import TestModel"),
        ("from agentloop.ui import MCPToolset", "from agentloop.mcp import MCPToolset"),
        ("from agentloop.otel import DBOSAgent", "from agentloop.dbos import DBOSAgent"),
        ("from agentloop.dbos import vercel_ai_app", "from agentloop.ui import vercel_ai_app"),
        ("from agentloop.stores import InputGuardrail", "from agentloop.middleware import InputGuardrail"),
        ("from agentloop.mcp import Instrumentation", "from agentloop.otel import Instrumentation"),
    ],
)
def test_every_public_module_points_to_the_one_that_has_the_name(statement: str, hint: str) -> None:
    error = failure(statement)
    assert isinstance(error, ImportError)
    assert f"`{hint}`" in str(error)


def test_a_misspelt_name_gets_the_closest_ones_in_both_forms() -> None:
    error = failure("from agentloop import Agnet")
    assert isinstance(error, ImportError) and "did you mean 'Agent'?" in str(error)
    error = failure("from agentloop.middleware import UsageLimit")
    assert "did you mean 'UsageLimits'?" in str(error)
    error = failure("import agentloop; agentloop.agent")
    assert type(error) is AttributeError and "did you mean 'Agent'?" in str(error)


def test_attribute_probes_still_see_an_attribute_error() -> None:
    # hasattr/getattr(default) must keep working on every public module: a miss there is an AttributeError.
    for name in PUBLIC:
        module = importlib.import_module(name)
        assert not hasattr(module, "no_such_name")
        assert getattr(module, "__wrapped__", None) is None
    error = failure("import agentloop; agentloop.Nothing_like_it")
    assert type(error) is AttributeError and "did you mean" not in str(error)


def test_names_that_exist_still_import() -> None:
    from agentloop import CallContext, Middleware
    from agentloop.middleware import CallContext as Same
    from agentloop.models import ChatModel

    assert CallContext is Same and Middleware is not None and ChatModel is not None


def test_import_agentloop_loads_no_hint_machinery() -> None:
    code = "import sys, agentloop; print('agentloop._hints' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
