"""Run control of a running invocation: `stream.cancel()` (at once, or after the round in flight),
`stream.steer()`, `agent.cancel()` / `agent.steer()` through the agent's run control (in this process and
from another one, over SQLite and a real redis-server), and `if_busy=` for a second invocation on a busy
memory id. Each way checks what a user relies on: the Result says CANCELLED and why, memory stays valid for
the provider (and holds what docs/runtime.md says), tools' cleanup runs, nothing is left running, and the
next invocation on the memory id works. Both anyio backends."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import (
    Agent,
    AgentLoopError,
    AiMessage,
    BeforeToolExecution,
    FinishReason,
    IllegalConfigurationError,
    MemoryBusyError,
    MessageWindowChatMemory,
    Middleware,
    PartialResponse,
    RoundEnd,
    ToolExecutionRequest,
    UserMessage,
    tool,
)
from agentloop.control import LocalRunControl, SQLiteRunControl
from agentloop.testing import ScriptedChatModel
from tests.reliability._support import memory_problem, running_tasks
from tests.store_servers import redis_server

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


class Job:
    """A tool that blocks until released, recording that its cleanup ran."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.release = anyio.Event()
        self.cleaned = 0

        @tool
        async def job(n: int) -> str:
            """Runs a job."""
            self.started.set()
            try:
                await self.release.wait()
                return f"job {n} done"
            finally:
                self.cleaned += 1

        self.tool = job


def calls(*ns: int) -> AiMessage:
    return AiMessage(
        tool_execution_requests=[ToolExecutionRequest(f"c{n}", "job", json.dumps({"n": n})) for n in ns]
    )


def agent_with(job: Job, answers: list[Any], **options: Any) -> tuple[Agent, ScriptedChatModel]:
    model = ScriptedChatModel(answers)
    memory = options.pop("memory", MessageWindowChatMemory.provider(50))
    return Agent(model, tools=[job.tool], memory=memory, **options), model


async def memory_of(agent: Agent, memory_id: str) -> list[Any]:
    memory = agent._memory_for(memory_id)
    assert memory is not None
    messages = await memory.messages()
    assert memory_problem(messages) is None, memory_problem(messages)
    return messages


def kinds(messages: list[Any]) -> list[str]:
    return [type(m).__name__ for m in messages]


# -- cancel at once ------------------------------------------------------------------------------------


async def test_stream_cancel_during_a_tool_commits_nothing_of_the_round_and_runs_its_cleanup() -> None:
    job = Job()
    agent, _ = agent_with(job, [calls(1), "never"])
    before = running_tasks()
    stream = agent.stream("Run it", memory_id="m")
    async for event in stream.events():
        if isinstance(event, BeforeToolExecution):
            await job.started.wait()
            await stream.cancel(reason="the user pressed Stop")
    result = stream.result
    assert result is not None and result.finish_reason is FinishReason.CANCELLED
    assert result.cancel_reason == "the user pressed Stop" and result.content is None
    assert result.final_response is not None and result.final_response.finish_reason is FinishReason.CANCELLED
    assert job.cleaned == 1 and result.messages == ()
    assert await memory_of(agent, "m") == []  # the round in flight (with the question) was not committed
    assert running_tasks() <= before
    # The memory id goes on: the next invocation runs as usual.
    job.release.set()
    agent.model = ScriptedChatModel([calls(2), "done"])  # type: ignore[misc]
    again = await agent.chat("Run it again", memory_id="m")
    assert again.content == "done"
    assert kinds(await memory_of(agent, "m")) == [
        "UserMessage",
        "AiMessage",
        "ToolExecutionResultMessage",
        "AiMessage",
    ]


async def test_cancel_while_the_model_streams_its_answer() -> None:
    agent = Agent(ScriptedChatModel(["a long answer that streams word by word"], chunk_size=2, delay=0.001))
    stream = agent.stream("Talk")
    pieces = []
    async for event in stream.events():
        if isinstance(event, PartialResponse):
            pieces.append(event.text)
            if len(pieces) == 2:
                await stream.cancel()
    result = stream.result
    assert (
        result is not None and result.finish_reason is FinishReason.CANCELLED and result.cancel_reason is None
    )
    assert len(pieces) < 10  # it stopped: the rest of the answer never came


async def test_a_round_committed_before_the_cancel_stays_and_the_result_lists_it() -> None:
    job = Job()
    job.release.set()
    second = Job()  # the second round blocks
    model = ScriptedChatModel(
        [calls(1), AiMessage(tool_execution_requests=[ToolExecutionRequest("d", "block", "{}")]), "x"]
    )

    @tool
    async def block() -> str:
        """Blocks."""
        second.started.set()
        await anyio.sleep_forever()
        return "never"

    agent = Agent(model, tools=[job.tool, block], memory=MessageWindowChatMemory.provider(50))
    async with anyio.create_task_group() as group:

        async def cancel_when_blocked() -> None:
            await second.started.wait()
            assert await agent.cancel(memory_id="m", reason="too slow")

        group.start_soon(cancel_when_blocked)
        result = await agent.chat("Two rounds", memory_id="m")
    assert result.finish_reason is FinishReason.CANCELLED and result.cancel_reason == "too slow"
    assert [e.result for e in result.tool_executions] == ["job 1 done"]
    assert kinds(list(result.messages)) == ["UserMessage", "AiMessage", "ToolExecutionResultMessage"]
    assert kinds(await memory_of(agent, "m")) == kinds(list(result.messages))


# -- cancel after the round ----------------------------------------------------------------------------


@pytest.mark.parametrize("streamed", [True, False])
async def test_cancel_after_round_lets_the_round_finish_and_commit(streamed: bool, tmp_path: Path) -> None:
    from agentloop.stores import SQLiteChatMemoryStore

    store = SQLiteChatMemoryStore(tmp_path / "memory.db")
    job = Job()
    agent, model = agent_with(
        job, [calls(1), calls(2), "never"], memory=MessageWindowChatMemory.provider(50, store=store)
    )

    async def stop_after_this_round() -> None:
        await job.started.wait()
        await (
            stream.cancel(after_round=True, reason="enough")
            if streamed
            else agent.cancel(memory_id="m", after_round=True, reason="enough")
        )
        job.release.set()

    async with anyio.create_task_group() as group:
        group.start_soon(stop_after_this_round)
        if streamed:
            stream = agent.stream("Work", memory_id="m")
            result = await stream.start()
        else:
            result = await agent.chat("Work", memory_id="m")
    assert (
        result is not None
        and result.finish_reason is FinishReason.CANCELLED
        and result.cancel_reason == "enough"
    )
    assert [e.result for e in result.tool_executions] == ["job 1 done"] and job.cleaned == 1
    assert len(model.requests) == 1  # the model was not called again
    stored = await memory_of(agent, "m")
    assert kinds(stored) == ["UserMessage", "AiMessage", "ToolExecutionResultMessage"]
    store.close()
    reopened = SQLiteChatMemoryStore(tmp_path / "memory.db")  # what another process reads back
    assert kinds(await reopened.get_messages("m")) == kinds(stored)
    reopened.close()


async def test_cancel_after_round_still_tells_the_middleware_the_round_committed() -> None:
    """Regression (found by the composition suite): run control's `Stop` was asked before the user's
    `after_round` hooks, so a middleware never heard of the round a `cancel(after_round=True)` stopped after.
    The user's hooks run first now, and what they add comes before the steered messages."""
    heard: list[int] = []

    class Rounds(Middleware):
        async def after_round(self, end: RoundEnd) -> list[UserMessage]:
            heard.append(end.round)
            return [UserMessage("from the middleware")] if end.round == 1 else []

    job = Job()
    agent, model = agent_with(job, [calls(1), calls(2), "done"], middleware=[Rounds()])

    async def steer_then_stop() -> None:
        await job.started.wait()
        await agent.steer("steered", memory_id="m")
        job.release.set()

    async with anyio.create_task_group() as group:
        group.start_soon(steer_then_stop)
        result = await agent.chat("Work", memory_id="m")
    assert result.finish_reason is FinishReason.STOP
    sent = [m.text for m in model.requests[1].messages if isinstance(m, UserMessage)]
    assert sent[-2:] == ["from the middleware", "steered"], sent

    heard.clear()
    job = Job()
    agent, model = agent_with(job, [calls(1), "never"], middleware=[Rounds()])

    async def stop_after_the_round() -> None:
        await job.started.wait()
        await agent.cancel(memory_id="m", after_round=True, reason="enough")
        job.release.set()

    async with anyio.create_task_group() as group:
        group.start_soon(stop_after_the_round)
        result = await agent.chat("Work", memory_id="m")
    assert (result.finish_reason, result.cancel_reason) == (FinishReason.CANCELLED, "enough")
    assert heard == [1] and len(model.requests) == 1
    assert kinds(await memory_of(agent, "m")) == ["UserMessage", "AiMessage", "ToolExecutionResultMessage"]


async def test_cancel_after_round_on_a_final_answer_lets_it_finish() -> None:
    agent = Agent(ScriptedChatModel(["the answer"], chunk_size=3))
    stream = agent.stream("Q")
    async for event in stream.events():
        if isinstance(event, PartialResponse):
            await stream.cancel(after_round=True)
    assert stream.result is not None and stream.result.finish_reason is FinishReason.STOP
    assert stream.result.content == "the answer"


# -- steer ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("streamed", [True, False])
async def test_steering_reaches_the_next_model_call_in_order(streamed: bool) -> None:
    job = Job()
    agent, model = agent_with(job, [calls(1), "answered both"])

    async def steer_while_the_tool_runs() -> None:
        await job.started.wait()
        if streamed:
            await stream.steer("Also check Lima")
            await stream.steer(UserMessage("And Quito"))
        else:
            assert await agent.steer("Also check Lima", memory_id="m")
            assert await agent.steer(UserMessage("And Quito"), memory_id="m")
        job.release.set()

    async with anyio.create_task_group() as group:
        group.start_soon(steer_while_the_tool_runs)
        if streamed:
            stream = agent.stream("Check Paris", memory_id="m")
            result = await stream.start()
        else:
            result = await agent.chat("Check Paris", memory_id="m")
    assert result is not None and result.content == "answered both"
    second = model.requests[1].messages
    assert kinds(second) == [
        "UserMessage",
        "AiMessage",
        "ToolExecutionResultMessage",
        "UserMessage",
        "UserMessage",
    ]
    assert [m.text for m in second if isinstance(m, UserMessage)] == [
        "Check Paris",
        "Also check Lima",
        "And Quito",
    ]
    stored = await memory_of(agent, "m")
    assert kinds(stored) == [*kinds(second), "AiMessage"]


async def test_a_message_steered_into_a_finishing_answer_gets_its_own_answer() -> None:
    model = ScriptedChatModel(["first answer", "second answer"], chunk_size=4)
    agent = Agent(model, memory=MessageWindowChatMemory.provider(50))
    stream = agent.stream("Hello", memory_id="m")
    steered = False
    async for event in stream.events():
        if isinstance(event, PartialResponse) and not steered:
            steered = True
            await stream.steer("One more thing")
    assert stream.result is not None and stream.result.content == "second answer"
    stored = await memory_of(agent, "m")
    assert [(type(m).__name__, m.text) for m in stored] == [
        ("UserMessage", "Hello"),
        ("AiMessage", "first answer"),
        ("UserMessage", "One more thing"),
        ("AiMessage", "second answer"),
    ]


async def test_a_finished_stream_cannot_be_steered_and_cancelling_it_does_nothing() -> None:
    stream = Agent(ScriptedChatModel(["done"])).stream("Q")
    assert await stream.start() is not None
    await stream.cancel()  # nothing to stop
    assert stream.result is not None and stream.result.finish_reason is FinishReason.STOP
    with pytest.raises(AgentLoopError, match="has ended"):
        await stream.steer("too late")


async def test_agent_cancel_and_steer_say_when_nothing_runs_and_need_one_target() -> None:
    agent = Agent(ScriptedChatModel(["x"]))
    assert await agent.cancel(memory_id="nobody") is False
    assert await agent.steer("hello", invocation_id="nothing") is False
    with pytest.raises(IllegalConfigurationError, match="exactly one of"):
        await agent.cancel()
    with pytest.raises(IllegalConfigurationError, match="exactly one of"):
        await agent.steer("x", memory_id="a", invocation_id="b")
    with pytest.raises(IllegalConfigurationError, match="RunControl"):
        Agent(ScriptedChatModel(["x"]), control="redis://")  # type: ignore[arg-type]


async def test_cancel_by_invocation_id_reaches_only_that_invocation() -> None:
    job = Job()
    ids = iter(["inv-a", "inv-b"])
    agent, _ = agent_with(job, [calls(1), calls(2), "b done"], id_factory=lambda: next(ids))
    results: dict[str, Any] = {}

    async def run(memory_id: str) -> None:
        results[memory_id] = await agent.chat("go", memory_id=memory_id)

    async with anyio.create_task_group() as group:
        group.start_soon(run, "a")
        await job.started.wait()
        group.start_soon(run, "b")
        while not await agent.control.busy("b"):
            await anyio.sleep(0.001)
        assert await agent.cancel(invocation_id="inv-a", reason="only a")
        job.release.set()
    assert results["a"].finish_reason is FinishReason.CANCELLED and results["a"].cancel_reason == "only a"
    assert results["b"].content == "b done"


# -- if_busy -------------------------------------------------------------------------------------------


async def test_if_busy_reject_raises_memory_busy_error_naming_the_id() -> None:
    job = Job()
    agent, _ = agent_with(job, [calls(1), "other answer", "first done"])
    async with anyio.create_task_group() as group:
        group.start_soon(functools.partial(agent.chat, "first", memory_id="m"))
        await job.started.wait()
        with pytest.raises(MemoryBusyError, match="'m'") as caught:
            await agent.chat("second", memory_id="m", if_busy="reject")
        assert caught.value.memory_id == "m"
        other = await agent.chat("elsewhere", memory_id="other", if_busy="reject")  # another id is free
        job.release.set()
    assert other.content == "other answer"


class Watched(LocalRunControl):
    """A LocalRunControl that says when a command went out."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = anyio.Event()

    async def send(self, command: Any, *, invocation_id: str | None = None, memory_id: Any = None) -> bool:
        delivered = await super().send(command, invocation_id=invocation_id, memory_id=memory_id)
        self.sent.set()
        return delivered


async def test_if_busy_steer_hands_the_message_over_and_returns_that_invocations_result() -> None:
    job = Job()
    control = Watched()
    agent, model = agent_with(job, [calls(1), "answered both"], control=control)
    first: dict[str, Any] = {}

    async def run_first() -> None:
        first["result"] = await agent.chat("first", memory_id="m")

    async def release_once_steered() -> None:
        await control.sent.wait()
        job.release.set()

    async with anyio.create_task_group() as group:
        group.start_soon(run_first)
        await job.started.wait()
        group.start_soon(release_once_steered)
        second = await agent.chat("and this", memory_id="m", if_busy="steer")
    assert second is first["result"] and second.content == "answered both"
    assert [m.text for m in model.requests[1].messages if isinstance(m, UserMessage)] == ["first", "and this"]


async def test_if_busy_interrupt_cancels_the_running_one_then_runs() -> None:
    job = Job()
    agent, _ = agent_with(job, [calls(1), "the new answer"])
    results: dict[str, Any] = {}

    async def run_first() -> None:
        results["first"] = await agent.chat("first", memory_id="m")

    async with anyio.create_task_group() as group:
        group.start_soon(run_first)
        await job.started.wait()
        results["second"] = await agent.chat("instead", memory_id="m", if_busy="interrupt")
    assert results["first"].finish_reason is FinishReason.CANCELLED
    assert "if_busy='interrupt'" in (results["first"].cancel_reason or "")
    assert results["second"].content == "the new answer" and job.cleaned == 1
    assert [(type(m).__name__, m.text) for m in await memory_of(agent, "m")] == [
        ("UserMessage", "instead"),
        ("AiMessage", "the new answer"),
    ]


def test_if_busy_takes_only_the_four_choices() -> None:
    agent = Agent(ScriptedChatModel(["x"]))
    with pytest.raises(IllegalConfigurationError, match=r"'wait'.*'steer'.*'interrupt'.*'reject'"):
        agent.stream("q", if_busy="queue")  # type: ignore[call-overload]


# -- across processes ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


def _worker(kind: str, where: str, memory_id: str, backend: str) -> subprocess.Popen[str]:
    worker = Path(__file__).parents[2] / "run_control_agent_worker.py"
    return subprocess.Popen(
        [sys.executable, str(worker), kind, where, memory_id, backend],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[3],
    )


def _control(kind: str, where: str) -> Any:
    from agentloop.control import RedisRunControl

    return SQLiteRunControl(where, poll_interval=0.01) if kind == "sqlite" else RedisRunControl(where)


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_agent_in_another_process_is_steered_and_cancelled(
    kind: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = str(tmp_path / "control.db") if kind == "sqlite" else request.getfixturevalue("redis_url")
    memory_id = f"remote-{kind}-{backend}"
    for way in ("steer", "cancel"):
        process = _worker(kind, where, f"{memory_id}-{way}", backend)
        try:
            assert process.stdout is not None and process.stdin is not None
            assert json.loads(process.stdout.readline()) == {"running": True}

            async def reach() -> bool:
                control = _control(kind, where)
                agent = Agent(ScriptedChatModel(["unused"]), control=control)
                if way == "steer":
                    with pytest.raises(MemoryBusyError):  # busy, as seen from this process
                        await agent.chat("me too", memory_id=f"{memory_id}-{way}", if_busy="reject")
                    done = await agent.steer("Also this, please", memory_id=f"{memory_id}-{way}")
                else:
                    done = await agent.cancel(memory_id=f"{memory_id}-{way}", reason="stopped from afar")
                control.close()
                return done

            assert anyio.run(reach, backend=backend) is True
            if way == "steer":
                process.stdin.write("\n")
                process.stdin.flush()
            outcome = json.loads(process.stdout.readline())
            process.stdin.close()  # the cancelled tool's reading thread ends too (asyncio waits for it)
            assert process.wait(30) == 0
        finally:
            process.kill()
            process.wait()
        if way == "steer":
            assert outcome["finish"] == "stop" and outcome["content"] == "first answer"
            assert outcome["requests"][1][-1] == "UserMessage:Also this, please"
        else:
            assert outcome["finish"] == "cancelled" and outcome["reason"] == "stopped from afar"
            assert len(outcome["requests"]) == 1


async def test_local_control_is_the_default_and_can_be_shared_by_agents() -> None:
    shared = LocalRunControl()
    job = Job()
    worker, _ = agent_with(job, [calls(1), "x"], control=shared)
    watcher = Agent(ScriptedChatModel(["y"]), control=shared)
    assert isinstance(Agent(ScriptedChatModel(["z"])).control, LocalRunControl)
    async with anyio.create_task_group() as group:
        results: list[Any] = []

        async def run() -> None:
            results.append(await worker.chat("go", memory_id="shared"))

        group.start_soon(run)
        await job.started.wait()
        assert await watcher.cancel(memory_id="shared", reason="the other agent said so")
    assert results[0].finish_reason is FinishReason.CANCELLED
