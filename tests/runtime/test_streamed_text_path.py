"""The streamed answer text's short way: a built-in provider hands each piece of text straight to the
TokenStream's queue (no event per token). Checked against a real socket: every piece arrives once and in
order, also when the consumer is slow and the queue is full (the text then comes as events, as before);
callbacks and `wrap_stream` hooks still see every piece (the short way is off for them)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest

from agentloop import Agent, AiMessage, ChatRequest, Middleware, StreamCall, ToolExecutionRequest, tool
from agentloop._runtime._stream import TEXT_BUFFER_SIZE
from agentloop.models import (
    AnthropicChatModel,
    ModelEvent,
    OpenAIChatModel,
    OpenAIResponsesModel,
    TextDelta,
)
from agentloop.testing._fake_anthropic import FakeAnthropicServer
from agentloop.testing._fake_openai import FakeOpenAIServer
from agentloop.testing._fake_responses import FakeOpenAIResponsesServer

pytestmark = pytest.mark.anyio

WORDS = 6 * TEXT_BUFFER_SIZE  # several times what the TokenStream's queue holds of text (twice that)
ANSWER = " ".join(f"w{i}" for i in range(WORDS))


class Counter:
    """Counts what the runtime's text sink took and refused (mixed into each provider's model)."""

    taken = refused = 0

    def stream_text_to(self, request: ChatRequest, sink: Callable[[str], bool]) -> AsyncIterator[ModelEvent]:
        def counted(text: str) -> bool:
            took = sink(text)
            if took:
                self.taken += 1
            else:
                self.refused += 1
            return took

        return super().stream_text_to(request, counted)  # type: ignore[misc, no-any-return]


class OpenAI(Counter, OpenAIChatModel):
    pass


class Anthropic(Counter, AnthropicChatModel):
    pass


class Responses(Counter, OpenAIResponsesModel):
    pass


PROVIDERS = {
    "openai": (FakeOpenAIServer, OpenAI, "gpt-4o-mini"),
    "anthropic": (FakeAnthropicServer, Anthropic, "claude-sonnet-4-5"),
    "responses": (FakeOpenAIResponsesServer, Responses, "gpt-4o-mini"),
}


@pytest.fixture(params=list(PROVIDERS))
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def serving(provider: str, replies: list[Any]) -> Any:
    return PROVIDERS[provider][0](replies)


def counting(provider: str, server: Any) -> Any:
    _, model, name = PROVIDERS[provider]
    return model(name, base_url=server.base_url, api_key="k")


@tool
async def lookup(key: str) -> str:
    """Looks a key up."""
    return f"value of {key}"


def replies() -> list[Any]:
    call = ToolExecutionRequest("c1", "lookup", '{"key": "a"}')
    return [AiMessage("Looking it up.", [call]), ANSWER]


async def test_every_piece_arrives_once_in_order_through_the_sink(provider: str) -> None:
    async with serving(provider, replies()) as server, counting(provider, server) as model:
        stream = Agent(model, tools=[lookup]).stream("look a up")
        pieces = [piece async for piece in stream]
    assert "".join(pieces) == "Looking it up." + ANSWER
    assert stream.result.content == ANSWER
    assert model.taken > WORDS // 2  # the short way carried the text


async def test_a_slow_consumer_gets_every_piece_in_order_when_the_queue_fills(provider: str) -> None:
    async with serving(provider, replies()) as server, counting(provider, server) as model:
        stream = Agent(model, tools=[lookup]).stream("look a up")
        pieces = []
        async for piece in stream:
            pieces.append(piece)
            for _ in range(30):  # the consumer falls behind: the invocation fills the queue
                await anyio.lowlevel.checkpoint()
    assert "".join(pieces) == "Looking it up." + ANSWER
    assert model.refused > 0, "the queue never filled: the fallback was not exercised"


async def test_callbacks_and_wrap_stream_hooks_see_every_piece(provider: str) -> None:
    seen: list[str] = []

    class Watch(Middleware):
        def wrap_stream(
            self, events: AsyncIterator[ModelEvent], call: StreamCall
        ) -> AsyncIterator[ModelEvent]:
            async def watched() -> AsyncIterator[ModelEvent]:
                async for event in events:
                    if isinstance(event, TextDelta):
                        seen.append(event.text)
                    yield event

            return watched()

    async with serving(provider, replies() + replies()) as server, counting(provider, server) as model:
        stream = Agent(model, tools=[lookup], middleware=[Watch()]).stream("look a up")
        pieces = [piece async for piece in stream]
        assert "".join(pieces) == "".join(seen) == "Looking it up." + ANSWER
        assert model.taken == model.refused == 0  # a wrap_stream hook turns the short way off

        partials: list[str] = []
        agent = Agent(model, tools=[lookup])
        result = await agent.stream("again").on_partial_response(partials.append).start()
    assert result is not None and result.content == ANSWER
    assert "".join(partials) == "Looking it up." + ANSWER
    assert model.taken == model.refused == 0  # callbacks want events: no sink


async def test_tracing_keeps_the_short_way_and_times_the_first_piece_of_text(provider: str) -> None:
    """Under tracing the text still takes the short way, and `time_to_first_chunk` is the first piece's
    time, not that of the first event the loop sees (here: the end, held back by the server)."""
    from tests.otel_helpers import Telemetry

    hold = 1.0
    server_type = PROVIDERS[provider][0]

    class HoldsTheEnd(server_type):  # type: ignore[misc, valid-type]
        def render(self, item: Any, request: Any) -> Any:
            reply = super().render(item, request)
            if not reply.chunks or item != ANSWER:
                return reply
            return reply.with_faults(chunk_delay=(0.0,) * (len(reply.chunks) - 1) + (hold,))

    telemetry = Telemetry()
    async with HoldsTheEnd(replies()) as server, counting(provider, server) as model:
        agent = Agent(model, tools=[lookup], middleware=[telemetry.instrumentation()])
        pieces = [piece async for piece in agent.stream("look a up")]
    assert "".join(pieces) == "Looking it up." + ANSWER
    assert model.taken > WORDS // 2
    answer = telemetry.named("chat")[-1]
    attributes = dict(answer.attributes or {})
    assert answer.end_time is not None and answer.start_time is not None
    assert (answer.end_time - answer.start_time) / 1e9 >= hold
    assert attributes["gen_ai.response.time_to_first_chunk"] < hold * 0.9
