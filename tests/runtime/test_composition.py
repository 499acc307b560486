"""Every pair of features composes: {chat, stream} x {asyncio, trio} x pairs of structured output (three
modes), approval inline, approval paused and resumed in another process, SQLite store, Redis store,
DBOSAgent, tracing, FallbackChatModel, an MCP toolset, a user middleware, Compaction, ClearToolResults and
ToolSearch (tests/composition.py builds each scenario); and run control paired with each of them and with
each other: `cancel` (at once), `cancel_after_round` and `steer`, acting once the run's first tool call is
held by the scenario's Gate middleware (events, no sleeps): `stream.cancel()` / `stream.steer()` when
streamed, `agent.cancel()` / `agent.steer()` by memory id for `chat()`, `DBOSAgent.cancel(workflow_id)`
(after the round and steering through its agent, by the workflow id). Each run-control pair checks what
docs/runtime.md, "Stopping and steering a run", promises: the Result (CANCELLED and its reason, no output;
or the steered message answered by the same run), the memory (provider-valid: nothing of the round in
flight, the round that committed, or the steered message after the round's results), the spans
(`agentloop.cancelled`, `agentloop.cancel_reason`) and the middleware's hooks, and that the next invocation
on the memory id works. A paused approval is resumed in this process for them (the tool round runs then).

Servers are shared per module: one redis-server, one MCP server over streamable HTTP, one worker process
that resumes paused rounds, one DBOS launch for every DBOS pair. Pairs that cannot be asked for at once (two
output modes, two stores for one memory) are skipped with that reason; DBOS runs on asyncio and through
`chat()` only, as docs/durable.md says; a DBOSAgent refuses an inline approval handler by design, and that
pair checks the refusal. `cancel` with `cancel_after_round` is skipped (one cancel per run).
"""

from __future__ import annotations

import itertools
import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import (
    AiMessage,
    FinishReason,
    IllegalConfigurationError,
    ToolExecutionResultMessage,
    UserMessage,
)
from tests.composition import CONTROL, FEATURES, STEERED, SUM, Scenario, Sum
from tests.runtime_helpers import assert_valid_for_provider
from tests.store_servers import free_port, redis_server

ROOT = Path(__file__).resolve().parents[2]
PAIRS = list(itertools.combinations(FEATURES, 2))
ONE_OF_A_KIND = [
    {"output_tool", "output_native"},
    {"output_tool", "output_prompted"},
    {"output_native", "output_prompted"},
    {"sqlite", "redis"},
]
NOT_COVERED = {
    frozenset({"tool_search", "mcp"}): "ToolSearch takes its tools when built; an MCP toolset lists its "
    "tools only once connected (put the MCPToolset beside a ToolSearch instead)",
}


class Telemetry:
    """An OpenTelemetry SDK tracer provider keeping spans in memory."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def instrumentation(self) -> Any:
        from agentloop.otel import Instrumentation

        return Instrumentation(self.tracer_provider, None, capture_content=False)

    def names(self) -> list[str]:
        return [span.name for span in self.exporter.get_finished_spans()]


class Worker:
    """The other process: resumes a paused round from its JSON with an agent built the same way."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.composition_worker"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def resume(self, spec: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(spec) + "\n")
        self.process.stdin.flush()
        answer: dict[str, Any] = json.loads(self.process.stdout.readline())
        return answer

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(10)


class MCPServer:
    def __init__(self, state: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        demo = str(ROOT / "tests" / "mcp_demo_server.py")
        self.process = subprocess.Popen([sys.executable, demo, "http", str(self.port), str(state)], cwd=ROOT)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                assert self.process.poll() is None and time.monotonic() < deadline, (
                    "the MCP server did not start"
                )
                time.sleep(0.05)

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    state = tmp_path_factory.mktemp("mcp")
    with redis_server() as redis_url:
        mcp = MCPServer(state)
        worker = Worker()
        try:
            yield {"redis_url": redis_url, "mcp_url": mcp.url, "worker": worker}
        finally:
            worker.close()
            mcp.close()


def scenario_for(pair: tuple[str, ...], servers: dict[str, Any], directory: Path) -> Scenario:
    features = frozenset(pair)
    return Scenario(
        features,
        sqlite_path=str(directory / "memory.sqlite"),
        redis_url=servers["redis_url"],
        redis_prefix=f"comp-{uuid.uuid4().hex[:8]}",
        mcp_url=servers["mcp_url"],
        telemetry=Telemetry() if "tracing" in features else None,
    )


async def invoke(agent: Any, streaming: bool, **options: Any) -> Any:
    if not streaming:
        return await agent.chat("What is 2 + 3?", memory_id="u1", **options)
    async with agent.stream("What is 2 + 3?", memory_id="u1", **options) as stream:
        async for _ in stream:
            pass
        return stream.result


def pair_id(pair: tuple[str, ...]) -> str:
    return "+".join(pair)


@pytest.mark.parametrize("mode", ["chat", "stream"])
@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
async def test_a_pair_of_features_composes(
    pair: tuple[str, str], mode: str, anyio_backend: str, servers: dict[str, Any], tmp_path: Path
) -> None:
    if set(pair) in ONE_OF_A_KIND:
        pytest.skip("one output mode and one store per call: this pair cannot be asked for at once")
    if "dbos" in pair:
        pytest.skip("DBOS pairs run in test_a_pair_with_dbos_composes (asyncio, chat() only)")
    if frozenset(pair) in NOT_COVERED:
        pytest.skip(NOT_COVERED[frozenset(pair)])
    scenario = scenario_for(pair, servers, tmp_path)
    streaming = mode == "stream"
    if "mcp" in scenario.features:
        from agentloop.mcp import MCPToolset

        async with MCPToolset(scenario.mcp_url or "", call_timeout=10) as toolset:
            result = await invoke(scenario.agent(tools=[toolset]), streaming, **scenario.call_options())
    else:
        result = await invoke(scenario.agent(), streaming, **scenario.call_options())

    if scenario.pauses:
        assert result.finish_reason is FinishReason.APPROVAL_REQUIRED and result.pending is not None
        assert [r.tool_name for r in result.pending.requests] == ["add"]
        spec = {
            "features": sorted(scenario.features),
            "pending": result.pending.to_json().decode(),
            "sqlite_path": scenario.sqlite_path,
            "redis_url": scenario.redis_url,
            "redis_prefix": scenario.redis_prefix,
            "mcp_url": scenario.mcp_url,
            "backend": anyio_backend,
            "streaming": streaming,
        }
        answer = await anyio.to_thread.run_sync(servers["worker"].resume, spec)
        assert "error" not in answer, answer
        if scenario.output_mode is not None:
            assert answer["output"] == Sum(total=5).model_dump()
        else:
            assert answer["content"] == "The sum is 5."
        assert ["add", "5"] in answer["tools"]
    else:
        scenario.check_result(result)

    store = scenario.store()
    if store is not None:  # the conversation is whole and valid, in the store
        messages = await store.get_messages("u1")
        assert_valid_for_provider(messages)
        assert messages[0].text == "What is 2 + 3?" and len(messages) >= 4
        if "compaction" in scenario.features:  # the summary is kept in the store
            assert any("agentloop.compaction" in getattr(m, "provider_state", {}) for m in messages)
        await store.aclose()
    if scenario.telemetry is not None:
        names = scenario.telemetry.names()
        assert any(n.startswith("invoke_agent") for n in names), names
        if not scenario.pauses:
            assert any(n.startswith("execute_tool") for n in names), names
    if "middleware" in scenario.features:
        log = scenario.recorder.hooks
        assert log[0] == "invocation" and log[1] == "resume" and "model" in log and "hold" not in log
        assert ("stream:0" in log) is streaming, log  # each streamed response passes wrap_stream
        if not scenario.pauses:
            assert f"tool:{scenario.tool_name}" in log and "tool_round:1" in log, log
            assert log[-1] == scenario.answer_logged and log.count(scenario.answer_logged) == 1
            assert "round:1" in scenario.recorder.log  # the tool round committed, then the model went on
        scenario.recorder.check_plain_hooks(result, None if scenario.pauses else scenario.tool_name)


# -- DBOS pairs ---------------------------------------------------------------------------------------------

DBOS_PAIRS = [pair for pair in PAIRS if "dbos" in pair]


@pytest.fixture(scope="module")
def dbos_agents(
    servers: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[tuple[str, ...], Any]]:
    """Every DBOS pair's DBOSAgent, registered before the one launch of the module."""
    pytest.importorskip("dbos")
    from dbos import DBOS

    from agentloop.dbos import DBOSAgent

    directory = tmp_path_factory.mktemp("dbos")
    DBOS(
        config={
            "name": "agentloop-composition",
            "system_database_url": f"sqlite:///{directory / 'dbos.sqlite'}",
            "log_level": "WARNING",
        }
    )
    built: dict[tuple[str, ...], Any] = {}
    for pair in DBOS_PAIRS + [(control, "dbos") for control in CONTROL]:
        if "mcp" in pair:
            continue
        pair_dir = directory / pair_id(pair)
        pair_dir.mkdir()
        scenario = scenario_for(pair, servers, pair_dir)
        try:
            built[pair] = (DBOSAgent(scenario.agent(name=f"comp_{'_'.join(pair)}")), scenario)
        except IllegalConfigurationError as error:
            built[pair] = (error, scenario)
    DBOS.launch()
    try:
        yield built
    finally:
        DBOS.destroy(destroy_registry=True)


@pytest.mark.parametrize("pair", DBOS_PAIRS, ids=pair_id)
async def test_a_pair_with_dbos_composes(
    pair: tuple[str, str], anyio_backend: str, dbos_agents: dict[tuple[str, ...], Any]
) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("DBOS runs on asyncio only (docs/durable.md)")
    if "mcp" in pair:
        pytest.skip(
            "not covered: an MCPToolset connects in one event loop, this module's DBOS launch spans tests"
        )
    durable, scenario = dbos_agents[pair]
    if "approval_inline" in pair:  # by design: an inline handler would be asked again on every replay
        assert isinstance(durable, IllegalConfigurationError) and "durable wait" in str(durable)
        return
    workflow_id = f"comp-{pair_id(pair)}-{uuid.uuid4().hex[:6]}"
    options = scenario.call_options()
    if scenario.pauses:
        results: list[Any] = []

        async def run() -> None:
            results.append(
                await durable.chat("What is 2 + 3?", memory_id="u1", workflow_id=workflow_id, **options)
            )

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            pending = await durable.pending(workflow_id, timeout=30)
            assert pending is not None and [r.tool_name for r in pending.requests] == ["add"]
            await durable.approve(workflow_id, {r.call_id: True for r in pending.requests})
        result = results[0]
    else:
        result = await durable.chat("What is 2 + 3?", memory_id="u1", workflow_id=workflow_id, **options)
    scenario.check_result(result)
    store = scenario.store()
    if store is not None:
        messages = await store.get_messages("u1")
        assert_valid_for_provider(messages)
        assert messages[0].text == "What is 2 + 3?"
    if scenario.telemetry is not None:
        assert any(n.startswith("invoke_agent") for n in scenario.telemetry.names())
    if "middleware" in pair:
        assert "model" in scenario.recorder.log and f"tool:{scenario.tool_name}" in scenario.recorder.log
        assert scenario.recorder.hooks[-1] == scenario.answer_logged
        assert "round:1" in scenario.recorder.log
        scenario.recorder.check_plain_hooks(result, scenario.tool_name)


# -- run control --------------------------------------------------------------------------------------------

CONTROL_PAIRS = [(control, feature) for control in CONTROL for feature in FEATURES]
CONTROL_PAIRS += list(itertools.combinations(CONTROL, 2))
CONTROL_NOT_COVERED = {
    frozenset({"cancel", "cancel_after_round"}): "one cancel per run: a cancel at once ends the run before "
    "a later cancel after the round could act (tests/features/run_control/test_run_control.py covers "
    "cancelling twice)",
}
QUESTION = "What is 2 + 3?"


def start(scenario: Scenario, agent: Any, streaming: bool, pending: Any = None) -> Any:
    """The controlled invocation, not yet awaited: a `chat()` coroutine or a stream; with `pending`, the
    resumption (in this process) of the round that paused for approval."""
    options = scenario.call_options()
    if pending is not None:
        decisions = {r.call_id: True for r in pending.requests}
        if streaming:
            return agent.resume_stream(pending, decisions, **options)
        return agent.resume(pending, decisions, **options)
    if streaming:
        return agent.stream(QUESTION, memory_id="u1", **options)
    return agent.chat(QUESTION, memory_id="u1", **options)


async def act(scenario: Scenario, target: Any, streaming: bool) -> None:
    """What run control does once the gate holds the first tool call: steers, then cancels (at once or
    after the round): on the stream when streamed, by memory id through the agent for `chat()`."""
    gate, features = scenario.gate, scenario.features
    assert gate.reached is not None and gate.release is not None
    await gate.reached.wait()
    if "steer" in features:
        if streaming:
            await target.steer(STEERED)
        else:
            assert await target.steer(STEERED, memory_id="u1")
    after_round = "cancel_after_round" in features
    if after_round or "cancel" in features:
        if streaming:
            await target.cancel(after_round=after_round, reason="stop")
        else:
            assert await target.cancel(memory_id="u1", after_round=after_round, reason="stop")
    if "cancel" not in features:  # a cancel at once leaves the call held until the run ended
        gate.release.set()


async def controlled(scenario: Scenario, agent: Any, streaming: bool, pending: Any = None) -> Any:
    """Runs the invocation under run control (`act`), and returns its Result."""
    scenario.gate.arm()
    run = start(scenario, agent, streaming, pending)
    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(act, scenario, run if streaming else agent, streaming)
            if streaming:
                async with run as stream:
                    async for _ in stream:
                        pass
                result = stream.result
            else:
                result = await run
            group.cancel_scope.cancel()  # the run ended before the gate was reached: the checks say so
    assert scenario.gate.release is not None
    scenario.gate.release.set()
    return result


async def memory_of(scenario: Scenario, agent: Any) -> list[Any]:
    store = scenario.store()
    if store is not None:
        messages: list[Any] = await store.get_messages("u1")
        return messages
    memory = agent._memory_for("u1")
    return list(await memory.messages())


def check_controlled(scenario: Scenario, result: Any, messages: list[Any], held: list[Any]) -> None:
    """What docs/runtime.md, "Stopping and steering a run", promises of the run and its memory. `held`: the
    messages in memory before the controlled invocation (a paused round's)."""
    features = scenario.features
    first_tool = "search_tools" if "tool_search" in features else scenario.tool_name
    assert scenario.gate.cleaned == [first_tool], "the held call's cleanup did not run"
    assert_valid_for_provider(messages)
    steered = [i for i, m in enumerate(messages) if isinstance(m, UserMessage) and m.text == STEERED]
    if "cancel" in features:  # at once: nothing of the round in flight
        assert (result.finish_reason, result.cancel_reason) == (FinishReason.CANCELLED, "stop"), result
        assert result.output is None and result.content is None and result.pending is None
        assert messages == held, "the round in flight was committed"
        assert not [e for e in result.tool_executions if e.request.name == first_tool]
        assert not steered, "a steered message outlived the round it was steered into"
        return
    if "cancel_after_round" in features:  # the round in flight finished and committed, then the run ended
        assert (result.finish_reason, result.cancel_reason) == (FinishReason.CANCELLED, "stop"), result
        assert result.output is None and result.content is None and result.pending is None
        assert [e.request.name for e in result.tool_executions][-1:] == [first_tool]
        assert messages[: len(held)] == held and isinstance(messages[-1], ToolExecutionResultMessage)
        assert isinstance(messages[-2], AiMessage) and len(messages) == max(len(held), 1) + 2
        assert not steered, "a message steered into a run stopped after its round was committed unanswered"
        return
    # steered: the same run answered it, after the round's results, in order
    assert len(steered) == 1, (messages, result.messages)
    assert isinstance(messages[steered[0] - 1], ToolExecutionResultMessage), (messages, result.messages)
    assert any(isinstance(m, AiMessage) for m in messages[steered[0] + 1 :]), messages  # then answered
    assert any(m.text == STEERED for m in scenario.gate.requests[-1] if isinstance(m, UserMessage))
    if scenario.output_mode is not None:
        assert result.output == Sum(total=SUM), result
    else:
        assert result.content == "The sum is 5.", result


@pytest.mark.parametrize("mode", ["chat", "stream"])
@pytest.mark.parametrize("pair", CONTROL_PAIRS, ids=pair_id)
async def test_run_control_composes(
    pair: tuple[str, str],
    mode: str,
    anyio_backend: str,
    servers: dict[str, Any],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    if frozenset(pair) in CONTROL_NOT_COVERED:
        pytest.skip(CONTROL_NOT_COVERED[frozenset(pair)])
    if "dbos" in pair:
        if anyio_backend != "asyncio" or mode != "chat":
            pytest.skip("DBOS runs on asyncio and through chat() only (docs/durable.md)")
        await dbos_controlled(pair, request.getfixturevalue("dbos_agents"))
        return
    scenario = scenario_for(pair, servers, tmp_path)
    streaming = mode == "stream"
    async with AsyncExitStack() as stack:
        tools = None
        if "mcp" in scenario.features:
            from agentloop.mcp import MCPToolset

            tools = [await stack.enter_async_context(MCPToolset(scenario.mcp_url or "", call_timeout=10))]
        agent = scenario.agent(tools=tools)
        pending, held = None, []
        if scenario.pauses:  # the tool round runs once approved: run control acts on the resumption
            paused = await invoke(agent, streaming, **scenario.call_options())
            assert paused.finish_reason is FinishReason.APPROVAL_REQUIRED and paused.pending is not None
            pending, held = paused.pending, await memory_of(scenario, agent)
        result = await controlled(scenario, agent, streaming, pending)
        messages = await memory_of(scenario, agent)
        check_controlled(scenario, result, messages, held)
        await check_telemetry_and_middleware(scenario, result)
        # The next invocation on the memory id works, and its memory too.
        following = await invoke(agent, streaming, **scenario.call_options())
        assert following.finish_reason is FinishReason.STOP, following
        if scenario.output_mode is not None:
            assert following.output == Sum(total=SUM)
        else:
            assert following.content == "The sum is 5."
        after = await memory_of(scenario, agent)
        assert_valid_for_provider(after)
        assert after[: len(messages)] == messages or "compaction" in scenario.features
    store = scenario.store()
    if store is not None:
        await store.aclose()


async def check_telemetry_and_middleware(scenario: Scenario, result: Any) -> None:
    cancelled = result.finish_reason is FinishReason.CANCELLED
    if scenario.telemetry is not None:  # every span ended; the invocation's says how the run ended
        spans = scenario.telemetry.exporter.get_finished_spans()
        invocations = [s for s in spans if s.name.startswith("invoke_agent")]
        attributes = dict(invocations[-1].attributes or {})
        assert attributes["agentloop.finish_reason"] == result.finish_reason.value
        assert attributes.get("agentloop.cancelled", False) is cancelled
        if cancelled:
            assert attributes["agentloop.cancel_reason"] == "stop"
        assert all(s.status.status_code.name != "ERROR" for s in spans), spans
    if "middleware" in scenario.features:
        log = scenario.recorder.log
        answered = [entry for entry in log if entry.startswith("answer:")]
        if cancelled:  # a stopped run gives no answer; after the round, the model is not called again
            assert not answered, log
            if "cancel_after_round" in scenario.features:
                last = log[-2]  # the entry before the Result (on_result, checked below)
                assert last.startswith("round:") and "model" not in log[log.index(last) :], log
        else:
            assert answered == [scenario.answer_logged], log
        scenario.recorder.check_plain_hooks(result, scenario.tool_name)


async def dbos_controlled(pair: tuple[str, str], agents: dict[tuple[str, ...], Any]) -> None:
    """Run control across the durable boundary: `DBOSAgent.cancel(workflow_id)` at once (awaiting the run
    then raises DBOS's `DBOSAwaitedWorkflowCancelledError`, docs/durable.md); after the round and steering
    through the agent's run control, by the invocation id (the workflow id)."""
    from dbos._error import DBOSAwaitedWorkflowCancelledError  # not re-exported by dbos

    durable, scenario = agents[pair]
    gate, features = scenario.gate, scenario.features
    workflow_id = f"comp-{pair_id(pair)}-{uuid.uuid4().hex[:6]}"
    gate.arm()
    result = None

    async def act_durably() -> None:
        assert gate.reached is not None and gate.release is not None
        await gate.reached.wait()
        if "steer" in features:
            assert await durable.agent.steer(STEERED, invocation_id=workflow_id)
        if "cancel" in features:
            assert await durable.cancel(workflow_id, reason="stop")
        else:
            if "cancel_after_round" in features:
                after = {"after_round": True, "reason": "stop"}
                assert await durable.agent.cancel(invocation_id=workflow_id, **after)
            gate.release.set()

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(act_durably)
            if "cancel" in features:
                with pytest.raises(DBOSAwaitedWorkflowCancelledError):
                    await durable.chat(QUESTION, memory_id="u1", workflow_id=workflow_id)
            else:
                result = await durable.chat(QUESTION, memory_id="u1", workflow_id=workflow_id)
            group.cancel_scope.cancel()
    assert gate.release is not None
    gate.release.set()
    messages = await memory_of(scenario, durable.agent)
    if result is None:  # cancelled at once: no Result to read, the memory as documented
        assert gate.cleaned == [scenario.tool_name] and messages == []
    else:
        check_controlled(scenario, result, messages, [])
    following = await durable.chat(QUESTION, memory_id="u1", workflow_id=f"{workflow_id}-next")
    assert following.finish_reason is FinishReason.STOP and following.content == "The sum is 5."
    assert_valid_for_provider(await memory_of(scenario, durable.agent))
