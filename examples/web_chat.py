"""An agent behind the two protocols browser chat UIs speak, in one FastAPI app, with a chat page built on
the Vercel AI SDK's own client:

- `POST /api/chat`: `agentloop.ui.vercel_ai_app` (the AI SDK's UI message stream, for `useChat`);
- `POST /api/ag-ui`: `agentloop.ui.ag_ui_app` (AG-UI events, for CopilotKit and `@ag-ui/client`);
- `GET /`: the page (examples/web/chat.html + chat.js, bundled offline into chat.bundle.js).

Some tool calls wait for the person's approval: the page shows Approve and Deny, and the answer resumes the
paused run on the server (the browser holds only an unguessable approval id, never the run's state). A slow
tool (`count_primes`) reports its progress while it runs (`ctx.report_progress`): the page shows a progress
bar for it. While an answer runs, Stop cancels it on the server (`POST /api/stop` -> `agent.cancel`), and a
message sent meanwhile is steered into it (`POST /api/steer` -> `agent.steer`): the same run answers it, in
the chat's server-side memory.

    # needs the `web` extra (FastAPI, uvicorn)
    python examples/web_chat.py            # offline: both protocols, the approval flow, over HTTP; exits
    python examples/web_chat.py --serve    # the page on http://127.0.0.1:8000 (build the bundle first:
                                           #   cd tests/node && npm ci && node build_example.mjs)
    python examples/web_chat.py --serve --model openai:gpt-4o-mini
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any

import anyio
from fastapi import FastAPI
from fastapi.responses import FileResponse, HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from agentloop import (
    Agent,
    AiMessage,
    MessageWindowChatMemory,
    ToolContext,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
    tool,
)
from agentloop.models import ChatModel
from agentloop.testing import FunctionChatModel
from agentloop.ui import InMemoryPausedRuns, PausedRuns, UIRequest, ag_ui_app, vercel_ai_app

WEB = Path(__file__).resolve().parent / "web"
outbox: list[str] = []


@tool("Adds two numbers")
def add(a: float, b: float) -> float:
    return a + b


@tool("Sends an email", requires_approval=True)  # every call waits for the person's yes
def send_email(to: str, text: str) -> str:
    outbox.append(f"{to}: {text}")  # a real app calls its mail service here
    return f"Email sent to {to}"


@tool("Counts the prime numbers up to a limit (slowly: it reports its progress)")
async def count_primes(limit: int, ctx: ToolContext) -> int:
    found, steps = 0, 10
    for step in range(steps):
        low, high = max(2, limit * step // steps), limit * (step + 1) // steps
        found += sum(1 for n in range(low, high) if all(n % d for d in range(2, int(n**0.5) + 1)))
        await ctx.report_progress(step + 1, steps, f"checked up to {high}")  # the page's progress bar
        await anyio.sleep(0.2)  # a slow tool: a real one waits on I/O here
    return found


ADDRESS = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def offline_model() -> ChatModel:
    """A stand-in model (no key needed): adds the two numbers it finds, and emails the sum when the question
    names an address, which waits for approval."""
    ids = itertools.count(1)

    def call(name: str, **arguments: Any) -> AiMessage:
        return AiMessage(
            tool_execution_requests=[ToolExecutionRequest(f"call_{next(ids)}", name, json.dumps(arguments))]
        )

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
        if "prime" in question.lower() and numbers:
            return call("count_primes", limit=int(float(numbers[0])))
        if len(numbers) < 2:
            return AiMessage("Ask me to add two numbers, to email a sum, or to count primes up to a number.")
        return call("add", a=float(numbers[0]), b=float(numbers[1]))

    return FunctionChatModel(answer)


def build_agent(model: ChatModel | str | None = None) -> Agent:
    return Agent(
        model if model is not None else offline_model(),
        tools=[add, send_email, count_primes],
        system_message="You are a calculator. Use the tools for arithmetic. Send emails only when asked.",
        memory=MessageWindowChatMemory.provider(100),  # one conversation per chat, kept on the server
    )


def chat_of(request: UIRequest) -> str | None:
    """Whose conversation a request continues: the chat id the page sends (an unguessable random id the AI
    SDK makes per chat). A real app takes it from the signed-in user's session instead."""
    return request.thread_id


def create_app(agent: Agent, *, runs: PausedRuns | None = None) -> FastAPI:
    """The page and both protocols. `runs`: where paused runs wait (shared by both endpoints here)."""
    runs = runs if runs is not None else InMemoryPausedRuns()
    app = FastAPI(title="agentloop web chat")
    memory_id = chat_of if agent.memory is not None else None  # without a memory the page sends the history
    # The UI apps are plain ASGI apps: a route hands them the request as it is.
    app.routes.append(
        Route("/api/chat", vercel_ai_app(agent, runs=runs, memory_id=memory_id), methods=["POST"])
    )
    app.routes.append(Route("/api/ag-ui", ag_ui_app(agent, runs=runs, memory_id=memory_id), methods=["POST"]))

    @app.post("/api/steer", response_model=None)
    async def steer(body: dict[str, Any]) -> Response:
        """A message typed while the chat's answer is still running: handed to that run, which answers it
        before it finishes (409 when nothing runs any more: the page then sends it as a new message)."""
        chat, text = body.get("id"), body.get("text")
        if not isinstance(chat, str) or not isinstance(text, str) or not text.strip():
            return PlainTextResponse("send {'id': <chat id>, 'text': <message>}", status_code=400)
        if agent.memory is None or not await agent.steer(text, memory_id=chat):
            return PlainTextResponse("no answer is running in this chat", status_code=409)
        return PlainTextResponse("steered")

    @app.post("/api/stop", response_model=None)
    async def stop(body: dict[str, Any]) -> Response:
        """The page's Stop: cancels the chat's running answer through run control (its tools' cleanup runs,
        nothing of the round in flight is kept). 409 when none runs (or the agent has no memory to find it
        by): the page then drops its request, which stops the answer too."""
        chat = body.get("id")
        if not isinstance(chat, str):
            return PlainTextResponse("send {'id': <chat id>}", status_code=400)
        if agent.memory is None or not await agent.cancel(memory_id=chat, reason="stopped in the browser"):
            return PlainTextResponse("no answer is running in this chat", status_code=409)
        return PlainTextResponse("stopped")

    @app.get("/", response_class=HTMLResponse)
    async def page() -> str:
        return (WEB / "chat.html").read_text(encoding="utf-8")

    @app.get("/chat.js", response_model=None)
    async def script() -> Response:
        bundle = WEB / "chat.bundle.js"
        if not bundle.exists():
            hint = "// Build the page first: cd tests/node && npm ci && node build_example.mjs\n"
            return PlainTextResponse(hint, status_code=404, media_type="text/javascript")
        return FileResponse(bundle, media_type="text/javascript")

    return app


# -- the offline run: what a page does, over HTTP --------------------------------------------------------


def serve_in_thread(app: FastAPI) -> tuple[str, Any]:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server


def kinds(events: list[dict[str, Any]]) -> str:
    """The event types in order, a run of the same type shown once with its count."""
    runs = [(kind, len(list(group))) for kind, group in itertools.groupby(e["type"] for e in events)]
    return " ".join(kind if n == 1 else f"{kind}x{n}" for kind, n in runs)


def chunks(response: Any) -> list[dict[str, Any]]:
    data = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    return [json.loads(d) for d in data if d != "[DONE]"]


def demo() -> None:
    import httpx2

    url, server = serve_in_thread(create_app(build_agent()))
    try:
        with httpx2.Client(base_url=url, timeout=30) as http:
            # Vercel AI SDK: a useChat request body, then the answer to the call that waits.
            question = {
                "id": "u1",
                "role": "user",
                "parts": [{"type": "text", "text": "Email 2 + 3 to ada@example.com"}],
            }
            first = http.post(
                "/api/chat", json={"id": "chat-1", "messages": [question], "trigger": "submit-message"}
            )
            print("x-vercel-ai-ui-message-stream:", first.headers["x-vercel-ai-ui-message-stream"])
            sent = chunks(first)
            print("ai sdk:", kinds(sent))
            asked = next(c for c in sent if c["type"] == "tool-approval-request")
            tool_part = {
                "type": "dynamic-tool",
                "toolName": "send_email",
                "toolCallId": asked["toolCallId"],
                "state": "approval-responded",
                "input": next(
                    c["input"] for c in sent if c.get("toolCallId") == asked["toolCallId"] and "input" in c
                ),
                "approval": {"id": asked["approvalId"], "approved": True},
            }
            answer = {"id": "a1", "role": "assistant", "parts": [tool_part]}
            body = {"id": "chat-1", "messages": [question, answer], "trigger": "submit-message"}
            second = chunks(http.post("/api/chat", json=body))
            text = "".join(c["delta"] for c in second if c["type"] == "text-delta")
            print("ai sdk, approved:", text)
            again = http.post("/api/chat", json=body)
            print("the same answer again:", again.status_code, again.json()["type"])
            assert outbox == ["ada@example.com: 2 + 3 = 5.0"] and again.status_code == 409

            # AG-UI: a RunAgentInput; the interrupt is answered in the next run's `resume`.
            run = {
                "threadId": "t1",
                "runId": "r1",
                "messages": [{"id": "m1", "role": "user", "content": "What is 4 + 5?"}],
            }
            events = chunks(http.post("/api/ag-ui", json=run))
            print("ag-ui:", kinds(events))
            finished = events[-1]
            print("ag-ui result:", finished["result"], "| tokens:", finished["usage"][0]["totalTokens"])
            assert finished["type"] == "RUN_FINISHED" and finished["result"] == "The answer is 9.0."
    finally:
        server.should_exit = True


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--serve", action="store_true", help="serve the page instead of the offline run")
    parser.add_argument("--model", help="a model string such as 'openai:gpt-4o-mini' (default: offline)")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    if not args.serve:
        demo()
        return
    import uvicorn

    if not (WEB / "chat.bundle.js").exists():
        print("note: build the page first: cd tests/node && npm ci && node build_example.mjs")
    print(f"chat page: http://127.0.0.1:{args.port}/")
    uvicorn.run(create_app(build_agent(args.model)), host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
