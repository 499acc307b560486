"""An agent using the tools of an MCP server next to a local tool, offline.

The server (examples/mcp_server.py) runs as a subprocess over stdio; the model is scripted, so no API key
or network is needed. Swap in a real model (e.g. Agent("openai:gpt-4o-mini", ...)) and it works the same.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from agentloop import Agent, AiMessage, ToolExecutionRequest, tool
from agentloop.mcp import MCPToolset
from agentloop.testing import ScriptedChatModel

SERVER = [sys.executable, str(Path(__file__).resolve().parent / "mcp_server.py")]


@tool
def years_since(year: int) -> int:
    """Years between `year` and 2026."""
    return 2026 - year


async def main() -> None:
    async with MCPToolset(SERVER, prefix="library") as library:
        print("MCP tools:", ", ".join(library.tools.names))
        # What a model would do: look the book up, then compute its age, then answer.
        model = ScriptedChatModel(
            [
                AiMessage(
                    tool_execution_requests=[
                        ToolExecutionRequest("c1", "library_find_book", '{"title": "Dune"}'),
                        ToolExecutionRequest("c2", library.tools.names[1], "{}"),
                    ]
                ),
                AiMessage(
                    tool_execution_requests=[ToolExecutionRequest("c3", "years_since", '{"year": 1965}')]
                ),
                "Dune (Frank Herbert, 1965) is 61 years old; the library holds 3 books.",
            ]
        )
        agent = Agent(model, tools=[years_since, library])
        result = await agent.chat("How old is Dune, and how many books are there?")

    for execution in result.tool_executions:
        print(f"{execution.request.name}({execution.request.arguments}) -> {execution.result}")
    print("Answer:", result.content)
    book = result.tool_executions[0].result_object.structured
    assert book == {"title": "Dune", "author": "Frank Herbert", "year": 1965}, book
    assert result.tool_executions[1].result == "3"
    assert result.tool_executions[2].result == "61"


if __name__ == "__main__":
    anyio.run(main)
