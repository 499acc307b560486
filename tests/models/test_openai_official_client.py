"""`FakeOpenAIServer` checked against the official `openai` client: what it sends is what OpenAI sends."""

from __future__ import annotations

import json

import openai
import pytest

from agentloop import AiMessage, ChatResponse, FinishReason, TokenUsage, ToolExecutionRequest
from agentloop.testing._fake_openai import FakeOpenAIServer

pytestmark = pytest.mark.anyio

MESSAGES = [{"role": "user", "content": "What is the weather in Paris and Oslo?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
CALLS = [
    ToolExecutionRequest("call_paris", "get_weather", '{"city": "Paris"}'),
    ToolExecutionRequest("call_oslo", "get_weather", '{"city": "Oslo"}'),
]


def client_for(server: FakeOpenAIServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)


async def test_streamed_text_and_usage() -> None:
    scripted = ChatResponse(AiMessage("The weather is fine today."), TokenUsage(12, 6))
    async with FakeOpenAIServer([scripted]) as server, client_for(server) as client:
        stream = await client.chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) > 1
    assert "".join(pieces) == "The weather is fine today."
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == []
    assert usage_chunk.usage is not None
    assert (usage_chunk.usage.prompt_tokens, usage_chunk.usage.completion_tokens) == (12, 6)
    assert usage_chunk.usage.total_tokens == 18
    assert server.requests[0].headers["authorization"] == "Bearer test"


async def test_streamed_parallel_tool_calls_reassemble_with_the_official_helper() -> None:
    async with (
        FakeOpenAIServer([AiMessage(tool_execution_requests=CALLS)]) as server,
        client_for(server) as client,
        client.chat.completions.stream(model="gpt-4o-mini", messages=MESSAGES, tools=TOOLS) as stream,
    ):
        async for _ in stream:
            pass
        completion = await stream.get_final_completion()
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("call_paris", "get_weather", {"city": "Paris"}),
        ("call_oslo", "get_weather", {"city": "Oslo"}),
    ]


async def test_streamed_tool_call_deltas_follow_openai_conventions() -> None:
    script = [AiMessage(tool_execution_requests=CALLS)]
    async with FakeOpenAIServer(script, argument_pieces=3) as server, client_for(server) as client:
        stream = await client.chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES, tools=TOOLS, stream=True
        )
        deltas = [tc async for chunk in stream for tc in (chunk.choices[0].delta.tool_calls or [])]
    firsts = [d for d in deltas if d.id is not None]
    assert [(d.index, d.id, d.type, d.function.name, d.function.arguments) for d in firsts] == [
        (0, "call_paris", "function", "get_weather", ""),
        (1, "call_oslo", "function", "get_weather", ""),
    ]
    rest = [d for d in deltas if d.id is None]
    assert all(d.function.name is None for d in rest)
    assert "".join(d.function.arguments for d in rest if d.index == 0) == '{"city": "Paris"}'
    assert len([d for d in rest if d.index == 0]) == 3


async def test_non_streaming_completion_with_tool_calls_and_usage() -> None:
    scripted = ChatResponse(AiMessage("Checking", CALLS), TokenUsage(30, 9), FinishReason.TOOL_EXECUTION)
    async with FakeOpenAIServer([scripted]) as server, client_for(server) as client:
        completion = await client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, tools=TOOLS)
    message = completion.choices[0].message
    assert message.content == "Checking"
    assert [c.function.arguments for c in message.tool_calls or []] == [
        '{"city": "Paris"}',
        '{"city": "Oslo"}',
    ]
    assert completion.choices[0].finish_reason == "tool_calls"
    assert completion.usage is not None
    assert (
        completion.usage.prompt_tokens,
        completion.usage.completion_tokens,
        completion.usage.total_tokens,
    ) == (
        30,
        9,
        39,
    )


@pytest.mark.parametrize(
    ("status", "cls", "error_type"),
    [
        (400, openai.BadRequestError, "invalid_request_error"),
        (401, openai.AuthenticationError, "invalid_request_error"),
        (404, openai.NotFoundError, "invalid_request_error"),
        (429, openai.RateLimitError, "rate_limit_exceeded"),
        (500, openai.InternalServerError, "server_error"),
    ],
)
@pytest.mark.parametrize("streaming", [False, True])
async def test_errors_as_the_official_client_sees_them(
    status: int, cls: type[openai.APIStatusError], error_type: str, streaming: bool
) -> None:
    reply = FakeOpenAIServer.error(
        status, "Something specific went wrong", code="some_code", request_id="req_42"
    )
    async with FakeOpenAIServer([reply]) as server, client_for(server) as client:
        with pytest.raises(cls) as caught:
            await client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=streaming)
    error = caught.value
    assert error.status_code == status
    assert error.type == error_type
    assert error.code == "some_code"
    assert error.request_id == "req_42"
    assert "Something specific went wrong" in error.message


async def test_invalid_conversations_are_rejected_like_openai_does() -> None:
    broken = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
            ],
        },
    ]
    async with FakeOpenAIServer(["unused"]) as server, client_for(server) as client:
        with pytest.raises(openai.BadRequestError, match="call_1"):
            await client.chat.completions.create(model="gpt-4o-mini", messages=broken, tools=TOOLS)
