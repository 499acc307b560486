"""The web apps' `if_busy=`: a request on a conversation whose answer is still being written (another tab,
another worker) is refused with a 409 (`reject`), stops that run and answers instead (`interrupt`), or
waits (`wait`, the default). In process over ASGI, on asyncio and trio; the OpenAI endpoint through httpx2."""

from __future__ import annotations

import functools
import json
from typing import Any

import anyio
import httpx2
import pytest

from agentloop import (
    Agent,
    AiMessage,
    FinishReason,
    IllegalConfigurationError,
    MessageWindowChatMemory,
    ToolExecutionRequest,
    tool,
)
from agentloop.testing import ScriptedChatModel
from agentloop.ui import ag_ui_app, openai_app, vercel_ai_app
from tests.integrations.test_ui import Exchange, chat


class Slow:
    """A tool that runs until released."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.release = anyio.Event()

        @tool
        async def crawl(site: str) -> str:
            """Crawls a site."""
            self.started.set()
            await self.release.wait()
            return "crawled"

        self.tool = crawl


CRAWL = AiMessage(tool_execution_requests=[ToolExecutionRequest("c1", "crawl", json.dumps({"site": "x"}))])


def agent_for(slow: Slow, answers: list[Any]) -> Agent:
    return Agent(ScriptedChatModel(answers), tools=[slow.tool], memory=MessageWindowChatMemory.provider(20))


def ag_ui_run(text: str) -> dict[str, Any]:
    return {"threadId": "t", "runId": "r", "messages": [{"id": "1", "role": "user", "content": text}]}


@pytest.mark.parametrize("app_kind", ["vercel", "ag_ui"])
async def test_reject_answers_409_while_the_conversation_runs(app_kind: str) -> None:
    slow = Slow()
    agent = agent_for(slow, [CRAWL, "done"])
    if app_kind == "vercel":
        app = vercel_ai_app(agent, memory_id=lambda r: r.headers["x-user"], if_busy="reject")
        body: Any = chat("And also this")
    else:
        app = ag_ui_app(agent, memory_id=lambda r: r.headers["x-user"], if_busy="reject")
        body = ag_ui_run("And also this")
    async with anyio.create_task_group() as group:
        group.start_soon(functools.partial(agent.chat, "Crawl x", memory_id="ada"))
        await slow.started.wait()
        refused = await Exchange(body).run(app)
        slow.release.set()
    assert refused.status == 409 and refused.json()["type"] == "MemoryBusy"
    assert "'ada'" in refused.json()["message"]
    # Once it finished, the same request goes through.
    agent.model = ScriptedChatModel(["Sure."])  # type: ignore[misc]
    accepted = await Exchange(body).run(app)
    assert accepted.status == 200


async def test_interrupt_stops_the_running_answer_and_answers_the_new_message() -> None:
    slow = Slow()
    agent = agent_for(slow, [CRAWL, "The new answer."])
    app = vercel_ai_app(agent, memory_id=lambda r: r.headers["x-user"], if_busy="interrupt")
    first: dict[str, Any] = {}

    async def run_first() -> None:
        first["result"] = await agent.chat("Crawl x", memory_id="ada")

    async with anyio.create_task_group() as group:
        group.start_soon(run_first)
        await slow.started.wait()
        answered = await Exchange(chat("Never mind, say hi")).run(app)
    assert first["result"].finish_reason is FinishReason.CANCELLED
    chunks = [c for c in answered.chunks() if isinstance(c, dict)]  # the last one is "[DONE]"
    text = "".join(c["delta"] for c in chunks if c.get("type") == "text-delta")
    assert answered.status == 200 and text == "The new answer."
    memory = agent.memory("ada")  # type: ignore[operator]
    assert [m.text for m in await memory.messages()] == ["Never mind, say hi", "The new answer."]


async def test_the_openai_endpoint_answers_409_memory_busy() -> None:
    slow = Slow()
    agent = agent_for(slow, [CRAWL, "done"])
    app = openai_app(agent, if_busy="reject")
    body = {"model": "agentloop", "messages": [{"role": "user", "content": "me too"}], "user": "ada"}
    async with anyio.create_task_group() as group:
        group.start_soon(functools.partial(agent.chat, "Crawl x", memory_id="ada"))
        await slow.started.wait()
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://app") as client:
            refused = await client.post("/v1/chat/completions", json=body)
        slow.release.set()
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "memory_busy" and "'ada'" in error["message"]


def test_apps_check_if_busy_when_built() -> None:
    agent = Agent(ScriptedChatModel([]), memory=MessageWindowChatMemory.provider(5))
    for build in (
        functools.partial(vercel_ai_app, agent, memory_id=lambda r: "a"),
        functools.partial(ag_ui_app, agent, memory_id=lambda r: "a"),
        functools.partial(openai_app, agent),
    ):
        with pytest.raises(
            IllegalConfigurationError, match="choose 'wait', 'steer', 'interrupt' or 'reject'"
        ):
            build(if_busy="queue")
