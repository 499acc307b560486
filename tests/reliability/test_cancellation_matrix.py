"""The cancellation contract, as a matrix: each way of stopping a run x each await point it can be stopped at
x each memory store, streamed and not.

Ways: `stream.cancel()` / `agent.cancel()` (at once), `cancel(after_round=True)`, and the caller's own cancel
scope. Points: an async tool, a sync tool (in a worker thread), the model call before its first token, an
approval handler's wait, a tool of an agent used as a tool (and, below, after the first token and a
structured-output answer). Each
case checks what docs/runtime.md "Stopping and steering a run" promises: the Result (CANCELLED, the reason),
the memory (provider-valid; nothing of the round in flight at once, the whole round after it), the tools'
`finally` blocks ran, no task left behind, and the next invocation on the same memory id works.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from agentloop import (
    Agent,
    AgentLoopError,
    AiMessage,
    ChatRequest,
    FinishReason,
    MessageWindowChatMemory,
    PartialResponse,
    Result,
    ToolApprovalRequest,
    ToolExecutionRequest,
    tool,
)
from agentloop.testing import ScriptedChatModel
from tests.reliability._support import memory_problem, running_tasks

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

WAYS = ["cancel", "after_round", "scope"]
POINTS = ["async_tool", "sync_tool", "model_before_first_token", "approval", "agent_as_tool"]
STORES = ["in_memory", "sqlite"]


def job_call(name: str) -> AiMessage:
    arguments = {"request": "work"} if name == "worker" else {"n": 1}
    return AiMessage(tool_execution_requests=[ToolExecutionRequest("c1", name, json.dumps(arguments))])


class Blocker:
    """Where the run waits: `started` once it got there, `release()` lets it go on; counts cleanups."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.gate = anyio.Event()
        self.thread_gate = threading.Event()
        self.cleaned = threading.Event()

    def release(self) -> None:
        self.gate.set()
        self.thread_gate.set()

    def tools(self, point: str) -> list[Any]:
        if point == "sync_tool":
            token = anyio.lowlevel.current_token()

            @tool
            def job(n: int) -> str:
                """Runs a job (in a worker thread)."""
                anyio.from_thread.run_sync(self.started.set, token=token)
                try:
                    self.thread_gate.wait(30)
                    return f"job {n} done"
                finally:
                    self.cleaned.set()

            return [job]

        blocks = point in ("async_tool", "agent_as_tool")

        @tool(requires_approval=point == "approval")
        async def job(n: int) -> str:  # type: ignore[no-redef]
            """Runs a job."""
            if blocks:
                self.started.set()
            try:
                if blocks:
                    await self.gate.wait()
                return f"job {n} done"
            finally:
                self.cleaned.set()

        if point != "agent_as_tool":
            return [job]
        inner = Agent(ScriptedChatModel([job_call("job"), "inner done"]), tools=[job], name="worker")
        return [inner.as_tool(description="Does the work")]

    def options(self, point: str) -> dict[str, Any]:
        """The agent's options for `point`: an approval handler that waits there."""
        if point != "approval":
            return {}

        async def decide(request: ToolApprovalRequest) -> bool:
            self.started.set()
            await self.gate.wait()
            return True

        return {"approval_handler": decide}

    def first_answer(self, point: str) -> Any:
        call = job_call("worker") if point == "agent_as_tool" else job_call("job")
        if point != "model_before_first_token":
            return call

        async def answer(request: ChatRequest) -> AiMessage:
            self.started.set()
            await self.gate.wait()
            return call

        return answer


def memory_for(store: str, tmp_path: Path) -> tuple[Any, Any]:
    if store == "in_memory":
        return MessageWindowChatMemory.provider(50), None
    from agentloop.stores import SQLiteChatMemoryStore

    sqlite = SQLiteChatMemoryStore(tmp_path / "memory.db")
    return MessageWindowChatMemory.provider(50, store=sqlite), sqlite


async def stored(agent: Agent, memory_id: str) -> list[str]:
    memory = agent._memory_for(memory_id)
    assert memory is not None
    messages = await memory.messages()
    assert memory_problem(messages) is None, memory_problem(messages)
    return [type(m).__name__ for m in messages]


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("streamed", [True, False])
async def test_cancel_each_way_at_each_point(
    way: str, point: str, store: str, streamed: bool, tmp_path: Path
) -> None:
    blocker = Blocker()
    memory, sqlite = memory_for(store, tmp_path)
    model = ScriptedChatModel([blocker.first_answer(point), "never"])
    agent = Agent(model, tools=blocker.tools(point), memory=memory, **blocker.options(point))
    before = running_tasks()
    result: Result | None = None
    scope = anyio.CancelScope()

    async def stop_it() -> None:
        await blocker.started.wait()
        if way == "scope":
            scope.cancel()
        elif streamed:
            await stream.cancel(after_round=way == "after_round", reason="stop")
        else:
            assert await agent.cancel(memory_id="m", after_round=way == "after_round", reason="stop")
        blocker.release()

    async with anyio.create_task_group() as group:
        group.start_soon(stop_it)
        with scope:
            if streamed:
                stream = agent.stream("Work", memory_id="m")
                result = await stream.start()
            else:
                result = await agent.chat("Work", memory_id="m")

    if way == "scope":
        assert result is None and scope.cancelled_caught
    else:
        assert result is not None and result.finish_reason is FinishReason.CANCELLED
        assert result.cancel_reason == "stop" and result.content is None
    if way == "after_round":
        assert len(model.requests) == 1  # the round finished, the model was not called again
        assert await stored(agent, "m") == ["UserMessage", "AiMessage", "ToolExecutionResultMessage"]
        assert result is not None and len(result.tool_executions) == 1
        done = result.tool_executions[0]
        assert not done.is_error and (done.result == "job 1 done" or point == "agent_as_tool")
    else:
        assert await stored(agent, "m") == []  # nothing of the round in flight, the question included
    if point in ("async_tool", "sync_tool", "agent_as_tool") or way == "after_round":
        # The tool's finally block ran (a sync tool's once its thread returned).
        assert await anyio.to_thread.run_sync(blocker.cleaned.wait, 30)
    assert running_tasks() <= before

    # The memory id goes on.
    agent.model = ScriptedChatModel(["again"])  # type: ignore[misc]
    again = await agent.chat("Next", memory_id="m")
    assert again.content == "again" and again.finish_reason is not FinishReason.CANCELLED
    kinds = await stored(agent, "m")
    assert kinds[-2:] == ["UserMessage", "AiMessage"]
    if sqlite is not None:
        sqlite.close()


@pytest.mark.parametrize("way", WAYS)
async def test_cancel_each_way_after_the_first_token(way: str) -> None:
    model = ScriptedChatModel(["a long answer that streams word by word, " * 20], chunk_size=2, delay=0.001)
    agent = Agent(model, memory=MessageWindowChatMemory.provider(50))
    before = running_tasks()
    pieces: list[str] = []
    with anyio.CancelScope() as scope:
        stream = agent.stream("Talk", memory_id="m")
        async for event in stream.events():
            if isinstance(event, PartialResponse):
                pieces.append(event.text)
                if len(pieces) == 1:
                    if way == "scope":
                        scope.cancel()
                    else:
                        await stream.cancel(after_round=way == "after_round", reason="stop")
    if way == "scope":
        assert scope.cancelled_caught
        with pytest.raises(AgentLoopError, match="has not finished"):  # no Result: the caller left
            stream.result
        assert await stored(agent, "m") == []
    elif way == "cancel":
        result = stream.result
        assert result.finish_reason is FinishReason.CANCELLED and result.cancel_reason == "stop"
        assert len(pieces) < 100 and await stored(agent, "m") == []
    else:  # the final answer simply finishes (docs/runtime.md) and commits
        result = stream.result
        assert result.finish_reason is FinishReason.STOP
        assert "".join(pieces) == result.content == model.responses[0]
        assert await stored(agent, "m") == ["UserMessage", "AiMessage"]
    assert running_tasks() <= before
    agent.model = ScriptedChatModel(["again"])  # type: ignore[misc]
    assert (await agent.chat("Next", memory_id="m")).content == "again"


class Invoice(BaseModel):
    """A structured answer."""

    customer: str
    total: float


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("streamed", [True, False])
async def test_cancel_each_way_while_the_model_writes_structured_output(way: str, streamed: bool) -> None:
    """A committed tool round stays; the output round in flight is dropped at once, or finishes after it."""
    blocker = Blocker()
    output_call = ToolExecutionRequest("c2", "final_result", '{"customer": "Acme", "total": 99.5}')

    async def answer(request: ChatRequest) -> AiMessage:
        blocker.started.set()
        await blocker.gate.wait()
        return AiMessage(tool_execution_requests=[output_call])

    model = ScriptedChatModel([job_call("job"), answer])
    agent = Agent(
        model,
        tools=blocker.tools("model_before_first_token"),
        memory=MessageWindowChatMemory.provider(50),
        output_type=Invoice,
    )
    before = running_tasks()
    result: Result[Invoice] | None = None
    scope = anyio.CancelScope()

    async def stop_it() -> None:
        await blocker.started.wait()
        if way == "scope":
            scope.cancel()
        else:
            assert await agent.cancel(memory_id="m", after_round=way == "after_round", reason="stop")
        blocker.release()

    async with anyio.create_task_group() as group:
        group.start_soon(stop_it)
        with scope:
            if streamed:
                result = await agent.stream("Invoice", memory_id="m").start()
            else:
                result = await agent.chat("Invoice", memory_id="m")
    tool_round = ["UserMessage", "AiMessage", "ToolExecutionResultMessage"]
    if way == "scope":
        assert result is None and scope.cancelled_caught
        assert await stored(agent, "m") == tool_round
    elif way == "cancel":
        assert result is not None and result.finish_reason is FinishReason.CANCELLED
        assert result.output is None and await stored(agent, "m") == tool_round
    else:
        assert result is not None and result.output == Invoice(customer="Acme", total=99.5)
        assert (await stored(agent, "m"))[:3] == tool_round
    assert running_tasks() <= before
    again = ToolExecutionRequest("c3", "final_result", output_call.arguments)
    agent.model = ScriptedChatModel([AiMessage(tool_execution_requests=[again])])  # type: ignore[misc]
    assert (await agent.chat("Again", memory_id="m")).output == Invoice(customer="Acme", total=99.5)
