"""agentloop with `instrument=True` but no OpenTelemetry SDK installed in the process: the API's no-op tracer
and meter. What instrumentation costs a library user whose application does not trace. For
`benchmarks/cpu_ab.py` only."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from agentloop import Agent
from agentloop.models import OpenAIChatModel
from contenders.agentloop import PACKAGES, _tools, tool
from contenders.agentloop import Contender as _Plain

LABEL = "agentloop (instrument=True, no SDK)"
__all__ = ["LABEL", "PACKAGES", "Contender"]


class Contender(_Plain):
    def __init__(self, base_url: str, get_value: Callable[[str], Awaitable[str]]) -> None:
        if get_value not in _tools:
            _tools[get_value] = tool(get_value)
        self._model = OpenAIChatModel(model="gpt-4o-mini", base_url=base_url, api_key="bench")
        self._agent = Agent(self._model, tools=[_tools[get_value]], instrument=True)
