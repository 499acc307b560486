"""A web backend that streams an agent's tokens and tool events to the browser as Server-Sent Events, with
a small chat page to try it (no JavaScript libraries, no build step).

    pip install "agentloop[web]"                   # fastapi + uvicorn (the core install does not bring them)
    python examples/fastapi_sse.py                 # offline scripted model; open http://127.0.0.1:8000
    python examples/fastapi_sse.py --model local   # the embedded model (pip install "agentloop[local,web]")
    python examples/fastapi_sse.py --cors-origin http://localhost:3000   # a page served from elsewhere
    curl -N 'http://127.0.0.1:8000/chat?q=What+is+2%2B3%3F&user=alice'

`GET /chat?q=...&user=...` answers with an event stream. Each SSE event is one of: `token` (a piece of
answer text), `tool_start` and `tool_result` (matched by `call`), then exactly one of `done` (the summary) or
`error` (what failed), after which the server ends the stream.

A browser `EventSource` reconnects whenever a stream ends, and every reconnect would run the agent again.
So the page (`chat.html`) closes its `EventSource` on `done` and on `error`; and, in case a client does not,
the server answers a reconnect (it carries a `Last-Event-ID` header) with 204 No Content, which tells
`EventSource` to stop, without running the agent. A browser that disconnects mid-answer cancels the model
request and the running tools.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import HTMLResponse, StreamingResponse

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

PAGE = Path(__file__).with_name("chat.html")
logger = logging.getLogger("fastapi_sse")


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


def sse(event: str, data: dict[str, Any], event_id: int) -> str:
    return f"event: {event}\nid: {event_id}\ndata: {json.dumps(data)}\n\n"


async def agent_events(agent: Agent, question: str, user: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """One invocation as (event name, data) pairs, ending with `done` or `error`."""
    # `async with` closes the invocation even if the client goes away mid-stream.
    async with agent.stream(question, memory_id=user) as stream:
        try:
            async for event in stream.events():
                if isinstance(event, PartialResponse):
                    yield "token", {"text": event.text}
                elif isinstance(event, BeforeToolExecution):
                    request = event.request
                    call = f"{event.round}.{event.index}"  # round.index: unique in the invocation
                    yield "tool_start", {"call": call, "name": request.name, "arguments": request.arguments}
                elif isinstance(event, ToolExecuted):
                    execution = event.execution
                    yield (
                        "tool_result",
                        {
                            "call": f"{event.round}.{event.index}",
                            "name": execution.request.name,
                            "result": execution.result,
                            "error": execution.has_failed,
                            "ms": round(execution.duration * 1000, 1),
                        },
                    )
                elif isinstance(event, CompleteResponse):
                    usage = event.token_usage
                    yield (
                        "done",
                        {
                            "content": event.result.content,
                            "tools": len(event.result.tool_executions),
                            "tokens": usage.total_tokens if usage else None,
                        },
                    )
        except AgentLoopError as error:  # says what failed and what to check: fine to show
            yield "error", {"type": type(error).__name__, "message": str(error)}
        except Exception:  # a bug: details stay in the server log
            logger.exception("the agent failed")
            yield "error", {"type": "InternalError", "message": "internal error (see the server log)"}


def create_app(agent: Agent, *, cors_origins: Sequence[str] = ()) -> FastAPI:
    """The app: `GET /` (the chat page) and `GET /chat` (the event stream). `cors_origins`: origins allowed
    to call `/chat` from a page served elsewhere (e.g. a dev server); `["*"]` allows any."""
    app = FastAPI(title="agentloop SSE example")
    if cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["GET"],
            allow_headers=["Last-Event-ID"],
        )

    @app.get("/", response_class=HTMLResponse)
    async def page() -> str:
        return PAGE.read_text(encoding="utf-8")

    @app.get("/chat", response_model=None)
    async def chat(q: str, request: Request, user: str = "anonymous") -> Response:
        if request.headers.get("last-event-id") is not None:
            # An EventSource reconnecting after the stream ended: the answer was given; 204 stops it.
            return Response(status_code=204)

        async def stream() -> AsyncIterator[str]:
            event_id = 0
            async for name, data in agent_events(agent, q, user):
                event_id += 1
                yield sse(name, data, event_id)

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},  # no proxy buffering
        )

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
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="allow pages from ORIGIN (e.g. http://localhost:3000) to call /chat; repeatable; '*' for any",
    )
    args = parser.parse_args()
    app = create_app(build_agent(args.model), cors_origins=args.cors_origin)
    print(f"chat page: http://{args.host}:{args.port}/")
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
