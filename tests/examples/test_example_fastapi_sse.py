"""The FastAPI SSE example, served by uvicorn on 127.0.0.1 and read over real HTTP, and its chat page driven
in a real browser (Debian's chromium, through Playwright)."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import uvicorn

from agentloop import (
    Agent,
    AiMessage,
    ChatRequest,
    ChatResponse,
    MessageWindowChatMemory,
    RateLimitError,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    tool,
)
from agentloop.models import GenerationProgress, ModelEvent, ResponseComplete, TextDelta
from agentloop.testing import ScriptedChatModel

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
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
            # The page POSTs decisions as JSON: a cross-origin page needs the preflight to pass.
            preflight = await client.options(
                "/runs/some-run/decisions",
                headers={
                    **headers,
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "content-type",
                },
            )
            assert preflight.headers.get("access-control-allow-origin") == allowed
            assert preflight.status_code == (405 if allowed is None else 200)


async def test_an_agent_failure_ends_the_stream_with_an_error_event() -> None:
    agent = Agent(ScriptedChatModel([RateLimitError("openai: HTTP 429 Too Many Requests: slow down")]))
    transport = httpx2.ASGITransport(app=fastapi_sse.create_app(agent))
    async with httpx2.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.get("/chat", params={"q": "hi"})
    [(kind, data)] = parse_sse(response.text.splitlines())
    assert kind == "error"
    assert data == {
        "type": "RateLimitError",
        "message": "The model is busy right now; try again in a moment.",
    }


async def test_an_error_shows_a_plain_message_and_logs_the_model_servers_address(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from agentloop.models import OpenAIChatModel

    port = free_port()  # nothing listens there: the connection is refused
    model = OpenAIChatModel("m", base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-secret", max_retries=0)
    transport = httpx2.ASGITransport(app=fastapi_sse.create_app(fastapi_sse.build_agent(model)))
    with caplog.at_level(logging.WARNING, logger="fastapi_sse"):
        async with httpx2.AsyncClient(transport=transport, base_url="http://test") as client:
            response = await client.get("/chat", params={"q": "hi"})
    [(kind, data)] = parse_sse(response.text.splitlines())
    assert (kind, data) == (
        "error",
        {"type": "ModelConnectionError", "message": "The model is not available right now; try again later."},
    )
    assert "127.0.0.1" not in response.text and str(port) not in response.text
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert f"127.0.0.1:{port}" in logged and "ModelConnectionError" in logged  # the operator sees where
    assert "sk-secret" not in logged


class LoadingModel:
    """A `ChatModel` that loads ahead of use and reports its progress as the local model does: the prompt in
    steps, then the tokens of a tool-call decision, then an answer."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.loads = 0
        self.requests_before_load = 0
        self.gate = gate  # when given, the model waits for it after its first steps (a long prompt)

    async def load(self) -> None:
        self.loads += 1

    async def chat(self, request: ChatRequest) -> ChatResponse:
        async for event in self.stream(request):
            if isinstance(event, ResponseComplete):
                return event.response
        raise AssertionError("no response")

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        if not self.loads:
            self.requests_before_load += 1
        for read in (0, 128, 256, 300):
            yield GenerationProgress(read, 300)
            if read == 128 and self.gate is not None:
                await anyio.to_thread.run_sync(self.gate.wait)
        yield GenerationProgress(300, 300, generated_tokens=1)
        yield GenerationProgress(300, 300, generated_tokens=2)
        yield TextDelta("Hello.")
        yield ResponseComplete(ChatResponse(AiMessage("Hello.")))


async def test_the_model_loads_at_startup_and_its_progress_streams_as_events() -> None:
    model = LoadingModel()
    with serving(fastapi_sse.create_app(Agent(model))) as url:
        assert model.loads == 1  # before any request: the lifespan loaded it
        async with httpx2.AsyncClient(base_url=url, timeout=10) as client:
            response = await client.get("/chat", params={"q": "hi", "user": "p"})
    events = parse_sse(response.text.splitlines())
    assert [data for kind, data in events if kind == "progress"] == [
        {"read": 0, "of": 300, "cached": 0},
        {"read": 128, "of": 300, "cached": 0},
        {"read": 256, "of": 300, "cached": 0},
        {"read": 300, "of": 300, "cached": 0},
        {"written": 1},
        {"written": 2},
    ]
    assert [kind for kind, _ in events][-2:] == ["token", "done"]
    assert model.loads == 1 and model.requests_before_load == 0


# -- approval of tool calls, over HTTP ----------------------------------------------------------------------


class Outbox:
    """The example's offline model with a counted, gated `send_email`: every email really sent is listed."""

    def __init__(self) -> None:
        self.sent: Counter[str] = Counter()
        self.model = fastapi_sse.offline_model()

        @tool("Sends an email", requires_approval=True)
        def send_email(to: str, text: str) -> str:
            self.sent[to] += 1
            return f"Email sent to {to}"

        self.agent = Agent(
            self.model,
            tools=[fastapi_sse.add, send_email],
            memory=MessageWindowChatMemory.provider(20),
        )


@pytest.fixture(scope="module")
def mail() -> Iterator[tuple[str, Outbox, Any]]:
    outbox = Outbox()
    app = fastapi_sse.create_app(outbox.agent)
    with serving(app) as url:
        yield url, outbox, app.state.runs


async def paused_run(client: httpx2.AsyncClient, address: str) -> dict[str, Any]:
    """Asks for an email of 2 + 3 to `address`; returns the `approval_required` event's data."""
    response = await client.get("/chat", params={"q": f"Email 2 + 3 to {address}", "user": address})
    events = parse_sse(response.text.splitlines())
    assert [kind for kind, _ in events] == ["tool_start", "tool_result", "approval_required"]  # no `done`
    return events[-1][1]


def decisions_url(run: str) -> str:
    return f"/runs/{run}/decisions"


async def test_a_gated_call_pauses_the_stream_and_an_approval_streams_the_rest(
    mail: tuple[str, Outbox, Any],
) -> None:
    url, outbox, runs = mail
    address = f"ada-{uuid.uuid4().hex[:8]}@example.com"
    async with httpx2.AsyncClient(base_url=url, timeout=10) as client:
        paused = await paused_run(client, address)
        [request] = paused["calls"]
        assert request["name"] == "send_email" and request["call"] == "2.0"  # round 2: after `add`
        assert json.loads(request["arguments"]) == {"to": address, "text": "2 + 3 = 5.0"}
        assert len(paused["run"]) >= 32 and runs.get(paused["run"]) is not None  # unguessable, kept here
        assert outbox.sent[address] == 0

        response = await client.post(
            decisions_url(paused["run"]), json={"decisions": {request["call_id"]: True}}
        )
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = parse_sse(response.text.splitlines())
    kinds = [kind for kind, _ in events]
    assert kinds[:2] == ["tool_start", "tool_result"] and kinds[-1] == "done"
    assert dict(events)["tool_start"]["call"] == request["call"]  # the page matches the waiting line with it
    assert dict(events)["tool_result"]["result"] == f"Email sent to {address}"
    assert dict(events)["done"]["content"] == f"Email sent to {address}."
    assert outbox.sent[address] == 1
    assert not runs.get(paused["run"]) and runs.was_decided(paused["run"])


async def test_a_run_is_decided_once_even_by_two_requests_at_the_same_time(
    mail: tuple[str, Outbox, Any],
) -> None:
    url, outbox, _ = mail
    address = f"bob-{uuid.uuid4().hex[:8]}@example.com"
    statuses: list[int] = []
    async with httpx2.AsyncClient(base_url=url, timeout=10) as client:
        paused = await paused_run(client, address)
        body = {"decisions": {paused["calls"][0]["call_id"]: True}}
        model_calls = len(outbox.model.requests)

        async def decide() -> None:
            response = await client.post(decisions_url(paused["run"]), json=body)
            statuses.append(response.status_code)
            if response.status_code == 409:
                assert response.json() == {
                    "type": "AlreadyDecided",
                    "message": "This run was already decided; nothing ran again.",
                }
            else:
                assert "event: done" in response.text

        async with anyio.create_task_group() as group:
            group.start_soon(decide)
            group.start_soon(decide)
        replay = await client.post(decisions_url(paused["run"]), json=body)
    assert sorted(statuses) == [200, 409] and replay.status_code == 409
    assert outbox.sent[address] == 1  # ran once
    assert len(outbox.model.requests) == model_calls + 1  # one continuation


async def test_bad_decisions_are_refused_with_what_was_wrong_and_nothing_runs(
    mail: tuple[str, Outbox, Any],
) -> None:
    url, outbox, runs = mail
    address = f"carol-{uuid.uuid4().hex[:8]}@example.com"
    async with httpx2.AsyncClient(base_url=url, timeout=10) as client:
        paused = await paused_run(client, address)
        run, call_id = paused["run"], paused["calls"][0]["call_id"]
        model_calls = len(outbox.model.requests)

        unknown = await client.post(decisions_url("not-a-run"), json={"decisions": {call_id: True}})
        assert unknown.status_code == 404
        assert unknown.json()["type"] == "UnknownRun"
        assert "No run waits for a decision under this id" in unknown.json()["message"]

        missing = await client.post(decisions_url(run), json={"decisions": {}})
        assert missing.status_code == 422 and missing.json()["call_id"] == call_id
        assert f"No decision for call {call_id!r} (tool 'send_email')" in missing.json()["message"]

        stranger = await client.post(decisions_url(run), json={"decisions": {call_id: True, "call_99": True}})
        assert stranger.status_code == 422 and stranger.json()["call_id"] == "call_99"
        assert "has no call 'call_99' waiting for approval" in stranger.json()["message"]

        for wrong in [{"decisions": {call_id: 1}}, {"decisions": {call_id: "  "}}, {call_id: True}]:
            malformed = await client.post(decisions_url(run), json=wrong)
            assert malformed.status_code == 422, wrong
            assert malformed.json()["detail"][0]["loc"][:2] == ["body", "decisions"]

        assert outbox.sent[address] == 0 and len(outbox.model.requests) == model_calls  # nothing ran
        assert runs.get(run) is not None  # still waiting: the refusals took nothing

        # The run can still be decided, here with a denial the model reads.
        denied = await client.post(decisions_url(run), json={"decisions": {call_id: "Not to that address"}})
    events = parse_sse(denied.text.splitlines())
    result_event = dict(events)["tool_result"]
    assert {k: result_event[k] for k in ("call", "name", "result", "error")} == {
        "call": "2.0",
        "name": "send_email",
        "result": "Not to that address",
        "error": True,
    }
    assert "tool_start" not in dict(events)  # a denied call never starts
    assert dict(events)["done"]["content"] == "I did not send it: Not to that address"
    assert outbox.sent[address] == 0
    [result] = [m for m in outbox.model.requests[-1].messages if isinstance(m, ToolExecutionResultMessage)][
        -1:
    ]
    assert (result.tool_name, result.text, result.is_error) == ("send_email", "Not to that address", True)


async def test_a_continuation_can_pause_again_under_a_new_run_id() -> None:
    first = ToolExecutionRequest("c1", "send_email", '{"to": "ada@example.com", "text": "hi"}')
    second = ToolExecutionRequest("c2", "send_email", '{"to": "bob@example.com", "text": "hi"}')
    sent: list[str] = []

    @tool("Sends an email", requires_approval=True)
    def send_email(to: str, text: str) -> str:
        sent.append(to)
        return "sent"

    model = ScriptedChatModel(
        [
            AiMessage(tool_execution_requests=[first]),
            AiMessage(tool_execution_requests=[second]),
            "Both sent.",
        ]
    )
    agent = Agent(model, tools=[send_email], memory=MessageWindowChatMemory.provider(20))
    transport = httpx2.ASGITransport(app=fastapi_sse.create_app(agent))
    async with httpx2.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.get("/chat", params={"q": "Mail both", "user": "erin"})
        run = parse_sse(response.text.splitlines())[-1][1]["run"]
        response = await client.post(decisions_url(run), json={"decisions": {"c1": True}})
        kind, again = parse_sse(response.text.splitlines())[-1]
        assert kind == "approval_required" and again["run"] != run
        assert [c["call_id"] for c in again["calls"]] == ["c2"] and sent == ["ada@example.com"]
        response = await client.post(decisions_url(again["run"]), json={"decisions": {"c2": False}})
    kind, done = parse_sse(response.text.splitlines())[-1]
    assert kind == "done" and done["content"] == "Both sent."
    assert sent == ["ada@example.com"]
    assert model.requests[-1].messages[-1] == ToolExecutionResultMessage(
        "c2", "send_email", "The user denied this call of tool 'send_email'; it did not run.", True
    )


# -- the chat page in a real browser ---------------------------------------------------------------------
# (These tests come after the async ones: while the module's Playwright browser is open, its sync API holds
# an event loop in this thread, and an async test could not start its own.)

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
        assert error == "RateLimitError: The model is busy right now; try again in a moment."
        assert page.evaluate("window.__sources.map((s) => s.readyState)") == [2, 2]
        page.close()
    assert app.requests["/chat"] == 2  # one request per question: no reconnects
    assert len(model.requests) == 3  # two model calls for the first question, one for the second


def test_the_chat_page_shows_the_models_progress_while_it_reads_and_decides(browser: Any) -> None:
    gate = threading.Event()
    model = LoadingModel(gate)
    with serving(fastapi_sse.create_app(Agent(model))) as url:
        page = browser.new_page()
        page.goto(url + "/")
        page.fill("#question", "hi")
        page.press("#question", "Enter")
        status = ".exchange .status"
        try:
            # The model stopped after reading 128 of 300 prompt tokens: the page says so, not "thinking...".
            expected = "reading the prompt: 42% of 300 tokens"
            page.wait_for_function(f"document.querySelector({status!r})?.textContent === {expected!r}")
        finally:
            gate.set()
        page.wait_for_selector(".exchange[data-state='done']", timeout=20_000)
        assert page.inner_text(".exchange .answer") == "Hello."
        page.close()


# -- approval of tool calls, in the chat page ---------------------------------------------------------------


class Shop:
    """A gated `refund` next to an ungated `lookup_order`; every run counted."""

    def __init__(self) -> None:
        self.runs: Counter[str] = Counter()

    @tool("Refunds an order", requires_approval=True)
    async def refund(self, order: str, amount: float, note: str = "") -> str:
        self.runs[f"refund {order}"] += 1
        return f"refunded {amount:g} EUR on order {order}"

    @tool("Looks an order up")
    def lookup_order(self, order: str) -> str:
        self.runs[f"lookup {order}"] += 1
        return f"order {order}: 2 mugs, paid 30 EUR"


def refund_call(call_id: str, order: str, **more: Any) -> ToolExecutionRequest:
    return ToolExecutionRequest(call_id, "refund", json.dumps({"order": order, "amount": 30, **more}))


@contextmanager
def shop_page(browser: Any, script: list[Any]) -> Iterator[tuple[Any, Shop, Any, CountingApp]]:
    """The example's app over an agent whose model is a fake Anthropic server (over real sockets), and the
    chat page open on it: (page, shop, provider, app)."""
    from agentloop.models import AnthropicChatModel
    from agentloop.testing import FakeAnthropicServer

    shop = Shop()
    with FakeAnthropicServer(script) as provider:
        model = AnthropicChatModel("claude-test", base_url=provider.base_url, api_key="test-key")
        agent = Agent(model, tools=shop, memory=MessageWindowChatMemory.provider(20))
        app = CountingApp(fastapi_sse.create_app(agent))
        with serving(app) as url:
            page = browser.new_page()
            page.add_init_script(RECORDER)
            page.goto(url + "/")
            try:
                yield page, shop, provider, app
            finally:
                page.close()


def ask_in_page(page: Any, question: str, state: str) -> None:
    page.fill("#question", question)
    page.press("#question", "Enter")
    page.wait_for_selector(f".exchange[data-state='{state}']", timeout=20_000)


def tool_lines(page: Any) -> list[str]:
    """The tool lines of the newest exchange as `state|text`, the duration cut off."""
    lines = page.evaluate(
        "[...document.querySelectorAll('.exchange .tool')].map(t => `${t.dataset.state}|${t.textContent}`)"
    )
    return [re.sub(r" \(\d+(\.\d+)? ms\)$", "", line) for line in lines]


def waiting_calls(page: Any) -> list[str]:
    return page.eval_on_selector_all(
        ".approval .request",
        "rows => rows.map(r => `${r.dataset.callId}|${r.querySelector('.call').textContent}`)",
    )


def tool_results_sent(provider: Any, request: int) -> list[dict[str, Any]]:
    """The tool_result blocks of the provider's `request`-th request, in order."""
    last = provider.requests[request].json["messages"][-1]
    return [block for block in last["content"] if block["type"] == "tool_result"]


def test_approving_in_the_page_runs_the_call_once_and_streams_the_answer(browser: Any) -> None:
    answer = "Refunded: 30 EUR are on their way back."
    script = [AiMessage(tool_execution_requests=[refund_call("toolu_1", "A7")]), answer]
    with shop_page(browser, script) as (page, shop, provider, app):
        ask_in_page(page, "Refund order A7", "waiting")
        assert waiting_calls(page) == ['toolu_1|refund({"order": "A7", "amount": 30})']
        assert tool_lines(page) == ['waiting|refund({"order": "A7", "amount": 30})']
        assert page.is_disabled(".approval .submit")  # every call needs a decision first
        assert shop.runs == {} and len(provider.requests) == 1
        assert page.evaluate("window.__sources.map((s) => s.readyState)") == [2]  # closed: no reconnect

        page.click(".approval .approve")
        page.click(".approval .submit")
        page.wait_for_selector(".exchange[data-state='done']", timeout=20_000)
        assert page.inner_text(".exchange .answer") == answer
        assert tool_lines(page) == ['ok|refund({"order": "A7", "amount": 30}) → refunded 30 EUR on order A7']
        assert page.query_selector(".approval") is None  # decided: the form is gone
        assert "done: 1 tool call(s)" in page.inner_text(".exchange .status")
        assert page.is_hidden(".exchange .error")
    assert shop.runs == {"refund A7": 1}
    assert tool_results_sent(provider, 1) == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "refunded 30 EUR on order A7"}
    ]
    assert app.requests["/chat"] == 1
    assert [path for path in app.requests if path.startswith("/runs/")] and sum(
        n for path, n in app.requests.items() if path.startswith("/runs/")
    ) == 1


def test_the_done_line_counts_every_call_the_exchange_showed_across_two_pauses(browser: Any) -> None:
    # The run pauses twice (each round's refund waits for a decision); the last part's Result holds only
    # its own call, but the page showed two and says two.
    script = [
        AiMessage(tool_execution_requests=[refund_call("toolu_1", "A7")]),
        AiMessage(tool_execution_requests=[refund_call("toolu_2", "B8")]),
        "Both refunded.",
    ]
    with shop_page(browser, script) as (page, shop, _, _):
        ask_in_page(page, "Refund A7, then B8", "waiting")
        page.click(".approval .approve")
        page.click(".approval .submit")
        page.wait_for_selector(".approval [data-call-id='toolu_2']", timeout=20_000)
        page.click(".approval .approve")
        page.click(".approval .submit")
        page.wait_for_selector(".exchange[data-state='done']", timeout=20_000)
        assert [line.split("|")[0] for line in tool_lines(page)] == ["ok", "ok"]
        assert "done: 2 tool call(s)" in page.inner_text(".exchange .status")
    assert shop.runs == {"refund A7": 1, "refund B8": 1}


def test_denying_in_the_page_sends_the_reason_to_the_model_and_shows_arguments_as_text(browser: Any) -> None:
    trap = '<img src=x onerror="window.__injected = true">'
    answer = "Understood, no refund for A7."
    script = [AiMessage(tool_execution_requests=[refund_call("toolu_2", "A7", note=trap)]), answer]
    with shop_page(browser, script) as (page, shop, provider, _):
        ask_in_page(page, "Refund order A7", "waiting")
        [waiting] = waiting_calls(page)
        assert waiting == "toolu_2|refund(" + json.dumps({"order": "A7", "amount": 30, "note": trap}) + ")"
        assert page.is_hidden(".approval .reason")
        page.click(".approval .deny")
        page.fill(".approval .reason", "A7 was refunded last week")
        page.click(".approval .submit")
        page.wait_for_selector(".exchange[data-state='done']", timeout=20_000)
        assert page.inner_text(".exchange .answer") == answer
        [line] = tool_lines(page)
        assert line.startswith("failed|refund(") and line.endswith(" → A7 was refunded last week")
        assert page.evaluate("document.querySelectorAll('.exchange img').length") == 0  # text, not markup
        assert page.evaluate("window.__injected") is None
    assert shop.runs == {}  # never ran
    assert tool_results_sent(provider, 1) == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_2",
            "content": "A7 was refunded last week",
            "is_error": True,
        }
    ]
    assert len(provider.requests) == 2


def test_a_mixed_response_runs_the_ungated_call_once_and_resumes_only_the_waiting_ones(browser: Any) -> None:
    lookup = ToolExecutionRequest("toolu_look", "lookup_order", '{"order": "A7"}')
    response = AiMessage(
        tool_execution_requests=[lookup, refund_call("toolu_a7", "A7"), refund_call("toolu_b8", "B8")]
    )
    with shop_page(browser, [response, "A7 is refunded; B8 is not."]) as (page, shop, provider, _):
        ask_in_page(page, "Check A7, refund A7 and B8", "waiting")
        assert tool_lines(page) == [
            'ok|lookup_order({"order": "A7"}) → order A7: 2 mugs, paid 30 EUR',
            'waiting|refund({"order": "A7", "amount": 30})',
            'waiting|refund({"order": "B8", "amount": 30})',
        ]
        assert shop.runs == {"lookup A7": 1}
        page.click(".approval [data-call-id='toolu_a7'] .approve")
        assert page.is_disabled(".approval .submit")  # B8 is not decided yet
        page.click(".approval [data-call-id='toolu_b8'] .deny")  # no reason: the default denial text
        page.click(".approval .submit")
        page.wait_for_selector(".exchange[data-state='done']", timeout=20_000)
        assert page.inner_text(".exchange .answer") == "A7 is refunded; B8 is not."
        assert tool_lines(page) == [
            'ok|lookup_order({"order": "A7"}) → order A7: 2 mugs, paid 30 EUR',
            'ok|refund({"order": "A7", "amount": 30}) → refunded 30 EUR on order A7',
            'failed|refund({"order": "B8", "amount": 30}) → The user denied this call of tool \'refund\'; '
            "it did not run.",
        ]
        states = page.evaluate("window.__states")
    assert shop.runs == {"lookup A7": 1, "refund A7": 1}  # the lookup was not run again on resume
    # From the pause on, the lookup's line stayed finished: the resumed stream did not start it again.
    paused_at = next(i for i, s in enumerate(states) if s["state"] == "waiting")
    assert all(s["tools"][0].startswith("ok|lookup_order") for s in states[paused_at:])
    assert [
        (b["tool_use_id"], b["content"], b.get("is_error", False)) for b in tool_results_sent(provider, 1)
    ] == [
        ("toolu_look", "order A7: 2 mugs, paid 30 EUR", False),
        ("toolu_a7", "refunded 30 EUR on order A7", False),
        ("toolu_b8", "The user denied this call of tool 'refund'; it did not run.", True),
    ]
