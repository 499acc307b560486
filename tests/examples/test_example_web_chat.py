"""The example chat page on the Vercel AI SDK's client (examples/web_chat.py + examples/web/chat.js, bundled
offline with esbuild) in a real browser (Debian's chromium, through Playwright), against the app served by
uvicorn: text and tool calls render, every model and tool text stays text (no markup runs), the approval
flow resumes the paused run, Stop cancels the run on the server, and a message sent while an answer runs is
steered into it (answered by the same run, in the chat's server-side memory)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import (
    Agent,
    AiMessage,
    InMemoryChatMemoryStore,
    MessageWindowChatMemory,
    ModelError,
    ToolContext,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
    tool,
)
from agentloop.control import LocalRunControl, RunCommand
from agentloop.testing import FunctionChatModel, ScriptedChatModel
from tests.ui_clients import NODE_DIR, EndlessModel, node_clients, serving

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
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


class Chats(InMemoryChatMemoryStore):
    """The server's memory, noting which chats (memory ids) wrote to it."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[Any] = set()

    async def append(self, memory_id: Any, *args: Any, **kwargs: Any) -> int:
        self.ids.add(memory_id)
        return await super().append(memory_id, *args, **kwargs)

    def held(self) -> list[Any]:
        """What the page's one chat holds (read once the server stopped)."""
        (chat,) = self.ids
        with ThreadPoolExecutor(1) as thread:  # the sync Playwright API holds this thread's event loop
            return thread.submit(anyio.run, self.get_messages, chat).result()


def slow_counter() -> tuple[Any, threading.Event, list[str]]:
    """A tool that waits for the test (`release`), and its cleanups (`cleaned`)."""
    release, cleaned = threading.Event(), []

    @tool("Counts slowly")
    async def slow_count(limit: int) -> int:
        try:
            assert await anyio.to_thread.run_sync(release.wait, 20, abandon_on_cancel=True)
            return limit
        finally:
            cleaned.append("slow_count")

    return slow_count, release, cleaned


def test_a_message_sent_while_the_answer_runs_is_steered_into_it(browser: Any) -> None:
    slow_count, release, _ = slow_counter()
    requests: list[list[Any]] = []

    def answer(messages: list[Any], tools: Any) -> Any:
        requests.append(list(messages))
        last = messages[-1]
        if isinstance(last, UserMessage) and last.text == "Count to 7":
            call = ToolExecutionRequest("c1", "slow_count", json.dumps({"limit": 7}))
            return AiMessage(tool_execution_requests=[call])
        if isinstance(last, UserMessage) and last.text == "And what is 2 + 2?":
            return "Counted to 7, and 2 + 2 is 4."
        return "Counted to 7."

    chats = Chats()
    memory = MessageWindowChatMemory.provider(50, store=chats)
    agent = Agent(FunctionChatModel(answer), tools=[slow_count], memory=memory)
    with serving(web_chat.create_app(agent)) as url:
        page = browser.new_page()
        page.goto(url + "/")
        ask(page, "Count to 7")
        page.wait_for_selector(".tool[data-state='input-available']", timeout=20_000)
        assert page.inner_text("#send") == "Add to the answer"
        ask(page, "And what is 2 + 2?")  # while the tool runs: steered, no second request
        page.wait_for_selector(".message.assistant .steered", timeout=20_000)
        release.set()
        page.wait_for_selector("text=Counted to 7, and 2 + 2 is 4.", timeout=20_000)
        idle(page)
        assert page.inner_text(".steered") == "And what is 2 + 2?"
        assert page.evaluate("document.querySelectorAll('.message.user').length") == 1  # one question sent
        page.close()
    # One run answered both: its second model request had the steered message after the tool's result.
    assert len(requests) == 2
    assert [type(m) for m in requests[1][-2:]] == [ToolExecutionResultMessage, UserMessage]
    assert requests[1][-1].text == "And what is 2 + 2?"
    users = [m.text for m in chats.held() if isinstance(m, UserMessage)]
    assert users == ["Count to 7", "And what is 2 + 2?"]


class WatchedControl(LocalRunControl):
    """This process's run control, keeping the commands it delivered to a running invocation."""

    def __init__(self) -> None:
        super().__init__()
        self.delivered: list[RunCommand] = []

    async def send(
        self, command: RunCommand, *, invocation_id: str | None = None, memory_id: Any = None
    ) -> bool:
        done = await super().send(command, invocation_id=invocation_id, memory_id=memory_id)
        if done:
            self.delivered.append(command)
        return done


def test_stop_in_the_page_cancels_the_run_and_the_chat_goes_on(browser: Any) -> None:
    slow_count, release, cleaned = slow_counter()

    def answer(messages: list[Any], tools: Any) -> Any:
        last = messages[-1]
        if isinstance(last, UserMessage) and last.text == "Count to 7":
            call = ToolExecutionRequest("c1", "slow_count", json.dumps({"limit": 7}))
            return AiMessage(tool_execution_requests=[call])
        return "Hello again."

    chats = Chats()
    memory = MessageWindowChatMemory.provider(50, store=chats)
    control = WatchedControl()
    agent = Agent(FunctionChatModel(answer), tools=[slow_count], memory=memory, control=control)
    with serving(web_chat.create_app(agent)) as url:
        page = browser.new_page()
        page.goto(url + "/")
        ask(page, "Count to 7")
        page.wait_for_selector(".tool[data-state='input-available']", timeout=20_000)
        page.click("#stop")
        page.wait_for_selector(".message.assistant .stopped", timeout=20_000)  # the server cancelled it
        idle(page)
        # Through run control (agent.cancel), not by dropping the request.
        assert [(c.kind, c.reason) for c in control.delivered] == [("cancel", "stopped in the browser")]
        assert page.is_hidden("#error") and page.is_hidden("#stop")
        ask(page, "Hi")  # the conversation goes on
        page.wait_for_selector("text=Hello again.", timeout=20_000)
        idle(page)
        page.close()
    release.set()
    assert cleaned == ["slow_count"]  # the cancelled tool's cleanup ran
    assert [m.text for m in chats.held()] == ["Hi", "Hello again."]  # nothing of the stopped round


def test_the_offline_run_of_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    web_chat.outbox.clear()
    web_chat.demo()  # asserts its own outcome: both protocols, the approval, the refused second answer
    out = capsys.readouterr().out
    assert "ai sdk, approved: Email sent to ada@example.com." in out and "409 RunNotWaiting" in out


def test_a_run_paused_on_one_worker_resumes_on_another_once() -> None:
    from tests.store_servers import require_redis

    require_redis()
    root = Path(__file__).resolve().parents[2]
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
