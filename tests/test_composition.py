"""Every pair of features composes: {chat, stream} x {asyncio, trio} x pairs of structured output (three
modes), approval inline, approval paused and resumed in another process, SQLite store, Redis store,
DBOSAgent, tracing, FallbackChatModel, an MCP toolset, a user middleware, Compaction, ClearToolResults and
ToolSearch (tests/composition.py builds each scenario).

Servers are shared per module: one redis-server, one MCP server over streamable HTTP, one worker process
that resumes paused rounds, one DBOS launch for every DBOS pair. Pairs that cannot be asked for at once (two
output modes, two stores for one memory) are skipped with that reason; DBOS runs on asyncio and through
`chat()` only, as docs/durable.md says; a DBOSAgent refuses an inline approval handler by design, and that
pair checks the refusal.
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
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import FinishReason, IllegalConfigurationError

from .composition import FEATURES, Scenario, Sum
from .runtime_helpers import assert_valid_for_provider
from .store_servers import free_port, redis_server

ROOT = Path(__file__).resolve().parent.parent
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
    for pair in DBOS_PAIRS:
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
