"""Tool faults: tools that raise, hang, block the event loop, return megabytes or something that cannot be
serialised; callbacks and event consumers that raise; cancellation in the middle of a batch; error handlers
that abort. Each through the `Agent`, in chat and stream mode: the loop stays alive where it should, aborts
cleanly where it must, commits whole rounds only, and leaves no task behind."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from agentloop import (
    Agent,
    BeforeToolExecution,
    MessageWindowChatMemory,
    ToolExecutionResultMessage,
    tool,
)
from agentloop._tools._execution import DEFAULT_MAX_RESULT_CHARS
from agentloop.testing import ScriptedChatModel
from agentloop.testing._fake_server import FakeServer
from tests.runtime_helpers import calls

from ._support import Fault, ToolProbe, invoke, running_tasks, seed_messages
from ._wire import MODES, PROVIDERS, QUESTION, Requests, provider_model, shared, weather_tool

pytestmark = pytest.mark.anyio

mode_param = pytest.mark.parametrize("mode", MODES)


async def seeded_memory() -> MessageWindowChatMemory:
    memory = MessageWindowChatMemory(200)
    await memory.add(seed_messages())
    return memory


def results_sent(model: ScriptedChatModel, request: int) -> list[ToolExecutionResultMessage]:
    """The tool results the agent sent the model in its `request`-th request (0-based)."""
    return [m for m in model.requests[request].messages if isinstance(m, ToolExecutionResultMessage)]


@mode_param
async def test_a_tool_that_raises(mode: str, fault: Fault) -> None:
    fault.declare(
        "tool", "tool raises", "its message goes to the model as an error result; the loop goes on", mode=mode
    )
    before = running_tasks()
    probe = ToolProbe()

    @tool
    async def export(name: str) -> str:
        """Exports a report."""
        raise OSError(f"disk full while writing {name}")

    model = ScriptedChatModel([calls(("export", {"name": "q3"}), ("weather", {"city": "Paris"})), "Sorry."])
    memory = await seeded_memory()
    agent = Agent(model, tools=[export, weather_tool(probe)], memory=memory)
    outcome = await invoke(agent, mode, QUESTION)
    assert outcome.result is not None and outcome.result.content == "Sorry."
    failed, ok = outcome.result.tool_executions
    assert (
        failed.is_error
        and failed.result == "disk full while writing q3"
        and isinstance(failed.error, OSError)
    )
    assert not ok.is_error and ok.result == "Sunny in Paris"
    assert [(r.text, r.is_error) for r in results_sent(model, 1)] == [
        ("disk full while writing q3", True),
        ("Sunny in Paris", False),
    ]
    fault.check_memory(await memory.messages())
    fault.check_tasks(before)


@mode_param
async def test_a_tool_that_hangs_times_out_and_its_siblings_finish(mode: str, fault: Fault) -> None:
    fault.declare(
        "tool", "tool hangs", "its timeout fires (error result); siblings finish unaffected", mode=mode
    )
    before = running_tasks()
    probe = ToolProbe()

    @tool(timeout=0.2)
    async def lookup(key: str) -> str:
        """Looks a key up in a remote store that never answers."""
        await probe.run(f"lookup {key}", seconds=3600)
        return "never"

    model = ScriptedChatModel(
        [
            calls(("weather", {"city": "Paris"}), ("lookup", {"key": "k"}), ("weather", {"city": "London"})),
            "ok",
        ]
    )
    agent = Agent(model, tools=[lookup, weather_tool(probe)])
    outcome = await invoke(agent, mode, QUESTION)
    assert outcome.result is not None
    paris, hung, london = outcome.result.tool_executions
    assert hung.is_error and hung.result == "Tool 'lookup' timed out after 0.2 s"
    assert isinstance(hung.error, TimeoutError)
    assert (paris.result, london.result) == ("Sunny in Paris", "Sunny in London")
    assert probe.cancelled == ["lookup k"] and sorted(probe.finished) == ["London", "Paris"]
    assert outcome.elapsed < 2.0
    fault.check_tasks(before)


@mode_param
async def test_a_blocking_sync_tool_does_not_block_the_event_loop(mode: str, fault: Fault) -> None:
    fault.declare(
        "tool",
        "blocking sync tool (time.sleep)",
        "runs in a worker thread: the event loop keeps ticking (lag stays small)",
        mode=mode,
    )
    before = running_tasks()
    blocking = 0.4

    @tool
    def compress(path: str) -> str:
        """Compresses a file, holding the CPU for a while."""
        time.sleep(blocking)
        return f"{path}.gz"

    lags: list[float] = []
    done = anyio.Event()

    async def ticker() -> None:
        while not done.is_set():
            start = anyio.current_time()
            await anyio.sleep(0.01)
            lags.append(anyio.current_time() - start - 0.01)

    agent = Agent(
        ScriptedChatModel([calls(("compress", {"path": "log.txt"})), "Compressed."]), tools=[compress]
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        outcome = await invoke(agent, mode, "Compress the log")
        done.set()
    assert outcome.result is not None and outcome.result.tool_executions[0].result == "log.txt.gz"
    assert outcome.elapsed >= blocking
    # A blocked loop would show one lag of the whole 0.4 s; a free one ticks ~every 10 ms throughout.
    assert len(lags) >= 10 and max(lags) < blocking / 2, f"event loop lag: {max(lags):.3f} s"
    fault.check_tasks(before)


@pytest.mark.parametrize("provider", PROVIDERS)
@mode_param
async def test_huge_output_is_cut_before_it_reaches_the_model(
    provider: str, mode: str, fault: Fault, servers: dict[str, FakeServer]
) -> None:
    fault.declare(
        "tool",
        "huge tool output (10 MB)",
        "cut to max_tool_result_chars (100,000) with a marker; the request stays small",
        provider=provider,
        mode=mode,
    )
    before = running_tasks()
    size = 10_000_000

    @tool
    async def dump(table: str) -> str:
        """Dumps a whole table."""
        return "x" * size

    with shared(servers[provider]) as server:
        requests = Requests(server)
        model = provider_model(provider, server)
        memory = await seeded_memory()
        agent = Agent(model, tools=[dump], memory=memory)
        server.add(calls(("dump", {"table": "events"})))
        server.add("That is a lot of events.")
        outcome = await invoke(agent, mode, "Dump the events table")
        assert outcome.result is not None and outcome.result.content == "That is a lot of events."
        (execution,) = outcome.result.tool_executions
        marker = f"\n[... truncated: the result had {size:,} characters; the first 100,000 are shown]"
        assert execution.result == "x" * DEFAULT_MAX_RESULT_CHARS + marker
        assert len(requests[1].body) < 2 * DEFAULT_MAX_RESULT_CHARS, "megabytes went to the model"
        assert marker.strip() in requests[1].body.decode()
        stored = [m for m in await memory.messages() if isinstance(m, ToolExecutionResultMessage)]
        assert [m.text for m in stored] == [execution.result]
        fault.check_memory(await memory.messages())
        await fault.check_connections(model, server)
    fault.check_tasks(before)


@mode_param
async def test_an_unserialisable_result_is_a_clear_error_result(mode: str, fault: Fault) -> None:
    fault.declare(
        "tool",
        "unserialisable result (circular)",
        "an error result naming the problem; the loop goes on",
        mode=mode,
    )

    @tool
    async def graph(node: str) -> dict[str, Any]:
        """The neighbourhood of a node (this one refers to itself)."""
        result: dict[str, Any] = {"node": node}
        result["self"] = result
        return result

    model = ScriptedChatModel([calls(("graph", {"node": "a"})), "Could not read the graph."])
    memory = await seeded_memory()
    outcome = await invoke(Agent(model, tools=[graph], memory=memory), mode, "Show node a")
    assert outcome.result is not None and outcome.result.content == "Could not read the graph."
    (execution,) = outcome.result.tool_executions
    assert execution.is_error
    assert execution.result.startswith("Tool 'graph' returned a result that cannot be sent to the model: ")
    assert "ircular" in execution.result
    assert results_sent(model, 1)[0].is_error
    fault.check_memory(await memory.messages())


class CallbackBroke(Exception):
    pass


async def test_an_exception_in_a_stream_callback_aborts_the_round(fault: Fault) -> None:
    fault.declare(
        "tool",
        "exception inside a callback (on_tool_executed)",
        "the invocation fails with it; the running sibling is cancelled; nothing of the round is committed",
        mode="stream",
    )
    before = running_tasks()
    probe = ToolProbe()

    @tool
    async def fast(n: int) -> int:
        """Returns at once."""
        return n

    def on_executed(execution: Any) -> None:
        raise CallbackBroke(f"dashboard rejected {execution.request.name}")

    batch = calls(("weather", {"city": "Paris"}), ("fast", {"n": 1}))
    model = ScriptedChatModel([batch, batch])
    memory = await seeded_memory()
    agent = Agent(model, tools=[fast, weather_tool(probe)], memory=memory)
    probe.seconds = 3600
    with pytest.raises(CallbackBroke, match="dashboard rejected fast"):
        await agent.stream(QUESTION).on_tool_executed(on_executed).start()
    errors: list[BaseException] = []
    result = await agent.stream(QUESTION).on_tool_executed(on_executed).on_error(errors.append).start()
    assert result is None and [type(e) for e in errors] == [CallbackBroke]
    assert probe.started == probe.cancelled == ["Paris", "Paris"] and not probe.finished
    assert await memory.messages() == seed_messages()
    fault.check_memory(await memory.messages())
    fault.check_tasks(before)


async def test_an_exception_in_the_event_consumer_cancels_the_invocation(fault: Fault) -> None:
    fault.declare(
        "tool",
        "exception inside the event consumer",
        "it propagates to the consumer; leaving `async with` cancels the tools; memory unchanged",
        mode="stream",
    )
    before = running_tasks()
    probe = ToolProbe(seconds=3600)
    memory = await seeded_memory()
    model = ScriptedChatModel(
        [calls(("weather", {"city": "Paris"}), ("weather", {"city": "London"})), "never"]
    )
    agent = Agent(model, tools=[weather_tool(probe)], memory=memory)

    async def consume() -> None:
        async with agent.stream(QUESTION) as stream:
            async for event in stream.events():
                if isinstance(event, BeforeToolExecution):
                    raise CallbackBroke("the web client went away")

    with pytest.raises(CallbackBroke):
        await consume()
    assert probe.started and probe.cancelled == probe.started and not probe.still_running()
    assert await memory.messages() == seed_messages()
    fault.check_memory(await memory.messages())
    fault.check_tasks(before)


@mode_param
async def test_a_tool_provider_failing_between_rounds_keeps_the_finished_round(
    mode: str, fault: Fault
) -> None:
    fault.declare(
        "tool",
        "exception inside a callback (dynamic tool provider, between rounds)",
        "the invocation fails with it; the completed round stays committed, nothing after it",
        mode=mode,
    )
    before = running_tasks()
    probe = ToolProbe()
    asked = 0

    def provider(request: Any) -> None:
        nonlocal asked
        asked += 1
        if asked == 2:
            raise CallbackBroke("the tool registry is down")

    provider.dynamic = True  # type: ignore[attr-defined]
    model = ScriptedChatModel([calls(("weather", {"city": "Paris"})), "never"])
    memory = await seeded_memory()
    agent = Agent(model, tools=[weather_tool(probe)], tool_provider=provider, memory=memory)
    outcome = await invoke(agent, mode, QUESTION)
    assert isinstance(outcome.error, CallbackBroke)
    messages = await memory.messages()
    assert messages[:2] == seed_messages() and len(messages) == 5  # + question, calls, result
    assert isinstance(messages[-1], ToolExecutionResultMessage) and messages[-1].text == "Sunny in Paris"
    fault.check_memory(messages)
    fault.check_tasks(before)


@mode_param
async def test_cancellation_in_the_middle_of_a_batch(mode: str, fault: Fault) -> None:
    fault.declare(
        "tool",
        "cancellation in the middle of a batch",
        "every running call observes it; nothing of the round is committed; the next invocation works",
        mode=mode,
    )
    before = running_tasks()
    probe = ToolProbe()

    @tool
    async def slow(city: str) -> str:
        """Takes its time."""
        await probe.run(city, seconds=3600)
        return "never"

    batch = calls(("weather", {"city": "Paris"}), ("slow", {"city": "Rome"}), ("slow", {"city": "Oslo"}))
    model = ScriptedChatModel([batch, "Fine, thanks."])
    memory = await seeded_memory()
    agent = Agent(model, tools=[weather_tool(probe), slow], memory=memory)
    async with anyio.create_task_group() as tg:

        async def cancel_when_running() -> None:
            # Wait until the quick call of the batch completed and the two slow ones run.
            while not ("Paris" in probe.finished and len(probe.started) == 3):
                await anyio.sleep(0.005)
            tg.cancel_scope.cancel()

        tg.start_soon(cancel_when_running)
        await invoke(agent, mode, QUESTION)
        pytest.fail("the invocation should have been cancelled")  # pragma: no cover
    assert sorted(probe.cancelled) == ["Oslo", "Rome"] and probe.finished == ["Paris"]
    assert await memory.messages() == seed_messages()
    outcome = await invoke(agent, mode, "How are you?")
    assert outcome.result is not None and outcome.result.content == "Fine, thanks."
    fault.check_memory(await memory.messages())
    fault.check_tasks(before)


class Abort(Exception):
    pass


@pytest.mark.parametrize("handler", ["tool_execution_error_handler", "tool_arguments_error_handler"])
@mode_param
async def test_an_error_handler_that_re_raises_aborts_the_round(
    mode: str, handler: str, fault: Fault
) -> None:
    fault.declare(
        "tool",
        f"error handler that re-raises ({handler})",
        "the handler's exception propagates as itself; siblings are cancelled; nothing committed",
        mode=mode,
    )
    before = running_tasks()
    probe = ToolProbe(seconds=3600)

    @tool
    async def charge(amount: int) -> str:
        """Charges a card."""
        raise RuntimeError("card declined")

    def abort(error: Exception, request: Any) -> str:
        raise Abort(f"stop everything: {request.name} failed ({error})")

    arguments = {"amount": 10} if handler == "tool_execution_error_handler" else {"amount": "ten"}
    model = ScriptedChatModel([calls(("weather", {"city": "Paris"}), ("charge", arguments)), "never"])
    memory = await seeded_memory()
    handlers: dict[str, Any] = {handler: abort}
    agent = Agent(model, tools=[weather_tool(probe), charge], memory=memory, **handlers)
    outcome = await invoke(agent, mode, QUESTION)
    assert type(outcome.error) is Abort and "stop everything: charge failed" in str(outcome.error)
    assert probe.started == ["Paris"] and probe.cancelled == ["Paris"]
    assert await memory.messages() == seed_messages()
    fault.check_memory(await memory.messages())
    fault.check_tasks(before)
