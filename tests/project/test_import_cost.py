"""`import agentloop` plus `Agent`, `tool` and `OpenAIChatModel` loads no heavy dependency (issue 36).

pydantic, tenacity, asyncio and the optional integrations load on first use; a fresh interpreter shows
which modules the import brought in, so an eager import cannot come back unnoticed.
"""

from __future__ import annotations

import json
import subprocess
import sys

_HEAVY = (
    "pydantic",
    "pydantic_core",
    "tenacity",
    "asyncio",
    "subprocess",
    "opentelemetry",
    "redis",
    "mcp",
    "dbos",
    "starlette",
    "trio",
    "agentloop.stores",
    "agentloop.ui",
    "agentloop.otel",
    "agentloop.mcp",
    "agentloop.dbos",
)

_SCRIPT = """
import json, sys
import agentloop
from agentloop import Agent, tool, tool_specification_from
from agentloop.models import OpenAIChatModel
print(json.dumps(sorted(sys.modules)))
"""


def _loaded(script: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_loads_no_heavy_dependency() -> None:
    floor = _loaded("import json, sys, httpx2, msgspec, anyio\nprint(json.dumps(sorted(sys.modules)))")
    loaded = _loaded(_SCRIPT) - floor  # what the floor loads (email, for httpx2) is not ours to defer
    assert "agentloop.models._openai._model" in loaded  # the names were really imported
    eager = sorted(name for name in loaded if any(name == h or name.startswith(h + ".") for h in _HEAVY))
    assert eager == [], f"`import agentloop` (Agent, tool, OpenAIChatModel) loaded {eager}: load them lazily"


def test_first_use_loads_what_it_needs() -> None:
    """Laziness does not lose anything: a tool's schema brings pydantic, and works."""
    script = _SCRIPT.replace(
        "print(",
        "def add(a: int, b: int) -> int:\n    return a + b\n"
        "assert tool_specification_from(tool(add)).parameters['required'] == ['a', 'b']\n"
        "print(",
    )
    loaded = _loaded(script)
    assert "pydantic" in loaded
    assert "tenacity" not in loaded
