"""A chat UI backend on several workers: a tool call paused for approval on one worker is resumed by the
page's answer on another, exactly once, because the paused runs and the conversations live in Redis.

    python examples/web_workers.py          # starts redis-server, two uvicorn workers, then plays the page
    REDIS_URL=redis://127.0.0.1:6379/0 uvicorn web_workers:app --app-dir examples --workers 4   # deployed

Needs the `web` and `redis` extras and, without REDIS_URL, `redis-server` on PATH. The model
is an offline stand-in (no key needed) that deletes the file a request names, after a person's yes.

Two things are shared between the workers:
- `RedisPausedRuns`: the `agentloop.ui.PausedRuns` of the app, in Redis: `SET` on pause (with a TTL),
  `GETDEL` on resume, so whichever worker gets the answer takes the run, and only one ever does;
- the agent's memory (`RedisChatMemoryStore`), keyed by the signed-in user (here a header a real app's auth
  would set): it also records paused rounds, so the agent itself refuses a second resume from any worker.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from agentloop import Agent, AiMessage, MessageWindowChatMemory, ToolExecutionRequest, tool
from agentloop.testing import FunctionChatModel
from agentloop.ui import vercel_ai_app

HERE = Path(__file__).resolve().parent


@tool("Deletes a file", requires_approval=True)
def delete_file(path: str) -> str:
    return f"deleted {path} (worker {os.getpid()})"


def answer(messages: list[Any], tools: Any) -> AiMessage:
    last = messages[-1]
    if last.text.startswith("deleted") or last.text.startswith("The user"):
        return AiMessage(f"Done: {last.text}")
    path = last.text.rsplit(" ", 1)[-1]
    return AiMessage(
        tool_execution_requests=[ToolExecutionRequest(None, "delete_file", json.dumps({"path": path}))]
    )


class RedisPausedRuns:
    """`agentloop.ui.PausedRuns` in Redis, shared by every worker: runs wait `ttl` seconds at most."""

    def __init__(self, url: str, ttl: int = 24 * 3600) -> None:
        import redis.asyncio

        self.client = redis.asyncio.Redis.from_url(url)
        self.ttl = ttl

    async def save(self, token: str, record: bytes) -> None:
        await self.client.set(f"paused-run:{token}", record, ex=self.ttl)

    async def get(self, token: str) -> bytes | None:
        return _record(await self.client.get(f"paused-run:{token}"))

    async def take(self, token: str) -> bytes | None:
        return _record(await self.client.getdel(f"paused-run:{token}"))


def _record(value: object) -> bytes | None:
    """A stored run as Redis returned it: bytes, or None when the token is unknown or expired."""
    if value is None or isinstance(value, bytes):
        return value
    raise TypeError(f"expected the paused run's bytes from Redis, got {type(value).__name__}")


def create_app(redis_url: str) -> Any:
    from agentloop.stores import RedisChatMemoryStore

    store = RedisChatMemoryStore(redis_url)
    agent = Agent(
        FunctionChatModel(answer),
        tools=[delete_file],
        memory=MessageWindowChatMemory.provider(50, store=store),
    )
    return vercel_ai_app(
        agent, runs=RedisPausedRuns(redis_url), memory_id=lambda request: request.headers["x-user"]
    )


if "REDIS_URL" in os.environ:  # `uvicorn web_workers:app` imports this module in each worker
    app = create_app(os.environ["REDIS_URL"])


def events(response: Any) -> list[dict[str, Any]]:
    lines = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    return [json.loads(line) for line in lines if line != "[DONE]"]


def main() -> None:
    import httpx2

    sys.path.insert(0, str(HERE))
    from multi_worker import redis_and_workers  # the process helpers of the other multi-worker example

    with ExitStack() as stack:
        workers = redis_and_workers(stack, "web_workers:app")
        http = stack.enter_context(httpx2.Client(timeout=30, headers={"x-user": f"ada-{os.getpid()}"}))

        question = {
            "id": "u1",
            "role": "user",
            "parts": [{"type": "text", "text": "Please delete /tmp/report.txt"}],
        }
        first = events(http.post(f"{workers[0]}/", json={"id": "chat", "messages": [question]}))
        asked = next(e for e in first if e["type"] == "tool-approval-request")
        print(f"worker 1 paused the run: {asked['toolCallId']} waits for approval")

        part = {
            "type": "dynamic-tool",
            "toolName": "delete_file",
            "toolCallId": asked["toolCallId"],
            "state": "approval-responded",
            "input": {"path": "/tmp/report.txt"},
            "approval": {"id": asked["approvalId"], "approved": True},
        }
        body = {"id": "chat", "messages": [question, {"id": "a1", "role": "assistant", "parts": [part]}]}
        second = events(http.post(f"{workers[1]}/", json=body))
        text = "".join(e["delta"] for e in second if e["type"] == "text-delta")
        print(f"worker 2 resumed it: {text}")
        assert text.startswith("Done: deleted /tmp/report.txt")

        again = http.post(f"{workers[0]}/", json=body)
        print(f"the same answer to worker 1 again: {again.status_code} {again.json()['type']}")
        assert again.status_code == 409


if __name__ == "__main__":
    main()
