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
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import Agent, MessageWindowChatMemory
from agentloop.models._openai import OpenAIChatModel
from agentloop.testing._fake_openai import FakeOpenAIServer
from agentloop.testing._fake_server import Reply, encode_sse
from tests.reliability._support import checked_out, running_tasks

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.mark.parametrize("where", ["at a yield", "waiting for an item"])
async def test_async_with_inside_a_generator_cancelled_anywhere(server: FakeOpenAIServer, where: str) -> None:
    # The web handler's shape (agentloop.ui's stream_sse): a generator holding `async with stream` across
    # its yields, iterated inside `aclosing()` and a task group that the client's leaving cancels while the
    # generator sits at a yield (the body is sending) or waits for the next item. A task group of the
    # stream's inside that block would be misnested here (why the producer is not the consumer's child).
    server.add(never_ending("one "))  # the next item never comes: the cancellation finds the wait
    agent = agent_for(server)
    before = running_tasks()

    async def handler() -> AsyncIterator[str]:
        async with agent.stream("hi", memory_id="u") as stream:
            async for token in stream:
                yield token

    events = handler()
    async with aclosing(events), anyio.create_task_group() as group:  # type: ignore[type-var]
        async for token in events:
            assert token == "one "
            group.cancel_scope.cancel()
            if where == "at a yield":
                await anyio.lowlevel.checkpoint()  # cancelled here, the generator at its yield
    assert group.cancel_scope.cancelled_caught
    assert running_tasks() == before
    assert checked_out(agent.model) == 0
    with anyio.fail_after(5):
        await server.requests[0].wait_disconnected()
    assert await agent.memory("u").messages() == []  # type: ignore[union-attr]
    await agent.model.aclose()  # type: ignore[attr-defined]


SCRIPT = """
import asyncio, gc, sys
import anyio
from agentloop import Agent, MessageWindowChatMemory
from agentloop.models._openai import OpenAIChatModel
from agentloop.testing._fake_openai import FakeOpenAIServer
from tests.runtime.test_stream_ownership import leave, never_ending

def patient() -> None:
    try:
        asyncio.get_running_loop().slow_callback_duration = 60  # a loaded machine is not a warning
    except RuntimeError:
        pass

async def main() -> None:
    patient()
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

kept = []

async def left_running_at_shutdown() -> None:
    # An iterator still alive when the run ends: the run's shutdown cancels its producer, and dropping it
    # afterwards (the event loop gone) does nothing.
    patient()
    server = FakeOpenAIServer([never_ending("one ")])
    server.start()
    model = OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key="sk-test")
    iterator = aiter(Agent(model).stream("hi"))
    assert await iterator.__anext__() == "one "
    kept.append((iterator, server))

for backend in ("asyncio", "trio"):
    anyio.run(main, backend=backend)
    gc.collect()
    anyio.run(left_running_at_shutdown, backend=backend)
    kept[0][1].requests[0].disconnected.wait(5)
    assert kept[0][1].requests[0].disconnected.is_set()
    kept[0][1].stop()
    kept.clear()
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


async def test_an_iterator_closed_before_its_first_item_never_runs(server: FakeOpenAIServer) -> None:
    agent = agent_for(server)
    async with agent.stream("hi") as stream:
        events = stream.events()  # claimed, not started
        await stream.aclose()
        assert [event async for event in events] == []
    assert server.requests == []  # the model was never called
    await agent.model.aclose()  # type: ignore[attr-defined]
