"""OpenTelemetry instrumentation: spans and metrics recorded with the SDK's in-memory exporter and reader,
for real model calls to the fake provider servers over loopback sockets."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

import agentloop
from agentloop import (
    Agent,
    AiMessage,
    BadRequestError,
    ChatRequest,
    ChatResponse,
    InvocationTimeoutError,
    TokenUsage,
    ToolExecutionRequest,
    tool,
)
from agentloop.models import (
    AnthropicChatModel,
    ChatModel,
    ClosableModel,
    FallbackChatModel,
    LocallyNamedModel,
    ModelWithDefaults,
    NamedModel,
    OpenAIChatModel,
    ProviderModel,
    RemoteModel,
    ResponseComplete,
    TextDelta,
    WrapperModel,
)
from agentloop.models._base import (
    model_name_of,
    provider_of,
    supports_response_format,
    supports_tool_search,
)
from agentloop.models._http import RetryPolicy
from agentloop.testing import FakeAnthropicServer, FakeOpenAIServer, ScriptedChatModel
from tests.otel_helpers import Telemetry

KEY = "sk-test-0123456789abcdef-secret"
CITIES = ("Paris", "Oslo", "Lima")
CALLS = [
    ToolExecutionRequest(f"call_{n}", "weather", json.dumps({"city": city})) for n, city in enumerate(CITIES)
]
USAGE = TokenUsage(120, 30, cache_read_tokens=100, cache_write_tokens=None, reasoning_tokens=12)


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    found = Telemetry()
    yield found
    found.tracer_provider.shutdown()
    found.meter_provider.shutdown()


def _overlapping_tool() -> Any:
    """A tool whose calls each wait until all three have started: they provably run at the same time."""
    started: list[str] = []
    everyone = anyio.Event()

    @tool
    async def weather(city: str) -> str:
        """The weather in a city."""
        started.append(city)
        if len(started) == len(CITIES):
            everyone.set()
        with anyio.fail_after(5):
            await everyone.wait()
        return f"sunny in {city}"

    return weather


def _server(backend: str, responses: list[Any]) -> Any:
    return FakeOpenAIServer(responses) if backend == "openai" else FakeAnthropicServer(responses)


def _model(backend: str, server: Any, **options: Any) -> Any:
    options.setdefault("max_retries", 0)
    if backend == "openai":
        return OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key=KEY, **options)
    return AnthropicChatModel("claude-test", base_url=server.base_url, api_key=KEY, **options)


def _all_attribute_text(spans: list[ReadableSpan]) -> str:
    parts = []
    for span in spans:
        parts.append(span.name)
        parts.extend(f"{k}={v}" for k, v in (span.attributes or {}).items())
        parts.append(span.status.description or "")
        for event in span.events:
            parts.extend(f"{k}={v}" for k, v in (event.attributes or {}).items())
    return "\n".join(parts)


CONTENT_KEYS = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.definitions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}


@pytest.mark.parametrize("backend", ["openai", "anthropic"])
@pytest.mark.parametrize("streaming", [False, True], ids=["chat", "stream"])
async def test_three_parallel_tools_give_sibling_spans_under_the_invocation(
    telemetry: Telemetry, backend: str, streaming: bool
) -> None:
    first = ChatResponse(AiMessage(None, CALLS), USAGE, id="resp_1")
    second = ChatResponse(AiMessage("Sunny everywhere."), TokenUsage(200, 10), id="resp_2")
    with _server(backend, [first, second]) as server:
        async with _model(backend, server) as model:
            agent = Agent(
                model,
                tools=[_overlapping_tool()],
                name="forecaster",
                system_message="Be brief.",
                instrument=telemetry.instrumentation(),
            )
            if streaming:
                stream = agent.stream("Weather in three cities?", memory_id="conv-7")
                text = "".join([piece async for piece in stream])
                result = stream.result
                assert result is not None
            else:
                result = await agent.chat("Weather in three cities?", memory_id="conv-7")
                text = result.content or ""
    assert text == "Sunny everywhere."
    model_name = "gpt-4o-mini" if backend == "openai" else "claude-test"

    [invocation] = telemetry.named("invoke_agent")
    chats = sorted(telemetry.named("chat"), key=lambda s: s.start_time or 0)
    tools = telemetry.named("execute_tool")
    assert len(telemetry.spans()) == 6
    assert invocation.name == "invoke_agent forecaster"
    assert invocation.kind is SpanKind.INTERNAL
    assert invocation.parent is None
    attributes = dict(invocation.attributes or {})
    assert attributes["gen_ai.operation.name"] == "invoke_agent"
    assert attributes["gen_ai.agent.name"] == "forecaster"
    assert attributes["gen_ai.provider.name"] == backend
    assert attributes["gen_ai.request.model"] == model_name
    assert attributes["gen_ai.conversation.id"] == "conv-7"
    assert attributes["agentloop.tool_calls"] == 3
    # The invocation's usage is the chat spans' sum, under names a backend does not add up a second time.
    assert attributes["agentloop.usage.input_tokens"] == 320
    assert attributes["agentloop.usage.output_tokens"] == 40
    assert not any(key.startswith("gen_ai.usage.") for key in attributes)
    assert invocation.status.status_code is StatusCode.UNSET

    assert [c.name for c in chats] == [f"chat {model_name}"] * 2
    for chat in chats:
        assert chat.kind is SpanKind.CLIENT
        assert chat.parent is not None and chat.parent.span_id == invocation.context.span_id
        a = dict(chat.attributes or {})
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == backend
        assert a["gen_ai.request.model"] == model_name
        assert a["gen_ai.response.model"] == model_name
        assert a["server.address"] == "127.0.0.1"
        assert a["server.port"] == server.port
        assert a["gen_ai.request.stream"] is streaming
        assert ("gen_ai.response.time_to_first_chunk" in a) is streaming
    one, two = (dict(c.attributes or {}) for c in chats)
    assert one["gen_ai.response.id"] == "resp_1"
    assert one["gen_ai.response.finish_reasons"] == ("tool_call",)
    assert (one["gen_ai.usage.input_tokens"], one["gen_ai.usage.output_tokens"]) == (120, 30)
    assert one["gen_ai.usage.cache_read.input_tokens"] == 100
    if backend == "openai":  # Anthropic has no reasoning count
        assert one["gen_ai.usage.reasoning.output_tokens"] == 12
    assert two["gen_ai.response.id"] == "resp_2"
    assert two["gen_ai.response.finish_reasons"] == ("stop",)
    assert (two["gen_ai.usage.input_tokens"], two["gen_ai.usage.output_tokens"]) == (200, 10)

    assert sorted(t.name for t in tools) == ["execute_tool weather"] * 3
    assert sorted(dict(t.attributes or {})["gen_ai.tool.call.id"] for t in tools) == [
        "call_0",
        "call_1",
        "call_2",
    ]
    for span in tools:
        assert span.kind is SpanKind.INTERNAL
        assert span.parent is not None and span.parent.span_id == invocation.context.span_id
        assert dict(span.attributes or {})["gen_ai.tool.name"] == "weather"
        assert dict(span.attributes or {})["gen_ai.tool.type"] == "function"
        assert span.status.status_code is StatusCode.UNSET
    # Every tool span starts before any of them ends: they ran at the same time.
    assert max(t.start_time or 0 for t in tools) < min(t.end_time or 0 for t in tools)

    # Private by default: no content, and never the key.
    assert not any(CONTENT_KEYS & set(s.attributes or {}) for s in telemetry.spans())
    text_of_spans = _all_attribute_text(telemetry.spans())
    assert KEY not in text_of_spans and KEY[-12:] not in text_of_spans
    assert "Paris" not in text_of_spans and "Sunny" not in text_of_spans

    points = telemetry.metrics()
    tokens = {dict(p.attributes)["gen_ai.token.type"]: p for p in points["gen_ai.client.token.usage"]}
    assert (tokens["input"].sum, tokens["input"].count) == (320, 2)
    assert (tokens["output"].sum, tokens["output"].count) == (40, 2)
    assert dict(tokens["input"].attributes)["gen_ai.provider.name"] == backend
    [duration] = points["gen_ai.client.operation.duration"]
    assert duration.count == 2 and duration.sum > 0
    assert dict(duration.attributes)["gen_ai.operation.name"] == "chat"


@pytest.mark.parametrize("streaming", [False, True], ids=["chat", "stream"])
async def test_content_is_recorded_when_asked(telemetry: Telemetry, streaming: bool) -> None:
    with FakeOpenAIServer([AiMessage(None, CALLS[:1]), "Sunny in Paris."]) as server:
        async with _model("openai", server) as model:
            agent = Agent(
                model,
                tools=[_single_weather()],
                system_message="Be brief.",
                instrument=telemetry.instrumentation(capture_content=True),
            )
            if streaming:
                await _text(agent.stream("Weather in Paris?"))
            else:
                await agent.chat("Weather in Paris?")
    [invocation] = telemetry.named("invoke_agent")
    first, second = sorted(telemetry.named("chat"), key=lambda s: s.start_time or 0)
    [call] = telemetry.named("execute_tool")
    a = dict(first.attributes or {})
    assert json.loads(str(a["gen_ai.input.messages"])) == [
        {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}
    ]
    assert json.loads(str(a["gen_ai.system_instructions"])) == [{"type": "text", "content": "Be brief."}]
    assert json.loads(str(a["gen_ai.tool.definitions"]))[0]["name"] == "weather"
    [output] = json.loads(str(a["gen_ai.output.messages"]))
    assert output["finish_reason"] == "tool_call"
    assert output["parts"] == [
        {"type": "tool_call", "id": "call_0", "name": "weather", "arguments": {"city": "Paris"}}
    ]
    history = json.loads(str(dict(second.attributes or {})["gen_ai.input.messages"]))
    assert history[-1] == {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": "call_0", "response": "sunny in Paris"}],
    }
    tool_attributes = dict(call.attributes or {})
    assert json.loads(str(tool_attributes["gen_ai.tool.call.arguments"])) == {"city": "Paris"}
    assert tool_attributes["gen_ai.tool.call.result"] == "sunny in Paris"
    final = json.loads(str(dict(invocation.attributes or {})["gen_ai.output.messages"]))
    assert final[0]["parts"] == [{"type": "text", "content": "Sunny in Paris."}]
    assert KEY not in _all_attribute_text(telemetry.spans())


async def _text(stream: Any) -> str:
    return "".join([piece async for piece in stream])


def _single_weather() -> Any:
    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    return weather


@pytest.mark.parametrize(("value", "captured"), [("true", True), ("SPAN_ONLY", True), ("false", False)])
async def test_content_capture_follows_the_environment_variable(
    telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch, value: str, captured: bool
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", value)
    with FakeOpenAIServer(["Hello."]) as server:
        async with _model("openai", server) as model:
            await Agent(model, instrument=telemetry.instrumentation()).chat("Hi")
    [chat] = telemetry.named("chat")
    assert ("gen_ai.input.messages" in (chat.attributes or {})) is captured


async def test_failed_tool_marks_its_span_only(telemetry: Telemetry) -> None:
    @tool
    def lookup(city: str) -> str:
        """Looks a city up."""
        raise ValueError(f"no data for {city}")

    call = ToolExecutionRequest("call_x", "lookup", '{"city": "Atlantis"}')
    with FakeOpenAIServer([AiMessage(None, [call]), "Sorry."]) as server:
        async with _model("openai", server) as model:
            result = await Agent(model, tools=[lookup], instrument=telemetry.instrumentation()).chat(
                "Atlantis?"
            )
    assert result.content == "Sorry."
    [span] = telemetry.named("execute_tool")
    assert span.status.status_code is StatusCode.ERROR
    assert dict(span.attributes or {})["error.type"] == "ValueError"
    assert "Atlantis" not in _all_attribute_text([span])  # the message may quote user data: not by default
    [invocation] = telemetry.named("invoke_agent")
    assert invocation.status.status_code is StatusCode.UNSET


async def test_model_error_marks_chat_and_invocation(telemetry: Telemetry) -> None:
    with FakeOpenAIServer([FakeOpenAIServer.error(400, "Invalid 'messages'.")]) as server:
        async with _model("openai", server) as model:
            agent = Agent(model, instrument=telemetry.instrumentation())
            with pytest.raises(BadRequestError):
                await agent.chat("Hi")
    [chat] = telemetry.named("chat")
    [invocation] = telemetry.named("invoke_agent")
    for span in (chat, invocation):
        assert span.status.status_code is StatusCode.ERROR
        assert dict(span.attributes or {})["error.type"] == "BadRequestError"
        assert "Invalid 'messages'" in (span.status.description or "")
    [duration] = telemetry.metrics()["gen_ai.client.operation.duration"]
    assert dict(duration.attributes)["error.type"] == "BadRequestError"
    assert "gen_ai.client.token.usage" not in telemetry.metrics()


@pytest.mark.parametrize("streaming", [False, True], ids=["chat", "stream"])
async def test_a_retried_call_is_one_span_with_a_retry_event(telemetry: Telemetry, streaming: bool) -> None:
    with FakeOpenAIServer([FakeOpenAIServer.error(503, "Overloaded"), "Hello."]) as server:
        retry = RetryPolicy(max_retries=2, initial_delay=0.01, jitter=0.0)
        async with _model("openai", server, retry=retry, max_retries=None) as model:
            agent = Agent(model, instrument=telemetry.instrumentation())
            if streaming:
                assert await _text(agent.stream("Hi")) == "Hello."
            else:
                assert (await agent.chat("Hi")).content == "Hello."
        assert len(server.requests) == 2
    [chat] = telemetry.named("chat")
    assert chat.status.status_code is StatusCode.UNSET
    [event] = chat.events
    assert event.name == "agentloop.retry"
    assert dict(event.attributes or {}) == {
        "agentloop.retry.attempt": 1,
        "agentloop.retry.delay": pytest.approx(0.01),
        "error.type": "ServerError",
    }


async def test_a_timed_out_invocation_ends_every_span(telemetry: Telemetry) -> None:
    @tool
    async def slow(city: str) -> str:
        """Never answers in time."""
        await anyio.sleep(30)
        return city

    call = ToolExecutionRequest("call_s", "slow", '{"city": "Oslo"}')
    with FakeOpenAIServer([AiMessage(None, [call])]) as server:
        async with _model("openai", server) as model:
            agent = Agent(model, tools=[slow], instrument=telemetry.instrumentation())
            with pytest.raises(InvocationTimeoutError):
                await agent.chat("Oslo?", timeout=2.0)  # the model answers well within it; the tool never
    [invocation] = telemetry.named("invoke_agent")
    [tool_span] = telemetry.named("execute_tool")
    [chat] = telemetry.named("chat")
    assert invocation.status.status_code is StatusCode.ERROR
    assert dict(invocation.attributes or {})["error.type"] == "InvocationTimeoutError"
    assert tool_span.end_time is not None and tool_span.status.status_code is StatusCode.UNSET
    assert chat.status.status_code is StatusCode.UNSET


def waiting_tool() -> tuple[anyio.Event, Any]:
    """A `slow` tool that says it started, then waits until cancelled: (started, tool)."""
    started = anyio.Event()

    @tool
    async def slow(city: str) -> str:
        """Waits until cancelled."""
        started.set()
        await anyio.sleep(30)
        return city

    return started, slow


async def test_a_cancelled_invocation_ends_every_span_without_error(telemetry: Telemetry) -> None:
    started, slow = waiting_tool()
    call = ToolExecutionRequest("call_s", "slow", '{"city": "Oslo"}')
    with FakeOpenAIServer([AiMessage(None, [call])]) as server:
        async with _model("openai", server) as model:
            agent = Agent(model, tools=[slow], instrument=telemetry.instrumentation())
            async with anyio.create_task_group() as group:
                group.start_soon(agent.chat, "Oslo?")
                with anyio.fail_after(10):
                    await started.wait()
                group.cancel_scope.cancel()
    [invocation] = telemetry.named("invoke_agent")
    [tool_span] = telemetry.named("execute_tool")
    assert invocation.status.status_code is StatusCode.UNSET
    assert dict(invocation.attributes or {})["agentloop.cancelled"] is True
    assert tool_span.end_time is not None and tool_span.status.status_code is StatusCode.UNSET


async def test_a_run_stopped_by_run_control_says_so_on_its_span(telemetry: Telemetry) -> None:
    """`cancel()` ends the run with a CANCELLED Result (no exception): `invoke_agent` says cancelled, and
    why, as for a run cancelled from outside; the cut-short tool's span ends without an error."""
    started, slow = waiting_tool()
    call = ToolExecutionRequest("call_s", "slow", '{"city": "Oslo"}')
    agent = Agent(
        ScriptedChatModel([AiMessage(None, [call])]), tools=[slow], instrument=telemetry.instrumentation()
    )

    async def stop() -> None:
        await started.wait()
        assert await agent.cancel(memory_id="m", reason="user pressed stop")

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(stop)
            result = await agent.chat("Oslo?", memory_id="m")
    assert result.cancel_reason == "user pressed stop"
    [invocation] = telemetry.named("invoke_agent")
    [tool_span] = telemetry.named("execute_tool")
    attributes = dict(invocation.attributes or {})
    assert invocation.status.status_code is StatusCode.UNSET
    assert attributes["agentloop.cancelled"] is True and attributes["agentloop.finish_reason"] == "cancelled"
    assert attributes["agentloop.cancel_reason"] == "user pressed stop"
    assert tool_span.end_time is not None and tool_span.status.status_code is StatusCode.UNSET


async def test_a_stream_left_early_ends_its_spans_without_error(telemetry: Telemetry) -> None:
    with FakeOpenAIServer() as server:
        # Still streaming when the consumer leaves.
        server.add("one two three four five six seven eight", chunk_delay=0.05)
        async with _model("openai", server) as model:
            agent = Agent(model, instrument=telemetry.instrumentation())
            async with agent.stream("Count") as stream:
                async for _ in stream:
                    break
    [chat] = telemetry.named("chat")
    [invocation] = telemetry.named("invoke_agent")
    assert chat.status.status_code is StatusCode.UNSET
    assert invocation.status.status_code is StatusCode.UNSET
    assert dict(invocation.attributes or {})["agentloop.cancelled"] is True


async def test_agent_as_tool_nests_under_the_tool_span(telemetry: Telemetry) -> None:
    instrumentation = telemetry.instrumentation()
    call = ToolExecutionRequest("call_h", "helper", '{"request": "sum 2 and 2"}')
    with FakeOpenAIServer([AiMessage(None, [call]), "4", "It is 4."]) as server:
        async with _model("openai", server) as model:
            helper = Agent(model, name="helper", description="Adds.", instrument=instrumentation)
            boss = Agent(model, name="boss", tools=[helper], instrument=instrumentation)
            assert (await boss.chat("2+2?")).content == "It is 4."
    by_name = {s.name: s for s in telemetry.spans()}
    outer, tool_span, inner = (
        by_name["invoke_agent boss"],
        by_name["execute_tool helper"],
        by_name["invoke_agent helper"],
    )
    assert tool_span.parent is not None and tool_span.parent.span_id == outer.context.span_id
    assert inner.parent is not None and inner.parent.span_id == tool_span.context.span_id
    assert inner.context.trace_id == outer.context.trace_id


async def test_instrument_traces_every_agent_until_uninstrument(telemetry: Telemetry) -> None:
    with FakeOpenAIServer(["a", "b", "c"]) as server:
        async with _model("openai", server) as model:
            plain, opted_out = Agent(model, name="plain"), Agent(model, name="quiet", instrument=False)
            agentloop.instrument(telemetry.tracer_provider, telemetry.meter_provider)
            try:
                await plain.chat("1")
                await opted_out.chat("2")
            finally:
                agentloop.uninstrument()
            await plain.chat("3")
    assert [s.name for s in telemetry.spans()] == ["chat gpt-4o-mini", "invoke_agent plain"]


class _Fallback:
    """A wrapper model in the shape of a fallback chain: tries each inner model until one answers."""

    def __init__(self, *models: Any) -> None:
        self.models = list(models)

    async def chat(self, request: ChatRequest) -> ChatResponse:
        for model in self.models[:-1]:
            try:
                return await model.chat(request)
            except BadRequestError:
                continue
        return await self.models[-1].chat(request)

    def stream(self, request: ChatRequest) -> Any:
        raise NotImplementedError

    def __agentloop_instrument__(self, wrap: Any) -> _Fallback:
        return _Fallback(*(wrap(m) for m in self.models))


async def test_a_wrapper_model_shows_each_inner_call(telemetry: Telemetry) -> None:
    with (
        FakeOpenAIServer([FakeOpenAIServer.error(400, "nope")]) as first,
        FakeAnthropicServer(["From the fallback."]) as second,
    ):
        async with _model("openai", first) as primary, _model("anthropic", second) as fallback:
            agent = Agent(_Fallback(primary, fallback), instrument=telemetry.instrumentation())
            assert (await agent.chat("Hi")).content == "From the fallback."
    failed, answered = sorted(telemetry.named("chat"), key=lambda s: s.start_time or 0)
    assert failed.name == "chat gpt-4o-mini" and failed.status.status_code is StatusCode.ERROR
    assert answered.name == "chat claude-test" and answered.status.status_code is StatusCode.UNSET
    [invocation] = telemetry.named("invoke_agent")
    assert {failed.parent.span_id, answered.parent.span_id} == {invocation.context.span_id}  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ["chat", "stream"])
async def test_a_fallback_chain_shows_the_failed_model_and_the_one_that_answered(
    telemetry: Telemetry, mode: str
) -> None:
    with (
        FakeOpenAIServer([FakeOpenAIServer.error(503, "overloaded")]) as first,
        FakeAnthropicServer(["From the fallback."]) as second,
    ):
        async with _model("openai", first) as primary, _model("anthropic", second) as fallback:
            chain = FallbackChatModel(primary, fallback, sticky=True)
            agent = Agent(chain, instrument=telemetry.instrumentation())
            if mode == "chat":
                assert (await agent.chat("Hi")).content == "From the fallback."
            else:
                assert "".join([t async for t in agent.stream("Hi")]) == "From the fallback."
            assert chain.model == "claude-test"  # the view shared the chain's sticky state
    failed, answered = sorted(telemetry.named("chat"), key=lambda s: s.start_time or 0)
    assert failed.name == "chat gpt-4o-mini" and failed.status.status_code is StatusCode.ERROR
    assert answered.name == "chat claude-test" and answered.status.status_code is StatusCode.UNSET
    [invocation] = telemetry.named("invoke_agent")
    assert {failed.parent.span_id, answered.parent.span_id} == {invocation.context.span_id}  # type: ignore[union-attr]


def test_importing_agentloop_does_not_import_opentelemetry() -> None:
    code = (
        "import sys, agentloop\n"
        "from agentloop import Agent\n"
        "from agentloop.testing import TestModel\n"
        "Agent(TestModel())\n"
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry', 'genai_prices'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_instrument_true_without_the_extra_says_how_to_install_it() -> None:
    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "from agentloop import Agent, AgentLoopError\n"
        "from agentloop.testing import TestModel\n"
        "try:\n"
        "    Agent(TestModel(), instrument=True)\n"
        "except AgentLoopError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'agentloop-runtime[otel]'" in out.stdout


async def test_an_in_process_model_gets_internal_chat_spans(telemetry: Telemetry) -> None:
    from agentloop.testing import TestModel

    await Agent(TestModel(), instrument=telemetry.instrumentation()).chat("Hi")
    [chat] = telemetry.named("chat")
    assert chat.kind is SpanKind.INTERNAL
    assert "server.address" not in (chat.attributes or {})
    assert dict(chat.attributes or {})["gen_ai.response.finish_reasons"] == ("stop",)


async def test_the_observability_guide_snippets_run(capsys: pytest.CaptureFixture[str]) -> None:
    import ast
    import inspect
    import re
    from pathlib import Path

    guide = Path(__file__).resolve().parents[3] / "docs" / "observability.md"
    blocks = re.findall(r"```python\n(.*?)```", guide.read_text(), flags=re.DOTALL)
    namespace: dict[str, object] = {"__name__": "guide"}
    try:
        for number, block in enumerate(blocks, 1):
            code = compile(
                block, f"observability.md snippet {number}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
            )
            outcome = eval(code, namespace)
            if inspect.iscoroutine(outcome):
                await outcome
    finally:
        agentloop.uninstrument()
        logging.getLogger("agentloop").setLevel(logging.NOTSET)  # the guide's logging snippet set it
    printed = capsys.readouterr().out
    assert "['chat test', 'chat test', 'execute_tool weather', 'invoke_agent forecaster']" in printed
    assert "cache_read_tokens=1024" in printed
    assert "$0.000210" in printed


async def test_control_flow_ending_an_invocation_is_not_an_error(telemetry: Telemetry) -> None:
    from agentloop import FinishReason, ReturnBehavior

    @tool(return_behavior=ReturnBehavior.IMMEDIATE)
    def book(city: str) -> str:
        """Books a trip; its result is the answer."""
        return f"booked {city}"

    call = ToolExecutionRequest("call_b", "book", '{"city": "Oslo"}')
    with FakeOpenAIServer([AiMessage(None, [call])]) as server:
        async with _model("openai", server) as model:
            result = await Agent(model, tools=[book], instrument=telemetry.instrumentation()).chat(
                "Book Oslo"
            )
    assert result.finish_reason is FinishReason.TOOL_EXECUTION
    [invocation] = telemetry.named("invoke_agent")
    assert invocation.status.status_code is StatusCode.UNSET
    attributes = dict(invocation.attributes or {})
    assert attributes["agentloop.finish_reason"] == "tool_execution"
    assert attributes["gen_ai.response.finish_reasons"] == ("tool_call",)


def test_without_an_sdk_instrumentation_stays_out_of_the_way() -> None:
    # A fresh process: the global providers are the API's no-ops until the application sets an SDK.
    code = """
import anyio
from agentloop import Agent, tool
from agentloop.otel import Instrumentation
from agentloop.testing import TestModel
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

@tool
def ping() -> str:
    "Pings."
    return "pong"

instrumentation = Instrumentation()
print(instrumentation.enabled)
anyio.run(Agent(TestModel(), tools=[ping], instrument=instrumentation).chat, "hi")
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)  # set later: honoured from now on
print(instrumentation.enabled)
anyio.run(Agent(TestModel(), tools=[ping], instrument=instrumentation).chat, "hi")
print(sorted(s.name for s in exporter.get_finished_spans()))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:3] == [
        "False",
        "True",
        "['chat test', 'chat test', 'execute_tool ping', 'invoke_agent']",
    ]


async def test_an_approval_pause_is_not_an_error_and_the_resume_is_traced(telemetry: Telemetry) -> None:
    from agentloop import FinishReason

    @tool(requires_approval=True)
    def refund(order: str) -> str:
        """Refunds an order."""
        return f"refunded {order}"

    call = ToolExecutionRequest("call_r", "refund", '{"order": "A-1"}')
    with FakeOpenAIServer([AiMessage(None, [call]), "Refunded."]) as server:
        async with _model("openai", server) as model:
            agent = Agent(model, tools=[refund], name="clerk", instrument=telemetry.instrumentation())
            paused = await agent.chat("Refund A-1", memory_id="m1")
            assert paused.finish_reason is FinishReason.APPROVAL_REQUIRED
            assert paused.pending is not None
            resumed = await agent.resume(paused.pending, {"call_r": True})
    assert resumed.content == "Refunded."
    first, second = sorted(telemetry.named("invoke_agent"), key=lambda s: s.start_time or 0)
    assert first.status.status_code is StatusCode.UNSET
    assert dict(first.attributes or {})["gen_ai.response.finish_reasons"] == ("approval_required",)
    [tool_span] = telemetry.named("execute_tool")  # the call ran once, after the approval
    assert dict(tool_span.attributes or {})["gen_ai.tool.call.id"] == "call_r"
    assert tool_span.parent is not None and tool_span.parent.span_id == second.context.span_id
    assert second.status.status_code is StatusCode.UNSET


@pytest.mark.parametrize("streaming", [False, True], ids=["chat", "stream"])
async def test_a_call_s_parameters_and_response_model_are_its_own(
    telemetry: Telemetry, streaming: bool
) -> None:
    # The attributes a call shares with every call of its model are worked out once: a call's own
    # parameters and its response's model must still show on its span and its metric samples only.
    replies = [
        ChatResponse(AiMessage("one"), TokenUsage(10, 1), model="gpt-4o-mini-2024-07-18"),
        ChatResponse(AiMessage("two"), TokenUsage(20, 2)),
        ChatResponse(AiMessage("three"), TokenUsage(30, 3), model="gpt-4o-mini-2024-07-18"),
    ]
    instrumentation = telemetry.instrumentation()
    with FakeOpenAIServer(replies) as server:
        async with OpenAIChatModel(
            "gpt-4o-mini", base_url=server.base_url, api_key=KEY, temperature=0.5, max_retries=0
        ) as model:
            traced = instrumentation.wrap(model)
            for parameters in ({"temperature": 0.1, "seed": 7}, None, None):
                request = ChatRequest([agentloop.UserMessage("hi")], parameters=parameters)
                if streaming:
                    async for _ in traced.stream(request):
                        pass
                else:
                    await traced.chat(request)
    spans = sorted(telemetry.named("chat"), key=lambda s: s.start_time or 0)
    own, plain, again = (dict(s.attributes or {}) for s in spans)
    assert (own["gen_ai.request.temperature"], own["gen_ai.request.seed"]) == (0.1, 7)
    assert plain["gen_ai.request.temperature"] == 0.5 and "gen_ai.request.seed" not in plain
    assert again["gen_ai.request.temperature"] == 0.5 and "gen_ai.request.seed" not in again
    assert [a["gen_ai.response.model"] for a in (own, plain, again)] == [
        "gpt-4o-mini-2024-07-18",
        "gpt-4o-mini",
        "gpt-4o-mini-2024-07-18",
    ]
    durations = telemetry.metrics()["gen_ai.client.operation.duration"]
    counts = {dict(p.attributes)["gen_ai.response.model"]: p.count for p in durations}
    assert counts == {"gpt-4o-mini-2024-07-18": 2, "gpt-4o-mini": 1}
    tokens = {
        (dict(p.attributes)["gen_ai.response.model"], dict(p.attributes)["gen_ai.token.type"]): p.sum
        for p in telemetry.metrics()["gen_ai.client.token.usage"]
    }
    assert tokens == {
        ("gpt-4o-mini-2024-07-18", "input"): 40,
        ("gpt-4o-mini-2024-07-18", "output"): 4,
        ("gpt-4o-mini", "input"): 20,
        ("gpt-4o-mini", "output"): 2,
    }


@pytest.mark.parametrize("streaming", [False, True], ids=["chat", "stream"])
async def test_metric_exemplars_point_at_the_chat_span(telemetry: Telemetry, streaming: bool) -> None:
    # The SDK keeps exemplars of samples taken in a sampled span: they lead from a metric to its model
    # call's span (a streamed call's span is not the current one, so it is passed along explicitly).
    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    with FakeOpenAIServer([AiMessage(None, CALLS[:1]), "Sunny."]) as server:
        async with _model("openai", server) as model:
            agent = Agent(model, tools=[weather], instrument=telemetry.instrumentation())
            if streaming:
                async for _ in agent.stream("Weather?"):
                    pass
            else:
                await agent.chat("Weather?")
    chat_ids = {s.context.span_id for s in telemetry.named("chat")}
    points = telemetry.metrics()
    exemplars = [
        exemplar
        for name in ("gen_ai.client.operation.duration", "gen_ai.client.token.usage")
        for point in points[name]
        for exemplar in point.exemplars
    ]
    assert exemplars
    assert {e.span_id for e in exemplars} == chat_ids


# -- what tracing reads of a model: declared Protocols ------------------------------------------------


class _Described:
    """An in-process model describing itself through the Protocols tracing reads (`NamedModel`,
    `ProviderModel`, `RemoteModel`, `ModelWithDefaults`, `ClosableModel`): values of the wrong type are
    ignored, as a model without them is."""

    def __init__(
        self, base_url: Any, defaults: Any, model: Any = "described-1", provider: Any = "acme"
    ) -> None:
        self.base_url = base_url
        self.defaults = defaults
        self.model = model
        self.provider = provider
        self.closed = 0

    async def chat(self, request: ChatRequest) -> ChatResponse:
        return ChatResponse(AiMessage("Hi."), TokenUsage(3, 1))

    async def stream(self, request: ChatRequest) -> Any:
        response = await self.chat(request)
        yield TextDelta(response.ai_message.text or "")
        yield ResponseComplete(response)

    async def aclose(self) -> None:
        self.closed += 1


class _Bare:
    """A `ChatModel` and nothing more."""

    async def chat(self, request: ChatRequest) -> ChatResponse:
        return ChatResponse(AiMessage("Hi."))

    async def stream(self, request: ChatRequest) -> Any:
        response = await self.chat(request)
        yield TextDelta(response.ai_message.text or "")
        yield ResponseComplete(response)


def test_what_tracing_reads_of_a_model_is_declared() -> None:
    from agentloop.testing import TestModel

    described = _Described("https://api.example.com:8443/v1", {"temperature": 0.3})
    assert isinstance(described, ChatModel) and isinstance(_Bare(), ChatModel)
    for protocol in (NamedModel, ProviderModel, RemoteModel, ModelWithDefaults, ClosableModel):
        assert isinstance(described, protocol) and not isinstance(_Bare(), protocol), protocol
    assert (model_name_of(described), provider_of(described)) == ("described-1", "acme")
    local = TestModel(model_name="local-7")
    assert isinstance(local, LocallyNamedModel) and not isinstance(local, NamedModel)
    assert (model_name_of(local), provider_of(local)) == ("local-7", None)
    unnamed = _Described(None, None, model="", provider=7)  # present, but no name: as if absent
    assert (model_name_of(unnamed), provider_of(unnamed), model_name_of(_Bare())) == (None, None, None)
    chain = FallbackChatModel(described, local)
    assert isinstance(chain, WrapperModel) and not isinstance(described, WrapperModel)
    assert chain.model == "described-1" and FallbackChatModel(_Bare(), local).model == "_Bare"


@pytest.mark.parametrize("streaming", [False, True], ids=["chat", "stream"])
async def test_a_model_s_declared_base_url_and_defaults_show_on_its_spans(
    telemetry: Telemetry, streaming: bool
) -> None:
    remote = _Described("https://api.example.com:8443/v1", {"temperature": 0.3, "seed": None})
    odd = _Described(None, [("temperature", 0.3)], model="odd-1")  # neither a URL nor a mapping
    for model in (remote, odd):
        agent = Agent(model, instrument=telemetry.instrumentation())
        if streaming:
            assert "".join([t async for t in agent.stream("Hi")]) == "Hi."
        else:
            assert (await agent.chat("Hi")).content == "Hi."
    [declared] = telemetry.named("chat described-1")
    attributes = dict(declared.attributes or {})
    assert declared.kind is SpanKind.CLIENT
    assert (attributes["server.address"], attributes["server.port"]) == ("api.example.com", 8443)
    assert attributes["gen_ai.request.temperature"] == 0.3 and "gen_ai.request.seed" not in attributes
    assert attributes["gen_ai.provider.name"] == "acme"
    [plain] = telemetry.named("chat odd-1")
    attributes = dict(plain.attributes or {})
    assert plain.kind is SpanKind.INTERNAL
    assert "server.address" not in attributes and "gen_ai.request.temperature" not in attributes


async def test_a_traced_model_reads_as_its_model_and_closes_it(telemetry: Telemetry) -> None:
    described = _Described("https://api.example.com/v1", {})
    traced: Any = telemetry.instrumentation().wrap(described)
    assert traced is not described and traced.inner is described
    assert (traced.model, traced.provider) == ("described-1", "acme")
    assert isinstance(traced, ChatModel) and isinstance(traced, ClosableModel)
    assert supports_response_format(traced) is False
    described.supports_response_format = True  # type: ignore[attr-defined]
    assert supports_response_format(traced) is True  # read from the model at each use
    assert supports_tool_search(traced) is False
    described.supports_tool_search = True  # type: ignore[attr-defined]
    assert supports_tool_search(traced) is True  # ToolSearch(native=True) works on a traced model
    assert (await traced.chat(ChatRequest([agentloop.UserMessage("Hi")]))).ai_message.text == "Hi."
    await traced.aclose()
    assert described.closed == 1
    await telemetry.instrumentation().wrap(_Bare()).aclose()  # nothing to close: nothing done
    assert [s.name for s in telemetry.named("chat")] == ["chat described-1"]
