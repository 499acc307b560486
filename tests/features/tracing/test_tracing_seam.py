"""Tracing is a middleware: `agentloop.otel.Instrumentation` sits outermost on the seam, so its spans cover
what the user's middleware does (a short-circuited model call, a retried tool call, a routed model call), and
the loop has no tracing path of its own. Real model calls to the fake provider servers over loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode

from agentloop import (
    Agent,
    AiMessage,
    ChatResponse,
    FinishReason,
    IllegalConfigurationError,
    Middleware,
    ModelCall,
    Observer,
    TokenUsage,
    ToolCall,
    ToolExecutionRequest,
    tool,
)
from agentloop.middleware import ToolRetry
from agentloop.models import OpenAIChatModel
from agentloop.models._base import supports_response_format
from agentloop.otel import Instrumentation
from agentloop.testing import FakeOpenAIServer
from tests.otel_helpers import Telemetry

KEY = "sk-test-0123456789abcdef-secret"


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    found = Telemetry()
    yield found
    found.tracer_provider.shutdown()
    found.meter_provider.shutdown()


def _model(server: FakeOpenAIServer, name: str = "gpt-4o-mini") -> OpenAIChatModel:
    return OpenAIChatModel(name, base_url=server.base_url, api_key=KEY, max_retries=0)


class Cache(Middleware):
    """Answers every model call itself: the model is never called."""

    async def wrap_model_call(self, call: ModelCall, call_next: Any) -> ChatResponse:
        return ChatResponse(AiMessage("From the cache."), TokenUsage(0, 3), model="cache")


@pytest.mark.parametrize("streaming", [False, True], ids=["chat", "stream"])
async def test_a_model_call_a_user_middleware_answers_still_gets_its_chat_span(
    telemetry: Telemetry, streaming: bool
) -> None:
    with FakeOpenAIServer(["never sent"]) as server:
        async with _model(server) as model:
            agent = Agent(model, instrument=telemetry.instrumentation(), middleware=[Cache()])
            if streaming:
                stream = agent.stream("Hi")
                assert "".join([piece async for piece in stream]) == "From the cache."
            else:
                assert (await agent.chat("Hi")).content == "From the cache."
        assert server.requests == []
    [chat] = telemetry.named("chat")
    [invocation] = telemetry.named("invoke_agent")
    attributes = dict(chat.attributes or {})
    assert chat.name == "chat gpt-4o-mini" and chat.status.status_code is StatusCode.UNSET
    assert attributes["gen_ai.request.stream"] is streaming
    assert attributes["gen_ai.response.model"] == "cache"
    assert attributes["gen_ai.usage.output_tokens"] == 3
    assert "gen_ai.response.time_to_first_chunk" not in attributes  # nothing was streamed from a model
    assert chat.parent is not None and chat.parent.span_id == invocation.context.span_id


async def test_one_tool_span_covers_every_attempt_of_a_retried_tool(telemetry: Telemetry) -> None:
    attempts: list[int] = []

    @tool
    def flaky(city: str) -> str:
        """Fails twice, then answers."""
        attempts.append(len(attempts))
        if len(attempts) < 3:
            raise ConnectionError("try again")
        return f"sunny in {city}"

    call = ToolExecutionRequest("call_f", "flaky", json.dumps({"city": "Oslo"}))
    with FakeOpenAIServer([AiMessage(None, [call]), "Sunny."]) as server:
        async with _model(server) as model:
            agent = Agent(
                model,
                tools=[flaky],
                instrument=telemetry.instrumentation(),
                middleware=[ToolRetry(max_attempts=3, wait=0)],
            )
            result = await agent.chat("Oslo?")
    assert result.content == "Sunny." and len(attempts) == 3
    [span] = telemetry.named("execute_tool")
    assert span.status.status_code is StatusCode.UNSET  # the call succeeded, after its retries
    assert dict(span.attributes or {})["gen_ai.tool.call.id"] == "call_f"


class SeesTheSpans(Middleware):
    """Notes the current span's name at each hook: tracing, outermost, has opened its span by then."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def _note(self) -> None:
        self.seen.append(getattr(trace.get_current_span(), "name", "-"))

    async def wrap_invocation(self, call: Any, call_next: Any) -> Any:
        self._note()
        return await call_next(call)

    async def wrap_model_call(self, call: ModelCall, call_next: Any) -> ChatResponse:
        self._note()  # a non-streamed chat span is the current one
        return await call_next(call)

    async def wrap_tool_call(self, call: ToolCall, call_next: Any) -> Any:
        self._note()
        return await call_next(call)


async def test_user_middleware_runs_inside_the_tracing_spans(telemetry: Telemetry) -> None:
    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    call = ToolExecutionRequest("call_w", "weather", json.dumps({"city": "Oslo"}))
    watcher = SeesTheSpans()
    with FakeOpenAIServer([AiMessage(None, [call]), "Sunny."]) as server:
        async with _model(server) as model:
            agent = Agent(
                model,
                name="clerk",
                tools=[weather],
                instrument=telemetry.instrumentation(),
                middleware=[watcher],
            )
            await agent.chat("Oslo?")
    assert watcher.seen == [
        "invoke_agent clerk",
        "chat gpt-4o-mini",
        "execute_tool weather",
        "chat gpt-4o-mini",
    ]


class Route(Middleware):
    """Sends every model call of "gpt-4o-mini" to another model."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.seen: list[tuple[str, str, bool]] = []

    async def wrap_model_call(self, call: ModelCall, call_next: Any) -> ChatResponse:
        # Inside tracing a streamed call's model is a timing view: it reads as the agent's model (its name,
        # provider, and whether it takes a response format).
        model = call.model
        self.seen.append((model.model, model.provider, supports_response_format(model)))
        if call.model.model != "gpt-4o-mini":
            return await call_next(call)
        return await call_next(call.replace(model=self.model))


@pytest.mark.parametrize("streaming", [False, True], ids=["chat", "stream"])
async def test_a_middleware_can_send_a_model_call_to_another_model(
    telemetry: Telemetry, streaming: bool
) -> None:
    with FakeOpenAIServer(["unused"]) as first, FakeOpenAIServer(["From the other."]) as second:
        async with _model(first) as agents_model, _model(second, "gpt-4o") as other:
            route = Route(other)
            agent = Agent(agents_model, instrument=telemetry.instrumentation(), middleware=[route])
            if streaming:
                stream = agent.stream("Hi")
                assert "".join([piece async for piece in stream]) == "From the other."
            else:
                assert (await agent.chat("Hi")).content == "From the other."
        assert first.requests == [] and len(second.requests) == 1
    assert route.seen == [("gpt-4o-mini", "openai", True)]
    [chat] = telemetry.named("chat")
    attributes = dict(chat.attributes or {})
    # Tracing is outside the routing middleware: the span is the agent's model call, answered by the other
    # (which then streams past tracing's first-chunk timer: docs/observability.md).
    assert attributes["gen_ai.request.model"] == "gpt-4o-mini"
    assert attributes["gen_ai.response.model"] == "gpt-4o"
    assert attributes["gen_ai.request.stream"] is streaming
    assert "gen_ai.response.time_to_first_chunk" not in attributes


def test_instrument_takes_only_an_observer() -> None:
    from agentloop.testing import TestModel

    with pytest.raises(IllegalConfigurationError, match=r"agentloop\.Observer.*middleware="):
        Agent(TestModel(), instrument=Cache())
    assert isinstance(Instrumentation(), Middleware) and isinstance(Instrumentation(), Observer)


class Counting(Observer):
    """A custom observer: counts the calls it sees; steps aside while `on` is False."""

    def __init__(self) -> None:
        self.on = True
        self.models = 0

    @property
    def enabled(self) -> bool:
        return self.on

    async def wrap_model_call(self, call: ModelCall, call_next: Any) -> ChatResponse:
        self.models += 1
        return await call_next(call)


async def test_a_custom_observer_is_outermost_and_left_out_while_disabled() -> None:
    from agentloop.testing import TestModel

    counting = Counting()
    agent = Agent(TestModel(), instrument=counting, middleware=[Cache()])
    assert (await agent.chat("Hi")).content == "From the cache."
    assert counting.models == 1  # it saw the call the cache answered: it runs outside the cache
    counting.on = False
    await agent.chat("Hi")
    assert counting.models == 1
    assert (await Agent(TestModel()).chat("Hi")).finish_reason is FinishReason.STOP
    assert counting.models == 1  # an observer given to one agent watches that agent only
