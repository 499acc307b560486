"""Who owns a TokenStream's producer, and what leaving a stream early leaves behind.

Against a real HTTP model (the fake OpenAI server over a socket) whose answer streams three pieces and then
never ends: the consumer leaves after the first piece by `break`, by an error in the loop's body, or by a
cancellation delivered in the body (not while waiting for an item). Under `async with` the producer is a
child of the block's task group: when the block is left, no task is left and the HTTP response is closed,
at once. A bare `async for` is told nothing by Python: the producer is stopped when the iterator is dropped
and closes everything itself; once it has, nothing is left either. Either way memory keeps no half round and
the next invocation on the memory id works. Both anyio backends; a subprocess checks `python -X dev` prints
no warning (ResourceWarning, unretrieved task exceptions, unawaited coroutines).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import Agent, MessageWindowChatMemory
from agentloop.models._openai import OpenAIChatModel
from agentloop.testing._fake_openai import FakeOpenAIServer
from agentloop.testing._fake_server import Reply, encode_sse
from tests.reliability._support import checked_out, running_tasks

ROOT = Path(__file__).resolve().parents[1]
HOW = ["break", "error", "cancel"]


class Left(Exception):
    """The consumer's own error, raised in the loop's body."""


def never_ending(*pieces: str) -> Reply:
    """An OpenAI chat stream that sends `pieces` as text and then stays open, its end never sent."""

    def chunk(delta: dict[str, Any]) -> bytes:
        return encode_sse({"id": "c", "model": "m", "choices": [{"index": 0, "delta": delta}]})

    events = [chunk({"role": "assistant", "content": ""}), *(chunk({"content": p}) for p in pieces)]
    return Reply.sse(events, hold_open=True)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


def agent_for(server: FakeOpenAIServer) -> Agent:
    model = OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key="sk-test")
    return Agent(model, memory=MessageWindowChatMemory.provider(20))


async def leave(stream: Any, how: str, *, structured: bool) -> list[str]:
    """Reads the first piece of `stream`, then leaves the loop the way `how` says."""
    seen: list[str] = []
    with anyio.CancelScope() as scope:
        try:
            if structured:
                async with stream:
                    await _consume(stream, how, scope, seen)
            else:
                await _consume(stream, how, scope, seen)
        except Left:
            pass
    assert scope.cancelled_caught is (how == "cancel")
    return seen


async def _consume(stream: Any, how: str, scope: anyio.CancelScope, seen: list[str]) -> None:
    async for token in stream:
        seen.append(token)
        if how == "break":
            break
        if how == "error":
            raise Left
        scope.cancel()
        await anyio.lowlevel.checkpoint()  # the cancellation arrives here, in the body
        raise AssertionError("not cancelled")


@pytest.mark.parametrize("how", HOW)
async def test_leaving_async_with_leaves_nothing_at_once(server: FakeOpenAIServer, how: str) -> None:
    server.add(never_ending("one ", "two ", "three "))
    agent = agent_for(server)
    before = running_tasks()
    stream = agent.stream("hi", memory_id="u")
    assert await leave(stream, how, structured=True) == ["one "]
    # No waiting: the block's exit waited for the producer, which closed the response.
    assert running_tasks() == before
    assert checked_out(agent.model) == 0
    assert stream.done
    with anyio.fail_after(5):
        await server.requests[0].wait_disconnected()
    assert await agent.memory("u").messages() == []  # type: ignore[union-attr]
    server.add("hello again")
    assert (await agent.chat("hi again", memory_id="u")).content == "hello again"
    await agent.model.aclose()  # type: ignore[attr-defined]


@pytest.mark.parametrize("how", HOW)
async def test_an_abandoned_bare_async_for_leaves_nothing(server: FakeOpenAIServer, how: str) -> None:
    server.add(never_ending("one ", "two ", "three "))
    agent = agent_for(server)
    before = running_tasks()
    assert await leave(agent.stream("hi", memory_id="u"), how, structured=False) == ["one "]
    # Python told the iterator nothing; dropping it stopped the producer, which closes the response itself.
    with anyio.fail_after(5):
        await server.requests[0].wait_disconnected()
    await anyio.wait_all_tasks_blocked()
    assert running_tasks() == before
    assert checked_out(agent.model) == 0
    assert await agent.memory("u").messages() == []  # type: ignore[union-attr]
    server.add("hello again")
    assert (await agent.chat("hi again", memory_id="u")).content == "hello again"
    await agent.model.aclose()  # type: ignore[attr-defined]


async def test_the_producer_of_async_with_is_a_child_of_the_consumer() -> None:
    # On trio the tree is visible: the producer runs in a nursery of the consuming task, not the system one.
    from agentloop import AiMessage
    from agentloop.testing import ScriptedChatModel

    agent = Agent(ScriptedChatModel([AiMessage("a b c")], chunk_size=2))
    owners: list[str] = []
    async with agent.stream("hi") as stream:
        async for _ in stream:
            owners.append(_owner_of_producer())
    assert owners and set(owners) == {"consumer"}
    owners.clear()
    async for _ in Agent(ScriptedChatModel([AiMessage("a b c")], chunk_size=2)).stream("hi"):
        owners.append(_owner_of_producer())
    assert owners and set(owners) == {"event loop"}


def _owner_of_producer() -> str:
    """Who owns the running producer task: the consuming task's task group, or the event loop."""
    try:
        import trio

        current = trio.lowlevel.current_task()
    except RuntimeError:  # asyncio: no task tree to read; the loop-owned producers are kept in a set
        import asyncio

        from agentloop import _stream

        for task in asyncio.all_tasks():
            if task.get_name() == "agentloop.TokenStream":
                return "event loop" if task in _stream._running else "consumer"
        return "none"
    for nursery in current.child_nurseries:
        if any(t.name == "agentloop.TokenStream" for t in nursery.child_tasks):
            return "consumer"
    system = trio.lowlevel.current_root_task()
    assert system is not None
    return "event loop"


SCRIPT = """
import asyncio, gc, sys
import anyio
from agentloop import Agent, MessageWindowChatMemory
from agentloop.models._openai import OpenAIChatModel
from agentloop.testing._fake_openai import FakeOpenAIServer
from tests.test_stream_ownership import leave, never_ending

async def main() -> None:
    try:
        asyncio.get_running_loop().slow_callback_duration = 60  # a loaded machine is not a warning
    except RuntimeError:
        pass
    async with FakeOpenAIServer() as server:
        model = OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key="sk-test")
        agent = Agent(model, memory=MessageWindowChatMemory.provider(20))
        for n, how in enumerate(["break", "error", "cancel"] * 2):
            server.add(never_ending("one ", "two "))
            stream = agent.stream("hi", memory_id="u")
            await leave(stream, how, structured=n % 2 == 0)
            del stream
            with anyio.fail_after(5):
                await server.requests[n].wait_disconnected()
        await anyio.wait_all_tasks_blocked()
        server.add("done")
        assert (await agent.chat("hi", memory_id="u")).content == "done"
        await model.aclose()
    gc.collect()

for backend in ("asyncio", "trio"):
    anyio.run(main, backend=backend)
    gc.collect()
print("ok")
"""


def test_no_warning_under_python_dev_mode() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "always", "-c", SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    assert done.stderr == "", done.stderr
