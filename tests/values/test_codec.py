"""The storage format: what a store or a durable engine keeps reads back equal; old data stays readable."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentloop._values._codec as codec
from agentloop import (
    AiMessage,
    ChatRequest,
    ChatResponse,
    FinishReason,
    SystemMessage,
    TokenUsage,
    ToolChoice,
    ToolExecution,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolSpecification,
    UserMessage,
    execute_tool_calls,
    tool,
)
from agentloop._values._codec import (
    CodecError,
    RecordedToolError,
    decode,
    decode_messages,
    encode,
    encode_messages,
)

GOLDEN = Path(__file__).parents[1] / "golden" / "codec"

texts = st.text()  # any code point but lone surrogates (JSON cannot carry those)
ids = st.one_of(st.none(), st.text(min_size=1, max_size=20))
requests = st.builds(ToolExecutionRequest, ids, st.text(min_size=1, max_size=20), texts)
messages = st.one_of(
    st.builds(SystemMessage, texts),
    st.builds(UserMessage, texts),
    st.builds(
        AiMessage,
        st.one_of(st.none(), texts),
        st.lists(requests, max_size=4).map(tuple),
        st.one_of(st.none(), texts),
    ),
    st.builds(ToolExecutionResultMessage, ids, st.text(min_size=1), texts, st.booleans()),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(messages, max_size=8))
def test_messages_round_trip_exactly(conversation: list[object]) -> None:
    assert decode(encode(conversation), "messages") == conversation
    assert decode_messages(encode_messages(conversation)) == conversation  # type: ignore[arg-type]


def test_ids_is_error_and_thinking_survive() -> None:
    ai = AiMessage("let me", [ToolExecutionRequest("call_1", "f", '{"x": 1.5}')], thinking="x is 1.5")
    failed = ToolExecutionResultMessage("call_1", "f", "boom", is_error=True)
    (ai2, failed2) = decode(encode([ai, failed]))
    assert ai2.tool_execution_requests[0].id == "call_1"
    assert ai2.tool_execution_requests[0].arguments == '{"x": 1.5}'  # the model's text, byte for byte
    assert ai2.thinking == "x is 1.5"
    assert failed2.is_error is True
    assert failed2.id == "call_1"


def test_request_response_and_specifications_round_trip() -> None:
    spec = ToolSpecification(
        "weather",
        "Forecast",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        {"cache_control": {"type": "ephemeral"}},
    )
    request = ChatRequest(
        [SystemMessage("be brief"), UserMessage("hi")],
        [spec],
        ToolChoice.tool("weather"),
        {"temperature": 0.25, "max_tokens": 100, "stop": ["\n"]},
    )
    response = ChatResponse(
        AiMessage(None, [ToolExecutionRequest("c", "weather", '{"city":"Oslo"}')], "thinking..."),
        TokenUsage(12, 7),
        FinishReason.TOOL_EXECUTION,
        "gpt-x",
        "resp_1",
    )
    assert decode(encode(request), "chat_request") == request
    assert decode(encode(response), "chat_response") == response
    assert decode(encode(response)).token_usage == TokenUsage(12, 7, 19)
    assert decode(encode(spec)) == spec
    assert decode(encode([spec, spec])) == [spec, spec]


@dataclasses.dataclass
class Forecast:
    city: str
    when: dt.date


@tool
def forecast(city: str) -> Forecast:
    """Forecast for a city."""
    return Forecast(city, dt.date(2026, 1, 2))


@tool
def broken(city: str) -> str:
    """Always fails."""
    raise ValueError(f"no data for {city}")


async def test_tool_executions_round_trip() -> None:
    calls = [
        ToolExecutionRequest("a", "forecast", '{"city": "Oslo"}'),
        ToolExecutionRequest("b", "broken", '{"city": "Rome"}'),
    ]
    executions = await execute_tool_calls(calls, [forecast, broken], round=3)
    back: list[ToolExecution] = decode(encode(executions), "tool_executions")
    for original, copy in zip(executions, back):
        for field in ("request", "result", "index", "round", "started_at", "finished_at", "duration"):
            assert getattr(copy, field) == getattr(original, field), field
        assert copy.return_behavior is original.return_behavior
        assert copy.is_error == original.is_error
        assert copy.has_failed == original.has_failed
        assert copy.result_message() == original.result_message()
    assert back[0].result_object == {"city": "Oslo", "when": "2026-01-02"}  # its JSON form
    assert isinstance(back[1].error, RecordedToolError)
    assert back[1].error.error_type == "ValueError"
    assert str(back[1].error) == "no data for Rome"
    # Records compare by value: read back twice, they are equal (and hash alike); another message is not.
    again: list[ToolExecution] = decode(encode(executions), "tool_executions")
    assert again == back and again[1].error is not back[1].error
    assert hash(again[1].error) == hash(back[1].error)
    assert back[1].error != RecordedToolError("no data for Oslo", error_type="ValueError")
    assert back[1].error != ValueError("no data for Rome")
    # A record read back encodes to the same bytes: replaying it is stable.
    assert encode(back) == encode(executions)
    assert decode(encode(executions[1]), "tool_execution").result == executions[1].result


def test_golden_documents_of_format_1_stay_readable() -> None:
    """Format-1 files: every later release must read them (add an upgrade step, never edit them)."""
    conversation = decode((GOLDEN / "messages-v1.json").read_bytes(), "messages")
    assert conversation == [
        SystemMessage("You are terse."),
        UserMessage("Weather in Oslo?"),
        AiMessage(
            None, [ToolExecutionRequest("call_1", "weather", '{"city":"Oslo"}')], thinking="Need the tool."
        ),
        ToolExecutionResultMessage("call_1", "weather", "Service down", is_error=True),
        AiMessage("I could not get the weather."),
    ]
    response = decode((GOLDEN / "chat_response-v1.json").read_bytes(), "chat_response")
    assert response.token_usage == TokenUsage(30, 9, 39)
    assert response.finish_reason is FinishReason.STOP


def test_an_older_format_is_upgraded_step_by_step(monkeypatch: pytest.MonkeyPatch) -> None:
    old = encode([UserMessage("hi")])
    seen: list[object] = []

    def step(kind: str, data: object) -> object:
        seen.append((kind, data))
        return data

    monkeypatch.setattr(codec, "FORMAT", 2)
    monkeypatch.setitem(codec._UPGRADES, 1, step)
    assert decode(old) == [UserMessage("hi")]
    assert decode_messages(encode_messages([UserMessage("x")]), format=1) == [UserMessage("x")]
    assert seen == [
        ("messages", [{"type": "user", "text": "hi"}]),
        ("messages", [{"type": "user", "text": "x"}]),
    ]


def test_bad_data_gives_clear_errors() -> None:
    newer = msgspec.json.encode({"format": 99, "kind": "messages", "data": []})
    with pytest.raises(CodecError, match="format 99, newer than this release"):
        decode(newer)
    with pytest.raises(CodecError, match="Not an agentloop document"):
        decode(b"\x00garbage")
    with pytest.raises(CodecError, match="Expected a 'chat_request' document, got 'messages'"):
        decode(encode([UserMessage("x")]), "chat_request")
    with pytest.raises(CodecError, match="Corrupt 'messages' document"):
        decode(b'{"format":1,"kind":"messages","data":[{"type":"robot","text":"x"}]}')
    with pytest.raises(CodecError, match="Corrupt stored messages"):
        decode_messages(b'[{"type":"user"}]')
    with pytest.raises(CodecError, match="Cannot encode a set"):
        encode({1, 2})
