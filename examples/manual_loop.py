"""A loop you write yourself (Spring AI's user-controlled tool execution): call the model, run
its tool calls with `execute_tool_calls`, apply `should_return_immediately`, repeat.

    python examples/manual_loop.py
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import anyio

from agentloop import (
    AiMessage,
    ChatRequest,
    ToolContext,
    ToolExecutionRequest,
    UserMessage,
    execute_tool_calls,
    should_return_immediately,
    tool,
    tool_specifications_from,
)
from agentloop._values._messages import ChatMessage
from agentloop.models import ChatModel
from agentloop.testing import ScriptedChatModel


@dataclass(frozen=True)
class Customer:
    id: int
    name: str
    tier: str


class CustomerTools:
    def __init__(self) -> None:
        self.customers = {42: Customer(42, "Ada Lovelace", "gold")}

    @tool("Retrieve customer information")
    def get_customer_info(self, id: int, ctx: ToolContext) -> Customer:
        print(f"  (tenant {ctx['tenantId']}) looking up customer {id}")
        return self.customers[id]


def scripted_model() -> ChatModel:
    """An offline stand-in: asks for customer 42, then answers from the tool's result."""

    def answer(request: ChatRequest) -> AiMessage:
        customer = json.loads(request.messages[-1].text or "")  # the tool's result, as JSON
        return AiMessage(f"Customer 42 is {customer['name']}, a {customer['tier']} customer.")

    return ScriptedChatModel(
        [
            AiMessage(
                tool_execution_requests=[ToolExecutionRequest("call_1", "get_customer_info", '{"id": 42}')]
            ),
            answer,
        ]
    )


async def manual_loop(model: ChatModel, tools: object | None = None) -> str | None:
    tools = tools if tools is not None else CustomerTools()
    specifications = tool_specifications_from(tools)
    messages: list[ChatMessage] = [UserMessage("Tell me more about the customer with ID 42")]
    response = await model.chat(ChatRequest(messages, specifications))
    while response.ai_message.has_tool_execution_requests():
        executions = await execute_tool_calls(
            response.ai_message.tool_execution_requests, tools, context={"tenantId": "acme"}
        )
        messages += [response.ai_message, *(e.result_message() for e in executions)]
        behaviours = [e.return_behavior for e in executions]
        if should_return_immediately(behaviours, any(e.has_failed for e in executions)):
            return executions[-1].result
        response = await model.chat(ChatRequest(messages, specifications))
    return response.ai_message.text


async def main() -> None:
    answer = await manual_loop(scripted_model())
    print(answer)
    assert answer == "Customer 42 is Ada Lovelace, a gold customer."


if __name__ == "__main__":
    anyio.run(main)
