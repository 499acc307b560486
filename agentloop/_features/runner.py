"""`Agent(tool_runner=fn)` on the seam: the innermost `wrap_tool_call`, so every call the loop runs goes
through `fn(request, run)` (a durable engine's step) after every middleware of the agent and of the call."""

from __future__ import annotations

from .._runtime._seam import Middleware, NextToolCall, ToolCall
from .._tools._execution import ToolRunner
from .._values._records import ToolExecution

__all__ = ["RunnerHook"]


class RunnerHook(Middleware):
    """Hands each tool call to the agent's `tool_runner` with `run()`, which runs the call in this process."""

    def __init__(self, runner: ToolRunner) -> None:
        self.runner = runner

    async def wrap_tool_call(self, call: ToolCall, call_next: NextToolCall) -> ToolExecution:
        return await self.runner(call.request, lambda: call_next(call))

    def __repr__(self) -> str:
        return f"RunnerHook({self.runner!r})"
