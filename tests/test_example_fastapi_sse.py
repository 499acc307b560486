"""The FastAPI SSE example, served by uvicorn on 127.0.0.1 and read over real HTTP."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import fastapi_sse


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, Any]]:
    port = free_port()
    agent = fastapi_sse.build_agent()
    config = uvicorn.Config(fastapi_sse.create_app(agent), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}", agent
    server.should_exit = True
    thread.join(10)


def parse_sse(lines: list[str]) -> list[tuple[str, dict[str, Any]]]:
    events, name = [], ""
    for line in lines:
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            events.append((name, json.loads(line[6:])))
    return events


async def test_tokens_and_tool_events_arrive_as_sse(served: tuple[str, Any]) -> None:
    server_url, _ = served
    params = {"q": "What is 2 + 3?", "user": "alice"}
    async with (
        httpx2.AsyncClient(base_url=server_url, timeout=10) as client,
        client.stream("GET", "/chat", params=params) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line async for line in response.aiter_lines()]
    events = parse_sse(lines)
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "tool_start" and kinds[-1] == "done"
    assert kinds.index("tool_start") < kinds.index("tool_result") < kinds.index("token")
    tool_start = dict(events)["tool_start"]
    assert tool_start["name"] == "add" and json.loads(tool_start["arguments"]) == {"a": 2.0, "b": 3.0}
    assert dict(events)["tool_result"]["result"] == "5.0"
    text = "".join(data["text"] for kind, data in events if kind == "token")
    assert text == "The answer is 5.0."
    assert sum(kind == "token" for kind in kinds) > 3  # streamed in pieces, not one blob
    assert dict(events)["done"] == {
        "content": "The answer is 5.0.",
        "tools": 1,
        "tokens": dict(events)["done"]["tokens"],
    }


async def test_memory_is_per_user_over_http(served: tuple[str, Any]) -> None:
    server_url, agent = served
    bob, carol = f"bob-{uuid.uuid4()}", f"carol-{uuid.uuid4()}"
    async with httpx2.AsyncClient(base_url=server_url, timeout=10) as client:
        for user in [bob, bob, carol]:
            response = await client.get("/chat", params={"q": "1 + 1", "user": user})
            assert response.status_code == 200
            assert "The answer is 2.0." in response.text
    # Each exchange is: question, tool round (call + result), answer.
    assert len(await agent.memory(bob).messages()) == 8
    assert len(await agent.memory(carol).messages()) == 4
