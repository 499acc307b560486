"""Structured output through the real provider clients, over real sockets, against the fake OpenAI and
Anthropic servers (which refuse a schema the real APIs would refuse): every mode, streaming partials,
retries, unions, mixing with function calls, cancellation mid-output."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, Literal, Union

import anyio
import pydantic
import pytest

from agentloop import (
    Agent,
    AiMessage,
    ChatRequest,
    MessageWindowChatMemory,
    OutputValidationError,
    ResponseFormat,
    UserMessage,
    tool,
)
from agentloop.models import AnthropicChatModel, ChatModel, OpenAIChatModel, strict_schema
from agentloop.testing import FakeAnthropicServer, FakeOpenAIServer, FakeServer
from tests.runtime_helpers import assert_valid_for_provider, calls

PROVIDERS = ["openai", "anthropic"]
MODES = ["tool", "native", "prompted"]


class Address(pydantic.BaseModel):
    street: str
    city: str


class Customer(pydantic.BaseModel):
    """A customer record."""

    name: str = pydantic.Field(min_length=1, max_length=80, description="Full name")
    age: int | None = pydantic.Field(default=None, ge=0, le=150)
    tier: Literal["free", "pro"] = "free"
    address: Address
    tags: list[str] = []


class Cat(pydantic.BaseModel):
    meows: int


class Dog(pydantic.BaseModel):
    barks: int


WIRE = {
    "name": "Ada Lovelace",
    "age": 36,
    "tier": "pro",
    "address": {"street": "1 Main St", "city": "London"},
}


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest) -> Iterator[tuple[str, FakeServer, Callable[..., ChatModel]]]:
    if request.param == "openai":
        with FakeOpenAIServer() as server:

            def openai(**options: Any) -> ChatModel:
                return OpenAIChatModel("gpt-test", base_url=server.base_url, api_key="k", max_retries=0)

            yield "openai", server, openai
    else:
        with FakeAnthropicServer() as server:

            def anthropic(**options: Any) -> ChatModel:
                return AnthropicChatModel(
                    "claude-test", base_url=server.base_url, api_key="k", max_retries=0, **options
                )

            yield "anthropic", server, anthropic


def answer(mode: str, wire: dict[str, Any], name: str = "final_result") -> AiMessage:
    if mode == "tool":
        return calls((name, wire, f"call_{name}"))
    return AiMessage(json.dumps(wire))


def sent(server: FakeServer, n: int = 0) -> dict[str, Any]:
    body = server.requests[n].json
    assert isinstance(body, dict)
    return body


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("streaming", [False, True])
async def test_output_in_every_mode(provider: Any, mode: str, streaming: bool) -> None:
    name, server, make = provider
    server.add(answer(mode, WIRE))
    memory = MessageWindowChatMemory(max_messages=20)
    agent = Agent(make(), output_type=Customer, output_mode=mode, memory=memory)  # type: ignore[arg-type]
    if streaming:
        stream = agent.stream("Who?")
        outputs = [o async for o in stream.outputs()]
        result = stream.result
        assert outputs[-1] == result.output
    else:
        result = await agent.chat("Who?")
    assert result.output == Customer.model_validate(WIRE)
    body = sent(server)
    if mode == "tool":
        tools = [t.get("function", t) for t in body["tools"]]
        assert [t["name"] for t in tools] == ["final_result"]
        choice = body["tool_choice"]
        assert choice == ("required" if name == "openai" else {"type": "any"})
    elif mode == "native":
        if name == "openai":
            format = body["response_format"]
            assert format["type"] == "json_schema"
            assert format["json_schema"]["strict"] is True
            assert format["json_schema"]["name"] == "Customer"
            schema = format["json_schema"]["schema"]
            assert schema["additionalProperties"] is False
            assert set(schema["required"]) == set(Customer.model_fields)
        else:
            schema = body["output_config"]["format"]["schema"]
            assert schema["additionalProperties"] is False
            assert "maxLength" not in schema["properties"]["name"]
            assert "maxLength: 80" in schema["properties"]["name"]["description"]
        assert "tools" not in body
    else:
        assert "tools" not in body and "response_format" not in body and "output_config" not in body
        system = body["messages"][0]["content"] if name == "openai" else body["system"]
        assert "JSON schema" in system
    assert_valid_for_provider(await memory.messages())


async def test_the_next_turn_is_provider_valid(provider: Any) -> None:
    name, server, make = provider
    server.add(answer("tool", WIRE))
    server.add("She was a mathematician.")
    agent = Agent(make(), output_type=Customer, memory=MessageWindowChatMemory(max_messages=20))
    await agent.chat("Who?")
    follow = await agent.chat("Tell me more", output_type=str)  # the fake checks the history as the API does
    assert follow.output == "She was a mathematician."
    assert len(sent(server, 1)["messages"]) == 4 if name == "openai" else 3


@pytest.mark.parametrize("mode", MODES)
async def test_streamed_partials_are_monotone(provider: Any, mode: str) -> None:
    _, server, make = provider
    server.add(answer(mode, {**WIRE, "tags": ["analyst", "writer", "countess"]}))
    sent: list[Customer] = []  # every partial sent (the callbacks see them all)
    agent = Agent(make(), output_type=Customer, output_mode=mode)  # type: ignore[arg-type]
    stream = agent.stream("Who?").on_partial_output(sent.append)
    outputs = [o async for o in stream.outputs()]  # the latest partial at the loop's pace: may skip some
    assert len(sent) >= 2 and all(o in sent for o in outputs[:-1])
    previous: set[str] = set()
    for partial in sent:
        fields = set(partial.model_fields_set)
        assert fields >= previous
        previous = fields
    assert outputs[-1].tags == ["analyst", "writer", "countess"] and outputs[-1] == stream.result.output


@pytest.mark.parametrize("mode", MODES)
async def test_retry_then_success(provider: Any, mode: str) -> None:
    _, server, make = provider
    server.add(answer(mode, {**WIRE, "age": -4}))
    server.add(answer(mode, WIRE))
    agent = Agent(make(), output_type=Customer, output_mode=mode)  # type: ignore[arg-type]
    result = await agent.chat("Who?")
    assert result.output.age == 36
    retry_body = json.dumps(sent(server, 1)["messages"][-1])
    assert "age" in retry_body and "greater than or equal to 0" in retry_body


@pytest.mark.parametrize("mode", MODES)
async def test_retries_exhausted(provider: Any, mode: str) -> None:
    _, server, make = provider
    for _ in range(3):
        server.add(answer(mode, {"name": "Ada"}))
    agent = Agent(make(), output_type=Customer, output_mode=mode, output_retries=2)  # type: ignore[arg-type]
    with pytest.raises(OutputValidationError) as caught:
        await agent.chat("Who?")
    assert len(server.requests) == 3
    assert caught.value.errors[0]["loc"] == ("address",)


@pytest.mark.parametrize("mode", MODES)
async def test_union_choice(provider: Any, mode: str) -> None:
    _, server, make = provider
    if mode == "tool":
        server.add(calls(("final_result_Dog", {"barks": 2})))
    else:
        server.add(AiMessage(json.dumps({"result": {"barks": 2}})))
    agent = Agent(make(), output_type=Union[Cat, Dog], output_mode=mode)  # type: ignore[arg-type]
    assert (await agent.chat("pet?")).output == Dog(barks=2)


async def test_output_call_mixed_with_function_calls(provider: Any) -> None:
    _, server, make = provider
    ran: list[str] = []

    @tool
    def remember(fact: str) -> str:
        """Stores a fact."""
        ran.append(fact)
        return "stored"

    server.add(calls(("remember", {"fact": "Ada"}, "call_r"), ("final_result", WIRE, "call_f")))
    server.add("Noted.")
    memory = MessageWindowChatMemory(max_messages=20)
    agent = Agent(make(), tools=[remember], output_type=Customer, memory=memory)
    result = await agent.chat("Who?")
    assert result.output.name == "Ada Lovelace"
    assert ran == ["Ada"]
    assert len(server.requests) == 1
    await agent.chat("ok?", output_type=str)  # the stored round is valid for the provider
    assert_valid_for_provider(await memory.messages())


async def test_anthropic_without_structured_output_uses_the_tool() -> None:
    with FakeAnthropicServer([answer("tool", WIRE)]) as server:
        model = AnthropicChatModel(
            "claude-old", base_url=server.base_url, api_key="k", structured_output=False
        )
        result = await Agent(model, output_type=Customer, output_mode="native").chat("Who?")
        assert result.output.address.city == "London"
        body = sent(server)
        assert "output_config" not in body
        assert body["tools"][0]["name"] == "final_result"


async def test_the_fakes_refuse_a_schema_that_is_not_strict() -> None:
    raw = Customer.model_json_schema()
    with FakeOpenAIServer(["{}"]) as server:
        model = OpenAIChatModel("gpt-test", base_url=server.base_url, api_key="k", max_retries=0)
        request = ChatRequest([UserMessage("x")], response_format=ResponseFormat(raw, strict=False))
        body = model.build_body(request, stream=False)
        body["response_format"]["json_schema"]["strict"] = True
        from agentloop.testing._schema_rules import schema_problem

        assert schema_problem(body["response_format"]["json_schema"]["schema"], "openai") is not None
        assert schema_problem(strict_schema(raw), "openai") is None
        assert schema_problem(strict_schema(raw, provider="anthropic"), "anthropic") is None


@pytest.mark.parametrize("mode", MODES)
async def test_cancellation_mid_output_drops_the_connection(provider: Any, mode: str) -> None:
    _, server, make = provider
    long = {**WIRE, "tags": [f"tag number {n}" for n in range(60)]}
    server.add(answer(mode, long), chunk_delay=0.01)
    memory = MessageWindowChatMemory(max_messages=20)
    stream = Agent(make(), output_type=Customer, output_mode=mode, memory=memory).stream("Who?")  # type: ignore[arg-type]
    async with stream:
        async for partial in stream.outputs():
            if partial.tags:
                break
    assert stream.done
    with anyio.fail_after(5):
        await server.requests[0].wait_disconnected()
    assert await memory.messages() == []
