"""agentloop tools served over MCP by the round-trip tests: `python -m agentloop.mcp serve
tests.mcp_served_tools:toolbox`."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel

from agentloop import Agent, P, ToolContext, ToolMemoryId, tool
from agentloop.testing import FunctionChatModel


class Forecast(BaseModel):
    city: str
    temperature: float


class Calculator:
    @tool("Adds two numbers", metadata={"readOnlyHint": True})
    def add(self, a: float, b: float) -> float:
        return a + b

    @tool
    def divide(self, a: float, b: float) -> float:
        """Divides a by b."""
        if b == 0:
            raise ValueError("cannot divide by zero")
        return a / b


@tool
async def forecast(
    city: Annotated[str, P("The city")],
    user: Annotated[str, ToolMemoryId] = "",
    ctx: ToolContext | None = None,
) -> Forecast:
    """The forecast for a city."""
    return Forecast(city=city, temperature=21.5)


def geography_model(messages: list[object], tools: list[object]) -> str:
    return "The capital of France is Paris."


assistant = Agent(
    FunctionChatModel(geography_model),
    name="geography",
    description="Answers geography questions",
)

toolbox = [Calculator(), forecast, assistant]
