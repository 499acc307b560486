"""Immediate return: a tool whose result goes straight to the caller, without another model call.

python examples/immediate_return.py
"""

from __future__ import annotations

import anyio

from agentloop import Agent, AiMessage, FinishReason, ReturnBehavior, ToolExecutionRequest, tool
from agentloop.testing import ScriptedChatModel

BOOKINGS = {"123-456": "confirmed"}


@tool("Cancels a booking", return_behavior=ReturnBehavior.IMMEDIATE)
def cancel_booking(number: str) -> str:
    if number not in BOOKINGS:
        raise ValueError(f"No booking {number}")
    BOOKINGS[number] = "cancelled"
    return f"Booking {number} cancelled"


async def main() -> None:
    model = ScriptedChatModel(
        [
            AiMessage(
                tool_execution_requests=[
                    ToolExecutionRequest("c1", "cancel_booking", '{"number": "123-456"}')
                ]
            )
        ]
    )
    agent = Agent(model, tools=[cancel_booking])
    result = await agent.chat("Cancel my booking 123-456")
    # No second model call: the tool's result is the outcome.
    print(
        f"content={result.content!r} "
        f"finish_reason={result.finish_reason.value if result.finish_reason else None}"
    )
    for execution in result.tool_executions:
        print(f"{execution.request.name} -> {execution.result}")
    assert result.content is None and result.finish_reason is FinishReason.TOOL_EXECUTION
    assert len(model.requests) == 1 and BOOKINGS["123-456"] == "cancelled"


if __name__ == "__main__":
    anyio.run(main)
