"""Agents as tools: an `Agent` given to another agent answers its calls (`Agent.as_tool()`).

The tool takes one string argument, `request`, and answers it with a whole invocation of the inner agent;
the calling model sees the inner answer (a structured output as JSON), and the `ToolExecution`'s
`result_object` is the inner `Result`, so its own tool calls stay visible to the caller.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from .._tools._tool import Tool
from .._values._context import ToolContext
from .._values._errors import ToolArgumentsError, ToolExecutionError
from .._values._messages import ToolExecutionRequest
from .._values._records import ReturnBehavior
from .._values._result import Result
from .._values._spec import ToolSpecification

__all__ = ["agent_tool"]

_PARAMETERS = {
    "type": "object",
    "properties": {"request": {"type": "string", "description": "The request, passed on as is"}},
    "required": ["request"],
}


def agent_tool(
    name: str,
    description: str | None,
    invoke: Callable[[str, ToolContext], Awaitable[Result[Any]]],
    return_behavior: ReturnBehavior,
    timeout: float | None,
) -> Tool:
    """A tool named `name` whose calls `invoke(request, ctx)` an agent; an inner invocation that pauses for
    approval is an error (nobody could resume it from inside another agent's round)."""

    async def run(request: ToolExecutionRequest, ctx: ToolContext) -> Result[Any]:
        try:
            arguments = msgspec.json.decode(request.arguments or "{}")
        except (msgspec.DecodeError, RecursionError) as error:  # RecursionError: nesting too deep
            raise ToolArgumentsError(f"Invalid JSON arguments for tool '{name}': {error}") from None
        text = arguments.get("request") if isinstance(arguments, dict) else None
        if not isinstance(text, str):
            raise ToolArgumentsError(f"Tool '{name}' needs a string argument 'request'")
        result = await invoke(text, ctx)
        if result.pending is not None:
            waiting = ", ".join(r.tool_name for r in result.pending.requests)
            raise ToolExecutionError(
                f"Agent {name!r} stopped: its calls of {waiting} wait for approval, and an agent used as a "
                "tool cannot pause; give it an approval_handler"
            )
        return result

    specification = ToolSpecification(name=name, description=description, parameters=_PARAMETERS)
    return Tool(
        specification, run, return_behavior=return_behavior, timeout=timeout, result_converter=_answer
    )


def _answer(result: Any) -> str:
    """What the calling model sees of an agent-tool's Result: its answer (a structured output as JSON), or
    its tools' results."""
    if isinstance(result, Result):
        if result.output is not result.content and result.output is not None:
            import pydantic_core  # a structured output means pydantic is loaded already

            return pydantic_core.to_json(result.output).decode()
        if result.content is not None:
            return str(result.content)
        return msgspec.json.encode([e.result for e in result.tool_executions]).decode()
    return str(result)
