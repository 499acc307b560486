"""`GeminiChatModel` against `FakeGeminiServer`, over real loopback sockets."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from agentloop import (
    Agent,
    AiMessage,
    AuthenticationError,
    BadRequestError,
    BadResponseError,
    ChatRequest,
    ChatResponse,
    DocumentContent,
    FinishReason,
    IllegalConfigurationError,
    ImageContent,
    ModelConnectionError,
    ModelError,
    ResponseFormat,
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
    GeminiChatModel,
    ModelEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallComplete,
    ToolCallDelta,
    infer_model,
)
from agentloop.models._gemini import SKIP_SIGNATURE
from agentloop.models._http import RetryPolicy
from agentloop.testing import FakeGeminiServer
from agentloop.testing._fake_gemini import signature_of
from agentloop.testing._fake_server import Reply
from tests.provider_helpers import TIME, WEATHER, collect, final

KEY = "AIzaSyD-fake-gemini-key-for-agentloop-tests-9Q7Z"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
QUESTION = ChatRequest([UserMessage("What is the weather like in Paris?")])
CALLS = (
    ToolExecutionRequest("call_a", "get_weather", '{"location": "Paris"}'),
    ToolExecutionRequest("call_b", "get_time", "{}"),
)


@pytest.fixture
def server() -> Iterator[FakeGeminiServer]:
    with FakeGeminiServer(api_key=KEY) as fake:
        yield fake


def model_for(server: FakeGeminiServer, **options: Any) -> GeminiChatModel:
    options.setdefault("max_retries", 0)
    return GeminiChatModel("gemini-2.5-flash", base_url=server.base_url, api_key=KEY, **options)


# -- streaming and the request shape ------------------------------------------------------------------------


async def test_a_stream_is_asked_of_stream_generate_content_with_the_key_in_a_header(
    server: FakeGeminiServer,
) -> None:
    """What streams back is in tests/models/test_provider_contract.py, for every provider."""
    server.add("Sunny.")
    async with model_for(server) as model:
        assert final(await collect(model.stream(QUESTION))).text == "Sunny."
    request = server.requests[0]
    assert request.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    assert request.query == {"alt": "sse"}
    assert request.headers["x-goog-api-key"] == KEY
    assert "key" not in request.query  # the key travels in a header, never in the URL


async def test_request_has_the_gemini_shape(server: FakeGeminiServer) -> None:
    server.add("ok")
    history = [
        SystemMessage("Be brief."),
        UserMessage("Weather?"),
        AiMessage("Checking.", CALLS),
        ToolExecutionResultMessage("call_a", "get_weather", "18°C"),
        ToolExecutionResultMessage("call_b", "get_time", "boom", is_error=True),
    ]
    request = ChatRequest(history, [WEATHER, TIME], ToolChoice.REQUIRED, {"temperature": 0.2, "stop": "END"})
    async with model_for(server, max_output_tokens=256, top_k=4) as model:
        assert (await model.chat(request)).text == "ok"
    body = server.requests[0].json
    assert server.requests[0].path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert body["generationConfig"] == {
        "maxOutputTokens": 256,
        "topK": 4,
        "temperature": 0.2,
        "stopSequences": ["END"],
    }
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}
    assert body["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": WEATHER.description,
                    "parametersJsonSchema": WEATHER.parameters,
                },
                {"name": "get_time"},
            ]
        }
    ]
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "Weather?"}]},
        {
            "role": "model",
            "parts": [
                {"text": "Checking."},
                {
                    "functionCall": {"id": "call_a", "name": "get_weather", "args": {"location": "Paris"}},
                    "thoughtSignature": SKIP_SIGNATURE,  # not produced here: the documented stand-in
                },
                {"functionCall": {"id": "call_b", "name": "get_time", "args": {}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"id": "call_a", "name": "get_weather", "response": {"result": "18°C"}}},
                {"functionResponse": {"id": "call_b", "name": "get_time", "response": {"error": "boom"}}},
            ],
        },
    ]


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        (ToolChoice.AUTO, {"mode": "AUTO"}),
        (ToolChoice.NONE, {"mode": "NONE"}),
        (ToolChoice.tool("get_time"), {"mode": "ANY", "allowedFunctionNames": ["get_time"]}),
    ],
)
def test_tool_choice_mapping(choice: ToolChoice, wire: dict[str, Any]) -> None:
    model = GeminiChatModel("gemini-2.5-flash", api_key=KEY)
    body = model.build_body(ChatRequest([UserMessage("hi")], [WEATHER, TIME], choice))
    assert body["toolConfig"] == {"functionCallingConfig": wire}


@pytest.mark.parametrize("call_ids", [True, False])
async def test_parallel_calls_keep_matching_ids_through_a_tool_round(call_ids: bool) -> None:
    """Newer API versions give each call an id, older ones none: either way the ids agentloop hands out come
    back on the function responses, and the fake (which checks names, ids and order) accepts the round."""
    scripted = AiMessage("Checking both.", (CALLS[0], CALLS[1]), thinking="Two tools at once.")
    with FakeGeminiServer([scripted, "Sunny, and it is noon."], call_ids=call_ids) as server:
        async with model_for(server) as model:
            request = ChatRequest([UserMessage("Weather and time?")], [WEATHER, TIME])
            events = await collect(model.stream(request))
            response = final(events)
            calls = response.ai_message.tool_execution_requests
            assert [c.name for c in calls] == ["get_weather", "get_time"]
            assert [json.loads(c.arguments) for c in calls] == [{"location": "Paris"}, {}]
            if call_ids:
                assert [c.id for c in calls] == ["call_a", "call_b"]
            assert len({c.id for c in calls}) == 2 and all(c.id for c in calls)
            deltas = [e for e in events if isinstance(e, ToolCallDelta)]
            completes = [e for e in events if isinstance(e, ToolCallComplete)]
            assert [(d.index, d.id, d.name) for d in deltas] == [
                (i, c.id, c.name) for i, c in enumerate(calls)
            ]
            assert [c.request for c in completes] == list(calls)
            assert [e.text for e in events if isinstance(e, ThinkingDelta)]
            assert response.ai_message.thinking == "Two tools at once."
            assert response.finish_reason is FinishReason.TOOL_EXECUTION
            results = [
                ToolExecutionResultMessage(calls[1].id, "get_time", "noon"),  # answered out of order
                ToolExecutionResultMessage(calls[0].id, "get_weather", "sunny"),
            ]
            follow_up = ChatRequest([*request.messages, response.ai_message, *results], [WEATHER, TIME])
            answer = await model.chat(follow_up)
    assert answer.text == "Sunny, and it is noon."
    sent = server.requests[1].json["contents"]
    responses = [p["functionResponse"] for p in sent[2]["parts"]]  # back in the order of the calls
    assert [(r["id"], r["name"]) for r in responses] == [
        (calls[0].id, "get_weather"),
        (calls[1].id, "get_time"),
    ]


async def test_thought_signatures_go_back_on_their_parts_and_survive_a_store(
    server: FakeGeminiServer,
) -> None:
    server.add(AiMessage(None, CALLS[:1]))
    server.add("done")
    server.add("done again")
    server.add("refused")
    async with model_for(server) as model:
        request = ChatRequest([UserMessage("Weather?")], [WEATHER])
        response = final(await collect(model.stream(request)))
        state = response.ai_message.provider_state
        assert state == {
            "gemini": {"signatures": {"call_a": signature_of("get_weather", {"location": "Paris"})}}
        }
        result = ToolExecutionResultMessage("call_a", "get_weather", "sunny")
        assert (
            await model.chat(ChatRequest([*request.messages, response.ai_message, result], [WEATHER]))
        ).text
        # The message as a store keeps it (JSON), read back: the signature is still there.
        stored = msgspec.json.decode(msgspec.json.encode(response.ai_message), type=AiMessage)
        again = await model.chat(ChatRequest([*request.messages, stored, result], [WEATHER]))
        assert again.text == "done again"
        # A corrupted signature is refused by the API, as Google refuses one.
        broken = AiMessage(None, CALLS[:1], provider_state={"gemini": {"signatures": {"call_a": "AAAA"}}})
        with pytest.raises(BadRequestError, match="Corrupted thought signature"):
            await model.chat(ChatRequest([*request.messages, broken, result], [WEATHER]))
    for sent in server.requests[1:3]:
        part = sent.json["contents"][1]["parts"][0]
        assert part["thoughtSignature"] == signature_of("get_weather", {"location": "Paris"})


async def test_usage_counts_thoughts_as_output_and_cached_tokens_as_input(server: FakeGeminiServer) -> None:
    usage = TokenUsage(1200, 300, cache_read_tokens=1000, reasoning_tokens=220)
    server.add(ChatResponse(AiMessage("ok", thinking="hmm"), usage))
    server.add(ChatResponse(AiMessage("ok"), usage))
    async with model_for(server) as model:
        streamed = final(await collect(model.stream(QUESTION)))
        whole = await model.chat(QUESTION)
    assert streamed.token_usage == usage
    assert whole.token_usage == usage
    # on the wire: candidates exclude thoughts; the prompt count includes the cached tokens
    assert streamed.token_usage is not None and streamed.token_usage.output_tokens == 80 + 220


def test_input_tokens_are_the_billed_prompt_with_tool_use_prompt_tokens() -> None:
    """docs/models.md: input is promptTokenCount + toolUsePromptTokenCount (what Google bills as input)."""
    from agentloop.models._gemini._response import token_usage
    from agentloop.models._gemini._shapes import UsageMetadata

    usage = token_usage(UsageMetadata(100, 20, 40, 5, 30, 155))
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (130, 25)
    assert (usage.cache_read_tokens, usage.reasoning_tokens) == (40, 5)


async def test_structured_output_uses_response_json_schema(server: FakeGeminiServer) -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"city": {"type": "string"}, "temperature": {"type": "number"}},
        "required": ["city", "temperature"],
        "$defs": {"unused": {"type": "string"}},
    }
    server.add('{"city": "Paris", "temperature": 18}')
    async with model_for(server) as model:
        request = ChatRequest(
            [UserMessage("Weather in Paris as JSON")], response_format=ResponseFormat(schema)
        )
        response = await model.chat(request)
    assert json.loads(response.text or "") == {"city": "Paris", "temperature": 18}
    config = server.requests[0].json["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"] == {k: v for k, v in schema.items() if k != "$schema"}
    assert "responseSchema" not in config


async def test_an_agent_runs_a_tool_loop_on_gemini(monkeypatch: pytest.MonkeyPatch) -> None:
    @tool
    def get_weather(location: str) -> str:
        """Get the current weather in a given location."""
        return f"sunny in {location}"

    call = ToolExecutionRequest("c1", "get_weather", '{"location": "Paris"}')
    with FakeGeminiServer([AiMessage(None, [call]), "It is sunny in Paris."]) as server:
        monkeypatch.setenv("GEMINI_API_KEY", KEY)
        monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", server.base_url)
        agent = Agent("gemini:gemini-2.5-flash", tools=[get_weather])
        result = await agent.chat("Weather in Paris?")
    assert result.content == "It is sunny in Paris."
    answer = server.requests[1].json["contents"][-1]["parts"][0]["functionResponse"]
    assert answer == {"id": "c1", "name": "get_weather", "response": {"result": "sunny in Paris"}}


def test_the_model_string_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_GEMINI_BASE_URL", raising=False)
    with pytest.raises(IllegalConfigurationError, match="GEMINI_API_KEY"):
        infer_model("gemini:gemini-2.5-flash")
    with pytest.raises(IllegalConfigurationError, match=r"did you mean 'gemini:gemini-2\.5-pro'"):
        infer_model("gemini-2.5-pro")
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    model = infer_model("gemini:models/gemini-2.5-pro")
    assert isinstance(model, GeminiChatModel)
    assert model.model == "gemini-2.5-pro"
    assert model.base_url == "https://generativelanguage.googleapis.com"
    assert KEY not in repr(model)


# -- refusals and finish reasons ----------------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_blocked_prompt_is_a_clear_error(server: FakeGeminiServer, streaming: bool) -> None:
    server.add(FakeGeminiServer.blocked("PROHIBITED_CONTENT", stream=streaming))
    async with model_for(server) as model:
        call = collect(model.stream(QUESTION)) if streaming else model.chat(QUESTION)
        with pytest.raises(
            ModelError, match=r"prompt was blocked \(blockReason PROHIBITED_CONTENT\)"
        ) as caught:
            await call
    assert caught.value.error_type == "prompt_blocked:PROHIBITED_CONTENT"


@pytest.mark.parametrize("reason", ["SAFETY", "RECITATION", "BLOCKLIST", "SPII"])
async def test_an_answer_stopped_for_safety_with_nothing_in_it_is_an_error(
    server: FakeGeminiServer, reason: str
) -> None:
    server.add(FakeGeminiServer.stopped(reason))
    async with model_for(server) as model:
        with pytest.raises(ModelError, match=f"finishReason {reason} before it said anything") as caught:
            await collect(model.stream(QUESTION))
    assert caught.value.error_type == f"finish:{reason}"


async def test_a_partial_answer_stopped_for_safety_keeps_its_text(server: FakeGeminiServer) -> None:
    server.add(FakeGeminiServer.stopped("SAFETY", text="Here is the start"))
    async with model_for(server) as model:
        stopped = final(await collect(model.stream(QUESTION)))
    assert stopped.text == "Here is the start"
    assert stopped.finish_reason is FinishReason.CONTENT_FILTER


async def test_a_malformed_function_call_is_a_bad_response(server: FakeGeminiServer) -> None:
    server.add(FakeGeminiServer.stopped("MALFORMED_FUNCTION_CALL", stream=False))
    async with model_for(server) as model:
        with pytest.raises(BadResponseError, match="MALFORMED_FUNCTION_CALL"):
            await model.chat(ChatRequest([UserMessage("go")], [WEATHER]))


# -- errors, retries, secrets -------------------------------------------------------------------------------


async def test_a_400_message_reaches_the_user() -> None:
    with FakeGeminiServer(["never sent"]) as server:
        # an invalid request, refused by the fake as Google refuses it: a function response without a call
        history = [UserMessage("hi"), ToolExecutionResultMessage("x", "get_time", "noon")]
        async with model_for(server) as model:
            with pytest.raises(BadRequestError, match="function response turn comes immediately after"):
                await model.chat(ChatRequest(history, [TIME]))


async def test_a_429_is_retried_after_the_delay_google_asks_for(server: FakeGeminiServer) -> None:
    server.add(FakeGeminiServer.error(429, "Resource has been exhausted", retry_delay=0.3))
    server.add(FakeGeminiServer.error(429, "Slow down", headers=[("retry-after", "0.1")]))
    server.add("finally")
    async with model_for(server, max_retries=2) as model:
        started = time.monotonic()
        events = await collect(model.stream(QUESTION))
        elapsed = time.monotonic() - started
    assert final(events).text == "finally"
    assert len(server.requests) == 3
    assert 0.4 <= elapsed < 1.4  # waited what the server asked, not the default backoff (0.5 s, 1 s)


async def test_a_wrong_key_says_which_key_to_check_and_never_shows_it() -> None:
    wrong = "AIzaSyWRONG-key-that-must-never-be-printed-0000"
    with FakeGeminiServer(["never"], api_key=KEY) as server:
        async with GeminiChatModel("gemini-2.5-flash", base_url=server.base_url, api_key=wrong) as model:
            with pytest.raises(AuthenticationError, match="API key not valid") as caught:
                await model.chat(QUESTION)
    error = caught.value
    assert "GEMINI_API_KEY" in str(error)
    for text in (str(error), repr(error), error.provider_message or "", repr(model)):
        assert wrong not in text


async def test_a_key_from_the_environment_is_named_in_a_403(
    server: FakeGeminiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", server.base_url)
    server.add(FakeGeminiServer.error(403, "Permission denied on this model"))
    async with GeminiChatModel("gemini-2.5-pro", max_retries=0) as model:
        with pytest.raises(AuthenticationError, match=r"check the API key \(GOOGLE_API_KEY\)"):
            await model.chat(QUESTION)


async def test_an_error_in_the_stream_is_raised(server: FakeGeminiServer) -> None:
    error = {"error": {"code": 503, "message": "The model is overloaded", "status": "UNAVAILABLE"}}
    first = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Part"}]}, "index": 0}]}
    server.add(Reply.sse([b"data: " + msgspec.json.encode(c) + b"\r\n\r\n" for c in (first, error)]))
    received: list[ModelEvent] = []
    async with model_for(server) as model:
        with pytest.raises(ModelError, match="overloaded") as caught:
            await collect(model.stream(QUESTION), into=received)
    assert caught.value.error_type == "UNAVAILABLE"
    assert received == [TextDelta("Part")]


async def test_a_stream_cut_before_its_finish_reason_is_an_error(server: FakeGeminiServer) -> None:
    server.add("one two three four five six", disconnect_after_chunks=2)
    server.add(Reply.sse([b"data: {not json\r\n\r\n"]))
    async with model_for(server, max_retries=2, retry=RetryPolicy(initial_delay=0.01)) as model:
        with pytest.raises(ModelConnectionError):
            await collect(model.stream(QUESTION))
        with pytest.raises(BadResponseError, match="unreadable stream chunk"):
            await collect(model.stream(QUESTION))
    assert len(server.requests) == 2  # nothing was retried once events had arrived


# -- pictures and documents ---------------------------------------------------------------------------------


async def test_pictures_go_as_inline_data_or_file_data(server: FakeGeminiServer) -> None:
    server.add("A cat.")
    message = UserMessage.of(
        [
            "What is on these?",
            ImageContent(data=PNG),
            ImageContent(url="https://example.com/cat.jpg"),
            DocumentContent(url="gs://bucket/paper.pdf"),
        ]
    )
    async with model_for(server) as model:
        assert (await model.chat(ChatRequest([message]))).text == "A cat."
    parts = server.requests[0].json["contents"][0]["parts"]
    assert parts == [
        {"text": "What is on these?"},
        {"inlineData": {"mimeType": "image/png", "data": ImageContent(data=PNG).base64}},
        {"fileData": {"fileUri": "https://example.com/cat.jpg", "mimeType": "image/jpeg"}},
        {"fileData": {"fileUri": "gs://bucket/paper.pdf", "mimeType": "application/pdf"}},
    ]
    s3 = UserMessage.of(["And this?", ImageContent(url="s3://bucket/cat.png")])
    with pytest.raises(IllegalConfigurationError, match="s3:// URIs are Bedrock's"):
        model_for(server).build_body(ChatRequest([s3]))


async def test_a_picture_a_tool_returned_follows_the_function_responses(server: FakeGeminiServer) -> None:
    server.add("It is a chart.")
    shot = ToolExecutionRequest("s1", "screenshot", "{}")
    history = [
        UserMessage("Take a screenshot"),
        AiMessage(None, [shot, CALLS[1]]),
        ToolExecutionResultMessage("s1", "screenshot", "captured", contents=[ImageContent(data=PNG)]),
        ToolExecutionResultMessage("call_b", "get_time", "noon"),
    ]
    specs = [ToolSpecification("screenshot", None, {"type": "object", "properties": {}}), TIME]
    async with model_for(server) as model:
        assert (await model.chat(ChatRequest(history, specs))).text == "It is a chart."
    last = server.requests[0].json["contents"][-1]
    assert last["role"] == "user"
    kinds = [next(iter(part)) for part in last["parts"]]
    assert kinds == ["functionResponse", "functionResponse", "text", "inlineData"]
    assert last["parts"][0]["functionResponse"]["response"]["result"] == "captured"
    assert "screenshot (call s1)" in last["parts"][2]["text"]


async def test_gemini_3_takes_a_tool_picture_inside_the_function_response(server: FakeGeminiServer) -> None:
    server.add("It is a chart.")
    shot = ToolExecutionRequest("s1", "screenshot", "{}")
    history = [
        UserMessage("Take a screenshot"),
        AiMessage(None, [shot]),
        ToolExecutionResultMessage("s1", "screenshot", "captured", contents=[ImageContent(data=PNG)]),
    ]
    specs = [ToolSpecification("screenshot", None, {"type": "object", "properties": {}})]
    async with GeminiChatModel("gemini-3-pro-preview", base_url=server.base_url, api_key=KEY) as model:
        assert model.media_in_tool_results
        assert (await model.chat(ChatRequest(history, specs))).text == "It is a chart."
    last = server.requests[0].json["contents"][-1]
    assert last["parts"] == [
        {
            "functionResponse": {
                "id": "s1",
                "name": "screenshot",
                "response": {"result": "captured"},
                "parts": [{"inlineData": {"mimeType": "image/png", "data": ImageContent(data=PNG).base64}}],
            }
        }
    ]
