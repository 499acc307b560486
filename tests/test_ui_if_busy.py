"""The web apps' `if_busy=`: "reject" answers 409 with a JSON error while an invocation runs on the memory
id, "interrupt" cancels it and runs; a client that disconnects ends (and unregisters) its run."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentloop import Agent, IllegalConfigurationError, MessageWindowChatMemory
from agentloop.testing import ScriptedChatModel
from agentloop.ui import ag_ui_app, openai_app, vercel_ai_app
from tests.runtime_helpers import calls
from tests.test_agent_control import Gate
from tests.test_ui import Exchange, chat


def gated_agent(gate: Gate) -> Agent[str]:
    model = ScriptedChatModel([calls(("wait_here", {})), "after the tool"])
    return Agent(model, tools=[gate.tool], memory=MessageWindowChatMemory.provider(20))


def user(request: Any) -> str:
    return str(request.headers["x-user"])


def ag_ui_body(question: str) -> dict[str, Any]:
    return {"threadId": "t", "runId": "r", "messages": [{"id": "1", "role": "user", "content": question}]}


def openai_exchange(question: str, **options: Any) -> Exchange:
    exchange = Exchange(
        {"model": "agentloop", "messages": [{"role": "user", "content": question}]}, **options
    )
    exchange.scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "headers": [(b"x-memory-id", b"ada"), (b"content-type", b"application/json")],
    }
    return exchange


@pytest.mark.parametrize("kind", ["vercel", "ag_ui", "openai"])
async def test_reject_answers_409_with_a_json_error_while_the_memory_is_busy(kind: str) -> None:
    gate = Gate()
    agent = gated_agent(gate)
    if kind == "vercel":
        app: Any = vercel_ai_app(agent, memory_id=user, if_busy="reject")
        first, second = Exchange(chat("first")), Exchange(chat("second"))
    elif kind == "ag_ui":
        app = ag_ui_app(agent, memory_id=user, if_busy="reject")
        first, second = Exchange(ag_ui_body("first")), Exchange(ag_ui_body("second"))
    else:
        app = openai_app(agent, if_busy="reject")
        first, second = openai_exchange("first"), openai_exchange("second")
    async with anyio.create_task_group() as group:
        group.start_soon(first.run, app)
        await gate.started.wait()
        await second.run(app)
        gate.release.set()
    assert first.status == 200
    assert second.status == 409
    body = second.json()
    said = body["error"]["message"] if kind == "openai" else body["message"]
    assert "memory id 'ada'" in said and "if_busy='reject'" in said
    if kind == "openai":
        assert body["error"]["code"] == "memory_busy"
    else:
        assert body["type"] == "MemoryBusy"
    messages = await agent.memory("ada").messages()  # type: ignore[operator]
    assert [m.text for m in messages if m.text][:1] == ["first"] and "second" not in [
        m.text for m in messages
    ]


async def test_interrupt_cancels_the_running_request_and_answers_the_new_one() -> None:
    gate = Gate()
    agent = gated_agent(gate)
    app = vercel_ai_app(agent, memory_id=user, if_busy="interrupt")
    first, second = Exchange(chat("first")), Exchange(chat("second"))
    async with anyio.create_task_group() as group:
        group.start_soon(first.run, app)
        await gate.started.wait()
        agent.model = ScriptedChatModel(["the newer answer"])
        await second.run(app)
    assert first.status == 200 and second.status == 200
    deltas = [c["delta"] for c in second.chunks() if c != "[DONE]" and c["type"] == "text-delta"]
    assert "".join(deltas) == "the newer answer"
    assert first.chunks()[-2] == {"type": "finish", "finishReason": "other"}  # the AI SDK has no "cancelled"
    messages = await agent.memory("ada").messages()  # type: ignore[operator]
    assert [m.text for m in messages] == ["second", "the newer answer"]


async def test_a_client_disconnect_ends_and_unregisters_its_run() -> None:
    gate = Gate()
    agent = gated_agent(gate)
    app = vercel_ai_app(agent, memory_id=user)
    exchange = Exchange(chat("first"))
    async with anyio.create_task_group() as group:
        group.start_soon(exchange.run, app)
        await gate.started.wait()
        exchange.gone.set()  # the page goes away mid-run
    assert await agent.cancel(memory_id="ada") is False  # nothing runs on the memory any more
    assert await agent.memory("ada").messages() == []  # type: ignore[operator]


def test_a_bad_if_busy_is_refused_when_the_app_is_built() -> None:
    agent = Agent(ScriptedChatModel([]), memory=MessageWindowChatMemory.provider(20))
    with pytest.raises(IllegalConfigurationError, match="if_busy='queue'"):
        vercel_ai_app(agent, memory_id=user, if_busy="queue")  # type: ignore[arg-type]
    with pytest.raises(IllegalConfigurationError, match="if_busy='queue'"):
        openai_app(agent, if_busy="queue")  # type: ignore[arg-type]
