"""One conversation served by two web workers that share one Redis: whichever worker answers, it knows
what was said to the other, and concurrent requests on one conversation never interleave their rounds.

    python examples/multi_worker.py             # starts redis-server, two uvicorn workers, then a client
    REDIS_URL=redis://127.0.0.1:6379/0 python examples/multi_worker.py
    REDIS_URL=... uvicorn multi_worker:app --app-dir examples --workers 4   # how you would deploy it

Needs `pip install 'agentloop-runtime[redis]' fastapi uvicorn httpx` and, without REDIS_URL, `redis-server`
on PATH.
The model is an offline stand-in (no key needed) that adds numbers with a tool and remembers your name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from agentloop import (
    Agent,
    AiMessage,
    MessageWindowChatMemory,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
    tool,
)
from agentloop.testing import FunctionChatModel

HERE = Path(__file__).resolve().parent


@tool("Adds two numbers")
async def add(a: float, b: float) -> float:
    return a + b


def answer(messages: list[Any], tools: Any) -> AiMessage:
    """The stand-in model: adds two numbers with the tool, and recalls a name said earlier."""
    last = messages[-1]
    if isinstance(last, ToolExecutionResultMessage):
        return AiMessage(f"The answer is {last.text}.")
    said = [m.text for m in messages if isinstance(m, UserMessage)]
    if found := re.search(r"my name is (\w+)", last.text, re.IGNORECASE):
        return AiMessage(f"Nice to meet you, {found.group(1)}.")
    if "my name" in last.text.lower():
        names = [n for t in said for n in re.findall(r"my name is (\w+)", t, re.IGNORECASE)]
        return AiMessage(f"Your name is {names[-1]}." if names else "You have not told me your name.")
    numbers = re.findall(r"-?\d+(?:\.\d+)?", last.text)[:2]
    if len(numbers) == 2:
        arguments = json.dumps({"a": float(numbers[0]), "b": float(numbers[1])})
        return AiMessage(tool_execution_requests=[ToolExecutionRequest(None, "add", arguments)])
    return AiMessage(f"You said {len(said)} things so far.")


class Turn(BaseModel):
    user: str
    message: str


def create_app(redis_url: str) -> FastAPI:
    from agentloop.stores import RedisChatMemoryStore

    store = RedisChatMemoryStore(redis_url, ttl=24 * 3600)  # conversations expire a day after their last turn
    agent = Agent(
        FunctionChatModel(answer), tools=[add], memory=MessageWindowChatMemory.provider(50, store=store)
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await store.aclose()

    app = FastAPI(lifespan=lifespan)

    @app.post("/chat")
    async def chat(turn: Turn) -> dict[str, Any]:
        result = await agent.chat(turn.message, memory_id=turn.user)
        return {"answer": result.content, "worker": os.getpid()}

    @app.get("/history")
    async def history(user: str) -> list[dict[str, Any]]:
        messages = await MessageWindowChatMemory(10_000, id=user, store=store).messages()
        return [{"type": type(m).__name__, "text": getattr(m, "text", None)} for m in messages]

    @app.get("/health")
    async def health() -> dict[str, int]:
        return {"worker": os.getpid()}

    return app


if "REDIS_URL" in os.environ:  # `uvicorn multi_worker:app` imports this module in each worker
    app = create_app(os.environ["REDIS_URL"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.05)


@contextmanager
def running(command: list[str], port: int, what: str, **options: Any) -> Any:
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **options)
    try:
        wait_for(port, process, what)
        yield process
    finally:
        process.terminate()
        process.wait(10)


def start_redis(stack: ExitStack) -> str:
    """`REDIS_URL`, or a throwaway redis-server on 127.0.0.1 (stopped by `stack`); its URL."""
    url = os.environ.get("REDIS_URL")
    if url is None:
        binary = shutil.which("redis-server")
        if binary is None:
            sys.exit("redis-server is not installed (apt-get install redis-server) and REDIS_URL is not set")
        port = free_port()
        directory = stack.enter_context(tempfile.TemporaryDirectory())
        command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        stack.enter_context(running(command, port, "redis-server", cwd=directory))
        url = f"redis://127.0.0.1:{port}/0"
    return url


def redis_and_workers(stack: ExitStack, app: str, count: int = 2, url: str | None = None) -> list[str]:
    """`count` uvicorn workers serving `app` ("module:attribute" in this directory), sharing the Redis at
    `url` (default: `start_redis`); their base URLs. `stack` stops them all."""
    url = url or start_redis(stack)
    workers = []
    for _ in range(count):
        port = free_port()
        command = [sys.executable, "-m", "uvicorn", app, "--app-dir", str(HERE)]
        command += ["--port", str(port), "--log-level", "warning"]
        stack.enter_context(running(command, port, "uvicorn", env={**os.environ, "REDIS_URL": url}))
        workers.append(f"http://127.0.0.1:{port}")
    return workers


def main() -> None:
    import httpx

    with ExitStack() as stack:
        workers = redis_and_workers(stack, "multi_worker:app")
        client = stack.enter_context(httpx.Client(timeout=30))
        user = f"ada-{os.getpid()}"
        turns = ["My name is Ada", "What is 2 + 3?", "What is my name?", "How much have I said?"]
        pids = set()
        for i, message in enumerate(turns):
            worker = workers[i % 2]  # the conversation alternates between the two workers
            reply = client.post(f"{worker}/chat", json={"user": user, "message": message}).json()
            pids.add(reply["worker"])
            print(f"worker {reply['worker']} | you: {message!r:24} | agent: {reply['answer']}")
        assert len(pids) == 2, "both workers answered"
        assert reply["answer"] == "You said 4 things so far."

        # Six requests at once on one conversation, three per worker: they run one after another.
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            jobs = [
                pool.submit(
                    client.post, f"{workers[i % 2]}/chat", json={"user": user, "message": f"{i} + 10"}
                )
                for i in range(6)
            ]
            answers = sorted(job.result().json()["answer"] for job in jobs)
        print(f"6 concurrent requests over both workers: {answers}")
        history = client.get(f"{workers[1]}/history", params={"user": user}).json()
        kinds = [m["type"] for m in history]
        # Every exchange whole and contiguous: a user message, its tool round if it used one, the answer.
        talk = ["UserMessage", "AiMessage"]
        with_tool = ["UserMessage", "AiMessage", "ToolExecutionResultMessage", "AiMessage"]
        expected = talk + with_tool + talk + talk + with_tool * 6
        assert kinds == expected, kinds
        print(f"history: {len(history)} messages, every exchange whole and in order")


if __name__ == "__main__":
    main()
