"""`FakeAnthropicServer` checked against Anthropic's official Python client: if the SDK reads the fake as it
reads the real API, tests that use the fake test the real protocol."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from agentloop import (
    AiMessage,
    ChatRequest,
    ChatResponse,
    FinishReason,
    TokenUsage,
    ToolExecutionRequest,
    ToolSpecification,
    UserMessage,
)
from agentloop.models import AnthropicChatModel, ResponseComplete
from agentloop.testing import FakeAnthropicServer

anthropic = pytest.importorskip("anthropic")

TOOLS: list[dict[str, Any]] = [
    {
        "name": "get_weather",
        "description": "Get the current weather in a given location",
        "input_schema": {
            "type": "object",
            "properties": {"location": {"type": "string"}},
            "required": ["location"],
        },
    },
    {"name": "get_time", "input_schema": {"type": "object", "properties": {}}},
]
CALLS = [
    ToolExecutionRequest("toolu_01A", "get_weather", '{"location": "San Francisco, CA", "unit": "celsius"}'),
    ToolExecutionRequest("toolu_01B", "get_time", "{}"),
]
HELLO = [{"role": "user", "content": "Hello"}]


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


def client_for(server: FakeAnthropicServer, **options: Any) -> Any:
    options.setdefault("max_retries", 0)
    return anthropic.AsyncAnthropic(base_url=server.base_url, api_key="test", **options)


async def test_streamed_text_and_usage(server: FakeAnthropicServer) -> None:
    text = "Hello! I am a fake Claude, streaming word by word."
    server.add(ChatResponse(AiMessage(text), TokenUsage(25, 14), FinishReason.STOP))
    async with (
        client_for(server) as client,
        client.messages.stream(model="claude-test", max_tokens=256, messages=HELLO) as stream,
    ):
        pieces = [piece async for piece in stream.text_stream]
        message = await stream.get_final_message()
    assert len(pieces) > 5
    assert "".join(pieces) == text
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == text
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (25, 14)
    assert message.model == "claude-test"
    assert server.requests[0].json["stream"] is True


async def test_streamed_tool_use_input(server: FakeAnthropicServer) -> None:
    server.add(AiMessage("Let me check.", CALLS, thinking="Two tools."))
    async with (
        client_for(server) as client,
        client.messages.stream(model="claude-test", max_tokens=256, messages=HELLO, tools=TOOLS) as stream,
    ):
        kinds = [event.type async for event in stream]
        message = await stream.get_final_message()
    assert kinds.count("input_json") >= 3  # the SDK saw the input arrive in pieces
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert message.content[0].thinking == "Two tools."
    assert message.content[0].signature
    uses = message.content[2:]
    assert [(u.id, u.name) for u in uses] == [("toolu_01A", "get_weather"), ("toolu_01B", "get_time")]
    assert uses[0].input == json.loads(CALLS[0].arguments)
    assert uses[1].input == {}
    assert message.stop_reason == "tool_use"


async def test_non_streamed_message(server: FakeAnthropicServer) -> None:
    server.add(ChatResponse(AiMessage("Sure.", CALLS[:1]), TokenUsage(40, 9), FinishReason.TOOL_EXECUTION))
    async with client_for(server) as client:
        message = await client.messages.create(
            model="claude-test", max_tokens=64, messages=HELLO, tools=TOOLS
        )
    assert message.type == "message"
    assert message.role == "assistant"
    assert [block.type for block in message.content] == ["text", "tool_use"]
    assert message.content[1].input == {"location": "San Francisco, CA", "unit": "celsius"}
    assert message.stop_reason == "tool_use"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (40, 9)


async def test_the_sdk_tool_loop_request_is_accepted_and_a_broken_one_rejected(
    server: FakeAnthropicServer,
) -> None:
    server.add("It is 18°C.")
    server.add("unreachable")
    answered = [
        {"role": "user", "content": "Weather in SF?"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"location": "SF"}}
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A", "content": "18°C"}]},
    ]
    async with client_for(server) as client:
        message = await client.messages.create(
            model="claude-test", max_tokens=64, messages=answered, tools=TOOLS
        )
        assert message.content[0].text == "It is 18°C."
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                model="claude-test", max_tokens=64, messages=answered[:2], tools=TOOLS
            )
    assert caught.value.type == "invalid_request_error"
    assert "toolu_01A" in (caught.value.api_message or "")


@pytest.mark.parametrize(
    ("status", "error_type", "sdk_error"),
    [
        (400, "invalid_request_error", "BadRequestError"),
        (401, "authentication_error", "AuthenticationError"),
        (403, "permission_error", "PermissionDeniedError"),
        (404, "not_found_error", "NotFoundError"),
        (413, "request_too_large", "ContentTooLargeError"),
        (429, "rate_limit_error", "RateLimitError"),
        (500, "api_error", "InternalServerError"),
        (529, "overloaded_error", "OverloadedError"),
    ],
)
async def test_error_types(server: FakeAnthropicServer, status: int, error_type: str, sdk_error: str) -> None:
    server.add(FakeAnthropicServer.error(status, f"about {error_type}", request_id="req_017"))
    async with client_for(server) as client:
        with pytest.raises(getattr(anthropic, sdk_error)) as caught:
            await client.messages.create(model="claude-test", max_tokens=64, messages=HELLO)
    error = caught.value
    assert error.status_code == status
    assert error.type == error_type
    assert error.api_message == f"about {error_type}"
    assert error.request_id == "req_017"


async def test_an_error_event_mid_stream(server: FakeAnthropicServer) -> None:
    server.add(server.stream_error("overloaded_error", "Overloaded", after="Partial"))
    seen: list[str] = []

    async def read(client: Any) -> None:
        async with client.messages.stream(model="claude-test", max_tokens=64, messages=HELLO) as stream:
            async for piece in stream.text_stream:
                seen.append(piece)

    async with client_for(server) as client:
        with pytest.raises(anthropic.APIStatusError) as caught:
            await read(client)
    assert "".join(seen) == "Partial"
    assert caught.value.type == "overloaded_error"


async def test_the_sdk_and_agentloop_read_the_same_stream_alike(server: FakeAnthropicServer) -> None:
    scripted = ChatResponse(
        AiMessage("Checking both.", CALLS), TokenUsage(33, 21), FinishReason.TOOL_EXECUTION
    )
    server.add(scripted)
    server.add(scripted)
    async with (
        client_for(server) as client,
        client.messages.stream(model="claude-test", max_tokens=256, messages=HELLO, tools=TOOLS) as stream,
    ):
        message = await stream.get_final_message()
    specs = [ToolSpecification(t["name"], t.get("description"), t["input_schema"]) for t in TOOLS]
    async with AnthropicChatModel("claude-test", base_url=server.base_url, api_key="test") as model:
        events = [e async for e in model.stream(ChatRequest([UserMessage("Hello")], specs))]
    assert isinstance(events[-1], ResponseComplete)
    ours = events[-1].response
    assert ours.text == message.content[0].text
    assert [json.loads(c.arguments) for c in ours.ai_message.tool_execution_requests] == [
        block.input for block in message.content[1:]
    ]
    assert [c.id for c in ours.ai_message.tool_execution_requests] == [
        block.id for block in message.content[1:]
    ]
    assert ours.token_usage == TokenUsage(message.usage.input_tokens, message.usage.output_tokens)
    assert ours.finish_reason is FinishReason.TOOL_EXECUTION
    assert message.stop_reason == "tool_use"
