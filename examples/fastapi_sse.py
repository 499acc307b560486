"""A web backend that streams an agent's tokens and tool events to the browser as Server-Sent Events, with
a small chat page to try it (no JavaScript libraries, no build step). Some tool calls wait for the person's
approval: the page shows them with Approve and Deny buttons, and the answer goes on streaming once decided.

    pip install "agentloop-runtime[web]"           # fastapi + uvicorn (the core install does not bring them)
    python examples/fastapi_sse.py                 # offline scripted model; open http://127.0.0.1:8000
    python examples/fastapi_sse.py --model local   # local model: pip install "agentloop-runtime[local,web]"
    python examples/fastapi_sse.py --cors-origin http://localhost:3000   # a page served from elsewhere
    curl -N 'http://127.0.0.1:8000/chat?q=What+is+2%2B3%3F&user=alice'
    curl -N 'http://127.0.0.1:8000/chat?q=Email+2+%2B+3+to+ada%40example.com&user=alice'   # asks approval

`GET /chat?q=...&user=...` answers with an event stream. Each SSE event is one of: `token` (a piece of
answer text), `tool_start` and `tool_result` (matched by `call`), `progress` (the model reading its prompt,
`{"read", "of", "cached"}` in tokens, then writing a tool-call decision, `{"written"}`: the local model
reports these, so the page shows more than "thinking..."), then exactly one of `done` (the summary),
`approval_required` (some calls wait for a decision) or `error` (a plain message for the user: the details,
such as the model server's address, go to the server log only), after which the server ends the stream.

`approval_required` carries `run` (an unguessable id of the paused run) and `calls`, each with `call_id`,
`call` (as in the tool events), `name` and `arguments`. The paused state stays on the server. `POST
/runs/{run}/decisions` with `{"decisions": {call_id: true | false | "reason"}}` (true runs the call; false
or a reason denies it, and the model reads the reason) answers with the continuation as an event stream of
the same events (it may end in another `approval_required`). A run is decided once: a second decision gets
409, an unknown run 404, a missing or unknown call id 422, each with a JSON body `{"type", "message"}`;
nothing runs then.

A browser `EventSource` reconnects whenever a stream ends, and every reconnect would run the agent again.
So the page (`chat.html`) closes its `EventSource` when the stream ends; and, in case a client does not,
the server answers a reconnect (it carries a `Last-Event-ID` header) with 204 No Content, which tells
`EventSource` to stop, without running the agent. A browser that disconnects mid-answer cancels the model
request and the running tools.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import re
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, Protocol, Union, runtime_checkable

from fastapi import FastAPI, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse
from pydantic import BaseModel, StrictBool, StringConstraints

from agentloop import (
    Agent,
    AgentLoopError,
    AiMessage,
    ApprovalError,
    ApprovalRequired,
    BeforeToolExecution,
    CompleteResponse,
    Denied,
    FinishReason,
    InvocationTimeoutError,
    MessageWindowChatMemory,
    ModelError,
    ModelProgress,
    PartialResponse,
    PendingApproval,
    RateLimitError,
    TokenStream,
    ToolExecuted,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
    tool,
)
from agentloop.models import ChatModel
from agentloop.testing import FunctionChatModel

PAGE = Path(__file__).with_name("chat.html")


@runtime_checkable
class Loadable(Protocol):
    """A model that can load ahead of its first request (`LocalChatModel.load()`)."""

    async def load(self) -> None: ...


logger = logging.getLogger("fastapi_sse")


@tool("Adds two numbers")
def add(a: float, b: float) -> float:
    return a + b


@tool("Multiplies two numbers")
def multiply(a: float, b: float) -> float:
    return a * b


@tool("Sends an email", requires_approval=True)  # every call waits for the person's yes
def send_email(to: str, text: str) -> str:
    logger.warning("(example) an email to %s: %s", to, text)  # a real app calls its mail service here
    return f"Email sent to {to}"


ADDRESS = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def offline_model() -> ChatModel:
    """A stand-in model for running the example without a key: adds the two numbers it finds, and emails
    the sum when the question names an address ('Email 2 + 3 to ada@example.com'): that call waits for a
    person's approval."""
    ids = itertools.count(1)

    def call(name: str, **arguments: Any) -> AiMessage:
        request = ToolExecutionRequest(f"call_{next(ids)}", name, json.dumps(arguments))
        return AiMessage(tool_execution_requests=[request])

    def answer(messages: list[Any], tools: list[Any]) -> AiMessage:
        question = next(m.text for m in reversed(messages) if isinstance(m, UserMessage))
        address = ADDRESS.search(question)
        numbers = NUMBER.findall(ADDRESS.sub("", question))[:2]
        last = messages[-1]
        if isinstance(last, ToolExecutionResultMessage):
            if last.tool_name == "send_email":
                return AiMessage(f"I did not send it: {last.text}" if last.is_error else f"{last.text}.")
            if address:
                return call(
                    "send_email", to=address.group(), text=f"{numbers[0]} + {numbers[1]} = {last.text}"
                )
            return AiMessage(f"The answer is {last.text}.")
        if len(numbers) < 2:
            return AiMessage(
                "Ask me to add two numbers ('What is 2 + 3?') "
                "or to email a sum ('Email 2 + 3 to ada@example.com')."
            )
        return call("add", a=float(numbers[0]), b=float(numbers[1]))

    return FunctionChatModel(answer)


class PausedRuns:
    """Runs paused for a person's decision, kept on the server as `PendingApproval.to_json()` by run id.

    The browser only ever holds the run id (unguessable) and sends back decisions, never the paused state.
    A run is taken once: the first request with valid decisions takes it, any later one is told it was
    decided. A dict is enough for one process (the oldest `limit` waiting runs are kept). With several
    workers keep the rows in a shared database instead (insert on pause; take with `DELETE ... RETURNING`,
    whoever deletes the row resumes) and give the agent a SQLite or Redis memory store: it records paused
    rounds, so the agent itself also refuses a second resume from any worker.
    """

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self._waiting: OrderedDict[str, bytes] = OrderedDict()
        self._decided: OrderedDict[str, None] = OrderedDict()

    def park(self, pending: PendingApproval) -> str:
        """Keeps a paused run; returns its new id."""
        run_id = secrets.token_urlsafe(24)
        self._waiting[run_id] = pending.to_json()
        _trim(self._waiting, self.limit)
        return run_id

    def get(self, run_id: str) -> bytes | None:
        """The paused state of a run that waits (None: unknown, forgotten or decided)."""
        return self._waiting.get(run_id)

    def take(self, run_id: str) -> bytes | None:
        """Removes a waiting run and remembers it was decided; None if another request took it first."""
        row = self._waiting.pop(run_id, None)
        if row is not None:
            self._decided[run_id] = None
            _trim(self._decided, self.limit)
        return row

    def was_decided(self, run_id: str) -> bool:
        return run_id in self._decided


def _trim(entries: OrderedDict[str, Any], limit: int) -> None:
    while len(entries) > limit:
        entries.popitem(last=False)


Reason = Annotated[str, StringConstraints(strict=True, strip_whitespace=True, min_length=1, max_length=2000)]


class Decisions(BaseModel):
    """The body of `POST /runs/{run}/decisions`: per waiting call id, true (run it), false (deny it), or a
    reason (deny it; the model reads the reason as the call's error result)."""

    decisions: dict[str, Union[StrictBool, Reason]]

    def for_agent(self) -> dict[str, bool | Denied]:
        return {
            call_id: value if isinstance(value, bool) else Denied(value)
            for call_id, value in self.decisions.items()
        }


def sse(event: str, data: dict[str, Any], event_id: int) -> str:
    return f"event: {event}\nid: {event_id}\ndata: {json.dumps(data)}\n\n"


async def agent_events(
    stream: TokenStream[Any], runs: PausedRuns
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """One invocation (or the continuation of a paused one) as (event name, data) pairs, ending with `done`,
    `approval_required` or `error`."""
    # `async with` closes the invocation even if the client goes away mid-stream.
    async with stream:
        try:
            async for event in stream.events():
                if isinstance(event, PartialResponse):
                    yield "token", {"text": event.text}
                elif isinstance(event, ModelProgress):
                    if event.reading_prompt or not event.generated_tokens:
                        read = {"read": event.prompt_processed, "of": event.prompt_tokens}
                        yield "progress", {**read, "cached": event.cached_tokens}
                    else:
                        yield "progress", {"written": event.generated_tokens}
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
                elif isinstance(event, ApprovalRequired):
                    calls = [
                        {
                            "call_id": request.call_id,
                            "call": f"{request.round}.{request.index}",
                            "name": request.tool_name,
                            "arguments": request.arguments,
                        }
                        for request in event.requests
                    ]
                    yield "approval_required", {"run": runs.park(event.pending), "calls": calls}
                elif isinstance(event, CompleteResponse):
                    if event.result.finish_reason is FinishReason.APPROVAL_REQUIRED:
                        continue  # `approval_required` ended this part of the run
                    usage = event.token_usage
                    yield (
                        "done",
                        {
                            "content": event.result.content,
                            "tools": len(event.result.tool_executions),
                            "tokens": usage.total_tokens if usage else None,
                        },
                    )
        except (
            AgentLoopError
        ) as error:  # the details (URLs, status bodies) are for the operator, not the user
            logger.warning("the agent failed: %s: %s", type(error).__name__, error)
            yield "error", {"type": type(error).__name__, "message": plain_message(error)}
        except Exception:  # a bug: details stay in the server log
            logger.exception("the agent failed")
            yield "error", {"type": "InternalError", "message": "internal error (see the server log)"}


def plain_message(error: AgentLoopError) -> str:
    """What the page tells the user about a failed run: what happened and what to do, never the model
    server's address or its answer (those are logged on the server)."""
    if isinstance(error, RateLimitError):
        return "The model is busy right now; try again in a moment."
    if isinstance(error, ModelError):
        return "The model is not available right now; try again later."
    if isinstance(error, InvocationTimeoutError):
        return "The answer took too long; try again."
    return "The agent could not answer this request; try again or ask differently."


def event_stream(events: AsyncIterator[tuple[str, dict[str, Any]]]) -> StreamingResponse:
    async def lines() -> AsyncIterator[str]:
        event_id = 0
        async for name, data in events:
            event_id += 1
            yield sse(name, data, event_id)

    return StreamingResponse(
        lines(),
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no"},  # no proxy buffering
    )


def refusal(status: int, kind: str, message: str, **details: Any) -> JSONResponse:
    """A 4xx answer: nothing ran. `type` and `message` as in the `error` event."""
    return JSONResponse({"type": kind, "message": message, **details}, status_code=status)


def create_app(agent: Agent, *, cors_origins: Sequence[str] = (), runs: PausedRuns | None = None) -> FastAPI:
    """The app: `GET /` (the chat page), `GET /chat` (the event stream) and `POST /runs/{run}/decisions`
    (the approval of a paused run, answered by the continuation's event stream). `cors_origins`: origins
    allowed to call them from a page served elsewhere (e.g. a dev server); `["*"]` allows any. `runs`: where
    paused runs wait (`app.state.runs`; a new in-process `PausedRuns` by default)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # A model that loads (the local one: seconds, a first install assembles its weights) does it now,
        # before the first request, not while someone waits for an answer.
        if isinstance(agent.model, Loadable):
            await agent.model.load()
        yield

    app = FastAPI(title="agentloop SSE example", lifespan=lifespan)
    app.state.runs = paused = runs if runs is not None else PausedRuns()
    if cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Last-Event-ID", "Content-Type"],
        )

    @app.get("/", response_class=HTMLResponse)
    async def page() -> str:
        return PAGE.read_text(encoding="utf-8")

    @app.get("/chat", response_model=None)
    async def chat(q: str, request: Request, user: str = "anonymous") -> Response:
        if request.headers.get("last-event-id") is not None:
            # An EventSource reconnecting after the stream ended: the answer was given; 204 stops it.
            return Response(status_code=204)
        return event_stream(agent_events(agent.stream(q, memory_id=user), paused))

    @app.post("/runs/{run_id}/decisions", response_model=None)
    async def decide(run_id: str, body: Decisions) -> Response:
        row = paused.get(run_id)
        if row is None:
            if paused.was_decided(run_id):
                return refusal(409, "AlreadyDecided", "This run was already decided; nothing ran again.")
            return refusal(
                404,
                "UnknownRun",
                "No run waits for a decision under this id (unknown or forgotten); ask again.",
            )
        try:
            # Checks the state and that every waiting call, and only those, has a decision; runs nothing.
            stream = agent.resume_stream(row, body.for_agent())
        except ApprovalError as error:
            return refusal(422, "ApprovalError", str(error), call_id=error.call_id)
        # No `await` since `get()`: the first request with valid decisions takes the run, no other can.
        paused.take(run_id)
        return event_stream(agent_events(stream, paused))

    return app


def build_agent(model: ChatModel | str | None = None) -> Agent:
    return Agent(
        model if model is not None else offline_model(),
        tools=[add, multiply, send_email],
        system_message="You are a calculator. Use the tools for arithmetic. Send emails only when asked.",
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
        help="allow pages from ORIGIN (e.g. http://localhost:3000) to call the API; repeatable; '*' for any",
    )
    args = parser.parse_args()
    app = create_app(build_agent(args.model), cors_origins=args.cors_origin)
    print(f"chat page: http://{args.host}:{args.port}/")
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
