"""`FakeOpenAIResponsesServer` checked against the official `openai` client: the SDK's typed events and its
stream accumulator read the fake's streams, and what they make of them is what `OpenAIResponsesModel` makes
of the same answers."""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import Any

import openai
import pytest

from agentloop import (
    AiMessage,
    ChatRequest,
    ChatResponse,
    FinishReason,
    TokenUsage,
    ToolExecutionRequest,
    UserMessage,
)
from agentloop.models import OpenAIResponsesModel, ResponseComplete, TextDelta, ThinkingDelta, ToolCallDelta
from agentloop.testing import FakeOpenAIResponsesServer

pytestmark = pytest.mark.anyio

TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "strict": False,
    }
]
CALLS = (
    ToolExecutionRequest("call_paris", "get_weather", '{"city": "Paris"}'),
    ToolExecutionRequest("call_oslo", "get_weather", '{"city": "Oslo"}'),
)
ANSWERS = [
    ChatResponse(AiMessage("The weather is fine today."), TokenUsage(12, 6, cache_read_tokens=4)),
    ChatResponse(
        AiMessage(None, CALLS, thinking="Two cities, two calls."), TokenUsage(30, 20, reasoning_tokens=12)
    ),
    ChatResponse(AiMessage("Sunny.", thinking="Easy."), TokenUsage(9, 5, reasoning_tokens=2)),
    ChatResponse(AiMessage("Cut sh"), TokenUsage(3, 2), finish_reason=FinishReason.LENGTH),
]


def client_for(server: FakeOpenAIResponsesServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)


async def agentloop_reads(answer: ChatResponse) -> tuple[ChatResponse, list[Any]]:
    async with FakeOpenAIResponsesServer([answer]) as server:
        model = OpenAIResponsesModel("gpt-5-mini", base_url=server.base_url, api_key="test")
        async with model, aclosing(model.stream(ChatRequest([UserMessage("weather?")]))) as stream:  # type: ignore[type-var]
            events = [event async for event in stream]
    last = events[-1]
    assert isinstance(last, ResponseComplete)
    return last.response, events


async def test_the_sdks_typed_events_follow_the_documented_order() -> None:
    async with FakeOpenAIResponsesServer([ANSWERS[1]]) as server, client_for(server) as client:
        stream = await client.responses.create(
            model="gpt-5-mini",
            input="weather?",
            tools=TOOLS,
            stream=True,
            include=["reasoning.encrypted_content"],
        )
        events = [event async for event in stream]
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added = [e.item.type for e in events if e.type == "response.output_item.added"]
    assert added == ["reasoning", "function_call", "function_call"]
    assert (
        "response.reasoning_summary_text.delta" in kinds and "response.function_call_arguments.delta" in kinds
    )
    # Each SDK event is its typed class, not the generic fallback: the fake's fields are the ones it knows.
    assert all(type(event).__name__.startswith("Response") for event in events)
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert done[0].encrypted_content and done[0].summary[0].text == "Two cities, two calls."
    assert [(c.call_id, c.name, json.loads(c.arguments)) for c in done[1:]] == [
        ("call_paris", "get_weather", {"city": "Paris"}),
        ("call_oslo", "get_weather", {"city": "Oslo"}),
    ]


async def sdk_reads(answer: ChatResponse) -> tuple[Any, list[str]]:
    """The final response as the SDK builds it, and the text deltas it saw. A completed response comes from
    the SDK's accumulator (`responses.stream`); an incomplete one (that helper waits for
    `response.completed` only) from the `response.incomplete` event of the typed stream."""
    kwargs: Any = {"model": "gpt-5-mini", "input": "weather?", "tools": TOOLS}
    kwargs["include"] = ["reasoning.encrypted_content"]
    async with FakeOpenAIResponsesServer([answer, answer]) as server, client_for(server) as client:
        if answer.finish_reason is FinishReason.LENGTH:
            events = [event async for event in await client.responses.create(stream=True, **kwargs)]
            assert events[-1].type == "response.incomplete"
            texts = [e.delta for e in events if e.type == "response.output_text.delta"]
            return events[-1].response, texts
        async with client.responses.stream(**kwargs) as stream:
            texts = [e.delta async for e in stream if e.type == "response.output_text.delta"]
            return await stream.get_final_response(), texts


@pytest.mark.parametrize("answer", ANSWERS, ids=["text", "calls", "reasoning", "incomplete"])
async def test_the_sdk_and_agentloop_read_the_same_answer(answer: ChatResponse) -> None:
    sdk, sdk_text = await sdk_reads(answer)
    ours, events = await agentloop_reads(answer)
    assert "".join(sdk_text) == "".join(e.text for e in events if isinstance(e, TextDelta))
    assert (sdk.output_text or None) == ours.text
    calls = [item for item in sdk.output if item.type == "function_call"]
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [
        (r.id, r.name, r.arguments) for r in ours.ai_message.tool_execution_requests
    ]
    streamed_calls = "".join(e.arguments for e in events if isinstance(e, ToolCallDelta))
    assert streamed_calls == "".join(c.arguments for c in calls)
    summaries = [part.text for item in sdk.output if item.type == "reasoning" for part in item.summary]
    assert ("\n\n".join(summaries) or None) == ours.ai_message.thinking
    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == (ours.ai_message.thinking or "")
    sdk_reasoning = [item for item in sdk.output if item.type == "reasoning"]
    our_reasoning = [
        e
        for e in ours.ai_message.provider_state.get("openai-responses", {}).get("output", ())
        if e["type"] == "reasoning"
    ]
    assert len(sdk_reasoning) == len(our_reasoning)
    assert all(
        bool(s.encrypted_content) and o["encrypted_content"].startswith("gAAAA")
        for s, o in zip(sdk_reasoning, our_reasoning)
    )
    usage = sdk.usage
    assert usage is not None and ours.token_usage is not None
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (
        ours.token_usage.input_tokens,
        ours.token_usage.output_tokens,
        ours.token_usage.total_tokens,
    )
    assert usage.input_tokens_details.cached_tokens == (ours.token_usage.cache_read_tokens or 0)
    assert usage.output_tokens_details.reasoning_tokens == (ours.token_usage.reasoning_tokens or 0)
    assert sdk.status == ("incomplete" if ours.finish_reason is FinishReason.LENGTH else "completed")


async def test_the_sdks_non_streaming_response_parses() -> None:
    async with FakeOpenAIResponsesServer([ANSWERS[2]]) as server, client_for(server) as client:
        response = await client.responses.create(model="gpt-5-mini", input="weather?")
    assert response.output_text == "Sunny."
    assert [item.type for item in response.output] == ["reasoning", "message"]
    assert response.usage is not None and response.usage.output_tokens_details.reasoning_tokens == 2


async def test_a_conversation_the_sdk_sends_back_is_accepted_by_the_fake() -> None:
    """The fake's request checks accept what the SDK builds from its own output (items by id, outputs)."""
    async with FakeOpenAIResponsesServer([ANSWERS[1], "Both sunny."]) as server, client_for(server) as client:
        first = await client.responses.create(
            model="gpt-5-mini",
            input="weather?",
            tools=TOOLS,
            store=False,
            include=["reasoning.encrypted_content"],
        )
        history: list[Any] = [{"role": "user", "content": "weather?"}]
        history += [item.model_dump(exclude_none=True) for item in first.output]
        history += [
            {"type": "function_call_output", "call_id": item.call_id, "output": "sunny"}
            for item in first.output
            if item.type == "function_call"
        ]
        second = await client.responses.create(
            model="gpt-5-mini",
            input=history,
            tools=TOOLS,
            store=False,
            include=["reasoning.encrypted_content"],
        )
    assert second.output_text == "Both sunny."
    assert not server.unanswered
