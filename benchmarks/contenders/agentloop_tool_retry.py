"""agentloop with middleware: ToolRetry() (no call fails: the cost of wrapping);
otherwise as `contenders.agentloop`."""

from __future__ import annotations

from typing import Any

from agentloop import Agent
from agentloop.middleware import ToolRetry
from contenders import agentloop as base

LABEL = "agentloop + tool_retry"
PACKAGES = base.PACKAGES


class Contender(base.Contender):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        agent = self._agent
        self._agent = Agent(agent.model, tools=agent.tools, middleware=[ToolRetry()])
