"""Structured output through GeminiChatModel and BedrockChatModel, over real sockets against their fakes:
the native mode (Gemini's responseJsonSchema, Bedrock's outputConfig), streamed, and the tool mode."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, Literal

import pydantic
import pytest

from agentloop import Agent, AiMessage, ToolExecutionRequest
from agentloop.models import BedrockChatModel, ChatModel, GeminiChatModel
from agentloop.testing import FakeBedrockServer, FakeGeminiServer, FakeServer

pytest.importorskip("botocore")


class Address(pydantic.BaseModel):
    street: str
    city: str


class Customer(pydantic.BaseModel):
    """A customer record."""

    name: str = pydantic.Field(min_length=1, description="Full name")
    tier: Literal["free", "pro"] = "free"
    address: Address


WIRE = {"name": "Ada Lovelace", "tier": "pro", "address": {"street": "1 Main St", "city": "London"}}


@pytest.fixture(params=["gemini", "bedrock"])
def provider(request: pytest.FixtureRequest) -> Iterator[tuple[str, FakeServer, Callable[[], ChatModel]]]:
    if request.param == "gemini":
        with FakeGeminiServer() as gemini:
            yield (
                "gemini",
                gemini,
                lambda: GeminiChatModel("gemini-test", base_url=gemini.base_url, api_key="k"),
            )
    else:
        with FakeBedrockServer() as bedrock:

            def make() -> ChatModel:
                return BedrockChatModel(
                    "anthropic.claude-test-v1:0",
                    region=bedrock.region,
                    endpoint_url=bedrock.base_url,
                    aws_access_key_id=bedrock.access_key,
                    aws_secret_access_key=bedrock.secret_key,
                )

            yield "bedrock", bedrock, make


def _schema_sent(name: str, body: dict[str, Any]) -> dict[str, Any]:
    if name == "gemini":
        config = body["generationConfig"]
        assert config["responseMimeType"] == "application/json"
        return dict(config["responseJsonSchema"])
    text_format = body["outputConfig"]["textFormat"]
    assert text_format["type"] == "json_schema"
    return dict(json.loads(text_format["structure"]["jsonSchema"]["schema"]))


@pytest.mark.parametrize("streaming", [False, True])
async def test_native_structured_output(
    provider: tuple[str, FakeServer, Callable[[], ChatModel]], streaming: bool
) -> None:
    name, server, make = provider
    server.add(json.dumps(WIRE))
    agent = Agent(make(), output_type=Customer, output_mode="native")
    if streaming:
        stream = agent.stream("Who is customer 1?")
        async for _ in stream:
            pass
        result = stream.result
    else:
        result = await agent.chat("Who is customer 1?")
    assert result.output == Customer.model_validate(WIRE)
    schema = _schema_sent(name, server.requests[0].json)
    assert set(schema["properties"]) == {"name", "tier", "address"}


async def test_tool_mode_structured_output(provider: tuple[str, FakeServer, Callable[[], ChatModel]]) -> None:
    name, server, make = provider
    agent = Agent(make(), output_type=Customer, output_mode="tool")
    server.add(lambda request: AiMessage(None, [_output_call(request.json, name)]))
    result = await agent.chat("Who is customer 1?")
    assert result.output == Customer.model_validate(WIRE)


def _output_call(body: dict[str, Any], name: str) -> ToolExecutionRequest:
    """A call of the output tool the agent offered (whatever it is called)."""
    if name == "gemini":
        tool_name = body["tools"][0]["functionDeclarations"][0]["name"]
    else:
        tool_name = body["toolConfig"]["tools"][0]["toolSpec"]["name"]
    return ToolExecutionRequest("out_1", tool_name, json.dumps(WIRE))
