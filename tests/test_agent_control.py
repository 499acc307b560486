"""`Agent(control=...)`: `agent.cancel()` and `if_busy=` reach running invocations in this process, on both
the default LocalRunControl and a SQLiteRunControl, on asyncio and trio."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import (
    Agent,
    AiMessage,
    FinishReason,
    IllegalConfigurationError,
    MemoryBusyError,
    MessageWindowChatMemory,
    ToolContext,
    UserMessage,
    tool,
)
from agentloop.control import LocalRunControl, RunCommand, SQLiteRunControl
from agentloop.testing import ScriptedChatModel
from tests.runtime_helpers import calls


@pytest.fixture(params=["local", "sqlite"])
def control(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "local":
        return LocalRunControl()
    return SQLiteRunControl(str(tmp_path / "control.db"))


class Gate:
    """A tool that blocks until released, telling the test when it started and from which invocation."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.release = anyio.Event()
        self.invocation_id = ""

        @tool
        async def wait_here(ctx: ToolContext) -> str:
            """Waits until the test releases it."""
            self.invocation_id = ctx.invocation_id
            self.started.set()
            await self.release.wait()
            return "released"

        self.tool = wait_here


def blocking_agent(control: Any, gate: Gate, *answers: Any) -> Agent[str]:
    script = [calls(("wait_here", {})), "after the tool", *answers]
    return Agent(
        ScriptedChatModel(script),
        tools=[gate.tool],
        memory=lambda memory_id: MessageWindowChatMemory(id=memory_id),
        control=control,
    )


async def test_agent_cancel_by_memory_id_ends_chat_with_a_cancelled_result(control: Any) -> None:
    gate = Gate()
    agent = blocking_agent(control, gate, "second answer")
    results: list[Any] = []
    async with anyio.create_task_group() as group:

        async def run() -> None:
            results.append(await agent.chat("first", memory_id="m1"))

        group.start_soon(run)
        await gate.started.wait()
        assert await agent.cancel(memory_id="m1", reason="user pressed stop") is True
    (result,) = results
    assert result.finish_reason is FinishReason.CANCELLED
    assert result.cancel_reason == "user pressed stop"
    assert result.content is None and result.invocation_id == gate.invocation_id
    assert result.memory_id == "m1"
    # Nothing of the cancelled round was committed; the memory is valid and the next invocation runs on it.
    assert await agent.cancel(memory_id="m1") is False
    gate.release.set()
    agent.model = ScriptedChatModel(["second answer"])
    again = await agent.chat("second", memory_id="m1")
    assert again.content == "second answer"
    messages = await agent._memory_for("m1").messages()  # type: ignore[union-attr]
    assert isinstance(messages[-1], AiMessage) and messages[-1].text == "second answer"
    assert [m for m in messages if isinstance(m, UserMessage)][-1].text == "second"
    assert all(not isinstance(m, AiMessage) or not m.tool_execution_requests for m in messages)


async def test_agent_cancel_by_invocation_id_ends_a_stream(control: Any) -> None:
    gate = Gate()
    agent = blocking_agent(control, gate)
    stream = agent.stream("go", memory_id="m2")
    async with anyio.create_task_group() as group:

        async def consume() -> None:
            async for _ in stream.events():
                pass

        group.start_soon(consume)
        await gate.started.wait()
        assert await agent.cancel(invocation_id=gate.invocation_id) is True
    result = stream.result
    assert result.finish_reason is FinishReason.CANCELLED and result.cancel_reason is None


async def test_cancel_without_a_running_invocation_is_false_and_needs_one_target(control: Any) -> None:
    agent = Agent(ScriptedChatModel(["hi"]), control=control)
    assert await agent.cancel(memory_id="nobody") is False
    assert await agent.cancel(invocation_id="inv-none") is False
    with pytest.raises(IllegalConfigurationError, match=r"memory_id= or invocation_id= \(got neither\)"):
        await agent.cancel()
    with pytest.raises(IllegalConfigurationError, match=r"\(got both\)"):
        await agent.cancel(memory_id="m", invocation_id="i")


async def test_a_finished_invocation_is_not_cancelled_and_is_unregistered(control: Any) -> None:
    agent = Agent(ScriptedChatModel(["hi"]), memory=lambda m: MessageWindowChatMemory(id=m), control=control)
    result = await agent.chat("hello", memory_id="m3")
    assert result.finish_reason is FinishReason.STOP
    assert await control.send(RunCommand.cancel(), invocation_id=result.invocation_id) is False
    assert await agent.cancel(memory_id="m3") is False


async def test_if_busy_reject_raises_memory_busy_error_naming_the_memory(control: Any) -> None:
    gate = Gate()
    agent = blocking_agent(control, gate)
    async with anyio.create_task_group() as group:

        async def first() -> None:
            await agent.chat("first", memory_id="m6")

        group.start_soon(first)
        await gate.started.wait()
        with pytest.raises(MemoryBusyError, match=r"memory id 'm6'.*if_busy='wait'.*'interrupt'") as caught:
            await agent.chat("second", memory_id="m6", if_busy="reject")
        assert caught.value.memory_id == "m6"
        with pytest.raises(MemoryBusyError):
            await agent.stream("second", memory_id="m6", if_busy="reject").start()
        gate.release.set()
    # Not busy any more: "reject" runs.
    agent.model = ScriptedChatModel(["free now"])
    assert (await agent.chat("third", memory_id="m6", if_busy="reject")).content == "free now"


async def test_if_busy_interrupt_cancels_the_running_invocation_then_runs(control: Any) -> None:
    gate = Gate()
    agent = blocking_agent(control, gate)
    results: list[Any] = []
    async with anyio.create_task_group() as group:

        async def first() -> None:
            results.append(await agent.chat("first", memory_id="m4"))

        group.start_soon(first)
        await gate.started.wait()
        agent.model = ScriptedChatModel(["the newer answer"])
        newer = await agent.chat("newer", memory_id="m4", if_busy="interrupt")
    assert results[0].finish_reason is FinishReason.CANCELLED
    assert (
        results[0].cancel_reason == f"interrupted by invocation {newer.invocation_id} (if_busy='interrupt')"
    )
    assert newer.content == "the newer answer"


async def test_if_busy_wait_serialises_as_before(control: Any) -> None:
    gate = Gate()
    agent = blocking_agent(control, gate, "second answer")
    order: list[str] = []
    async with anyio.create_task_group() as group:

        async def first() -> None:
            order.append((await agent.chat("first", memory_id="m5")).content or "")

        group.start_soon(first)
        await gate.started.wait()

        async def second() -> None:
            order.append((await agent.chat("second", memory_id="m5", if_busy="wait")).content or "")

        group.start_soon(second)
        gate.release.set()
    assert order == ["after the tool", "second answer"]


def test_a_bad_if_busy_is_refused_with_the_values_it_takes() -> None:
    agent = Agent(ScriptedChatModel(["hi"]))
    with pytest.raises(IllegalConfigurationError, match=r"if_busy='queue': choose 'wait'"):
        agent.stream("hi", if_busy="queue")  # type: ignore[arg-type]
    with pytest.raises(IllegalConfigurationError, match="if_busy='later'"):
        agent.chat_sync("hi", if_busy="later")


def test_every_agent_has_its_own_local_control_by_default() -> None:
    first, second = Agent(ScriptedChatModel([])), Agent(ScriptedChatModel([]))
    assert isinstance(first.control, LocalRunControl) and first.control is not second.control
