"""Agents as tools: a router agent forwards each request to the right expert agent.

python examples/agents_as_tools.py
"""

from __future__ import annotations

import anyio

from agentloop import Agent, AiMessage, ToolExecutionRequest, tool
from agentloop.testing import FunctionChatModel, ScriptedChatModel


@tool("Looks up first-aid guidance")
def first_aid(topic: str) -> str:
    return "Immobilise the limb and get an X-ray." if "leg" in topic else "See a doctor."


def router_model() -> ScriptedChatModel:
    forward = ToolExecutionRequest("r1", "medical_expert", '{"request": "I broke my leg, what should I do?"}')
    return ScriptedChatModel(
        [AiMessage(tool_execution_requests=[forward]), lambda request: AiMessage(request.messages[-1].text)]
    )


def expert_model() -> FunctionChatModel:
    def answer(messages: list, tools: list) -> AiMessage:  # type: ignore[type-arg]
        last = messages[-1]
        if type(last).__name__ == "ToolExecutionResultMessage":
            return AiMessage(f"Medical advice: {last.text}")
        return AiMessage(
            tool_execution_requests=[ToolExecutionRequest("m1", "first_aid", '{"topic": "leg"}')]
        )

    return FunctionChatModel(answer)


async def main() -> None:
    medical = Agent(expert_model(), tools=[first_aid], name="medical_expert", description="A medical expert")
    legal = Agent(ScriptedChatModel([]), name="legal_expert", description="A legal expert")
    router = Agent(router_model(), tools=[medical, legal], system_message="Forward the request to an expert.")

    result = await router.chat("I broke my leg, what should I do?")
    print(result.content)
    [forwarded] = result.tool_executions
    inner = forwarded.result_object
    print(
        f"router called {forwarded.request.name}; "
        f"the expert called {[e.request.name for e in inner.tool_executions]}"
    )
    assert result.content == "Medical advice: Immobilise the limb and get an X-ray."


if __name__ == "__main__":
    anyio.run(main)
