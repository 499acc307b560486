"""`FakeBedrockServer` checked against boto3's bedrock-runtime client: if the AWS SDK reads the fake's
Converse answers and event streams as it reads Bedrock's (and the fake accepts the SDK's signed requests),
tests that use the fake test the real protocol."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from agentloop import (
    AiMessage,
    ChatRequest,
    ChatResponse,
    FinishReason,
    ImageContent,
    TokenUsage,
    ToolExecutionRequest,
    ToolSpecification,
    UserMessage,
)
from agentloop.models import BedrockChatModel, ResponseComplete
from agentloop.testing import FakeBedrockServer

boto3 = pytest.importorskip("boto3")
botocore_exceptions = pytest.importorskip("botocore.exceptions")
botocore_config = pytest.importorskip("botocore.config")

MODEL_ID = "anthropic.claude-3-5-haiku-20241022-v1:0"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
TOOLS = {
    "tools": [
        {
            "toolSpec": {
                "name": "get_weather",
                "description": "Get the current weather in a given location",
                "inputSchema": {
                    "json": {
                        "type": "object",
                        "properties": {"location": {"type": "string"}},
                        "required": ["location"],
                    }
                },
            }
        },
        {"toolSpec": {"name": "get_time", "inputSchema": {"json": {"type": "object", "properties": {}}}}},
    ]
}
CALLS = [
    ToolExecutionRequest("tooluse_1", "get_weather", '{"location": "Seattle", "unit": "celsius"}'),
    ToolExecutionRequest("tooluse_2", "get_time", "{}"),
]
HELLO = [{"role": "user", "content": [{"text": "Hello"}]}]


@pytest.fixture
def server() -> Iterator[FakeBedrockServer]:
    with FakeBedrockServer(frame_pieces=11) as fake:  # frames cut mid-way, as networks deliver them
        yield fake


def client_for(server: FakeBedrockServer) -> Any:
    return boto3.client(
        "bedrock-runtime",
        region_name=server.region,
        endpoint_url=server.base_url,
        aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key,
        config=botocore_config.Config(retries={"total_max_attempts": 1, "mode": "standard"}),
    )


def test_streamed_text_and_usage(server: FakeBedrockServer) -> None:
    text = "Hello! I am a fake Bedrock, streaming word by word."
    server.add(ChatResponse(AiMessage(text), TokenUsage(25, 14, cache_read_tokens=5), FinishReason.STOP))
    answer = client_for(server).converse_stream(modelId=MODEL_ID, messages=HELLO)
    events = list(answer["stream"])
    assert [next(iter(e)) for e in events[:1]] == ["messageStart"]
    pieces = [e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e]
    assert len(pieces) > 5 and "".join(pieces) == text
    assert events[-2] == {"messageStop": {"stopReason": "end_turn"}}
    usage = events[-1]["metadata"]["usage"]
    assert (usage["inputTokens"], usage["outputTokens"], usage["cacheReadInputTokens"]) == (20, 14, 5)
    assert server.requests[0].path == "/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream"


def test_streamed_tool_use_and_reasoning(server: FakeBedrockServer) -> None:
    server.add(AiMessage("Let me check.", CALLS, thinking="Two tools."))
    events = list(
        client_for(server).converse_stream(modelId=MODEL_ID, messages=HELLO, toolConfig=TOOLS)["stream"]
    )
    starts = [e["contentBlockStart"] for e in events if "contentBlockStart" in e]
    assert [
        (s["contentBlockIndex"], s["start"]["toolUse"]["toolUseId"], s["start"]["toolUse"]["name"])
        for s in starts
    ] == [
        (2, "tooluse_1", "get_weather"),
        (3, "tooluse_2", "get_time"),
    ]
    fragments = [
        e["contentBlockDelta"]["delta"]["toolUse"]["input"]
        for e in events
        if "contentBlockDelta" in e and "toolUse" in e["contentBlockDelta"]["delta"]
    ]
    assert len(fragments) >= 3
    assert json.loads("".join(fragments)) == json.loads(CALLS[0].arguments)
    reasoning = [
        e["contentBlockDelta"]["delta"]["reasoningContent"]
        for e in events
        if "contentBlockDelta" in e and "reasoningContent" in e["contentBlockDelta"]["delta"]
    ]
    assert "".join(r.get("text", "") for r in reasoning) == "Two tools."
    assert any("signature" in r for r in reasoning)
    assert {"messageStop": {"stopReason": "tool_use"}} in events


def test_converse_and_the_sdk_tool_loop(server: FakeBedrockServer) -> None:
    server.add(ChatResponse(AiMessage("Sure.", CALLS[:1]), TokenUsage(40, 9), FinishReason.TOOL_EXECUTION))
    server.add("It is 9°C.")
    server.add("unreachable")
    client = client_for(server)
    first = client.converse(modelId=MODEL_ID, messages=HELLO, toolConfig=TOOLS)
    content = first["output"]["message"]["content"]
    assert content[0] == {"text": "Sure."}
    assert content[1]["toolUse"] == {
        "toolUseId": "tooluse_1",
        "name": "get_weather",
        "input": {"location": "Seattle", "unit": "celsius"},
    }
    assert first["stopReason"] == "tool_use"
    assert first["usage"]["inputTokens"] == 40
    result = {"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "9°C"}]}}
    messages = [*HELLO, first["output"]["message"], {"role": "user", "content": [result]}]
    second = client.converse(modelId=MODEL_ID, messages=messages, toolConfig=TOOLS)
    assert second["output"]["message"]["content"] == [{"text": "It is 9°C."}]
    with pytest.raises(botocore_exceptions.ClientError) as caught:  # the result left out: refused
        client.converse(modelId=MODEL_ID, messages=messages[:2], toolConfig=TOOLS)
    assert caught.value.response["Error"]["Code"] == "ValidationException"
    assert "tooluse_1" in caught.value.response["Error"]["Message"]


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, "ValidationException"),
        (403, "AccessDeniedException"),
        (404, "ResourceNotFoundException"),
        (429, "ThrottlingException"),
        (500, "InternalServerException"),
        (503, "ServiceUnavailableException"),
    ],
)
def test_error_answers(server: FakeBedrockServer, status: int, code: str) -> None:
    server.add(FakeBedrockServer.error(status, f"about {code}"))
    with pytest.raises(botocore_exceptions.ClientError) as caught:
        client_for(server).converse(modelId=MODEL_ID, messages=HELLO)
    error = caught.value.response
    assert error["Error"]["Code"] == code
    assert error["Error"]["Message"] == f"about {code}"
    assert error["ResponseMetadata"]["HTTPStatusCode"] == status


def test_a_wrong_secret_is_refused_by_signature(server: FakeBedrockServer) -> None:
    server.add("never")
    client = boto3.client(
        "bedrock-runtime",
        region_name=server.region,
        endpoint_url=server.base_url,
        aws_access_key_id=server.access_key,
        aws_secret_access_key="not-the-secret",
    )
    with pytest.raises(botocore_exceptions.ClientError) as caught:
        client.converse(modelId=MODEL_ID, messages=HELLO)
    assert caught.value.response["Error"]["Code"] == "InvalidSignatureException"


@pytest.mark.parametrize(
    "exception", ["throttlingException", "modelStreamErrorException", "validationException"]
)
def test_an_exception_frame_mid_stream(server: FakeBedrockServer, exception: str) -> None:
    server.add(server.stream_exception(exception, "Something broke", after="Partial"))
    stream = client_for(server).converse_stream(modelId=MODEL_ID, messages=HELLO)["stream"]
    seen: list[dict[str, Any]] = []

    def read() -> None:
        seen.extend(stream)

    with pytest.raises(botocore_exceptions.EventStreamError) as caught:
        read()
    assert seen[1] == {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "Partial"}}}
    assert caught.value.response["Error"]["Code"] == exception
    assert caught.value.response["Error"]["Message"] == "Something broke"


def test_the_sdk_and_agentloop_send_pictures_alike(server: FakeBedrockServer) -> None:
    server.add("A cat.")
    server.add("A cat.")
    client_for(server).converse(
        modelId=MODEL_ID,
        messages=[
            {
                "role": "user",
                "content": [{"text": "What?"}, {"image": {"format": "png", "source": {"bytes": PNG}}}],
            }
        ],
    )

    async def ours() -> None:
        async with BedrockChatModel(
            MODEL_ID,
            region=server.region,
            endpoint_url=server.base_url,
            aws_access_key_id=server.access_key,
            aws_secret_access_key=server.secret_key,
        ) as model:
            await model.chat(ChatRequest([UserMessage.of(["What?", ImageContent(data=PNG)])]))

    anyio.run(ours)
    assert server.requests[1].json["messages"] == server.requests[0].json["messages"]


def test_the_sdk_and_agentloop_read_the_same_stream_alike(server: FakeBedrockServer) -> None:
    scripted = ChatResponse(
        AiMessage("Checking both.", CALLS, thinking="Both."),
        TokenUsage(33, 21, cache_write_tokens=7),
        FinishReason.TOOL_EXECUTION,
    )
    server.add(scripted)
    server.add(scripted)
    events = list(
        client_for(server).converse_stream(modelId=MODEL_ID, messages=HELLO, toolConfig=TOOLS)["stream"]
    )
    specs = [
        ToolSpecification(
            t["toolSpec"]["name"], t["toolSpec"].get("description"), t["toolSpec"]["inputSchema"]["json"]
        )
        for t in TOOLS["tools"]
    ]

    async def ours() -> ChatResponse:
        async with BedrockChatModel(
            MODEL_ID,
            region=server.region,
            endpoint_url=server.base_url,
            aws_access_key_id=server.access_key,
            aws_secret_access_key=server.secret_key,
        ) as model:
            received = [e async for e in model.stream(ChatRequest([UserMessage("Hello")], specs))]
        assert isinstance(received[-1], ResponseComplete)
        return received[-1].response

    response = anyio.run(ours)
    deltas = [e["contentBlockDelta"] for e in events if "contentBlockDelta" in e]
    starts = {
        e["contentBlockStart"]["contentBlockIndex"]: e["contentBlockStart"]["start"]["toolUse"]
        for e in events
        if "contentBlockStart" in e
    }
    text = "".join(d["delta"].get("text", "") for d in deltas)
    inputs = {
        i: "".join(
            d["delta"]["toolUse"]["input"]
            for d in deltas
            if d["contentBlockIndex"] == i and "toolUse" in d["delta"]
        )
        for i in starts
    }
    assert response.text == text
    assert response.ai_message.thinking == "".join(
        d["delta"].get("reasoningContent", {}).get("text", "") for d in deltas
    )
    assert [(c.id, c.name, json.loads(c.arguments)) for c in response.ai_message.tool_execution_requests] == [
        (starts[i]["toolUseId"], starts[i]["name"], json.loads(inputs[i] or "{}")) for i in sorted(starts)
    ]
    usage = events[-1]["metadata"]["usage"]
    assert response.token_usage == TokenUsage(
        usage["inputTokens"] + usage["cacheWriteInputTokens"],
        usage["outputTokens"],
        cache_write_tokens=usage["cacheWriteInputTokens"],
    )
    assert response.finish_reason is FinishReason.TOOL_EXECUTION
