"""agentloop with middleware: a middleware that overrides all three hooks and only calls call_next;
otherwise as `contenders.agentloop`."""

from __future__ import annotations

from typing import Any

from agentloop import Agent, Middleware
from contenders import agentloop as base

LABEL = "agentloop + passthrough"
PACKAGES = base.PACKAGES


class Passthrough(Middleware):
    """A user middleware that does nothing but call the next step, at every hook."""

    async def wrap_model_call(self, call: Any, call_next: Any) -> Any:
        return await call_next(call)

    async def wrap_tool_call(self, call: Any, call_next: Any) -> Any:
        return await call_next(call)

    async def wrap_invocation(self, call: Any, call_next: Any) -> Any:
        return await call_next(call)


class Contender(base.Contender):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        agent = self._agent
        self._agent = Agent(agent.model, tools=agent.tools, middleware=[Passthrough()])
