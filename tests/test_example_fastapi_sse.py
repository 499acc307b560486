"""The FastAPI SSE example, served by uvicorn on 127.0.0.1 and read over real HTTP, and its chat page driven
in a real browser (Debian's chromium, through Playwright)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import uvicorn

from agentloop import Agent, AiMessage, MessageWindowChatMemory, RateLimitError, ToolExecutionRequest, tool
from agentloop.testing import ScriptedChatModel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import fastapi_sse


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class CountingApp:
    """The app, counting the requests to each path (to see whether a browser reconnected)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.requests: dict[str, int] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.requests[scope["path"]] = self.requests.get(scope["path"], 0) + 1
        await self.app(scope, receive, send)


@contextmanager
def serving(app: Any) -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, Any]]:
    agent = fastapi_sse.build_agent()
    with serving(fastapi_sse.create_app(agent)) as url:
        yield url, agent


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
    assert dict(events)["tool_result"]["call"] == tool_start["call"] == "1.0"  # matched by round.index
    text = "".join(data["text"] for kind, data in events if kind == "token")
    assert text == "The answer is 5.0."
    assert sum(kind == "token" for kind in kinds) > 3  # streamed in pieces, not one blob
    assert dict(events)["done"] == {
        "content": "The answer is 5.0.",
        "tools": 1,
        "tokens": dict(events)["done"]["tokens"],
    }
    assert [line for line in lines if line.startswith("id: ")] == [
        f"id: {n}" for n in range(1, len(events) + 1)
    ]


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


async def test_a_reconnecting_event_source_gets_204_and_does_not_rerun_the_agent(
    served: tuple[str, Any],
) -> None:
    server_url, agent = served
    dave = f"dave-{uuid.uuid4()}"
    async with httpx2.AsyncClient(base_url=server_url, timeout=10) as client:
        first = await client.get("/chat", params={"q": "4 + 4", "user": dave})
        last_id = [line for line in first.text.splitlines() if line.startswith("id: ")][-1][4:]
        again = await client.get(
            "/chat", params={"q": "4 + 4", "user": dave}, headers={"Last-Event-ID": last_id}
        )
    assert again.status_code == 204 and again.text == ""  # EventSource stops reconnecting on 204
    assert len(await agent.memory(dave).messages()) == 4  # one run, not two


async def test_cors_is_off_by_default_and_allows_the_configured_origins() -> None:
    origin = "http://localhost:3000"
    closed = fastapi_sse.create_app(fastapi_sse.build_agent())
    opened = fastapi_sse.create_app(fastapi_sse.build_agent(), cors_origins=[origin])
    headers = {"Origin": origin}
    for app, allowed in [(closed, None), (opened, origin)]:
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://test") as client:
            response = await client.get("/chat", params={"q": "1 + 2"}, headers=headers)
            assert response.status_code == 200
            assert response.headers.get("access-control-allow-origin") == allowed
            page = await client.get("/")
            assert page.status_code == 200 and "new EventSource(" in page.text


async def test_an_agent_failure_ends_the_stream_with_an_error_event() -> None:
    agent = Agent(ScriptedChatModel([RateLimitError("openai: HTTP 429 Too Many Requests: slow down")]))
    transport = httpx2.ASGITransport(app=fastapi_sse.create_app(agent))
    async with httpx2.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.get("/chat", params={"q": "hi"})
    [(kind, data)] = parse_sse(response.text.splitlines())
    assert kind == "error"
    assert data == {"type": "RateLimitError", "message": "openai: HTTP 429 Too Many Requests: slow down"}


# -- the chat page in a real browser ---------------------------------------------------------------------

CHROMIUM = os.environ.get("AGENTLOOP_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ANSWER = "2 and 3 make 5.0, as the slow adder says."
# Before the page loads: record every DOM state of the newest exchange, and every EventSource it opens.
RECORDER = """
window.__states = [];
window.__sources = [];
const NativeEventSource = window.EventSource;
window.EventSource = class extends NativeEventSource {
  constructor(...args) { super(...args); window.__sources.push(this); }
};
document.addEventListener("DOMContentLoaded", () => {
  new MutationObserver(() => {
    const exchange = document.querySelector(".exchange");
    if (!exchange) return;
    window.__states.push({
      state: exchange.dataset.state,
      answer: exchange.querySelector(".answer").textContent,
      tools: [...exchange.querySelectorAll(".tool")].map((t) => `${t.dataset.state}|${t.textContent}`),
      error: exchange.querySelector(".error").textContent,
    });
  }).observe(document.getElementById("log"), {
    subtree: true, childList: true, characterData: true, attributes: true,
  });
});
"""


@tool("Adds two numbers, slowly")
async def slow_add(a: float, b: float) -> float:
    await anyio.sleep(0.3)
    return a + b


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        message = "chromium is not installed (apt-get install -y chromium; or set AGENTLOOP_CHROMIUM)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    # Playwright's own browser download is not used: it drives the system's chromium, in a fresh profile.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


def test_the_chat_page_shows_tokens_as_they_stream_tool_calls_and_errors(browser: Any) -> None:
    call = AiMessage(tool_execution_requests=[ToolExecutionRequest("c1", "slow_add", '{"a": 2, "b": 3}')])
    failure = RateLimitError("openai: HTTP 429 Too Many Requests: slow down")
    model = ScriptedChatModel([call, ANSWER, failure], delay=0.04)  # a model streaming a word every 40 ms
    agent = Agent(model, tools=[slow_add], memory=MessageWindowChatMemory.provider(20))
    app = CountingApp(fastapi_sse.create_app(agent))
    with serving(app) as url:
        page = browser.new_page()
        page.add_init_script(RECORDER)
        page.goto(url + "/")
        page.fill("#question", "What is 2 + 3?")
        page.press("#question", "Enter")  # as a user would
        page.wait_for_selector(".exchange[data-state='done']", timeout=20_000)
        states = page.evaluate("window.__states")
        final = page.evaluate("document.querySelector('.exchange').innerText")

        # Tokens arrived one by one: many distinct, growing texts while the exchange was still running.
        answers = [s["answer"] for s in states]
        partial = {
            s["answer"] for s in states if s["state"] == "running" and 0 < len(s["answer"]) < len(ANSWER)
        }
        assert len(partial) >= 4, answers
        assert all(answers[i + 1].startswith(answers[i]) for i in range(len(answers) - 1))
        assert answers[-1] == ANSWER
        # The tool call showed as running, then finished with its result, before the answer began.
        tool_states = [s["tools"] for s in states if s["tools"]]
        assert tool_states[0] == ['running|slow_add({"a": 2, "b": 3})']
        assert tool_states[-1][0].startswith('ok|slow_add({"a": 2, "b": 3}) → 5.0 (')
        first_token = next(i for i, s in enumerate(states) if s["answer"])
        assert any(s["tools"] and s["tools"][0].startswith("ok|") for s in states[:first_token])
        assert "done: 1 tool call(s)" in final
        # The page closed its EventSource on `done`: the browser will not reconnect and re-run the agent.
        assert page.evaluate("window.__sources.map((s) => s.readyState)") == [2]  # 2 = CLOSED

        # A failing model: the page shows the server's error and closes the stream.
        page.fill("#question", "And now?")
        page.press("#question", "Enter")
        page.wait_for_selector(".exchange[data-state='error']", timeout=20_000)
        error = page.inner_text(".exchange .error")
        assert error == "RateLimitError: openai: HTTP 429 Too Many Requests: slow down"
        assert page.evaluate("window.__sources.map((s) => s.readyState)") == [2, 2]
        page.close()
    assert app.requests["/chat"] == 2  # one request per question: no reconnects
    assert len(model.requests) == 3  # two model calls for the first question, one for the second
