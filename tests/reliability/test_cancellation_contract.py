"""The cancellation contract at the await points of the features: a sync tool (in a worker thread), an async
tool over a SQLite store, the SQLite store writing a round, a round with a call waiting for approval, a
structured output being written, and an agent used as a tool. Each is cancelled each way (`cancel()` at
once, `cancel(after_round=True)`, scope cancellation of the consumer), streamed (`stream.cancel`) and not
(`agent.cancel` by memory id), on asyncio and trio. Checked every time: the Result (or the exception, for a
scope) as docs/runtime.md's table says, memory provider-valid and holding exactly what the way promises,
the tool's cleanup ran, no task left, and the next invocation on the memory id works. (The model stream and
store commit points, on the providers' wire fakes, are swept in test_cancellation.py.)"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from pydantic import BaseModel

from agentloop import (
    Agent,
    AiMessage,
    FinishReason,
    MessageWindowChatMemory,
    ToolExecutionResultMessage,
    UserMessage,
    tool,
)
from agentloop.testing import FunctionChatModel

from ..runtime_helpers import assert_valid_for_provider, calls
from ._support import running_tasks

pytestmark = pytest.mark.anyio

WAYS = ("cancel", "after_round", "scope")
MODES = ("stream", "chat")


class Weather(BaseModel):
    city: str
    sky: str


@dataclass
class Point:
    """One await point: an agent waiting there (`reached` set) until `release()`; `cleaned` counts the
    cleanups (finally blocks) that ran; `memory()` reads what its memory holds."""

    agent: Agent[Any]
    reached: anyio.Event
    release: Callable[[], None]
    memory: Callable[[], Any]
    cleaned: list[str] = field(default_factory=list)
    tool_round: bool = True  # the point is in a tool round (else: in the model call of the final answer)
    after_round_finish: FinishReason = FinishReason.CANCELLED
    thread_done: threading.Event | None = None  # set when the point's worker thread has ended
    commit: bool = False  # the point is a store commit: shielded, it finishes whichever way


def answers(messages: list[Any], tools: Any) -> Any:
    """Asks for the `slow` tool after a question, answers after the results, and says "Fine." to "again"."""
    last = messages[-1]
    if isinstance(last, UserMessage):
        return "Fine." if last.text == "again" else calls(("slow", {"city": "Paris"}, f"c{len(messages)}"))
    return "Sunny."


def in_memory_reader(agent: Agent[Any]) -> Callable[[], Any]:
    async def read() -> list[Any]:
        memory = agent._memory_for("m")
        assert memory is not None
        return await memory.messages()

    return read


def sync_tool_point(tmp_path: Path) -> Point:
    reached, gate, done = anyio.Event(), threading.Event(), threading.Event()
    cleaned: list[str] = []

    @tool
    def slow(city: str) -> str:
        """Looks the city up in a worker thread."""
        try:
            anyio.from_thread.run_sync(reached.set)
            gate.wait(30)
            return f"sunny in {city}"
        finally:
            cleaned.append("slow")
            done.set()

    agent = Agent(FunctionChatModel(answers), tools=[slow], memory=MessageWindowChatMemory.provider(50))
    return Point(agent, reached, gate.set, in_memory_reader(agent), cleaned, thread_done=done)


def gated_async_tool(reached: anyio.Event, release: anyio.Event, cleaned: list[str]) -> Any:
    @tool
    async def slow(city: str) -> str:
        """Looks the city up."""
        try:
            reached.set()
            await release.wait()
            return f"sunny in {city}"
        finally:
            cleaned.append("slow")

    return slow


def sqlite_point(tmp_path: Path) -> Point:
    from agentloop.stores import SQLiteChatMemoryStore

    reached, release, cleaned = anyio.Event(), anyio.Event(), []
    path = tmp_path / "memory.db"
    memory = MessageWindowChatMemory.provider(50, store=SQLiteChatMemoryStore(path))
    agent = Agent(
        FunctionChatModel(answers), tools=[gated_async_tool(reached, release, cleaned)], memory=memory
    )

    async def read() -> list[Any]:  # what another process would read back
        return list(await SQLiteChatMemoryStore(path).get_messages("m"))

    return Point(agent, reached, release.set, read, cleaned)


def store_commit_point(tmp_path: Path) -> Point:
    """The SQLite store writing the tool round: a commit is shielded, so every way keeps the round whole
    (it was decided before the cancellation came) and the invocation ends right after it."""
    from agentloop.stores import SQLiteChatMemoryStore

    reached, release, cleaned = anyio.Event(), anyio.Event(), []

    class GatedStore(SQLiteChatMemoryStore):
        async def append(self, memory_id: Any, messages: Any, **options: Any) -> int:
            if not reached.is_set():  # the first commit (the tool round) waits at the point
                try:
                    reached.set()
                    await release.wait()
                finally:
                    cleaned.append("commit")
            return await super().append(memory_id, messages, **options)

    path = tmp_path / "memory.db"
    memory = MessageWindowChatMemory.provider(50, store=GatedStore(path))

    @tool
    async def slow(city: str) -> str:
        """Looks the city up."""
        return f"sunny in {city}"

    agent = Agent(FunctionChatModel(answers), tools=[slow], memory=memory)

    async def read() -> list[Any]:
        return list(await SQLiteChatMemoryStore(path).get_messages("m"))

    return Point(agent, reached, release.set, read, cleaned, commit=True)


def approval_point(tmp_path: Path) -> Point:
    """A round with a call that waits for approval beside a slow one: cancelled at once nothing is held;
    after the round, the round pauses for the approval as it would have (a pause ends the invocation)."""
    reached, release, cleaned = anyio.Event(), anyio.Event(), []

    @tool(requires_approval=True)
    async def delete(path: str) -> str:
        """Deletes a file."""
        return "deleted"

    def both(messages: list[Any], tools: Any) -> Any:
        last = messages[-1]
        if isinstance(last, UserMessage):
            if last.text == "again":
                return "Fine."
            return calls(("slow", {"city": "Paris"}, "c1"), ("delete", {"path": "/tmp/x"}, "c2"))
        return "Done."

    slow = gated_async_tool(reached, release, cleaned)
    agent = Agent(FunctionChatModel(both), tools=[slow, delete], memory=MessageWindowChatMemory.provider(50))
    return Point(
        agent,
        reached,
        release.set,
        in_memory_reader(agent),
        cleaned,
        after_round_finish=FinishReason.APPROVAL_REQUIRED,
    )


def structured_point(tmp_path: Path) -> Point:
    """The model writing a structured output (no tool round): after the round, it simply finishes."""
    reached, release, cleaned = anyio.Event(), anyio.Event(), []

    async def write(messages: list[Any], tools: Any) -> str:
        if messages[-1].text == "again":
            return '{"city": "Oslo", "sky": "grey"}'
        try:
            reached.set()
            await release.wait()
            return '{"city": "Paris", "sky": "sunny"}'
        finally:
            cleaned.append("model")

    agent = Agent(
        FunctionChatModel(write),
        output_type=Weather,
        output_mode="native",
        memory=MessageWindowChatMemory.provider(50),
    )
    return Point(
        agent,
        reached,
        release.set,
        in_memory_reader(agent),
        cleaned,
        tool_round=False,
        after_round_finish=FinishReason.STOP,
    )


def agent_tool_point(tmp_path: Path) -> Point:
    """An agent used as a tool, its model call waiting: the outer cancellation reaches it."""
    reached, release, cleaned = anyio.Event(), anyio.Event(), []

    async def inner_answer(messages: list[Any], tools: Any) -> str:
        try:
            reached.set()
            await release.wait()
            return "sunny in Paris"
        finally:
            cleaned.append("inner")

    inner = Agent(FunctionChatModel(inner_answer), name="forecaster")
    forecaster = inner.as_tool("slow", "Asks the forecaster about a city")

    def outer(messages: list[Any], tools: Any) -> Any:
        last = messages[-1]
        if isinstance(last, UserMessage):
            return "Fine." if last.text == "again" else calls(("slow", {"request": "Paris?"}, "c1"))
        return "Sunny."

    agent = Agent(FunctionChatModel(outer), tools=[forecaster], memory=MessageWindowChatMemory.provider(50))
    return Point(agent, reached, release.set, in_memory_reader(agent), cleaned)


POINTS: dict[str, Callable[[Path], Point]] = {
    "sync-tool": sync_tool_point,
    "sqlite-store": sqlite_point,
    "store-commit": store_commit_point,
    "approval": approval_point,
    "structured-output": structured_point,
    "agent-as-tool": agent_tool_point,
}


async def run(point: Point, mode: str, way: str) -> Any:
    """One invocation on memory id "m", commanded `way` once it waits at the point; its Result, or the
    exception a scope cancellation gives (None)."""
    agent, streams = point.agent, []
    result = None
    async with anyio.create_task_group() as group:
        with anyio.CancelScope() as consumer:

            async def command() -> None:
                await point.reached.wait()
                if way == "scope":
                    consumer.cancel()
                elif mode == "stream":
                    await streams[0].cancel(after_round=way == "after_round", reason="stop")
                else:
                    assert await agent.cancel(memory_id="m", after_round=way == "after_round", reason="stop")
                if way == "after_round" or point.commit:
                    point.release()  # the round goes on; otherwise the point is released once all ended

            group.start_soon(command)
            if mode == "chat":
                result = await agent.chat("weather?", memory_id="m")
            else:
                stream = agent.stream("weather?", memory_id="m")
                streams.append(stream)
                async for _ in stream:
                    pass
                result = stream.result
    return result


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("name", list(POINTS))
async def test_cancellation_contract(name: str, way: str, mode: str, tmp_path: Path) -> None:
    before = running_tasks()
    point = POINTS[name](tmp_path)
    result = await run(point, mode, way)
    point.release()  # a worker thread cannot be interrupted: it waits until here
    if point.thread_done is not None:  # the abandoned worker thread ends once released
        assert await anyio.to_thread.run_sync(point.thread_done.wait, 10)
    messages = await point.memory()
    assert_valid_for_provider(messages)
    assert point.cleaned, "the cleanup at the point did not run"
    if way == "scope":
        assert result is None  # the exception went to the cancelled scope: no Result
    if point.commit:  # the round was being written: it is whole, then the invocation ended
        assert [type(m) for m in messages] == [UserMessage, AiMessage, ToolExecutionResultMessage]
        if result is not None:
            assert (result.finish_reason, result.cancel_reason) == (FinishReason.CANCELLED, "stop")
            assert list(result.messages) == messages and result.output is None
    elif way in ("cancel", "scope"):
        assert messages == [], "nothing of the first round is committed, the question neither"
        if result is not None:
            assert (result.finish_reason, result.cancel_reason) == (FinishReason.CANCELLED, "stop")
            assert result.messages == () and result.output is None and result.pending is None
    else:
        assert result is not None and result.finish_reason is point.after_round_finish
        if point.after_round_finish is FinishReason.CANCELLED:
            assert result.cancel_reason == "stop" and result.output is None
            assert list(result.messages) == messages
            assert isinstance(messages[-1], ToolExecutionResultMessage)
            assert [type(m) for m in messages[:2]] == [UserMessage, AiMessage]
        elif point.after_round_finish is FinishReason.STOP:
            assert result.output == Weather(city="Paris", sky="sunny")
        else:  # the round pauses for approval: held, not committed
            assert result.pending is not None and messages == []
    assert running_tasks() <= before, "a task of the invocation runs on"
    follow = await point.agent.chat("again", memory_id="m")
    assert follow.finish_reason is FinishReason.STOP
    assert_valid_for_provider(await point.memory())


@pytest.mark.parametrize("mode", MODES)
async def test_cancel_during_an_mcp_call_cancels_it_on_the_server(mode: str) -> None:
    """An MCP call (in-process server) waiting for its answer: `cancel()` reaches the server, nothing is
    committed, the connection stays usable for the next invocation."""
    pytest.importorskip("mcp", reason="the MCP point needs the mcp extra")
    from agentloop.mcp import MCPToolset

    from ..mcp_demo_server import make_server

    server = make_server()

    def answer(messages: list[Any], tools: Any) -> Any:
        last = messages[-1]
        if isinstance(last, UserMessage) and last.text != "again":
            return calls(("hang", {}, "c1"))
        return "Fine."

    async with MCPToolset(server) as toolset:
        agent = Agent(FunctionChatModel(answer), tools=[toolset], memory=MessageWindowChatMemory.provider(50))
        reached = anyio.Event()

        async def watch() -> None:  # the server counts the call once it runs there
            while server.state.hanging == 0:
                await anyio.sleep(0.01)
            reached.set()

        point = Point(agent, reached, lambda: None, in_memory_reader(agent), ["mcp"])
        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            with anyio.fail_after(20):
                result = await run(point, mode, "cancel")
        assert (result.finish_reason, result.cancel_reason) == (FinishReason.CANCELLED, "stop")
        with anyio.fail_after(10):
            while server.state.cancelled == 0:  # the cancellation reaches the server asynchronously
                await anyio.sleep(0.01)
        assert await point.memory() == []
        assert (await agent.chat("again", memory_id="m")).content == "Fine."
        assert_valid_for_provider(await point.memory())
