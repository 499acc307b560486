"""`OpenAIResponsesModel` against `FakeOpenAIResponsesServer` over real sockets: streamed text and reasoning
summaries, parallel function calls, reasoning items carried between rounds (through a store too), usage,
structured output, pictures and documents, errors."""

from __future__ import annotations

import json
import logging
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest

from agentloop import (
    Agent,
    AiMessage,
    AuthenticationError,
    BadRequestError,
    ChatRequest,
    ChatResponse,
    DocumentContent,
    FinishReason,
    ImageContent,
    MessageWindowChatMemory,
    ResponseFormat,
    ServerError,
    SystemMessage,
    TokenUsage,
    ToolChoice,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolSpecification,
    UserMessage,
    tool,
)
from agentloop.models import (
    ModelEvent,
    OpenAIResponsesModel,
    TextDelta,
    infer_model,
)
from agentloop.models._http import RetryPolicy
from agentloop.models._responses import STATE_KEY
from agentloop.stores import SQLiteChatMemoryStore
from agentloop.testing import FakeOpenAIResponsesServer
from agentloop.testing._fake_responses import encrypted
from agentloop.testing._fake_server import Reply, encode_sse
from tests.provider_helpers import final

pytestmark = pytest.mark.anyio

KEY = "sk-proj-SECRETSECRET-0123456789abcdefXYZ"
FAST = RetryPolicy(initial_delay=0.01, max_delay=0.02)
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\n%%EOF\n"
WEATHER = ToolSpecification(
    "get_weather",
    "Current weather for a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
HELLO = ChatRequest([UserMessage("hi")])
CALLS = (
    ToolExecutionRequest("call_paris", "get_weather", '{"city": "Paris"}'),
    ToolExecutionRequest("call_oslo", "get_weather", '{"city": "Oslo"}'),
)


def model_for(
    server: FakeOpenAIResponsesServer, name: str = "gpt-5-mini", **kwargs: Any
) -> OpenAIResponsesModel:
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("retry", FAST)
    return OpenAIResponsesModel(name, base_url=server.base_url, **kwargs)


async def collect(model: OpenAIResponsesModel, request: ChatRequest = HELLO) -> list[ModelEvent]:
    async with aclosing(model.stream(request)) as events:  # type: ignore[type-var]
        return [event async for event in events]


async def call(model: OpenAIResponsesModel, request: ChatRequest, *, streaming: bool) -> ChatResponse:
    return final(await collect(model, request)) if streaming else await model.chat(request)


streaming = pytest.mark.parametrize("streaming", [True, False], ids=["stream", "chat"])


@streaming
async def test_text_streams_and_usage_counts_cached_and_reasoning_tokens(streaming: bool) -> None:
    usage = TokenUsage(120, 40, cache_read_tokens=100, reasoning_tokens=25)
    script = [ChatResponse(AiMessage("The sky is blue today."), usage, model="gpt-5-mini-2025")]
    async with FakeOpenAIResponsesServer(script) as server, model_for(server) as model:
        if streaming:
            events = await collect(model)
            deltas = [e.text for e in events if isinstance(e, TextDelta)]
            assert len(deltas) > 1 and "".join(deltas) == "The sky is blue today."
            response = final(events)
        else:
            response = await model.chat(HELLO)
    assert response.text == "The sky is blue today."
    assert response.token_usage == TokenUsage(120, 40, 160, cache_read_tokens=100, reasoning_tokens=25)
    assert response.finish_reason is FinishReason.STOP
    assert response.model == "gpt-5-mini-2025" and (response.id or "").startswith("resp_")
    sent = server.requests[0]
    assert sent.path == "/v1/responses" and sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.json["input"] == [{"role": "user", "content": "hi"}]
    assert sent.json["store"] is False and sent.json["include"] == ["reasoning.encrypted_content"]
    assert ("stream" in sent.json) is streaming


async def test_tools_are_sent_as_functions() -> None:
    """How calls stream back is in tests/models/test_provider_contract.py, for every provider."""
    async with FakeOpenAIResponsesServer(["ok"]) as server, model_for(server) as model:
        await model.chat(ChatRequest([UserMessage("weather in Paris and Oslo?")], [WEATHER]))
    assert server.requests[0].json["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": WEATHER.parameters,
            "strict": False,
        }
    ]


@streaming
async def test_reasoning_items_go_back_with_their_encrypted_content_in_order(streaming: bool) -> None:
    script = [
        AiMessage(None, CALLS, thinking="Two cities: call twice."),
        AiMessage("Both sunny.", thinking=""),
    ]
    first_request = ChatRequest([SystemMessage("Be brief."), UserMessage("weather?")], [WEATHER])
    async with (
        FakeOpenAIResponsesServer(script) as server,
        model_for(server, reasoning_summary="auto") as model,
    ):
        first = await call(model, first_request, streaming=streaming)
        assert first.ai_message.thinking == "Two cities: call twice."
        state = first.ai_message.provider_state[STATE_KEY]
        reasoning = state["output"][0]
        assert reasoning["type"] == "reasoning" and reasoning["encrypted_content"] == encrypted(
            reasoning["id"]
        )
        results = [ToolExecutionResultMessage.from_request(c, "sunny") for c in CALLS]
        second = await call(
            model,
            ChatRequest([*first_request.messages, first.ai_message, *results], [WEATHER]),
            streaming=streaming,
        )
    assert second.text == "Both sunny." and second.ai_message.thinking is None
    sent = server.requests[1].json
    assert sent["instructions"] == "Be brief."
    assert sent["reasoning"] == {"summary": "auto"}
    kinds = [(item.get("type", "message"), item.get("role") or item.get("call_id")) for item in sent["input"]]
    assert kinds == [
        ("message", "user"),
        ("reasoning", None),
        ("function_call", "call_paris"),
        ("function_call", "call_oslo"),
        ("function_call_output", "call_paris"),
        ("function_call_output", "call_oslo"),
    ]
    assert sent["input"][1] == {
        "type": "reasoning",
        "id": reasoning["id"],
        "summary": [{"type": "summary_text", "text": "Two cities: call twice."}],
        "encrypted_content": encrypted(reasoning["id"]),
    }
    assert all(item["id"].startswith("fc_") for item in sent["input"][2:4])  # the items that followed it


async def test_an_agent_keeps_reasoning_across_rounds_and_through_a_store(tmp_path: Path) -> None:
    calls: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        calls.append(city)
        return f"sunny in {city}"

    script = [
        AiMessage(None, CALLS, thinking="Look both up."),
        AiMessage("Sunny in both.", thinking="Done."),
        AiMessage("Yes, as I said.", thinking="Recall."),
    ]
    async with FakeOpenAIResponsesServer(script) as server:
        async with SQLiteChatMemoryStore(tmp_path / "chat.db") as store:
            agent = Agent(
                model_for(server),
                tools=[get_weather],
                memory=MessageWindowChatMemory.provider(max_messages=50, store=store),
            )
            result = await agent.chat("Weather in Paris and Oslo?", memory_id="u")
        assert result.output == "Sunny in both." and sorted(calls) == ["Oslo", "Paris"]
        async with SQLiteChatMemoryStore(tmp_path / "chat.db") as store:  # another process, later
            agent = Agent(
                model_for(server), memory=MessageWindowChatMemory.provider(max_messages=50, store=store)
            )
            again = await agent.chat("Sure?", memory_id="u")
    assert again.output == "Yes, as I said."
    assert not server.unanswered and all(r.json for r in server.requests)
    last = server.requests[2].json["input"]
    reasoning = [item for item in last if item.get("type") == "reasoning"]
    assert len(reasoning) == 2  # both earlier answers' reasoning, read back from the store
    assert all(item["encrypted_content"] == encrypted(item["id"]) for item in reasoning)


async def test_another_providers_state_is_never_sent() -> None:
    history = [
        UserMessage("hi"),
        AiMessage("hello", provider_state={"gemini": {"signature": "x"}}),
        UserMessage("?"),
    ]
    async with FakeOpenAIResponsesServer(["ok"]) as server, model_for(server) as model:
        await model.chat(ChatRequest(history))
    assert server.requests[0].json["input"][1] == {"role": "assistant", "content": "hello"}


@streaming
async def test_structured_output_is_text_format_json_schema_strict(streaming: bool) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "temp": {"type": "number"}},
        "required": ["city", "temp"],
    }
    request = ChatRequest([UserMessage("Paris?")], response_format=ResponseFormat(schema, name="weather"))
    async with (
        FakeOpenAIResponsesServer(['{"city": "Paris", "temp": 21}']) as server,
        model_for(server) as model,
    ):
        response = await call(model, request, streaming=streaming)
    assert json.loads(response.text or "") == {"city": "Paris", "temp": 21}
    assert server.requests[0].json["text"] == {
        "format": {
            "type": "json_schema",
            "name": "weather",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "temp": {"type": "number"}},
                "required": ["city", "temp"],
                "additionalProperties": False,
            },
        }
    }


async def test_tool_choice_and_parameters() -> None:
    async with FakeOpenAIResponsesServer(["a", "b"]) as server:
        model = model_for(
            server, max_output_tokens=50, reasoning_effort="low", parameters={"service_tier": "flex"}
        )
        request = ChatRequest(
            [UserMessage("x")], [WEATHER], ToolChoice.tool("get_weather"), {"max_output_tokens": None}
        )
        await model.chat(request)
        await model.chat(ChatRequest([UserMessage("x")], parameters={"previous_response_id": "resp_1"}))
        await model.aclose()
    first, second = (r.json for r in server.requests)
    assert first["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert "max_output_tokens" not in first and first["reasoning"] == {"effort": "low"}
    assert first["service_tier"] == "flex"
    assert second["previous_response_id"] == "resp_1" and second["max_output_tokens"] == 50
    with pytest.raises(Exception, match="parameter 'input' cannot be set through parameters"):
        model.build_body(ChatRequest([UserMessage("x")], parameters={"input": []}), stream=False)


def test_non_reasoning_models_do_not_ask_for_encrypted_reasoning() -> None:
    model = OpenAIResponsesModel("gpt-4.1-mini", api_key=KEY, base_url="http://127.0.0.1:9/v1")
    assert "include" not in model.build_body(HELLO, stream=False)
    assert "include" in OpenAIResponsesModel("o4-mini", api_key=KEY, base_url="http://x/v1").build_body(
        HELLO, stream=False
    )


@streaming
async def test_pictures_and_documents_go_as_input_image_and_input_file(streaming: bool) -> None:
    message = UserMessage.of(
        [
            "Compare",
            ImageContent(PNG),
            ImageContent(url="https://example.com/cat.jpg"),
            DocumentContent(PDF, name="report.pdf"),
            DocumentContent(url="https://example.com/paper.pdf"),
        ]
    )
    async with FakeOpenAIResponsesServer(["Done."]) as server, model_for(server) as model:
        await call(model, ChatRequest([message]), streaming=streaming)
    content = server.requests[0].json["input"][0]["content"]
    assert content[0] == {"type": "input_text", "text": "Compare"}
    assert content[1]["type"] == "input_image" and content[1]["image_url"].startswith(
        "data:image/png;base64,iVBOR"
    )
    assert content[2] == {"type": "input_image", "image_url": "https://example.com/cat.jpg", "detail": "auto"}
    assert content[3]["filename"] == "report.pdf" and content[3]["file_data"].startswith(
        "data:application/pdf;base64,"
    )
    assert content[4] == {"type": "input_file", "file_url": "https://example.com/paper.pdf"}


async def test_a_picture_a_tool_returns_goes_in_its_function_call_output() -> None:
    @tool
    def screenshot() -> ImageContent:
        """Takes a screenshot."""
        return ImageContent(PNG)

    call = ToolExecutionRequest("call_1", "screenshot", "{}")
    script = [AiMessage(None, (call,)), "A login page."]
    async with FakeOpenAIResponsesServer(script) as server:
        result = await Agent(model_for(server), tools=[screenshot]).chat("What is on screen?")
    assert result.output == "A login page."
    output = server.requests[1].json["input"][-1]
    assert output["type"] == "function_call_output" and output["call_id"] == "call_1"
    assert output["output"][0] == {"type": "input_text", "text": f"[image 1: image/png, {len(PNG)} bytes]"}
    assert output["output"][1]["type"] == "input_image"
    assert output["output"][1]["image_url"].startswith("data:image/png;base64,")


@streaming
async def test_a_400_reaches_the_user_with_the_providers_message(streaming: bool) -> None:
    bad = ChatRequest(
        [UserMessage("x"), AiMessage(None, (ToolExecutionRequest("call_9", "f", "{}"),)), UserMessage("y")]
    )
    async with FakeOpenAIResponsesServer(["never"]) as server, model_for(server) as model:
        with pytest.raises(BadRequestError, match="No tool output found for function call call_9") as caught:
            await call(model, bad, streaming=streaming)
    assert caught.value.status_code == 400 and caught.value.provider == "openai"


@pytest.mark.parametrize("status", [401, 403])
async def test_401_and_403_say_which_key_and_never_show_it(
    status: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    reply = FakeOpenAIResponsesServer.error(status, f"Incorrect API key provided: {KEY}.")
    async with FakeOpenAIResponsesServer([reply, reply]) as server:
        with pytest.raises(AuthenticationError) as given:
            await model_for(server).chat(HELLO)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        with pytest.raises(AuthenticationError) as from_env:
            await infer_model("openai-responses:gpt-5-mini").chat(HELLO)  # type: ignore[attr-defined]
    assert "the key sent was the one from api_key=" in str(given.value)
    assert "the key sent was the one from OPENAI_API_KEY" in str(from_env.value)
    for error in (given.value, from_env.value):
        assert KEY not in str(error) and KEY not in (error.provider_message or "")
    assert KEY not in caplog.text


async def test_no_key_says_how_to_give_one() -> None:
    async with FakeOpenAIResponsesServer([FakeOpenAIResponsesServer.error(401, "Missing bearer")]) as server:
        with pytest.raises(AuthenticationError, match="no API key was given"):
            await OpenAIResponsesModel("gpt-5", base_url=server.base_url, retry=FAST).chat(HELLO)


async def test_failed_and_error_events_raise_model_errors() -> None:
    error_event = Reply.sse(
        [
            encode_sse(
                {"type": "error", "code": "invalid_prompt", "message": "bad prompt", "sequence_number": 0},
                event="error",
            )
        ]
    )
    truncated = Reply.sse(
        [encode_sse({"type": "response.created", "response": {"id": "resp_1"}}, event="response.created")]
    )
    script = [FakeOpenAIResponsesServer.failed("The server had an error"), error_event, truncated]
    async with FakeOpenAIResponsesServer(script) as server, model_for(server, max_retries=0) as model:
        with pytest.raises(ServerError, match="The server had an error"):
            await collect(model)
        with pytest.raises(Exception, match="bad prompt"):
            await collect(model)
        with pytest.raises(Exception, match="stream ended before the response was complete"):
            await collect(model)


def test_infer_model_builds_a_responses_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    model = infer_model("openai-responses:gpt-5-mini")
    assert isinstance(model, OpenAIResponsesModel)
    assert (model.model, model.base_url) == ("gpt-5-mini", "https://api.openai.com/v1")
    assert KEY not in repr(model)


async def test_a_paused_tool_loop_resumes_from_json_with_its_reasoning_and_pictures() -> None:
    """What a pending approval keeps (`to_json()`): the picture the user sent and the reasoning items, so a
    new agent resuming in another process sends both back as the API needs them."""

    @tool(requires_approval=True)
    def pay(to: str, amount: float) -> str:
        """Pays someone."""
        return f"paid {amount} to {to}"

    call = ToolExecutionRequest("call_pay", "pay", '{"to": "bob", "amount": 5}')
    script = [AiMessage(None, (call,), thinking="Pay per the invoice."), "Paid."]
    async with FakeOpenAIResponsesServer(script) as server:
        paused = await Agent(model_for(server), tools=[pay]).chat(["Pay this invoice", ImageContent(PNG)])
        assert paused.pending is not None
        data = paused.pending.to_json()
        resumed = await Agent(model_for(server), tools=[pay]).resume(data, {"call_pay": True})
    assert resumed.output == "Paid." and not server.unanswered
    sent = server.requests[1].json["input"]
    assert [item.get("type", "message") for item in sent] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert sent[0]["content"][1]["image_url"].startswith("data:image/png;base64,")
    assert sent[1]["encrypted_content"] == encrypted(sent[1]["id"])


async def test_items_sent_whole_without_deltas_still_stream_their_text() -> None:
    """A server (or proxy) that sends a message or a reasoning summary only in `output_item.done`."""
    reasoning = {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Think."}]}
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Whole answer.", "annotations": []}],
    }
    done = {"id": "resp_1", "status": "completed", "output": [reasoning, message], "usage": None}
    events = [
        encode_sse({"type": "response.output_item.done", "output_index": 0, "item": reasoning}),
        encode_sse({"type": "response.output_item.done", "output_index": 1, "item": message}),
        encode_sse({"type": "response.completed", "response": done}),
    ]
    async with FakeOpenAIResponsesServer([Reply.sse(events)]) as server, model_for(server) as model:
        received = await collect(model)
    assert [type(e).__name__ for e in received] == ["ThinkingDelta", "TextDelta", "ResponseComplete"]
    response = final(received)
    assert (response.text, response.ai_message.thinking) == ("Whole answer.", "Think.")
