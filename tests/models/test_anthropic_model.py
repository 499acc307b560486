"""`AnthropicChatModel` against `FakeAnthropicServer`, over real loopback sockets."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
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
    ModelError,
    ModelHTTPError,
    RateLimitError,
    ServerError,
    SystemMessage,
    TokenUsage,
    ToolChoice,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolSpecification,
    UserMessage,
)
from agentloop.models import (
    AnthropicChatModel,
    ChatModel,
    ModelEvent,
    ResponseComplete,
    TextDelta,
    ThinkingDelta,
    ToolCallComplete,
    ToolCallDelta,
)
from agentloop.testing import FakeAnthropicServer
from agentloop.testing._fake_server import Reply, encode_sse
from tests.provider_helpers import TIME, WEATHER, collect, final

FIXTURES = Path(__file__).parents[1] / "fixtures" / "anthropic"
KEY = "sk-ant-api03-Zm9vYmFyYmF6cXV4LXRlc3Qta2V5LW5vdC1yZWFs-AAAA"
QUESTION = ChatRequest([UserMessage("What is the weather like in San Francisco?")])


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


def model_for(server: FakeAnthropicServer, **options: Any) -> AnthropicChatModel:
    if "retry" not in options:
        options.setdefault("max_retries", 0)
    return AnthropicChatModel("claude-test", base_url=server.base_url, api_key=KEY, **options)


def sse_reply(*events: dict[str, Any], **faults: Any) -> Reply:
    """An event stream made of raw Messages API events (each named after its `type`)."""
    return Reply.sse([encode_sse(e, event=e["type"]) for e in events]).with_faults(**faults)


def message_start(**usage: int) -> dict[str, Any]:
    usage = {"input_tokens": 10, "output_tokens": 1, **usage}
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test", "content": []}
    return {"type": "message_start", "message": {**message, "stop_reason": None, "usage": usage}}


def text_block(index: int, *pieces: str) -> list[dict[str, Any]]:
    start = {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
    deltas = [
        {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": p}}
        for p in pieces
    ]
    return [start, *deltas, {"type": "content_block_stop", "index": index}]


def message_end(stop_reason: str, **usage: int) -> list[dict[str, Any]]:
    delta = {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None}}
    return [{**delta, "usage": {"output_tokens": 5, **usage}}, {"type": "message_stop"}]


# -- streaming ----------------------------------------------------------------------------------------------


async def test_request_has_the_messages_api_shape(server: FakeAnthropicServer) -> None:
    server.add("ok")
    history = ChatRequest(
        [
            SystemMessage("You are terse."),
            UserMessage("Weather and time in Paris?"),
            AiMessage(
                "Checking.",
                [
                    ToolExecutionRequest("toolu_a", "get_weather", '{"location": "Paris"}'),
                    ToolExecutionRequest("toolu_b", "get_time", ""),
                ],
            ),
            ToolExecutionResultMessage("toolu_a", "get_weather", "18°C"),
            ToolExecutionResultMessage("toolu_b", "get_time", "boom", is_error=True),
            UserMessage("Thanks. And tomorrow?"),
            SystemMessage("Answer in French."),
        ],
        [WEATHER, TIME],
        ToolChoice.AUTO,
    )
    async with model_for(server, temperature=0.2, stop_sequences=["END"]) as model:
        events = await collect(model.stream(history))
    assert final(events).text == "ok"
    sent = server.requests[0]
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent.headers
    body = sent.json
    assert body["model"] == "claude-test"
    assert body["stream"] is True
    assert body["max_tokens"] == 4096
    assert body["temperature"] == 0.2
    assert body["stop_sequences"] == ["END"]
    assert body["system"] == "You are terse.\n\nAnswer in French."
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather and time in Paris?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"location": "Paris"}},
                {"type": "tool_use", "id": "toolu_b", "name": "get_time", "input": {}},
            ],
        },
        {  # both results and the next user text in one user message, results first
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "18°C"},
                {"type": "tool_result", "tool_use_id": "toolu_b", "content": "boom", "is_error": True},
                {"type": "text", "text": "Thanks. And tomorrow?"},
            ],
        },
    ]
    assert body["tools"] == [
        {"name": "get_weather", "description": WEATHER.description, "input_schema": WEATHER.parameters},
        {"name": "get_time", "input_schema": TIME.parameters},
    ]
    assert body["tool_choice"] == {"type": "auto"}


@pytest.mark.parametrize(
    ("choice", "parallel", "expected"),
    [
        (None, None, None),
        (ToolChoice.AUTO, None, {"type": "auto"}),
        (ToolChoice.REQUIRED, None, {"type": "any"}),
        (ToolChoice.NONE, None, {"type": "none"}),
        (ToolChoice.tool("get_time"), None, {"type": "tool", "name": "get_time"}),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        (ToolChoice.REQUIRED, False, {"type": "any", "disable_parallel_tool_use": True}),
    ],
)
async def test_tool_choice_mapping(
    server: FakeAnthropicServer, choice: ToolChoice | None, parallel: bool | None, expected: Any
) -> None:
    server.add("ok")
    async with model_for(server, parallel_tool_calls=parallel) as model:
        await model.chat(ChatRequest([UserMessage("hi")], [WEATHER, TIME], choice))
    assert server.requests[0].json.get("tool_choice") == expected


async def test_a_tool_call_is_complete_before_the_rest_of_the_stream_arrives(
    server: FakeAnthropicServer,
) -> None:
    calls = [
        ToolExecutionRequest("toolu_1", "get_time", "{}"),
        ToolExecutionRequest("toolu_2", "get_time", "{}"),
    ]
    # message_start, block 0 (start, ping, "", "{", "}", stop), then a long pause before block 1
    server.add(AiMessage(None, calls), chunk_delay=(0, 0, 0, 0, 0, 0, 0, 1.0))
    async with model_for(server) as model:
        stream = model.stream(ChatRequest([UserMessage("go")], [TIME]))
        started = time.monotonic()
        async for event in stream:
            if isinstance(event, ToolCallComplete):
                assert event.index == 0
                assert time.monotonic() - started < 0.9
                assert not server.requests[0].completed.is_set()
                break
        await stream.aclose()


async def test_chat_returns_the_whole_message(server: FakeAnthropicServer) -> None:
    calls = [ToolExecutionRequest("toolu_9", "get_weather", '{"location":"Oslo", "days": [1, 2]}')]
    server.add(ChatResponse(AiMessage("Sure.", calls, thinking="Oslo, then."), TokenUsage(30, 12)))
    async with model_for(server) as model:
        response = await model.chat(ChatRequest([UserMessage("Oslo?")], [WEATHER]))
    message = response.ai_message
    assert (message.text, message.tool_execution_requests, message.thinking) == (
        "Sure.",
        tuple(calls),
        "Oslo, then.",
    )
    (block,) = message.provider_state["anthropic"]["thinking"]  # kept for the next call of the tool loop
    assert (block["type"], block["thinking"], bool(block["signature"])) == ("thinking", "Oslo, then.", True)
    assert response.token_usage == TokenUsage(30, 12)
    assert response.finish_reason is FinishReason.TOOL_EXECUTION
    assert "stream" not in server.requests[0].json


async def test_usage_counts_cache_tokens_as_input(server: FakeAnthropicServer) -> None:
    usage = {"input_tokens": 7, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000}
    server.add(
        sse_reply(message_start(**usage), *text_block(0, "hi"), *message_end("end_turn", output_tokens=9))
    )
    message = {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": "end_turn",
        "usage": {**usage, "output_tokens": 9},
    }
    server.add(Reply.json(message))
    async with model_for(server) as model:
        streamed = final(await collect(model.stream(QUESTION)))
        whole = await model.chat(QUESTION)
    expected = TokenUsage(1107, 9, cache_read_tokens=1000, cache_write_tokens=100)
    assert streamed.token_usage == expected
    assert whole.token_usage == expected


async def test_message_delta_usage_updates_input_tokens_too(server: FakeAnthropicServer) -> None:
    server.add(
        sse_reply(
            message_start(input_tokens=3), *text_block(0, "x"), *message_end("end_turn", input_tokens=50)
        )
    )
    async with model_for(server) as model:
        assert final(await collect(model.stream(QUESTION))).token_usage == TokenUsage(50, 5)


@pytest.mark.parametrize(
    ("stop_reason", "expected"),
    [
        ("end_turn", FinishReason.STOP),
        ("stop_sequence", FinishReason.STOP),
        ("max_tokens", FinishReason.LENGTH),
        ("model_context_window_exceeded", FinishReason.LENGTH),
        ("tool_use", FinishReason.TOOL_EXECUTION),
        ("refusal", FinishReason.CONTENT_FILTER),
        ("pause_turn", FinishReason.OTHER),
        ("a_reason_from_the_future", FinishReason.OTHER),
    ],
)
async def test_stop_reasons(server: FakeAnthropicServer, stop_reason: str, expected: FinishReason) -> None:
    server.add(sse_reply(message_start(), *text_block(0, "x"), *message_end(stop_reason)))
    message = {"type": "message", "content": [{"type": "text", "text": "x"}], "stop_reason": stop_reason}
    server.add(Reply.json({**message, "usage": {"input_tokens": 1, "output_tokens": 1}}))
    async with model_for(server) as model:
        assert final(await collect(model.stream(QUESTION))).finish_reason is expected
        assert (await model.chat(QUESTION)).finish_reason is expected


async def test_unknown_events_blocks_and_deltas_are_ignored(server: FakeAnthropicServer) -> None:
    server_tool = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    server.add(
        sse_reply(
            message_start(),
            {"type": "content_block_start", "index": 0, "content_block": server_tool},
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": '{"query": "x"}'},
            },
            {"type": "content_block_stop", "index": 0},
            {"type": "a_new_event", "whatever": [1, 2]},
            *text_block(1, "Found", " it."),
            {"type": "content_block_delta", "index": 1, "delta": {"type": "citations_delta", "citation": {}}},
            *message_end("end_turn"),
        )
    )
    async with model_for(server) as model:
        events = await collect(model.stream(QUESTION))
    assert [type(e) for e in events] == [TextDelta, TextDelta, ResponseComplete]
    assert final(events).ai_message == AiMessage("Found it.")


async def test_events_without_event_names_are_read_by_their_type(server: FakeAnthropicServer) -> None:
    """Some proxies drop the `event:` lines; the JSON's own `type` still says what each event is."""
    events = [message_start(), *text_block(0, "no ", "names"), *message_end("max_tokens")]
    server.add(Reply.sse([encode_sse(e) for e in events]))
    async with model_for(server) as model:
        response = final(await collect(model.stream(QUESTION)))
    assert (response.text, response.finish_reason) == ("no names", FinishReason.LENGTH)


# -- the documented transcripts -----------------------------------------------------------------------------


def fixture_chunks(name: str, size: int) -> list[bytes]:
    data = (FIXTURES / name).read_bytes()
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("chunk_size", [7, 100, 100_000])
async def test_documented_tool_use_transcript(server: FakeAnthropicServer, chunk_size: int) -> None:
    """Anthropic's own example (https://platform.claude.com/docs/en/build-with-claude/streaming, "Streaming
    request with tool use"), cut into network chunks at arbitrary places."""
    server.add(
        Reply.stream(fixture_chunks("streaming_tool_use.sse", chunk_size), content_type="text/event-stream")
    )
    async with model_for(server) as model:
        events = await collect(model.stream(ChatRequest(QUESTION.messages, [WEATHER], ToolChoice.REQUIRED)))
    text = "Okay, let's check the weather for San Francisco, CA:"
    arguments = '{"location": "San Francisco, CA", "unit": "fahrenheit"}'
    call = ToolExecutionRequest("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather", arguments)
    assert events[:13] == [TextDelta(t) for t in text_pieces()]
    assert events[13] == ToolCallDelta(0, call.id, "get_weather", "")
    assert events[14:22] == [
        ToolCallDelta(0, None, None, p)
        for p in ['{"location":', ' "San', " Francisc", "o,", ' CA"', ",", ' "unit": "fah', 'renheit"}']
    ]
    assert events[22] == ToolCallComplete(0, call)
    response = final(events)
    assert len(events) == 24
    assert response == ChatResponse(
        AiMessage(text, [call]),
        TokenUsage(472, 89),
        FinishReason.TOOL_EXECUTION,
        model="claude-opus-4-6",
        id="msg_014p7gG3wDgGV9EUtLvnow3U",
    )
    assert msgspec.json.decode(call.arguments) == {"location": "San Francisco, CA", "unit": "fahrenheit"}


def text_pieces() -> list[str]:
    return [
        "Okay",
        ",",
        " let",
        "'s",
        " check",
        " the",
        " weather",
        " for",
        " San",
        " Francisco",
        ",",
        " CA",
        ":",
    ]


async def test_documented_thinking_transcript_and_signature_round_trip(server: FakeAnthropicServer) -> None:
    """Anthropic's "Streaming request with extended thinking" example: thinking, signature, no usage."""
    server.add(Reply.stream(fixture_chunks("streaming_thinking.sse", 64), content_type="text/event-stream"))
    async with model_for(server, max_tokens=20000, thinking=16000) as model:
        events = await collect(model.stream(ChatRequest([UserMessage("GCD of 1071 and 462?")])))
    thinking = "".join(e.text for e in events if isinstance(e, ThinkingDelta))
    assert thinking.startswith("I need to find the GCD of 1071 and 462")
    assert thinking.endswith("so GCD(1071, 462) = 21.")
    assert len([e for e in events if isinstance(e, ThinkingDelta)]) == 4
    response = final(events)
    assert response.ai_message == AiMessage(
        "The greatest common divisor of 1071 and 462 is **21**.", (), thinking
    )
    assert response.token_usage is None  # the transcript reports none
    assert response.finish_reason is FinishReason.STOP
    assert server.requests[0].json["thinking"] == {"type": "enabled", "budget_tokens": 16000}


async def test_thinking_with_tools_is_sent_back_with_its_signature(server: FakeAnthropicServer) -> None:
    call = ToolExecutionRequest("toolu_t", "get_time", "{}")
    server.add(AiMessage("Checking the clock.", [call], thinking="The user wants the time."))
    server.add("It is noon.")
    server.add("It is noon.")
    specs = [TIME]
    async with model_for(server, max_tokens=4000, thinking=2000) as model:
        first = final(await collect(model.stream(ChatRequest([UserMessage("Time?")], specs))))
        assert first.ai_message.thinking == "The user wants the time."
        result = ToolExecutionResultMessage.from_request(first.ai_message.tool_execution_requests[0], "12:00")
        history = ChatRequest([UserMessage("Time?"), first.ai_message, result], specs)
        second = await model.chat(history)
        assert second.text == "It is noon."  # the fake checks the signature like the API does
        sent = server.requests[1].json["messages"][1]["content"]
        assert sent[0]["type"] == "thinking"
        assert sent[0]["thinking"] == "The user wants the time."
        assert sent[0]["signature"]
        # The thinking of a message this model did not produce has no signature: it is not sent (the API
        # would reject it; with thinking on, it also rejects a tool loop without it: this call turns it off).
        foreign = AiMessage(
            "Checking.", [ToolExecutionRequest("toolu_x", "get_time", "{}")], thinking="made up"
        )
        await model.chat(
            ChatRequest(
                [UserMessage("Time?"), foreign, ToolExecutionResultMessage("toolu_x", "get_time", "1")],
                specs,
                parameters={"thinking": None},
            )
        )
        assert "thinking" not in server.requests[2].json
        assert [b["type"] for b in server.requests[2].json["messages"][1]["content"]] == ["text", "tool_use"]


async def test_a_tool_loop_resumed_from_storage_by_a_new_model_keeps_its_signed_thinking(
    server: FakeAnthropicServer,
) -> None:
    from agentloop._values._codec import decode_messages, encode_messages

    call = ToolExecutionRequest("toolu_t", "get_time", "{}")
    server.add(AiMessage("Checking the clock.", [call], thinking="The user wants the time."))
    server.add("It is noon.")
    async with model_for(server, max_tokens=4000, thinking=2000) as model:
        first = await model.chat(ChatRequest([UserMessage("Time?")], [TIME]))
    result = ToolExecutionResultMessage.from_request(call, "12:00")
    stored = decode_messages(encode_messages([UserMessage("Time?"), first.ai_message, result]))  # a store row
    async with model_for(server, max_tokens=4000, thinking=2000) as another:  # another process, later
        second = await another.chat(ChatRequest(stored, [TIME]))
    assert second.text == "It is noon."  # the fake rejects a tool loop whose thinking did not come back
    sent = server.requests[1].json["messages"][1]["content"]
    assert [b["type"] for b in sent] == ["thinking", "text", "tool_use"]
    assert sent[0]["signature"] == first.ai_message.provider_state["anthropic"]["thinking"][0]["signature"]


# -- errors, retries, cancellation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_type", "cls"),
    [  # 400, 401, 403, 404, 429, 500, 503: tests/models/test_provider_contract.py, for every provider
        (402, "billing_error", ModelHTTPError),
        (413, "request_too_large", BadRequestError),
        (504, "timeout_error", ServerError),
        (529, "overloaded_error", ServerError),
    ],
)
@pytest.mark.parametrize("streaming", [False, True])
async def test_every_error_status_maps_to_its_error(
    server: FakeAnthropicServer, status: int, error_type: str, cls: type[ModelError], streaming: bool
) -> None:
    server.add(FakeAnthropicServer.error(status, f"something about {error_type}", request_id="req_abc"))
    async with model_for(server) as model:
        call = collect(model.stream(QUESTION)) if streaming else model.chat(QUESTION)
        with pytest.raises(cls) as caught:
            await call
    error = caught.value
    assert type(error) is cls
    assert error.status_code == status
    assert error.error_type == error_type
    assert error.provider == "anthropic"
    assert error.provider_message == f"something about {error_type}"
    assert error.request_id == "req_abc"
    assert f"HTTP {status}" in str(error)
    assert "req_abc" in str(error)


@pytest.mark.parametrize(
    ("error_type", "cls"),
    [("overloaded_error", ServerError), ("rate_limit_error", RateLimitError), ("api_error", ServerError)],
)
async def test_an_error_event_mid_stream_is_raised_and_not_retried(
    server: FakeAnthropicServer, error_type: str, cls: type[ModelError]
) -> None:
    server.add(server.stream_error(error_type, "Overloaded", after="Partial answer"))
    server.add("never sent")
    received: list[ModelEvent] = []
    async with model_for(server, max_retries=3) as model:
        with pytest.raises(cls, match="Overloaded") as caught:
            await collect(model.stream(QUESTION), into=received)
    assert caught.value.error_type == error_type
    assert "".join(e.text for e in received if isinstance(e, TextDelta)) == "Partial answer"
    assert len(server.requests) == 1
    assert server.pending == 1


async def test_retries_honour_retry_after(server: FakeAnthropicServer) -> None:
    server.add(FakeAnthropicServer.error(429, "Slow down", headers=[("retry-after", "0.3")]))
    server.add(FakeAnthropicServer.error(529, "Overloaded", headers=[("retry-after-ms", "100")]))
    server.add("finally")
    async with model_for(server, max_retries=2) as model:
        started = time.monotonic()
        events = await collect(model.stream(QUESTION))
        elapsed = time.monotonic() - started
    assert final(events).text == "finally"
    assert len(server.requests) == 3
    assert elapsed >= 0.4  # waited what the server asked, not the default backoff (0.5 s, 1 s)
    assert elapsed < 1.4


async def test_a_stream_without_message_stop_is_a_bad_response(server: FakeAnthropicServer) -> None:
    server.add(sse_reply(message_start(), *text_block(0, "cut")))
    server.add(Reply.sse([b"event: content_block_delta\ndata: {not json\n\n"]))
    async with model_for(server) as model:
        with pytest.raises(BadResponseError, match="ended before message_stop"):
            await collect(model.stream(QUESTION))
        with pytest.raises(BadResponseError, match="unreadable content_block_delta event"):
            await collect(model.stream(QUESTION))


async def test_a_wrong_key_is_an_authentication_error() -> None:
    with FakeAnthropicServer(["never"], api_key="the-right-key") as server:
        async with model_for(server) as model:
            with pytest.raises(AuthenticationError, match="invalid x-api-key"):
                await model.chat(QUESTION)


# -- tool metadata, parameters, configuration ---------------------------------------------------------------


async def test_tool_metadata_is_sent_only_for_configured_keys(server: FakeAnthropicServer) -> None:
    cached = ToolSpecification(
        "get_weather",
        "Weather",
        WEATHER.parameters,
        metadata={"cache_control": {"type": "ephemeral"}, "internal_note": "never sent"},
    )
    server.add("a")
    server.add("b")
    async with model_for(server) as plain:
        await plain.chat(ChatRequest([UserMessage("hi")], [cached, TIME]))
    async with model_for(server, send_tool_metadata_keys={"cache_control"}) as caching:
        await collect(caching.stream(ChatRequest([UserMessage("hi")], [cached, TIME])))
    assert server.requests[0].json["tools"][0] == {
        "name": "get_weather",
        "description": "Weather",
        "input_schema": WEATHER.parameters,
    }
    assert server.requests[1].json["tools"] == [
        {
            "name": "get_weather",
            "description": "Weather",
            "input_schema": WEATHER.parameters,
            "cache_control": {"type": "ephemeral"},
        },
        {"name": "get_time", "input_schema": TIME.parameters},
    ]


def test_metadata_keys_must_not_replace_the_tool_definition() -> None:
    with pytest.raises(IllegalConfigurationError, match="input_schema"):
        AnthropicChatModel("m", api_key=KEY, send_tool_metadata_keys={"input_schema"})
    with pytest.raises(IllegalConfigurationError, match="collection of keys"):
        AnthropicChatModel("m", api_key=KEY, send_tool_metadata_keys="cache_control")


async def test_request_parameters_override_the_defaults(server: FakeAnthropicServer) -> None:
    server.add("a")
    server.add("b")
    async with model_for(
        server, temperature=0.5, top_k=5, parameters={"metadata": {"user_id": "u1"}}
    ) as model:
        await model.chat(QUESTION)
        await model.chat(
            ChatRequest(
                QUESTION.messages,
                parameters={"temperature": None, "stop": "STOP", "max_tokens": 99, "top_p": 0.9},
            )
        )
    first, second = (r.json for r in server.requests)
    assert (first["temperature"], first["top_k"], first["metadata"]) == (0.5, 5, {"user_id": "u1"})
    assert "temperature" not in second
    thinking_late = {
        "thinking": 4500,
        "max_tokens": 5000,
    }  # checked against this call's max_tokens (not 4096)
    assert model.build_body(ChatRequest(QUESTION.messages, parameters=thinking_late), stream=False)[
        "thinking"
    ]
    assert second["stop_sequences"] == ["STOP"]
    assert (second["max_tokens"], second["top_p"], second["top_k"]) == (99, 0.9, 5)
    async with model_for(server) as model:
        with pytest.raises(IllegalConfigurationError, match="'messages' cannot be set"):
            model.build_body(ChatRequest(QUESTION.messages, parameters={"messages": []}), stream=False)


def test_thinking_options() -> None:
    body = AnthropicChatModel("m", api_key=KEY, max_tokens=8000, thinking=4000).build_body(
        QUESTION, stream=False
    )
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4000}
    adaptive = AnthropicChatModel("m", api_key=KEY, thinking={"type": "adaptive"})
    assert adaptive.build_body(QUESTION, stream=False)["thinking"] == {"type": "adaptive"}
    with pytest.raises(IllegalConfigurationError, match="below max_tokens"):
        AnthropicChatModel("m", api_key=KEY, max_tokens=1000, thinking=1000)
    with pytest.raises(IllegalConfigurationError, match="token budget"):
        AnthropicChatModel("m", api_key=KEY, thinking=-5)


def test_api_key_and_base_url_come_from_the_environment_together(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    with pytest.raises(IllegalConfigurationError, match="ANTHROPIC_API_KEY"):
        AnthropicChatModel("claude-sonnet-4-5")
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    model = AnthropicChatModel("claude-sonnet-4-5")
    assert model.base_url == "https://api.anthropic.com"
    assert isinstance(model, ChatModel)
    # A key from the environment is never sent to a base URL chosen in code.
    own = AnthropicChatModel("claude-sonnet-4-5", base_url="http://127.0.0.1:9/proxy")
    assert own.build_body(QUESTION, stream=False)  # builds fine, without a key
    assert own._http._headers.get("x-api-key") is None
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/env-proxy")
    assert AnthropicChatModel("claude-sonnet-4-5").base_url == "http://127.0.0.1:9/env-proxy"
    with pytest.raises(IllegalConfigurationError, match="base_url"):
        AnthropicChatModel("claude-sonnet-4-5", api_key=KEY, base_url="ftp://example.com")


async def test_without_a_key_a_401_says_so(server: FakeAnthropicServer) -> None:
    server.add("never sent: the fake answers 401 first")
    async with AnthropicChatModel("claude-test", base_url=server.base_url, max_retries=0) as model:
        with pytest.raises(AuthenticationError, match="no API key was given"):
            await model.chat(QUESTION)


async def test_calls_without_ids_get_matching_made_up_ids(server: FakeAnthropicServer) -> None:
    server.add("done")
    history = ChatRequest(
        [
            UserMessage("go"),
            AiMessage(
                None, [ToolExecutionRequest(None, "get_time", "{}"), ToolExecutionRequest(None, "b", "[1]")]
            ),
            ToolExecutionResultMessage(None, "b", "from b"),
            ToolExecutionResultMessage(None, "get_time", "noon"),
        ],
        [TIME, ToolSpecification("b", None, {"type": "object", "properties": {}})],
    )
    async with model_for(server) as model:
        assert (await model.chat(history)).text == "done"  # the fake accepts it: every tool_use is answered
    assistant, results = server.requests[0].json["messages"][1:]
    ids = {block["name"]: block["id"] for block in assistant["content"]}
    assert assistant["content"][1]["input"] == {}  # arguments that are not a JSON object
    assert [(r["tool_use_id"], r["content"]) for r in results["content"]] == [
        (ids["b"], "from b"),
        (ids["get_time"], "noon"),
    ]
    orphan = ChatRequest([UserMessage("go"), ToolExecutionResultMessage(None, "get_time", "noon")], [TIME])
    with pytest.raises(IllegalConfigurationError, match="answers no tool call"):
        model.build_body(orphan, stream=False)
