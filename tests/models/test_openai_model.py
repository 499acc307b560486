"""`OpenAIChatModel` over real sockets against `FakeOpenAIServer`: streaming, tools, errors, retries."""

from __future__ import annotations

import email.utils
import json
import logging
import re
import socket
import time
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest

from agentloop import (
    AiMessage,
    AuthenticationError,
    BadRequestError,
    BadResponseError,
    ChatRequest,
    ChatResponse,
    FinishReason,
    IllegalConfigurationError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelTimeoutError,
    NotFoundError,
    RateLimitError,
    ServerError,
    SystemMessage,
    TokenUsage,
    ToolChoice,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolsNotSupportedError,
    ToolSpecification,
    UserMessage,
)
from agentloop.models import ChatModel
from agentloop.models._base import (
    ModelEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallComplete,
    ToolCallDelta,
)
from agentloop.models._http import (
    ProviderError,
    RetryPolicy,
    Timeouts,
    error_from_response,
    extract_provider_error,
    mask_secret,
    parse_retry_after,
    scrub,
)
from agentloop.models._openai import OpenAIChatModel
from agentloop.testing._fake_openai import FakeOpenAIServer
from agentloop.testing._fake_server import Reply, encode_sse
from tests.provider_helpers import final

# Explicit marker (the conftest hook marks too late for parametrized tests to get both backends).
pytestmark = pytest.mark.anyio

KEY = "sk-proj-SECRETSECRET-0123456789abcdefXYZ"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "openai"
FAST = RetryPolicy(initial_delay=0.01, max_delay=0.02)

WEATHER = ToolSpecification(
    "get_weather",
    "Current weather for a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    metadata={"cache_control": {"type": "ephemeral"}},
)
TIME = ToolSpecification("get_time")
HELLO = ChatRequest([UserMessage("hi")])


def model_for(server: FakeOpenAIServer, **kwargs: Any) -> OpenAIChatModel:
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("retry", FAST)
    return OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, **kwargs)


async def collect(model: ChatModel, request: ChatRequest = HELLO) -> list[ModelEvent]:
    async with aclosing(model.stream(request)) as events:  # type: ignore[type-var]
        return [event async for event in events]


async def collect_into(model: ChatModel, sink: list[ModelEvent], request: ChatRequest = HELLO) -> None:
    """Streams `request`, appending each event to `sink` as it arrives (what preceded a failure shows)."""
    async with aclosing(model.stream(request)) as events:  # type: ignore[type-var]
        async for event in events:
            sink.append(event)


async def call(model: OpenAIChatModel, request: ChatRequest, *, streaming: bool) -> ChatResponse:
    """One model call, streamed or not."""
    return final(await collect(model, request)) if streaming else await model.chat(request)


def fixture_reply(name: str, piece: int = 7) -> Reply:
    """A fixture file served as an event stream cut into `piece`-byte chunks (boundaries fall anywhere)."""
    data = (FIXTURES / name).read_bytes()
    chunks = [data[i : i + piece] for i in range(0, len(data), piece)]
    return Reply.stream(chunks, content_type="text/event-stream", headers=[("x-request-id", "req_fixture")])


# -- streaming ---------------------------------------------------------------------------------------------


async def test_streams_ask_for_usage_unless_switched_off() -> None:
    async with FakeOpenAIServer(["ok", "ok"]) as server:
        async with model_for(server) as model:
            assert final(await collect(model)).token_usage is not None
        async with model_for(server, include_usage=False) as model:
            assert final(await collect(model)).token_usage is None
    asked, plain = (r.json for r in server.requests)
    assert asked["stream"] is True and asked["stream_options"] == {"include_usage": True}
    assert "stream_options" not in plain


async def test_tool_call_complete_arrives_while_the_stream_is_still_open() -> None:
    def chunk(delta: dict[str, Any]) -> bytes:
        return encode_sse(
            {"id": "c", "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        )

    first = {
        "index": 0,
        "id": "call_a",
        "type": "function",
        "function": {"name": "get_time", "arguments": ""},
    }
    second = {
        "index": 1,
        "id": "call_b",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    events = [
        chunk({"role": "assistant", "content": None}),
        chunk({"tool_calls": [first]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"tz": '}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"UTC"}'}}]}),
        chunk({"tool_calls": [second]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"ci'}}]}),
    ]
    # The server never finishes this response: ToolCallComplete(0) must not wait for the end.
    async with FakeOpenAIServer([Reply.sse(events, hold_open=True)]) as server, model_for(server) as model:
        request = ChatRequest([UserMessage("x")], [WEATHER, TIME])
        with anyio.fail_after(5):
            async with aclosing(model.stream(request)) as stream:  # type: ignore[type-var]
                async for event in stream:
                    if isinstance(event, ToolCallComplete):
                        break
        assert event == ToolCallComplete(0, ToolExecutionRequest("call_a", "get_time", '{"tz": "UTC"}'))
        with anyio.fail_after(5):
            await server.requests[0].wait_disconnected()


async def test_thinking_streams_as_thinking_deltas() -> None:
    script = [AiMessage("42", thinking="Let me think it over")]
    async with FakeOpenAIServer(script) as server, model_for(server) as model:
        events = await collect(model)
    thinking = [e.text for e in events if isinstance(e, ThinkingDelta)]
    assert "".join(thinking) == "Let me think it over"
    first_text = next(n for n, e in enumerate(events) if isinstance(e, TextDelta))
    assert all(n < first_text for n, e in enumerate(events) if isinstance(e, ThinkingDelta))
    assert final(events).ai_message == AiMessage("42", thinking="Let me think it over")


async def test_reasoning_field_of_other_servers_is_thinking_too() -> None:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return encode_sse({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    reply = Reply.sse([chunk({"reasoning": "hmm"}), chunk({"content": "yes"}), chunk({}, "stop")])
    async with FakeOpenAIServer([reply]) as server, model_for(server) as model:
        events = await collect(model)
    assert events[:2] == [ThinkingDelta("hmm"), TextDelta("yes")]
    assert final(events).ai_message == AiMessage("yes", thinking="hmm")


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        ("stop", FinishReason.STOP),
        ("length", FinishReason.LENGTH),
        ("content_filter", FinishReason.CONTENT_FILTER),
        ("tool_calls", FinishReason.TOOL_EXECUTION),
        ("something_new", FinishReason.OTHER),
    ],
)
async def test_finish_reasons_are_mapped(wire: str, expected: FinishReason) -> None:
    events = [
        encode_sse({"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}]}),
        encode_sse({"choices": [{"index": 0, "delta": {}, "finish_reason": wire}]}),
        encode_sse("[DONE]"),
    ]
    async with FakeOpenAIServer([Reply.sse(events)]) as server, model_for(server) as model:
        assert final(await collect(model)).finish_reason is expected


async def test_tool_calls_with_finish_reason_stop_still_mean_tool_execution() -> None:
    # Ollama and some vLLM versions say "stop" after tool calls.
    call = {"index": 0, "id": "c", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
    events = [
        encode_sse({"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]}),
        encode_sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    ]  # no [DONE] either: a finish reason is enough
    async with FakeOpenAIServer([Reply.sse(events)]) as server, model_for(server) as model:
        response = final(await collect(model))
    assert response.finish_reason is FinishReason.TOOL_EXECUTION
    assert response.ai_message.tool_execution_requests == (ToolExecutionRequest("c", "get_time", "{}"),)


async def test_servers_that_never_advance_the_index_or_omit_it() -> None:
    # Some OpenAI-compatible servers send every call whole, with index 0 (or none) each time.
    whole = [
        {
            "index": 0,
            "id": "a",
            "type": "function",
            "function": {"name": "get_time", "arguments": {"tz": "UTC"}},
        },
        {
            "index": 0,
            "id": "b",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "X"}'},
        },
        {"id": "c", "type": "function", "function": {"name": "get_time", "arguments": ""}},
    ]
    events = [
        encode_sse({"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]})
        for call in whole
    ]
    events.append(encode_sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}))
    async with FakeOpenAIServer([Reply.sse(events)]) as server, model_for(server) as model:
        response = final(await collect(model))
    assert response.ai_message.tool_execution_requests == (
        ToolExecutionRequest("a", "get_time", '{"tz":"UTC"}'),
        ToolExecutionRequest("b", "get_weather", '{"city": "X"}'),
        ToolExecutionRequest("c", "get_time", "{}"),
    )


async def test_other_choices_are_ignored() -> None:
    events = [
        encode_sse(
            {
                "choices": [
                    {"index": 1, "delta": {"content": "other"}},
                    {"index": 0, "delta": {"content": "a"}},
                ]
            }
        ),
        encode_sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    ]
    async with FakeOpenAIServer([Reply.sse(events)]) as server, model_for(server) as model:
        assert final(await collect(model)).text == "a"


# -- wire fixtures from the providers' docs ----------------------------------------------------------------


async def test_fixture_api_reference_text_stream() -> None:
    async with (
        FakeOpenAIServer([fixture_reply("chat_streaming_text.sse")]) as server,
        model_for(server) as model,
    ):
        events = await collect(model)
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert texts == ["Hello", "!", " How", " can", " I", " help", " you", " today", "?"]
    response = final(events)
    assert response == ChatResponse(
        AiMessage("Hello! How can I help you today?"), None, FinishReason.STOP, "gpt-4o-mini", "chatcmpl-123"
    )


async def test_fixture_function_calling_guide_stream() -> None:
    script = [fixture_reply("function_calling_streaming.sse", 5)]
    async with FakeOpenAIServer(script) as server, model_for(server) as model:
        events = await collect(model, ChatRequest([UserMessage("Paris?")], [WEATHER]))
    call = ToolExecutionRequest(
        "call_DdmO9pD3xa9XTPNJ32zg2hcA", "get_weather", '{"location":"Paris, France"}'
    )
    assert events[0] == ToolCallDelta(0, "call_DdmO9pD3xa9XTPNJ32zg2hcA", "get_weather", "")
    pieces = [e.arguments for e in events[1:] if isinstance(e, ToolCallDelta)]
    assert pieces == ['{"', "location", '":"', "Paris", ",", " France", '"}']
    assert ToolCallComplete(0, call) in events
    response = final(events)
    assert response.ai_message == AiMessage(None, [call])
    assert response.finish_reason is FinishReason.TOOL_EXECUTION


async def test_fixture_parallel_calls_with_usage_chunk_and_crlf() -> None:
    script = [fixture_reply("parallel_tool_calls_usage.sse", 11)]
    async with FakeOpenAIServer(script) as server, model_for(server) as model:
        events = await collect(model, ChatRequest([UserMessage("Paris and Bogotá?")], [WEATHER]))
    paris = ToolExecutionRequest("call_12345xyz", "get_weather", '{"location": "Paris, France"}')
    bogota = ToolExecutionRequest("call_67890abc", "get_weather", '{"location": "Bogotá, Colombia"}')
    completes = [e for e in events if isinstance(e, ToolCallComplete)]
    assert completes == [ToolCallComplete(0, paris), ToolCallComplete(1, bogota)]
    # The first call is complete as soon as the second starts.
    assert events.index(completes[0]) < events.index(ToolCallDelta(1, "call_67890abc", "get_weather", ""))
    response = final(events)
    assert response.token_usage == TokenUsage(82, 47, 129, cache_read_tokens=0, reasoning_tokens=0)
    assert response.model == "gpt-4o-mini-2024-07-18"
    assert response.ai_message.tool_execution_requests == (paris, bogota)


@pytest.mark.parametrize(
    "name",
    [
        "chat_streaming_text.sse",
        "function_calling_streaming.sse",
        "parallel_tool_calls_usage.sse",
        "deepseek_reasoning.sse",
    ],
)
async def test_a_stream_reads_the_same_however_its_events_arrive(name: str) -> None:
    """An event per network read (the reader takes its JSON's bytes as they are), the whole body in one read,
    and pieces cut anywhere (events made by the general parser) give the same model events."""
    data = (FIXTURES / name).read_bytes()
    one_per_read = [event for event in re.split(rb"(?<=\n\n)|(?<=\r\n\r\n)", data) if event]
    assert len(one_per_read) > 3
    shapes = [one_per_read, [data], [data[i : i + 7] for i in range(0, len(data), 7)]]
    outcomes = []
    for chunks in shapes:
        reply = Reply.stream(chunks, content_type="text/event-stream")
        async with FakeOpenAIServer([reply]) as server, model_for(server) as model:
            outcomes.append(await collect(model, ChatRequest([UserMessage("hi")], [WEATHER])))
    assert outcomes[0] == outcomes[1] == outcomes[2]
    assert final(outcomes[0]).finish_reason is not None


async def test_fixture_deepseek_reasoning_stream() -> None:
    async with (
        FakeOpenAIServer([fixture_reply("deepseek_reasoning.sse", 13)]) as server,
        model_for(server) as model,
    ):
        events = await collect(model)
    response = final(events)
    assert response.ai_message == AiMessage("9.8 is greater.", thinking="9.11 vs 9.8: compare decimals.")
    assert response.token_usage == TokenUsage(18, 10, 28, reasoning_tokens=6)
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["ThinkingDelta"] * 6 + ["TextDelta"] * 4 + ["ResponseComplete"]


async def test_fixture_non_streaming_function_call() -> None:
    body = (FIXTURES / "chat_completion_tool_calls.json").read_bytes()
    reply = Reply.json(body, headers=[("x-request-id", "req_1")])
    async with FakeOpenAIServer([reply]) as server, model_for(server) as model:
        response = await model.chat(ChatRequest([UserMessage("Boston?")], [WEATHER]))
    assert response == ChatResponse(
        AiMessage(
            None,
            [ToolExecutionRequest("call_abc123", "get_current_weather", '{\n"location": "Boston, MA"\n}')],
        ),
        TokenUsage(82, 17, 99, reasoning_tokens=0),
        FinishReason.TOOL_EXECUTION,
        "gpt-4o-mini",
        "chatcmpl-abc123",
    )


# -- chat (non-streaming) ----------------------------------------------------------------------------------


async def test_chat_with_tool_calls_and_thinking() -> None:
    calls = [
        ToolExecutionRequest("c1", "get_weather", '{"city": "Oslo"}'),
        ToolExecutionRequest("c2", "get_time", "{}"),
    ]
    async with (
        FakeOpenAIServer([AiMessage(None, calls, thinking="plan")]) as server,
        model_for(server) as model,
    ):
        response = await model.chat(ChatRequest([UserMessage("?")], [WEATHER, TIME]))
    assert response.ai_message == AiMessage(None, calls, thinking="plan")
    assert response.finish_reason is FinishReason.TOOL_EXECUTION


async def test_chat_content_parts_refusal_and_empty_arguments() -> None:
    parts = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "content": [
                        {"type": "text", "text": "a"},
                        {"type": "image_url"},
                        {"type": "text", "text": "b"},
                    ],
                    "tool_calls": [{"id": "x", "function": {"name": "get_time", "arguments": ""}}],
                },
                "finish_reason": "tool_calls",
            }
        ]
    }
    refusal = {"choices": [{"index": 0, "message": {"content": None, "refusal": "I can't help with that."}}]}
    async with (
        FakeOpenAIServer([Reply.json(parts), Reply.json(refusal)]) as server,
        model_for(server) as model,
    ):
        first = await model.chat(ChatRequest([UserMessage("?")], [TIME]))
        second = await model.chat(HELLO)
    assert first.ai_message == AiMessage("ab", [ToolExecutionRequest("x", "get_time", "{}")])
    assert second.text == "I can't help with that."


async def test_chat_unreadable_answers_are_bad_responses() -> None:
    replies = [
        Reply.json(b"{not json"),
        Reply.json({"choices": []}),
        Reply.json({"choices": [{"index": 0, "message": {"content": 5}}]}),
    ]
    async with FakeOpenAIServer(replies) as server, model_for(server) as model:
        for _ in replies:
            with pytest.raises(BadResponseError):
                await model.chat(HELLO)
    assert len(server.requests) == 3  # never retried


async def test_chat_error_inside_a_2xx_body() -> None:
    body = {"error": {"message": "Upstream overloaded", "type": "server_error", "code": 502}}
    async with FakeOpenAIServer([Reply.json(body)]) as server, model_for(server) as model:
        with pytest.raises(ServerError, match="Upstream overloaded") as caught:
            await model.chat(HELLO)
    assert caught.value.status_code == 502


# -- request mapping -----------------------------------------------------------------------------------------


CONVERSATION = [
    SystemMessage("Be brief."),
    UserMessage("Weather in Paris and the time?"),
    AiMessage(
        "Let me check.",
        [
            ToolExecutionRequest("call_1", "get_weather", '{"city": "Paris"}'),
            ToolExecutionRequest("call_2", "get_time", ""),
        ],
    ),
    ToolExecutionResultMessage("call_1", "get_weather", "sunny"),
    ToolExecutionResultMessage("call_2", "get_time", "clock broken", is_error=True),
    AiMessage("Sunny; no time."),
    UserMessage("Thanks"),
]


async def test_conversation_and_tools_are_sent_in_openai_form() -> None:
    async with FakeOpenAIServer(["ok"]) as server, model_for(server, strict_tools=True) as model:
        await model.chat(ChatRequest(CONVERSATION, [WEATHER, TIME], ToolChoice.AUTO))
    body = server.requests[0].json
    assert body["model"] == "gpt-4o-mini"
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris and the time?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "clock broken"},  # is_error: text as is
        {"role": "assistant", "content": "Sunny; no time."},
        {"role": "user", "content": "Thanks"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city",
                "parameters": WEATHER.parameters,
                "strict": True,
            },
        },
        {"type": "function", "function": {"name": "get_time", "parameters": TIME.parameters, "strict": True}},
    ]
    assert "cache_control" not in json.dumps(body)  # tool metadata is never sent
    assert body["tool_choice"] == "auto"


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        (ToolChoice.AUTO, "auto"),
        (ToolChoice.REQUIRED, "required"),
        (ToolChoice.NONE, "none"),
        (ToolChoice.tool("get_time"), {"type": "function", "function": {"name": "get_time"}}),
    ],
)
def test_tool_choice_mapping(choice: ToolChoice, wire: Any) -> None:
    model = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1")
    assert (
        model.build_body(ChatRequest([UserMessage("x")], [WEATHER, TIME], choice), stream=False)[
            "tool_choice"
        ]
        == wire
    )


def test_tool_choice_none_without_tools_sends_no_tool_choice() -> None:
    model = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1")
    assert "tool_choice" not in model.build_body(
        ChatRequest([UserMessage("x")], (), ToolChoice.NONE), stream=False
    )


def test_defaults_and_per_request_overrides() -> None:
    model = OpenAIChatModel(
        "gpt-4o",
        base_url="http://127.0.0.1:9/v1",
        temperature=0.2,
        max_tokens=100,
        top_p=0.9,
        stop=("END",),
        seed=7,
        parallel_tool_calls=False,
        response_format={"type": "json_object"},
        parameters={"reasoning_effort": "low"},
    )
    body = model.build_body(ChatRequest([UserMessage("x")], [TIME]), stream=False)
    assert {
        k: body[k] for k in ("temperature", "max_tokens", "top_p", "stop", "seed", "parallel_tool_calls")
    } == {
        "temperature": 0.2,
        "max_tokens": 100,
        "top_p": 0.9,
        "stop": ["END"],
        "seed": 7,
        "parallel_tool_calls": False,
    }
    assert body["response_format"] == {"type": "json_object"}
    assert body["reasoning_effort"] == "low"
    request = ChatRequest(
        [UserMessage("x")], parameters={"temperature": 1.0, "seed": None, "model": "gpt-4.1"}
    )
    body = model.build_body(request, stream=False)
    assert body["temperature"] == 1.0
    assert body["model"] == "gpt-4.1"
    assert "seed" not in body
    assert "parallel_tool_calls" not in body  # OpenAI rejects it without tools


def test_reserved_parameters_are_rejected() -> None:
    with pytest.raises(IllegalConfigurationError, match="'messages'"):
        OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", parameters={"messages": []})
    model = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(IllegalConfigurationError, match="'stream'"):
        model.build_body(ChatRequest([UserMessage("x")], parameters={"stream": False}), stream=True)


async def test_tool_calls_without_ids_get_matching_synthetic_ids() -> None:
    messages = [
        UserMessage("go"),
        AiMessage(
            None,
            [ToolExecutionRequest(None, "get_time", "{}"), ToolExecutionRequest(None, "get_weather", "{}")],
        ),
        ToolExecutionResultMessage(None, "get_weather", "rain"),
        ToolExecutionResultMessage(None, "get_time", "noon"),
    ]
    async with FakeOpenAIServer(["done"]) as server, model_for(server) as model:
        assert (
            await model.chat(ChatRequest(messages, [WEATHER, TIME]))
        ).text == "done"  # the fake validates ids
    sent = server.requests[0].json["messages"]
    ids = [call["id"] for call in sent[1]["tool_calls"]]
    assert len(set(ids)) == 2
    assert [sent[2]["tool_call_id"], sent[3]["tool_call_id"]] == [ids[1], ids[0]]


@pytest.mark.parametrize("base_query", ["", "?api-version=1"])
async def test_a_query_in_the_path_is_kept_and_merged_with_the_base_urls(base_query: str) -> None:
    """Request URLs are parsed once per client and cached: the cache must give what building the request from
    strings gives, with our pooled client and with a user's client alike."""
    from agentloop.models._http import ProviderClient

    own = ProviderClient(provider="p", base_url="http://127.0.0.1:9/v1" + base_query)
    async with httpx2.AsyncClient() as client:
        users = ProviderClient(provider="p", base_url="http://127.0.0.1:9/v1" + base_query, client=client)
        for path in ("/models/m:stream?alt=sse", "/chat/completions", "/models/m:stream?alt=sse"):
            built = own._build("POST", path, b"{}", None, accept="text/event-stream")
            expected = users._build("POST", path, b"{}", None, accept="text/event-stream")
            assert str(built.url) == str(expected.url)
            assert dict(built.url.params) == {
                **({"alt": "sse"} if "alt" in path else {}),
                **({"api-version": "1"} if base_query else {}),
            }
    await own.aclose()


async def test_headers_organization_project_and_query() -> None:
    async with FakeOpenAIServer(["ok"]) as server:
        model = OpenAIChatModel(
            "gpt-4o-mini",
            base_url=server.base_url + "?api-version=2024-10-21",
            api_key=KEY,
            organization="org-1",
            project="proj-1",
            headers={"X-Custom": "yes"},
        )
        async with model:
            await model.chat(HELLO)
    request = server.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.query == {"api-version": "2024-10-21"}
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["openai-organization"] == "org-1"
    assert request.headers["openai-project"] == "proj-1"
    assert request.headers["x-custom"] == "yes"
    assert request.headers["user-agent"].startswith("agentloop/")


async def test_no_key_means_no_authorization_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env-should-not-leak-0000")
    async with (
        FakeOpenAIServer(["ok"]) as server,
        OpenAIChatModel("llama3", base_url=server.base_url) as model,
    ):
        await model.chat(HELLO)
    assert "authorization" not in server.requests[0].headers  # env key is never sent to a chosen base_url


# -- errors --------------------------------------------------------------------------------------------------


# 400, 401, 403, 404, 429, 500 and 503 are in tests/models/test_provider_contract.py, for every provider.
ERROR_CASES = [
    (422, BadRequestError, "invalid_request_error"),
    (502, ServerError, "server_error"),
    (418, ModelHTTPError, "invalid_request_error"),
]


@pytest.mark.parametrize(("status", "cls", "error_type"), ERROR_CASES)
@pytest.mark.parametrize("streaming", [False, True])
async def test_error_statuses_map_to_model_errors(
    status: int, cls: type[ModelError], error_type: str, streaming: bool
) -> None:
    reply = FakeOpenAIServer.error(status, f"Problem {status} happened", request_id="req_abc123")
    async with FakeOpenAIServer([reply]) as server, model_for(server, max_retries=0) as model:
        with pytest.raises(cls) as caught:
            await call(model, HELLO, streaming=streaming)
    error = caught.value
    assert type(error) is cls
    assert error.status_code == status
    assert error.provider == "openai"
    assert error.error_type == error_type
    assert error.provider_message == f"Problem {status} happened"
    assert error.request_id == "req_abc123"
    assert f"Problem {status} happened" in str(error)
    assert "req_abc123" in str(error)
    assert str(status) in str(error)


async def test_error_body_echoing_the_key_is_masked_and_hints_are_given() -> None:
    body = json.loads((FIXTURES / "error_invalid_api_key.json").read_text())
    body["error"]["message"] = f"Incorrect API key provided: {KEY}."
    async with FakeOpenAIServer([Reply.json(body, status=401)]) as server, model_for(server) as model:
        with pytest.raises(AuthenticationError) as caught:
            await model.chat(HELLO)
    error = caught.value
    assert KEY not in str(error)
    assert KEY not in (error.provider_message or "")
    assert KEY[-4:] in str(error)  # masked, but recognisable
    assert error.error_type == "invalid_request_error"
    assert "check the API key" in str(error)


async def test_401_without_a_key_says_so() -> None:
    async with (
        FakeOpenAIServer([FakeOpenAIServer.error(401, "Missing bearer")]) as server,
        OpenAIChatModel("gpt-4o", base_url=server.base_url) as model,
    ):
        with pytest.raises(AuthenticationError, match="no API key was given"):
            await model.chat(HELLO)


@pytest.mark.parametrize("streaming", [False, True])
async def test_ollama_model_without_tool_support(streaming: bool) -> None:
    body = (FIXTURES / "ollama_tools_not_supported.json").read_bytes()
    replies = [Reply.json(body, status=400), Reply.json(body, status=400)]
    async with FakeOpenAIServer(replies) as server, model_for(server, provider="ollama") as model:
        request = ChatRequest([UserMessage("hi")], [WEATHER])
        with pytest.raises(ToolsNotSupportedError) as caught:
            await call(model, request, streaming=streaming)
        # Without tools in the request the same answer is an ordinary bad request.
        with pytest.raises(BadRequestError) as plain:
            await model.chat(HELLO)
    message = str(caught.value)
    assert "gemma3:4b does not support tools" in message
    assert "use a model with tool support" in message
    assert "LocalChatModel" in message
    assert "without tools" in message
    assert type(plain.value) is BadRequestError
    assert len(server.requests) == 2  # not retried


@pytest.mark.parametrize(
    ("event", "cls"),
    [
        (encode_sse({"error": {"message": "The server had an error", "type": "server_error"}}), ServerError),
        (
            encode_sse({"error": {"message": "Too many tokens", "type": "rate_limit_exceeded"}}),
            RateLimitError,
        ),
        (encode_sse({"error": {"message": "bad", "code": 400}}), BadRequestError),
        (encode_sse({"error": "something odd"}), ModelError),
        (encode_sse({"message": "overloaded", "type": "overloaded_error"}, event="error"), ServerError),
    ],
)
async def test_error_events_inside_the_stream(event: bytes, cls: type[ModelError]) -> None:
    first = encode_sse({"choices": [{"index": 0, "delta": {"content": "partial"}}]})
    reply = Reply.sse([first, event], headers=[("x-request-id", "req_in_stream")])
    async with FakeOpenAIServer([reply]) as server, model_for(server) as model:
        seen: list[ModelEvent] = []
        with pytest.raises(cls) as caught:
            await collect_into(model, seen)
    assert seen == [TextDelta("partial")]
    assert type(caught.value) is cls
    assert caught.value.request_id == "req_in_stream"


async def test_malformed_chunk_and_truncated_stream_are_bad_responses() -> None:
    good = encode_sse({"choices": [{"index": 0, "delta": {"content": "a"}}]})
    replies = [
        Reply.sse([good, b"data: {this is not json\n\n"]),
        Reply.sse([good]),  # ends cleanly but without finish_reason or [DONE]
        Reply.sse([b"data: \xff\xfe\n\n"]),
        Reply.json({"object": "chat.completion"}),  # JSON where a stream was asked for
    ]
    async with FakeOpenAIServer(replies) as server, model_for(server) as model:
        with pytest.raises(BadResponseError, match="unreadable stream chunk"):
            await collect(model)
        with pytest.raises(BadResponseError, match="before the response was complete"):
            await collect(model)
        with pytest.raises(BadResponseError, match="UTF-8"):
            await collect(model)
        with pytest.raises(BadResponseError, match="expected an event stream"):
            await collect(model)
    assert len(server.requests) == 4


async def test_json_error_body_on_a_streaming_request() -> None:
    body = {"error": {"message": "model overloaded", "type": "server_error"}}
    async with FakeOpenAIServer([Reply.json(body)]) as server, model_for(server) as model:
        with pytest.raises(ServerError, match="model overloaded"):
            await collect(model)


async def test_connection_refused_is_a_connection_error_after_retries() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    attempts: list[float] = []
    handler = _Recorder(attempts)
    logger = logging.getLogger("agentloop.models")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        async with OpenAIChatModel(
            "m", base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, retry=FAST, max_retries=2
        ) as model:
            with pytest.raises(ModelConnectionError, match="could not connect") as caught:
                await model.chat(HELLO)
    finally:
        logger.removeHandler(handler)
    assert len(attempts) == 2  # two retries logged, three attempts in all
    assert KEY not in str(caught.value)


class _Recorder(logging.Handler):
    def __init__(self, sink: list[float]) -> None:
        super().__init__(logging.INFO)
        self.sink = sink
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(time.monotonic())
        self.messages.append(record.getMessage())


# -- timeouts ----------------------------------------------------------------------------------------------


async def test_read_timeout_is_a_model_timeout_and_is_not_retried() -> None:
    async with FakeOpenAIServer() as server:
        server.add("late", headers_delay=2.0)
        async with model_for(server, timeout=Timeouts(connect=1, read=0.2)) as model:
            started = time.monotonic()
            with pytest.raises(ModelTimeoutError, match="timed out waiting for the response"):
                await model.chat(HELLO)
            assert time.monotonic() - started < 1.5
    assert len(server.requests) == 1


async def test_total_timeout_bounds_chat() -> None:
    async with FakeOpenAIServer() as server:
        server.add("late", headers_delay=2.0)
        async with model_for(server, timeout=Timeouts(total=0.2)) as model:
            with pytest.raises(ModelTimeoutError, match=r"total timeout of 0\.2s"):
                await model.chat(HELLO)


# -- retries -----------------------------------------------------------------------------------------------


async def test_retry_after_ms_is_honoured_for_streams() -> None:
    script = [FakeOpenAIServer.error(503, "busy", headers=[("retry-after-ms", "300")]), "streamed"]
    async with FakeOpenAIServer(script) as server, model_for(server) as model:
        started = time.monotonic()
        response = final(await collect(model))
        elapsed = time.monotonic() - started
    assert response.text == "streamed"
    assert len(server.requests) == 2
    assert 0.3 <= elapsed < 3.0


async def test_retry_after_http_date_is_honoured() -> None:
    when = email.utils.formatdate(time.time() + 2, usegmt=True)  # whole seconds: waits between 1 and 2 s
    script = [FakeOpenAIServer.error(429, "later", headers=[("retry-after", when)]), "ok"]
    async with FakeOpenAIServer(script) as server, model_for(server) as model:
        started = time.monotonic()
        assert (await model.chat(HELLO)).text == "ok"
        elapsed = time.monotonic() - started
    assert len(server.requests) == 2
    assert 0.9 <= elapsed < 4.0


async def test_backoff_without_retry_after_and_exhaustion() -> None:
    errors = [FakeOpenAIServer.error(500, f"boom {n}") for n in range(3)]
    policy = RetryPolicy(initial_delay=0.1, max_delay=1.0, jitter=0.0)
    async with FakeOpenAIServer(errors) as server, model_for(server, retry=policy) as model:
        started = time.monotonic()
        with pytest.raises(ServerError, match="boom 2"):
            await model.chat(HELLO)
        elapsed = time.monotonic() - started
    assert len(server.requests) == 3  # max_retries=2: three attempts
    assert 0.3 <= elapsed < 3.0  # 0.1 then 0.2


async def test_422_is_not_retried() -> None:  # 400, 401, 403, 404: tests/models/test_provider_contract.py
    script = [FakeOpenAIServer.error(422, "no"), "unused"]
    async with FakeOpenAIServer(script) as server, model_for(server) as model:
        with pytest.raises(ModelHTTPError):
            await model.chat(HELLO)
    assert len(server.requests) == 1


async def test_x_should_retry_header_wins() -> None:
    script = [
        FakeOpenAIServer.error(500, "do not retry me", headers=[("x-should-retry", "false")]),
        FakeOpenAIServer.error(400, "retry me", headers=[("x-should-retry", "true")]),
        "ok",
    ]
    async with FakeOpenAIServer(script) as server, model_for(server) as model:
        with pytest.raises(ServerError):
            await model.chat(HELLO)
        assert (await model.chat(HELLO)).text == "ok"
    assert len(server.requests) == 3


async def test_408_409_and_connection_resets_are_retried() -> None:
    script = [
        FakeOpenAIServer.error(408, "timeout"),
        FakeOpenAIServer.error(409, "conflict"),
        Reply.connection_reset(),
        "ok",
    ]
    async with FakeOpenAIServer(script) as server, model_for(server, max_retries=3) as model:
        assert (await model.chat(HELLO)).text == "ok"
    assert len(server.requests) == 4


async def test_retries_are_logged_without_the_key() -> None:
    messages: list[float] = []
    handler = _Recorder(messages)
    logger = logging.getLogger("agentloop.models")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    body = {"error": {"message": f"bad key {KEY} overloaded", "type": "server_error"}}
    try:
        async with (
            FakeOpenAIServer([Reply.json(body, status=503), "ok"]) as server,
            model_for(server) as model,
        ):
            await model.chat(HELLO)
    finally:
        logger.removeHandler(handler)
    assert len(handler.messages) == 1
    assert "retrying in" in handler.messages[0]
    assert "attempt 1 of 3" in handler.messages[0]
    assert KEY not in handler.messages[0]


# -- cancellation and connections ----------------------------------------------------------------------------


async def test_cancel_while_waiting_for_headers_leaves_no_connection() -> None:
    async with FakeOpenAIServer() as server, model_for(server) as model:
        server.add("slow", headers_delay=5.0)
        with anyio.move_on_after(0.3):
            await collect(model)
        with anyio.fail_after(5):
            await server.requests[0].wait_disconnected()


# -- clients, lifecycle, secrets ---------------------------------------------------------------------------


async def test_user_supplied_httpx_client_works_and_its_errors_are_mapped() -> None:
    async with (
        FakeOpenAIServer(["a", Reply.connection_reset(), FakeOpenAIServer.error(429, "slow")]) as server,
        httpx.AsyncClient() as client,
    ):
        async with model_for(server, http_client=client, max_retries=0) as model:
            assert final(await collect(model)).text == "a"
            with pytest.raises(ModelConnectionError):
                await model.chat(HELLO)
            with pytest.raises(RateLimitError):
                await model.chat(HELLO)
        assert not client.is_closed


async def test_aclose_closes_the_owned_pool() -> None:
    async with FakeOpenAIServer(["a"]) as server:
        model = model_for(server)
        await model.chat(HELLO)
        client = model._http.client
        await model.aclose()
        assert client.is_closed
        with pytest.raises(IllegalConfigurationError, match="closed"):
            await model.chat(HELLO)


def test_invalid_configuration_is_reported() -> None:
    with pytest.raises(IllegalConfigurationError, match="model name"):
        OpenAIChatModel("")
    with pytest.raises(IllegalConfigurationError, match="base_url"):
        OpenAIChatModel("m", base_url="localhost:8000")
    with pytest.raises(IllegalConfigurationError, match="http_client"):
        OpenAIChatModel("m", base_url="http://x", http_client=object())


def test_a_user_supplied_client_must_be_an_async_http_client() -> None:
    from agentloop.models import AnthropicChatModel
    from agentloop.models._http._client import AsyncHTTPClient

    class BuildsOnly:
        def build_request(self, method: str, url: Any, **kwargs: Any) -> Any:
            return None

    assert issubclass(httpx2.AsyncClient, AsyncHTTPClient) and issubclass(httpx.AsyncClient, AsyncHTTPClient)
    assert not isinstance(BuildsOnly(), AsyncHTTPClient)
    refused = r"client must be an httpx2\.AsyncClient or httpx\.AsyncClient, got BuildsOnly"
    with pytest.raises(IllegalConfigurationError, match=f"^http_{refused}"):
        OpenAIChatModel("m", base_url="http://x", http_client=BuildsOnly())
    with pytest.raises(IllegalConfigurationError, match=f"^AnthropicChatModel: {refused}"):
        AnthropicChatModel("m", base_url="http://x", api_key="k", http_client=BuildsOnly())


async def test_the_key_appears_in_no_error_or_repr() -> None:
    leaky = {"error": {"message": f"key {KEY} rejected", "type": "server_error"}}
    replies = [
        Reply.json(leaky, status=401),
        Reply.json(leaky, status=500),
        Reply.sse([encode_sse({"error": {"message": f"stream says {KEY}"}})]),
        Reply.sse([f"data: {{{KEY}\n\n".encode()]),
        Reply.connection_reset(),
        Reply.json(leaky, status=200).with_faults(headers_delay=2.0),
    ]
    errors: list[ModelError] = []
    async with FakeOpenAIServer(replies) as server:
        model = model_for(server, max_retries=0, timeout=Timeouts(read=0.3))
        assert KEY not in repr(model)
        assert KEY not in repr(model._http)
        assert repr(model) == f"OpenAIChatModel(model='gpt-4o-mini', base_url='{server.base_url}')"
        for streaming in (False, False, True, True, False, False):
            with pytest.raises(ModelError) as caught:
                await (collect(model) if streaming else model.chat(HELLO))
            errors.append(caught.value)
        await model.aclose()
    assert [type(e) for e in errors] == [
        AuthenticationError,
        ServerError,
        ModelError,
        BadResponseError,
        ModelConnectionError,
        ModelTimeoutError,
    ]
    for error in errors:
        for text in (
            str(error),
            repr(error),
            error.message,
            error.provider_message or "",
            str(error.__cause__),
        ):
            assert KEY not in text


# -- the shared HTTP helpers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"error": {"message": "m", "type": "t", "code": "c"}}', ProviderError("m", "t", "c")),
        (b'{"error": {"message": "m", "type": "t", "code": 429}}', ProviderError("m", "t", "429")),
        (
            b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}',
            ProviderError("Overloaded", "overloaded_error"),
        ),
        (b'{"error": "model not found"}', ProviderError("model not found")),
        (
            b'{"object": "error", "message": "bad", "type": "BadRequestError", "code": 400}',
            ProviderError("bad", "BadRequestError", "400"),
        ),
        (b'{"detail": "Not Found"}', ProviderError("Not Found")),
        (b"<html>502 Bad Gateway</html>", ProviderError("<html>502 Bad Gateway</html>")),
        (b"", ProviderError()),
    ],
)
def test_provider_error_extraction_understands_every_dialect(body: bytes, expected: ProviderError) -> None:
    assert extract_provider_error(body) == expected


def test_retry_after_parsing() -> None:
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after": "0.5"}) == 0.5
    assert parse_retry_after({"retry-after": date}, now=now) == 30.0
    assert parse_retry_after({"retry-after": email.utils.formatdate(now - 30, usegmt=True)}, now=now) == 0.0
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({"retry-after": "-1"}) is None
    assert parse_retry_after({"retry-after": "nan"}) is None
    assert parse_retry_after({"retry-after": "inf"}) == float("inf")  # beyond any limit: raised at once
    assert parse_retry_after({"retry-after-ms": "Infinity"}) == float("inf")
    assert parse_retry_after({}) is None


def test_secret_masking() -> None:
    assert mask_secret(KEY) == "****" + KEY[-4:]
    assert mask_secret("short") == "****"
    assert mask_secret(None) == "<none>"
    assert scrub(f"a {KEY} b {KEY}", [KEY]) == f"a ****{KEY[-4:]} b ****{KEY[-4:]}"


def test_error_from_response_builds_a_complete_message() -> None:
    error = error_from_response(
        429,
        {"x-request-id": "req_9", "retry-after": "3"},
        b'{"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}',
        provider="openai",
    )
    assert isinstance(error, RateLimitError)
    assert error.retry_after == 3.0
    assert str(error) == (
        "openai: HTTP 429 Too Many Requests: Rate limit reached (type: requests, request id: req_9); "
        "slow down, or raise max_retries to wait longer"
    )
    anthropic_style = error_from_response(
        404,
        {"request-id": "req_a"},
        b'{"type":"error","error":{"type":"not_found_error","message":"model: x"}}',
        provider="anthropic",
    )
    assert isinstance(anthropic_style, NotFoundError)
    assert (anthropic_style.error_type, anthropic_style.request_id) == ("not_found_error", "req_a")


async def test_many_concurrent_streams_spread_over_pool_shards() -> None:
    from agentloop.models._http import SHARD_CONNECTIONS

    n = SHARD_CONNECTIONS * 2 + 10
    with FakeOpenAIServer() as server:
        for _ in range(n * 2):
            server.add("hello world", chunk_delay=0.2)
        async with OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key="k") as model:

            async def one() -> None:
                texts = [
                    e.text
                    async for e in model.stream(ChatRequest([UserMessage("x")]))
                    if isinstance(e, TextDelta)
                ]
                assert "".join(texts) == "hello world"

            for _ in range(2):  # the second wave reuses the kept-alive connections
                async with anyio.create_task_group() as group:
                    for _ in range(n):
                        group.start_soon(one)
            shards = model._http._shards
            assert len(shards) == 3
            assert [s.in_flight for s in shards] == [0, 0, 0]
            assert server.connections_opened == n
