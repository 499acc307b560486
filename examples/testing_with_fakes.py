"""Testing an agent without a network: the offline models, and the fake provider servers on 127.0.0.1.

python examples/testing_with_fakes.py
"""

from __future__ import annotations

import anyio

from agentloop import Agent, AiMessage, ToolExecutionRequest, tool
from agentloop.models import OpenAIChatModel
from agentloop.testing import FakeOpenAIServer, ScriptedChatModel, TestModel


@tool("Returns the weather for a city")
def weather(city: str) -> str:
    return f"Sunny in {city}"


async def with_scripted_model() -> None:
    # Script exactly what the model answers; check what the agent sent it.
    model = ScriptedChatModel(
        [
            AiMessage(tool_execution_requests=[ToolExecutionRequest(None, "weather", '{"city": "Paris"}')]),
            "Sunny!",
        ]
    )
    result = await Agent(model, tools=[weather]).chat("Weather in Paris?")
    assert result.content == "Sunny!"
    assert model.requests[1].messages[-1].text == "Sunny in Paris"
    print("ScriptedChatModel:", result)


async def with_test_model() -> None:
    # TestModel calls every tool once with arguments generated from its schema: a smoke test of the wiring.
    result = await Agent(TestModel(), tools=[weather]).chat("anything")
    assert [e.request.name for e in result.tool_executions] == ["weather"]
    print("TestModel:", result.content)


async def with_fake_openai_server() -> None:
    # The real OpenAI client code, over a real socket, against a server that speaks the wire protocol.
    with FakeOpenAIServer() as server:
        server.add(
            AiMessage(tool_execution_requests=[ToolExecutionRequest("c1", "weather", '{"city": "Rome"}')])
        )
        server.add("It is sunny in Rome.")
        async with OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key="test-key") as model:
            tokens = [t async for t in Agent(model, tools=[weather]).stream("Weather in Rome?")]
        assert "".join(tokens) == "It is sunny in Rome."
        print("FakeOpenAIServer:", "".join(tokens), f"({len(server.requests)} HTTP requests)")


async def main() -> None:
    await with_scripted_model()
    await with_test_model()
    await with_fake_openai_server()


if __name__ == "__main__":
    anyio.run(main)
