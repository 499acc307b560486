"""agentloop with middleware: an InputGuardrail and an OutputGuardrail that never trip;
otherwise as `contenders.agentloop`."""

from __future__ import annotations

from typing import Any

from agentloop import Agent
from agentloop.middleware import InputGuardrail, OutputGuardrail
from contenders import agentloop as base

LABEL = "agentloop + guardrails"
PACKAGES = base.PACKAGES


def _never(text: str) -> bool:
    return False


class Contender(base.Contender):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        agent = self._agent
        self._agent = Agent(
            agent.model,
            tools=agent.tools,
            middleware=[InputGuardrail(_never, name="in"), OutputGuardrail(_never, name="out")],
        )
