"""A round opens its task group only when a tool call is about to start.

A response that calls no tool (every final answer) runs without one: no cancel scope, task set or exit
checkpoint for text alone. A call that becomes whole while the model streams opens it right there (eager
tools), so the group can open in the middle of a stream; these tests hold that to every guarantee the
up-front group gave: the calls still start before the response ends, also inside a `wrap_model_call` that
holds a cancel scope, a failing call ends the round with its own error and closes the model's stream,
cancelling mid-stream leaves no task, and `execute_tool_calls` is unchanged. A `wrap_model_call` that declares
`holds_no_scope` (tracing does) lets the group open inside it, so a traced text answer runs without one too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentloop import (
    Agent,
    AiMessage,
    ChatRequest,
    ChatResponse,
    FinishReason,
    IllegalConfigurationError,
    MessageWindowChatMemory,
    Middleware,
    ModelCall,
    ToolCall,
    ToolExecutionRequest,
    execute_tool_calls,
    tool,
)
from agentloop.models import ModelEvent, OpenAIChatModel, ResponseComplete, TextDelta, ToolCallComplete
from agentloop.otel import Instrumentation
from agentloop.testing import FakeOpenAIServer, ScriptedChatModel
from tests.reliability._support import running_tasks
from tests.runtime_helpers import assert_valid_for_provider, calls


@tool
def ping() -> str:
    """Answers pong."""
    return "pong"


@pytest.fixture
def groups(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every task group anyio creates while the test runs."""
    made: list[object] = []
    create = anyio.create_task_group

    def counting() -> Any:
        group = create()
        made.append(group)
        return group

    monkeypatch.setattr(anyio, "create_task_group", counting)
    return made


def openai(server: FakeOpenAIServer) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key="test")


async def _texts(agent: Agent[Any], message: str) -> str:
    async with agent.stream(message) as stream:
        return "".join([t async for t in stream])


async def test_a_text_answer_opens_no_task_group(groups: list[object]) -> None:
    agent = Agent(ScriptedChatModel(["hello there"]), tools=[ping])  # tools offered, eager tools on
    assert (await agent.chat("hi")).content == "hello there"
    assert groups == []

    async with FakeOpenAIServer(["hello there"] * 2) as server, openai(server) as model:
        assert await _texts(Agent(model), "hi") == "hello there"  # the stream's own machinery
        baseline = len(groups)
        assert await _texts(Agent(model, tools=[ping]), "hi") == "hello there"
    assert len(groups) == 2 * baseline  # tools offered but not called: nothing more than without tools


async def test_a_tool_round_opens_exactly_one(groups: list[object]) -> None:
    script = [calls(("ping", {}), ("ping", {})), "done"]
    result = await Agent(ScriptedChatModel(script), tools=[ping]).chat("go")
    assert [e.result for e in result.tool_executions] == ["pong", "pong"]
    assert len(groups) == 1  # the tool round's; the answer's round opened none

    async with FakeOpenAIServer(["x", *script]) as server, openai(server) as model:
        del groups[:]
        assert await _texts(Agent(model), "hi") == "x"
        baseline = len(groups)
        del groups[:]
        assert await _texts(Agent(model, tools=[ping]), "go") == "done"
    assert len(groups) == baseline + 1


class Counts(Middleware):
    """A `wrap_model_call` that keeps no scope around `call_next` and says so (`holds_no_scope`)."""

    allows_eager_tools = True
    holds_no_scope = True

    def __init__(self) -> None:
        self.calls = 0

    async def wrap_model_call(self, call: ModelCall, call_next: Any) -> ChatResponse:
        self.calls += 1
        response: ChatResponse = await call_next(call)
        return response


class Undeclared(Counts):
    holds_no_scope = False


def traced() -> tuple[Instrumentation, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Instrumentation(provider, MeterProvider(metric_readers=[InMemoryMetricReader()])), exporter


async def test_a_text_answer_under_a_declared_model_middleware_or_tracing_opens_no_task_group(
    groups: list[object],
) -> None:
    script = [calls(("ping", {}), ("ping", {})), "done"]
    async with FakeOpenAIServer(["x", *script] * 4) as server, openai(server) as model:
        assert await _texts(Agent(model), "hi") == "x"
        baseline = len(groups)  # the stream's own machinery
        del groups[:]
        assert await _texts(Agent(model, tools=[ping]), "go") == "done"
        assert len(groups) == 2 * baseline + 1  # two model calls; the tool round's group only
        bare = len(groups)

        counting = Counts()
        del groups[:]
        assert await _texts(Agent(model, tools=[ping], middleware=[counting]), "hi") == "x"
        assert len(groups) == baseline  # a text answer: no group
        del groups[:]
        assert await _texts(Agent(model, tools=[ping], middleware=[counting]), "go") == "done"
        assert len(groups) == bare and counting.calls == 3

        instrumentation, exporter = traced()
        del groups[:]
        assert await _texts(Agent(model, tools=[ping], instrument=instrumentation), "hi") == "x"
        assert len(groups) == baseline
        del groups[:]
        assert await _texts(Agent(model, tools=[ping], instrument=instrumentation), "go") == "done"
        assert len(groups) == bare
        names = sorted(span.name for span in exporter.get_finished_spans())
        assert names.count("execute_tool ping") == 2 and names.count("chat gpt-4o-mini") == 3

        del groups[:]  # undeclared: the round opens its group before the call, text answers too
        assert await _texts(Agent(model, tools=[ping], middleware=[Undeclared()]), "hi") == "x"
        assert len(groups) == baseline + 1


class StartsThenWaits:
    """Streams a whole call, then waits (bounded) for its tool to start before it ends the response: only a
    call started while the stream is open lets it finish. `closed` is set when its stream was closed."""

    def __init__(self, tool_name: str) -> None:
        self.tool_name = tool_name
        self.started = anyio.Event()
        self.release = anyio.Event()
        self.closed = False
        self.rounds = 0
        self.model_name = "starts-then-waits"

    async def chat(self, request: ChatRequest) -> ChatResponse:
        raise AssertionError("streamed only")

    async def stream_text_to(
        self, request: ChatRequest, sink: Callable[[str], bool]
    ) -> AsyncIterator[ModelEvent]:
        """A `TextSinkModel` (its scopes stay between yields): the round's task group opens mid-stream."""
        async for event in self.stream(request):
            if not (isinstance(event, TextDelta) and sink(event.text)):
                yield event

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        self.rounds += 1
        try:
            if self.rounds > 1:
                yield TextDelta("after")
                yield ResponseComplete(ChatResponse(AiMessage("after")))
                return
            call = ToolExecutionRequest("c1", self.tool_name, "{}")
            yield TextDelta("calling")
            yield ToolCallComplete(0, call)
            with anyio.fail_after(5):
                await self.started.wait()
            await self.release.wait()
            yield ResponseComplete(ChatResponse(AiMessage("calling", [call])))
        finally:
            self.closed = True


class ScopedStream:
    """A model whose stream yields inside a cancel scope of its own (what PEP 789 warns against): not a
    `TextSinkModel`, so the round's task group opens before its stream starts and the scopes still nest."""

    def __init__(self) -> None:
        self.rounds = 0
        self.model_name = "scoped-stream"

    async def chat(self, request: ChatRequest) -> ChatResponse:
        raise AssertionError("streamed only")

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        self.rounds += 1
        with anyio.fail_after(10):
            if self.rounds > 1:
                yield TextDelta("done")
                yield ResponseComplete(ChatResponse(AiMessage("done")))
                return
            call = ToolExecutionRequest("c1", "ping", "{}")
            yield ToolCallComplete(0, call)
            await anyio.sleep(0.01)
            yield ResponseComplete(ChatResponse(AiMessage(None, [call])))


async def test_a_stream_that_yields_inside_its_own_scope_still_runs_its_calls() -> None:
    assert await _texts(Agent(ScopedStream(), tools=[ping]), "go") == "done"
    agent = Agent(ScopedStream(), tools=[ping])
    async with agent.stream("go") as stream:  # events wanted: the long way, same rule
        kinds = [type(event).__name__ async for event in stream.events()]
    assert "ToolExecuted" in kinds


class HoldsAScope(Middleware):
    """A `wrap_model_call` that keeps a cancel scope open around the model call and lets calls start early."""

    allows_eager_tools = True

    async def wrap_model_call(self, call: ModelCall, call_next: Any) -> ChatResponse:
        with anyio.fail_after(10):
            response: ChatResponse = await call_next(call)
        return response


@pytest.mark.parametrize(
    "middleware", [[], [HoldsAScope()], [Counts()]], ids=["bare", "scoped-middleware", "declared-middleware"]
)
async def test_a_call_starts_while_the_model_streams(middleware: list[Middleware]) -> None:
    model = StartsThenWaits("begin")

    @tool
    async def begin() -> str:
        """Starts the work."""
        model.started.set()
        model.release.set()
        return "begun"

    agent = Agent(model, tools=[begin], middleware=middleware)
    async with agent.stream("go") as stream:
        text = "".join([piece async for piece in stream])
    assert text == "callingafter"
    assert [e.result for e in stream.result.tool_executions] == ["begun"]
    assert model.closed


async def _drain(agent: Agent[Any], message: str) -> None:
    async with agent.stream(message) as stream:
        async for _ in stream:
            pass


class Misreports(Middleware):
    """A `wrap_tool_call` that returns something other than the execution: an error of the configuration."""

    async def wrap_tool_call(self, call: ToolCall, call_next: Any) -> Any:
        await call_next(call)
        return "not an execution"


async def test_a_call_failing_mid_stream_ends_the_round_with_its_error_and_closes_the_stream() -> None:
    model = StartsThenWaits("begin")

    @tool
    async def begin() -> str:
        """Starts the work."""
        model.started.set()  # the model stays waiting on `release`: the error must end the stream
        return "begun"

    memory = MessageWindowChatMemory(max_messages=20)
    agent = Agent(model, tools=[begin], memory=memory, middleware=[Misreports()])
    before = running_tasks()
    with pytest.raises(IllegalConfigurationError, match="returned 'not an execution'"):
        await _drain(agent, "go")
    assert model.closed
    assert await memory.messages() == []  # nothing of the round stored
    assert running_tasks() <= before


@pytest.mark.parametrize("middleware", [[], [Counts()]], ids=["bare", "declared-middleware"])
async def test_cancelling_while_a_call_runs_mid_stream_leaves_nothing_running(
    middleware: list[Middleware],
) -> None:
    model = StartsThenWaits("begin")
    cleaned: list[str] = []

    @tool
    async def begin() -> str:
        """Works until cancelled."""
        model.started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cleaned.append("begin")
        return "never"

    memory = MessageWindowChatMemory(max_messages=20)
    agent = Agent(model, tools=[begin], memory=memory, middleware=middleware)
    before = running_tasks()
    async with agent.stream("go", memory_id="m") as stream:
        async for piece in stream:
            assert piece == "calling"
            with anyio.fail_after(5):
                await model.started.wait()
            await stream.cancel()
    assert stream.result.finish_reason is FinishReason.CANCELLED
    assert cleaned == ["begin"] and model.closed
    assert_valid_for_provider(await memory.messages())
    assert running_tasks() <= before
    model.release.set()
    async with agent.stream("again", memory_id="m") as again:  # the memory id is free again
        assert "".join([t async for t in again]) == "after"


async def test_execute_tool_calls_runs_its_calls_in_one_group(groups: list[object]) -> None:
    requests = [ToolExecutionRequest(f"c{i}", "ping", "{}") for i in range(3)]
    executions = await execute_tool_calls(requests, [ping])
    assert [e.result for e in executions] == ["pong"] * 3
    assert len(groups) == 1
    assert await execute_tool_calls([], [ping]) == [] and len(groups) == 1
