"""agentloop with middleware: UsageLimits with every limit set (none reached);
otherwise as `contenders.agentloop`."""

from __future__ import annotations

from typing import Any

from agentloop import Agent
from agentloop.middleware import UsageLimits
from contenders import agentloop as base

LABEL = "agentloop + usage_limits"
PACKAGES = base.PACKAGES


class Contender(base.Contender):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        agent = self._agent
        self._agent = Agent(
            agent.model,
            tools=agent.tools,
            middleware=[
                UsageLimits(
                    max_requests=1000,
                    max_tool_calls=1000,
                    max_input_tokens=10**9,
                    max_output_tokens=10**9,
                    max_total_tokens=10**9,
                )
            ],
        )
