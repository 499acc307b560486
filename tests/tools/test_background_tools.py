"""Background tools (`@tool(background=True)`): the model hears at once that the task started; the result
reaches it later as a user message "background task <id> (<tool>) finished: ...": in the same invocation
(which waits for its own tasks outside `async with agent:`), steered into the invocation running on the
memory id, or committed before the next invocation's user message. Both anyio backends, streamed and not,
in-memory and SQLite memories."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import (
    Agent,
    AiMessage,
    BackgroundTask,
    BackgroundTaskFinished,
    BackgroundTaskStarted,
    ChatMessage,
    IllegalConfigurationError,
    MessageWindowChatMemory,
    Result,
    Tool,
    ToolContext,
    ToolExecutionRequest,
    ToolSpecification,
    UserMessage,
    tool,
)
from agentloop.stores import RedisChatMemoryStore, SQLiteChatMemoryStore
from agentloop.testing import ScriptedChatModel
from tests.store_servers import redis_url  # noqa: F401  (the fixture)

pytestmark = pytest.mark.anyio


def call(name: str, call_id: str = "c1", **args: Any) -> AiMessage:
    return AiMessage(tool_execution_requests=[ToolExecutionRequest(call_id, name, json.dumps(args))])


def texts(messages: list[ChatMessage]) -> list[str]:
    return [m.text for m in messages if isinstance(m, UserMessage)]


class Gate:
    """A background tool that waits until the test opens its gate, then returns `n * 2` (or raises)."""

    def __init__(self) -> None:
        self.open = anyio.Event()

    @tool(background=True)
    async def double(self, n: int) -> int:
        """Doubles n, slowly."""
        await self.open.wait()
        if n < 0:
            raise ValueError(f"cannot double {n}")
        return n * 2


async def open_after(model: ScriptedChatModel, gate: Gate, requests: int) -> None:
    """Opens the gate once the model got `requests` requests (it heard the task started)."""
    while len(model.requests) < requests:
        await anyio.sleep(0.001)
    gate.open.set()


async def run(agent: Agent[Any], message: str, streamed: bool, **kw: Any) -> tuple[Result[Any], list[Any]]:
    if not streamed:
        return await agent.chat(message, **kw), []
    stream = agent.stream(message, **kw)
    events = [e async for e in stream.events()]
    return stream.result, events


@pytest.mark.parametrize("streamed", [False, True], ids=["chat", "stream"])
async def test_the_model_hears_at_once_and_the_invocation_waits_for_its_own_task(streamed: bool) -> None:
    gate = Gate()
    model = ScriptedChatModel([call("double", n=21), "It started; I will tell you.", "The answer is 42."])
    agent = Agent(model, tools=[gate])

    async with anyio.create_task_group() as group:
        group.start_soon(open_after, model, gate, 2)
        result, events = await run(agent, "double 21", streamed)

    assert result.content == "The answer is 42."
    [task] = result.background_tasks
    assert isinstance(task, BackgroundTask)
    assert (task.status, task.result, task.tool_name, task.call_id, task.delivered) == (
        "finished", "42", "double", "c1", True,
    )  # fmt: skip
    execution = result.tool_executions[0]
    assert execution.result.startswith(f"Started background task {task.task_id} (double)")
    assert execution.result_object is task
    told = texts(list(model.requests[2].messages))[-1]
    assert told == f"background task {task.task_id} (double) finished: 42"
    if streamed:
        started = [e for e in events if isinstance(e, BackgroundTaskStarted)]
        finished = [e for e in events if isinstance(e, BackgroundTaskFinished)]
        assert started == [BackgroundTaskStarted(task.task_id, "c1", "double")]
        assert [(e.task_id, e.status, e.result) for e in finished] == [(task.task_id, "finished", "42")]
        assert events.index(started[0]) < events.index(finished[0])


async def test_a_failing_task_delivers_its_error_like_a_tool_error() -> None:
    gate = Gate()
    model = ScriptedChatModel([call("double", n=-1), "Started.", "It failed."])
    async with anyio.create_task_group() as group:
        group.start_soon(open_after, model, gate, 2)
        result = await Agent(model, tools=[gate]).chat("double -1")
    [task] = result.background_tasks
    assert task.status == "failed" and isinstance(task.error, ValueError)
    assert task.result == "cannot double -1"
    assert texts(list(model.requests[2].messages))[-1] == (
        f"background task {task.task_id} (double) failed with an error: cannot double -1"
    )


def memories(kind: str, tmp_path: Path) -> Any:
    if kind == "memory":
        return MessageWindowChatMemory.provider(50)
    return MessageWindowChatMemory.provider(50, store=SQLiteChatMemoryStore(str(tmp_path / "m.db")))


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("streamed", [False, True], ids=["chat", "stream"])
async def test_in_an_entered_agent_the_task_outlives_its_invocation_and_the_next_one_gets_the_result(
    kind: str, streamed: bool, tmp_path: Path
) -> None:
    gate = Gate()
    model = ScriptedChatModel([call("double", n=5), "Started it.", "It was 10."])
    async with Agent(model, tools=[gate], memory=memories(kind, tmp_path)) as agent:
        first, _ = await run(agent, "double 5", streamed, memory_id="u1")
        [task] = first.background_tasks
        assert task.status == "running"  # the invocation returned without waiting
        gate.open.set()
        await task.wait()  # nothing runs on u1: its memory takes the result at once
        assert task.status == "finished" and task.delivered
        second, _ = await run(agent, "so?", streamed, memory_id="u1")
    assert second.content == "It was 10."
    assert task.delivered
    sent = texts(list(model.requests[2].messages))
    assert sent[-2:] == [f"background task {task.task_id} (double) finished: 10", "so?"]
    # Committed to memory, in order, before the new user message: later invocations see it too.
    stored = texts(list(await agent._memory_for("u1").messages()))  # type: ignore[union-attr]
    assert stored == ["double 5", f"background task {task.task_id} (double) finished: 10", "so?"]


async def test_a_result_is_steered_into_the_invocation_running_on_the_memory_id() -> None:
    gate = Gate()
    tasks: list[BackgroundTask] = []

    @tool
    async def wait_for_it() -> str:
        """Lets the background task finish and waits until it has."""
        gate.open.set()
        await tasks[0].wait()
        return "waited"

    model = ScriptedChatModel(
        [call("double", n=4), "Started.", call("wait_for_it", "c2"), "Got 8 meanwhile."]
    )
    async with Agent(model, tools=[gate, wait_for_it], memory=MessageWindowChatMemory.provider(50)) as agent:
        first = await agent.chat("double 4", memory_id="u")
        tasks.extend(first.background_tasks)
        second = await agent.chat("wait for it", memory_id="u")
    assert second.content == "Got 8 meanwhile."
    assert tasks[0].delivered
    # Added after the round of wait_for_it, before the next model call.
    last = list(model.requests[3].messages)
    assert texts(last)[-1] == f"background task {tasks[0].task_id} (double) finished: 8"
    assert texts(last)[-2] == "wait for it"


async def test_closing_the_agent_cancels_its_running_tasks() -> None:
    gate = Gate()  # never opened
    model = ScriptedChatModel([call("double", n=1), "Started."])
    async with Agent(model, tools=[gate]) as agent:
        result = await agent.chat("double 1")
    [task] = result.background_tasks
    assert task.status == "cancelled" and task.done and not task.delivered


async def test_cancelling_the_invocation_leaves_an_entered_agents_tasks_running() -> None:
    gate = Gate()
    model = ScriptedChatModel([call("double", n=3), call("double", "c2", n=4)])

    @tool
    async def never() -> str:
        """Blocks."""
        await anyio.sleep_forever()
        return ""

    async with Agent(model, tools=[gate], memory=MessageWindowChatMemory.provider(50)) as agent:
        stream = agent.stream("double 3", memory_id="x")
        seen: list[BackgroundTaskStarted] = []
        async for event in stream.events():
            if isinstance(event, BackgroundTaskStarted):
                seen.append(event)
                await stream.cancel()
        result = stream.result
        [task] = result.background_tasks
        assert task.status == "running"
        gate.open.set()
        await task.wait()
        assert task.status == "finished"
    assert seen and seen[0].task_id == task.task_id


async def test_a_programmatic_tool_can_run_in_the_background() -> None:
    async def executor(request: ToolExecutionRequest, ctx: ToolContext) -> str:
        return f"echo {request.arguments}"

    echo = Tool(ToolSpecification(name="echo", description="Echoes"), executor, background=True)
    model = ScriptedChatModel([call("echo", x=1), "Started.", "Echoed."])
    result = await Agent(model, tools=[echo]).chat("go")
    [task] = result.background_tasks
    assert task.result == 'echo {"x": 1}'
    assert echo.background


def test_background_must_be_a_bool() -> None:
    with pytest.raises(IllegalConfigurationError, match="background must be True or False"):

        @tool(background="yes")  # type: ignore[call-overload]
        def f() -> None: ...

    with pytest.raises(IllegalConfigurationError, match="background must be True or False"):
        Tool(ToolSpecification(name="e"), lambda r, c: "", background=1)  # type: ignore[arg-type]


async def test_outside_an_agent_a_background_tool_runs_as_an_ordinary_one() -> None:
    from agentloop import execute_tool_calls

    gate = Gate()
    gate.open.set()
    [execution] = await execute_tool_calls([ToolExecutionRequest("c", "double", '{"n": 2}')], tools=[gate])
    assert execution.result == "4"


Durable = Callable[[ScriptedChatModel, Gate], Agent[Any]]


@pytest.fixture(params=["sqlite", "redis"])
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Durable:
    """Builds agents over one store that outlives them: the SQLite file, or a real redis-server."""
    if request.param == "sqlite":
        path = str(tmp_path / "memory.db")

        def store() -> Any:
            return SQLiteChatMemoryStore(path)
    else:
        url = request.getfixturevalue("redis_url")
        prefix = f"bg{secrets.token_hex(4)}"

        def store() -> Any:
            return RedisChatMemoryStore(url, prefix=prefix)

    def agent(model: ScriptedChatModel, gate: Gate) -> Agent[Any]:
        return Agent(model, tools=[gate], memory=MessageWindowChatMemory.provider(50, store=store()))

    return agent


async def test_a_result_finished_before_a_restart_reaches_the_next_invocation_of_a_fresh_agent(
    durable: Durable,
) -> None:
    gate = Gate()
    async with durable(ScriptedChatModel([call("double", n=6), "Started."]), gate) as agent:
        [task] = (await agent.chat("double 6", memory_id="u")).background_tasks
        gate.open.set()
        await task.wait()  # committed to the SQLite memory: nothing ran on "u"
    model = ScriptedChatModel(["It was 12."])
    async with durable(model, Gate()) as fresh:  # "after the restart"
        result = await fresh.chat("and?", memory_id="u")
    assert result.content == "It was 12."
    assert texts(list(model.requests[0].messages))[-2:] == [
        f"background task {task.task_id} (double) finished: 12",
        "and?",
    ]


async def test_a_task_still_running_when_its_process_stopped_is_reported_lost(
    durable: Durable,
) -> None:
    async with durable(ScriptedChatModel([call("double", n=1), "Started."]), Gate()) as agent:
        [task] = (await agent.chat("double 1", memory_id="u")).background_tasks
    assert task.status == "cancelled"  # the "process" ended while it ran
    model = ScriptedChatModel(["It was lost; shall I start it again?"])
    fresh = durable(model, Gate())
    await fresh.chat("and?", memory_id="u")
    lost = f"background task {task.task_id} (double) was lost"
    sent = texts(list(model.requests[0].messages))
    assert sent[-2].startswith(lost) and sent[-1] == "and?"
    # Reported once: the next invocation finds the outcome in memory.
    model.responses.append("ok")
    await fresh.chat("again", memory_id="u")
    assert sum(text.startswith(lost) for text in texts(list(model.requests[1].messages))) == 1


async def test_without_a_memory_id_a_late_result_stays_on_its_record() -> None:
    gate = Gate()
    model = ScriptedChatModel([call("double", n=7), "Started."])
    async with Agent(model, tools=[gate]) as agent:
        [task] = (await agent.chat("double 7")).background_tasks
        gate.open.set()
        await task.wait()
    assert (task.status, task.result, task.delivered) == ("finished", "14", False)
    assert len(model.requests) == 2  # nobody was called to hear it


@tool(background=True)
def sync_square(n: int) -> int:
    """A sync tool: it runs in a worker thread."""
    return n * n


@tool(background=True, timeout=0.01)
async def never_done() -> str:
    """Slower than its timeout."""
    await anyio.sleep_forever()
    return ""


async def test_a_sync_tool_runs_in_the_background_and_a_timeout_bounds_the_work() -> None:
    # When each result is read (after the round, or once the model answered) is up to the scheduler: the
    # script has answers for every case.
    calls_ = AiMessage(
        tool_execution_requests=[
            ToolExecutionRequest("c1", "sync_square", '{"n": 3}'),
            ToolExecutionRequest("c2", "never_done", "{}"),
        ]
    )
    model = ScriptedChatModel([calls_, "A.", "B.", "C."])
    stream = Agent(model, tools=[sync_square, never_done]).stream("go")
    events = [e async for e in stream.events()]
    first, second = stream.result.background_tasks
    assert (first.status, first.result, first.delivered) == ("finished", "9", True)
    assert second.status == "failed" and isinstance(second.error, TimeoutError) and second.delivered
    sent = texts(list(model.requests[-1].messages))
    assert f"background task {first.task_id} (sync_square) finished: 9" in sent
    assert f"background task {second.task_id} (never_done) failed with an error: " in "".join(sent)
    # Each call's BackgroundTaskStarted comes before its ToolExecuted.
    names = ("BackgroundTaskStarted", "ToolExecuted")
    order = [(type(e).__name__, getattr(e, "call_id", None) or e.execution.request.id) for e in events
             if type(e).__name__ in names]  # fmt: skip
    for call_id in ("c1", "c2"):
        assert [n for n, c in order if c == call_id] == list(names)
