"""The example chat page on the Vercel AI SDK's client (examples/web_chat.py + examples/web/chat.js, bundled
offline with esbuild) in a real browser (Debian's chromium, through Playwright), against the app served by
uvicorn: text and tool calls render, every model and tool text stays text (no markup runs), the approval
flow resumes the paused run, Stop cancels the run on the server (through run control) and the chat goes on,
and a message sent while a reply runs is steered into it and answered by it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import (
    Agent,
    AiMessage,
    ChatMessage,
    MessageWindowChatMemory,
    ModelError,
    SystemMessage,
    ToolContext,
    ToolExecutionRequest,
    UserMessage,
    tool,
)
from agentloop.control import LocalRunControl, RunCommand
from agentloop.testing import FunctionChatModel, ScriptedChatModel
from tests.ui_clients import NODE_DIR, EndlessModel, node_clients, serving

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import web_chat

CHROMIUM = os.environ.get("AGENTLOOP_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-sync",
]
XSS = '<img src=x onerror="window.__xss = (window.__xss || 0) + 1">'
XSS_SCRIPT = "<script>window.__xss = 99</script>"


@tool("Looks a word up")
def lookup(word: str) -> str:
    return f"{word} means {XSS}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        message = "chromium is not installed (apt-get install -y chromium; or set AGENTLOOP_CHROMIUM)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    # The page's bundle, built offline from tests/node's packages (what a developer runs once).
    subprocess.run([str(node_clients()), "build_example.mjs"], cwd=NODE_DIR, check=True, timeout=120)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield browser
        browser.close()


def ask(page: Any, question: str) -> None:
    page.fill("#question", question)
    page.press("#question", "Enter")


def idle(page: Any) -> None:
    page.wait_for_function("['ready', 'error'].includes(document.body.dataset.status)", timeout=20_000)


def test_model_and_tool_text_is_shown_as_text_never_run(browser: Any) -> None:
    model = ScriptedChatModel(
        [
            AiMessage(
                f"Looking up {XSS_SCRIPT}", [ToolExecutionRequest("c1", "lookup", json.dumps({"word": XSS}))]
            ),
            f"Done: {XSS}",
            ModelError(f"the provider said {XSS}"),
        ],
        delay=0.01,
    )
    with serving(web_chat.create_app(Agent(model, tools=[lookup]))) as url:
        page = browser.new_page()
        page.goto(url + "/")
        ask(page, f"Define {XSS}")
        page.wait_for_selector(".tool[data-state='output-available']", timeout=20_000)
        idle(page)
        messages = page.inner_text("#messages")
        assert f"Define {XSS}" in messages and f"Looking up {XSS_SCRIPT}" in messages
        assert f"{XSS} means {XSS}" in messages and f"Done: {XSS}" in messages
        assert json.loads(page.inner_text(".tool-input")) == {"word": XSS}
        ask(page, "Again")  # the model fails: its error is shown as text too
        page.wait_for_selector("#error:not([hidden])", timeout=20_000)
        assert page.inner_text("#error") == f"ModelError: the provider said {XSS}"
        assert (
            page.evaluate("document.querySelectorAll('#messages img, #messages script, #error img').length")
            == 0
        )
        assert page.evaluate("window.__xss") is None
        page.close()


def test_the_approval_flow_in_the_page(browser: Any) -> None:
    web_chat.outbox.clear()
    with serving(web_chat.create_app(web_chat.build_agent())) as url:
        page = browser.new_page()
        page.goto(url + "/")
        ask(page, "Email 2 + 3 to ada@example.com")
        page.wait_for_selector("button.approve", timeout=20_000)
        assert web_chat.outbox == []
        page.click("button.approve")
        page.wait_for_selector(".tool[data-state='output-available'] >> text=Email sent", timeout=20_000)
        idle(page)
        assert page.inner_text(".message.assistant .text >> nth=-1") == "Email sent to ada@example.com."
        assert web_chat.outbox == ["ada@example.com: 2 + 3 = 5.0"]
        ask(page, "Email 1 + 1 to bob@example.com")
        page.wait_for_selector("button.deny", timeout=20_000)
        page.click("button.deny")
        page.wait_for_selector(".tool[data-state='output-denied']", timeout=20_000)
        idle(page)
        assert "I did not send it: The user said no." in page.inner_text("#messages")
        assert web_chat.outbox == ["ada@example.com: 2 + 3 = 5.0"]
        page.close()


def test_a_slow_tool_shows_a_progress_bar_while_it_runs(browser: Any) -> None:
    release = threading.Event()  # the tool's second half waits until the page showed its first report

    @tool("Counts slowly")
    async def slow_count(limit: int, ctx: ToolContext) -> int:
        await ctx.report_progress(1, 4, "a quarter done")
        assert await anyio.to_thread.run_sync(release.wait, 20)
        for step in (2, 3, 4):
            await ctx.report_progress(step, 4, f"{step} of 4")
        return limit

    call = ToolExecutionRequest("c1", "slow_count", json.dumps({"limit": 7}))
    model = ScriptedChatModel([AiMessage(tool_execution_requests=[call]), "Counted."])
    with serving(web_chat.create_app(Agent(model, tools=[slow_count]))) as url:
        page = browser.new_page()
        page.goto(url + "/")
        ask(page, "Count")
        page.wait_for_selector(".tool[data-state='input-available'] progress.tool-progress", timeout=20_000)
        bar = page.query_selector("progress.tool-progress")
        assert (bar.evaluate("b => [b.value, b.max]"), page.inner_text(".tool-progress-note")) == (
            [1, 4],
            "a quarter done",
        )
        release.set()
        page.wait_for_selector(".tool[data-state='output-available'] progress.tool-progress", timeout=20_000)
        idle(page)
        bar = page.query_selector("progress.tool-progress")
        assert (
            bar.evaluate("b => [b.value, b.max]") == [4, 4]
            and page.inner_text(".tool-progress-note") == "4 of 4"
        )
        assert "Counted." in page.inner_text("#messages")
        page.close()


def test_the_examples_prime_counter_fills_its_bar(browser: Any) -> None:
    with serving(web_chat.create_app(web_chat.build_agent())) as url:
        page = browser.new_page()
        page.goto(url + "/")
        ask(page, "How many primes are there below 5000?")
        page.wait_for_selector(".tool[data-state='output-available'] progress.tool-progress", timeout=30_000)
        idle(page)
        bar = page.query_selector("progress.tool-progress")
        assert bar.evaluate("b => [b.value, b.max]") == [10, 10]
        assert page.inner_text(".message.assistant .text >> nth=-1") == "The answer is 669."
        page.close()


def test_stop_in_the_page_cancels_the_model_on_the_server(browser: Any) -> None:
    model = EndlessModel(every=0.02)
    with serving(web_chat.create_app(Agent(model))) as url:
        page = browser.new_page()
        page.goto(url + "/")
        ask(page, "Talk forever")
        page.wait_for_selector(".message.assistant .text", timeout=20_000)
        page.click("#stop")
        assert model.cancelled.wait(10), "Stop in the page did not cancel the model request"
        idle(page)
        page.close()


class WatchedControl(LocalRunControl):
    """This process's run control, telling the test when a steered message reached a running invocation."""

    def __init__(self) -> None:
        super().__init__()
        self.steered = threading.Event()

    async def send(
        self, command: RunCommand, *, invocation_id: str | None = None, memory_id: Any = None
    ) -> bool:
        delivered = await super().send(command, invocation_id=invocation_id, memory_id=memory_id)
        if delivered and command.kind == "steer":
            self.steered.set()
        return delivered


def conversation(messages: list[ChatMessage]) -> list[tuple[str, str | None]]:
    """A model request's messages as (kind, text), the instructions left out."""
    return [
        (type(m).__name__, getattr(m, "text", None)) for m in messages if not isinstance(m, SystemMessage)
    ]


def slow_tool_agent(tool_: Any, control: LocalRunControl | None = None) -> tuple[Agent, FunctionChatModel]:
    """An agent with a memory whose model calls `tool_` for a question starting "Run", else answers with the
    user messages that came after its last message."""

    def answer(messages: list[ChatMessage], tools: list[Any]) -> AiMessage:
        if isinstance(messages[-1], UserMessage) and messages[-1].text.startswith("Run"):
            return AiMessage(tool_execution_requests=[ToolExecutionRequest("c1", tool_.__name__, "{}")])
        turns = [i for i, m in enumerate(messages) if isinstance(m, AiMessage)]
        asked = [m.text for m in messages[turns[-1] + 1 if turns else 0 :] if isinstance(m, UserMessage)]
        return AiMessage("Answered: " + " | ".join(asked))

    model = FunctionChatModel(answer)
    agent = Agent(model, tools=[tool_], memory=MessageWindowChatMemory.provider(50), control=control)
    return agent, model


def test_stop_cancels_the_run_on_the_server_and_the_chat_goes_on(browser: Any) -> None:
    started, cleaned_up = threading.Event(), threading.Event()

    @tool("Crawls a site, slowly")
    async def crawl() -> str:
        try:
            started.set()
            await anyio.sleep(3600)
            return "crawled"
        finally:
            cleaned_up.set()

    agent, model = slow_tool_agent(crawl)
    with serving(web_chat.create_app(agent)) as url:
        page = browser.new_page()
        page.goto(url + "/")
        ask(page, "Run the crawler")
        page.wait_for_selector(".tool[data-state='input-available']", timeout=20_000)
        assert started.wait(10) and page.is_visible("#stop")
        page.click("#stop")
        page.wait_for_selector(".message.assistant .stopped", timeout=20_000)
        idle(page)
        assert cleaned_up.is_set(), "the tool's finally block did not run"
        assert page.is_hidden("#stop") and page.is_hidden("#error")
        ask(page, "Hello again")
        page.wait_for_selector(".message.assistant >> text=Answered: Hello again", timeout=20_000)
        idle(page)
        # The server's memory kept nothing of the stopped round (not even its question: it was the first).
        assert conversation(model.requests[-1].messages) == [("UserMessage", "Hello again")]
        assert len(model.requests) == 2
        assert page.inner_text(".message.assistant .stopped") == "Stopped."
        page.close()


def test_a_message_sent_while_a_reply_runs_is_answered_by_that_reply(browser: Any) -> None:
    release = threading.Event()

    @tool("Counts slowly")
    async def slow_count() -> int:
        assert await anyio.to_thread.run_sync(release.wait, 20)
        return 7

    control = WatchedControl()
    agent, model = slow_tool_agent(slow_count, control)
    with serving(web_chat.create_app(agent)) as url:
        page = browser.new_page()
        page.goto(url + "/")
        ask(page, "Run the counter")
        page.wait_for_selector(".tool[data-state='input-available']", timeout=20_000)
        ask(page, "and then add one")  # the reply still runs: the page steers this into it
        page.wait_for_selector(".message.user.steered >> text=and then add one", timeout=20_000)
        assert control.steered.wait(10), "the steered message did not reach the running invocation"
        release.set()
        page.wait_for_selector(".message.assistant >> text=Answered: and then add one", timeout=20_000)
        idle(page)
        # One run answered both: two model calls, the second seeing the steered message after the result.
        assert len(model.requests) == 2
        assert conversation(model.requests[1].messages) == [
            ("UserMessage", "Run the counter"),
            ("AiMessage", None),
            ("ToolExecutionResultMessage", "7"),
            ("UserMessage", "and then add one"),
        ]
        users = page.locator(".message.user .text").all_inner_texts()
        assert users == ["Run the counter", "and then add one"]
        assert page.locator(".message.assistant .text").all_inner_texts() == ["Answered: and then add one"]
        page.close()


def test_the_offline_run_of_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    web_chat.outbox.clear()
    web_chat.demo()  # asserts its own outcome: both protocols, the approval, the refused second answer
    out = capsys.readouterr().out
    assert "ai sdk, approved: Email sent to ada@example.com." in out and "409 RunNotWaiting" in out


def test_a_run_paused_on_one_worker_resumes_on_another_once() -> None:
    from tests.store_servers import require_redis

    require_redis()
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("REDIS_URL", None)  # the example starts its own redis-server
    done = subprocess.run(
        [sys.executable, str(root / "examples" / "web_workers.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    paused, resumed, again = done.stdout.splitlines()
    assert paused.startswith("worker 1 paused the run") and "worker 2 resumed it: Done: deleted" in resumed
    assert again.endswith("409 RunNotWaiting")
