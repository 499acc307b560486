"""`FakeGeminiServer` checked against Google's official `google-genai` client: if the SDK reads the fake as it
reads the real API (and the fake accepts what the SDK sends), tests that use the fake test the real protocol.

The SDK's synchronous client is used: its async one runs on aiohttp when that is installed, which needs
asyncio; the wire format is the same either way.
"""

from __future__ import annotations

import base64
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
    ToolExecutionResultMessage,
    ToolSpecification,
    UserMessage,
)
from agentloop.models import GeminiChatModel, ResponseComplete
from agentloop.testing import FakeGeminiServer
from agentloop.testing._fake_gemini import signature_of

genai = pytest.importorskip("google.genai")
types = pytest.importorskip("google.genai.types")
errors = pytest.importorskip("google.genai.errors")

MODEL = "gemini-2.5-flash"
WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a given location",
    "parameters_json_schema": {
        "type": "object",
        "properties": {"location": {"type": "string"}},
        "required": ["location"],
    },
}
TIME = {"name": "get_time", "parameters_json_schema": {"type": "object", "properties": {}}}
CALLS = [
    ToolExecutionRequest("call_1", "get_weather", '{"location": "Paris", "unit": "celsius"}'),
    ToolExecutionRequest("call_2", "get_time", "{}"),
]


@pytest.fixture
def server() -> Iterator[FakeGeminiServer]:
    with FakeGeminiServer() as fake:
        yield fake


_clients: list[Any] = []


def client_for(server: FakeGeminiServer) -> Any:
    options = types.HttpOptions(base_url=server.base_url, api_version="v1beta")
    client = genai.Client(api_key="test-key", http_options=options)
    _clients.append(client)  # the SDK closes its connection when the client is garbage-collected
    return client


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _clients:
        _clients.pop().close()


def config(**options: Any) -> Any:
    return types.GenerateContentConfig(
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True), **options
    )


def tools() -> list[Any]:
    return [
        types.Tool(
            function_declarations=[types.FunctionDeclaration(**WEATHER), types.FunctionDeclaration(**TIME)]
        )
    ]


def test_streamed_text_and_usage(server: FakeGeminiServer) -> None:
    text = "Hello! I am a fake Gemini, streaming a few words at a time."
    server.add(ChatResponse(AiMessage(text), TokenUsage(25, 14), FinishReason.STOP))
    chunks = list(client_for(server).models.generate_content_stream(model=MODEL, contents="Hello"))
    assert len(chunks) > 3
    assert "".join(chunk.text or "" for chunk in chunks) == text
    last = chunks[-1]
    assert last.candidates[0].finish_reason == types.FinishReason.STOP
    assert last.usage_metadata.prompt_token_count == 25
    assert last.usage_metadata.candidates_token_count == 14
    assert last.model_version == MODEL
    request = server.requests[0]
    assert request.path == f"/v1beta/models/{MODEL}:streamGenerateContent"
    assert request.query.get("alt") == "sse"
    assert request.headers["x-goog-api-key"] == "test-key"


def test_streamed_function_calls_thoughts_and_signature(server: FakeGeminiServer) -> None:
    usage = TokenUsage(40, 30, cache_read_tokens=32, reasoning_tokens=12)
    server.add(ChatResponse(AiMessage("Checking.", CALLS, thinking="Two tools."), usage))
    chunks = list(
        client_for(server).models.generate_content_stream(
            model=MODEL, contents="Weather and time?", config=config(tools=tools())
        )
    )
    parts = [part for chunk in chunks for part in chunk.candidates[0].content.parts]
    thoughts = [p.text for p in parts if p.thought]
    assert "".join(thoughts) == "Two tools."
    calls = [p.function_call for p in parts if p.function_call is not None]
    assert [(c.id, c.name, c.args) for c in calls] == [
        ("call_1", "get_weather", {"location": "Paris", "unit": "celsius"}),
        ("call_2", "get_time", {}),
    ]
    signed = [p for p in parts if p.function_call is not None and p.thought_signature]
    assert len(signed) == 1 and signed[0].function_call.name == "get_weather"
    assert isinstance(signed[0].thought_signature, bytes)  # the SDK decodes the base64
    metadata = chunks[-1].usage_metadata
    assert (metadata.candidates_token_count, metadata.thoughts_token_count) == (18, 12)
    assert metadata.cached_content_token_count == 32


def test_the_sdk_tool_loop_is_accepted_and_a_lost_signature_refused(server: FakeGeminiServer) -> None:
    server.add(AiMessage(None, CALLS[:1]))
    server.add("It is 18°C in Paris.")
    server.add("unreachable")
    client = client_for(server)
    first = client.models.generate_content(model=MODEL, contents="Weather?", config=config(tools=tools()))
    model_turn = first.candidates[0].content
    answer = types.Part.from_function_response(name="get_weather", response={"result": "18°C"})
    answer.function_response.id = "call_1"
    contents = [
        types.Content(role="user", parts=[types.Part(text="Weather?")]),
        model_turn,
        types.Content(role="user", parts=[answer]),
    ]
    second = client.models.generate_content(model=MODEL, contents=contents, config=config(tools=tools()))
    assert second.text == "It is 18°C in Paris."
    sent = server.requests[1].json["contents"][1]["parts"][0]
    expected = base64.b64decode(signature_of("get_weather", json.loads(CALLS[0].arguments)))
    assert base64.urlsafe_b64decode(sent["thoughtSignature"]) == expected  # the SDK sends URL-safe base64
    model_turn.parts[0].thought_signature = None  # what clients that lose it send
    with pytest.raises(errors.ClientError) as caught:
        client.models.generate_content(model=MODEL, contents=contents, config=config(tools=tools()))
    assert caught.value.code == 400
    assert "missing a thought_signature" in (caught.value.message or "")


def test_structured_output_request_is_accepted(server: FakeGeminiServer) -> None:
    server.add('{"city": "Paris"}')
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    response = client_for(server).models.generate_content(
        model=MODEL,
        contents="City as JSON",
        config=types.GenerateContentConfig(
            response_mime_type="application/json", response_json_schema=schema
        ),
    )
    assert json.loads(response.text) == {"city": "Paris"}
    assert server.requests[0].json["generationConfig"]["responseJsonSchema"] == schema


@pytest.mark.parametrize(
    ("status", "sdk_error", "kind"),
    [
        (400, "ClientError", "INVALID_ARGUMENT"),
        (403, "ClientError", "PERMISSION_DENIED"),
        (404, "ClientError", "NOT_FOUND"),
        (429, "ClientError", "RESOURCE_EXHAUSTED"),
        (500, "ServerError", "INTERNAL"),
    ],
)
def test_error_bodies(server: FakeGeminiServer, status: int, sdk_error: str, kind: str) -> None:
    server.add(FakeGeminiServer.error(status, f"about {status}", retry_delay=0.01 if status == 429 else None))
    with pytest.raises(getattr(errors, sdk_error)) as caught:
        client_for(server).models.generate_content(model=MODEL, contents="Hello")
    error = caught.value
    assert error.code == status
    assert error.message == f"about {status}"
    assert error.status == kind


def test_a_blocked_prompt_is_read_as_blocked(server: FakeGeminiServer) -> None:
    server.add(FakeGeminiServer.blocked("SAFETY"))
    chunks = list(client_for(server).models.generate_content_stream(model=MODEL, contents="Hello"))
    assert chunks[0].prompt_feedback.block_reason == types.BlockedReason.SAFETY
    assert not chunks[0].candidates


def test_the_sdk_and_agentloop_read_the_same_stream_alike(server: FakeGeminiServer) -> None:
    scripted = ChatResponse(
        AiMessage("Checking both.", CALLS, thinking="Both at once."),
        TokenUsage(33, 21, reasoning_tokens=5),
        FinishReason.TOOL_EXECUTION,
    )
    server.add(scripted)
    server.add(scripted)
    chunks = list(
        client_for(server).models.generate_content_stream(
            model=MODEL, contents="Hello", config=config(tools=tools())
        )
    )
    parts = [part for chunk in chunks for part in chunk.candidates[0].content.parts]
    specs = [
        ToolSpecification(t["name"], t.get("description"), t["parameters_json_schema"])
        for t in (WEATHER, TIME)
    ]

    async def ours() -> ChatResponse:
        async with GeminiChatModel(MODEL, base_url=server.base_url, api_key="test-key") as model:
            events = [e async for e in model.stream(ChatRequest([UserMessage("Hello")], specs))]
        assert isinstance(events[-1], ResponseComplete)
        return events[-1].response

    response = anyio.run(ours)
    sdk_calls = [p.function_call for p in parts if p.function_call is not None]
    assert response.text == "".join(p.text or "" for p in parts if not p.thought)
    assert response.ai_message.thinking == "".join(p.text or "" for p in parts if p.thought)
    assert [(c.id, c.name, json.loads(c.arguments)) for c in response.ai_message.tool_execution_requests] == [
        (c.id, c.name, c.args) for c in sdk_calls
    ]
    metadata = chunks[-1].usage_metadata
    assert response.token_usage == TokenUsage(
        metadata.prompt_token_count,
        metadata.candidates_token_count + metadata.thoughts_token_count,
        reasoning_tokens=metadata.thoughts_token_count,
    )
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert response.finish_reason is FinishReason.TOOL_EXECUTION


def test_the_sdk_and_agentloop_send_a_tool_picture_alike(server: FakeGeminiServer) -> None:
    """Gemini 3's multimodal function response: the same JSON from the SDK and from agentloop."""
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
    server.add("A chart.")
    server.add("A chart.")
    call = types.Part(function_call=types.FunctionCall(id="s1", name="screenshot", args={}))
    call.thought_signature = base64.b64decode(signature_of("screenshot", {}))
    answer = types.Part(
        function_response=types.FunctionResponse(
            id="s1",
            name="screenshot",
            response={"result": "captured"},
            parts=[
                types.FunctionResponsePart(
                    inline_data=types.FunctionResponseBlob(mime_type="image/png", data=png)
                )
            ],
        )
    )
    contents = [
        types.Content(role="user", parts=[types.Part(text="Take a screenshot")]),
        types.Content(role="model", parts=[call]),
        types.Content(role="user", parts=[answer]),
    ]
    declaration = types.FunctionDeclaration(
        name="screenshot", parameters_json_schema={"type": "object", "properties": {}}
    )
    client_for(server).models.generate_content(
        model="gemini-3-pro-preview",
        contents=contents,
        config=config(tools=[types.Tool(function_declarations=[declaration])]),
    )

    async def ours() -> None:
        history = [
            UserMessage("Take a screenshot"),
            AiMessage(
                None,
                [ToolExecutionRequest("s1", "screenshot", "{}")],
                provider_state={"gemini": {"signatures": {"s1": signature_of("screenshot", {})}}},
            ),
            ToolExecutionResultMessage("s1", "screenshot", "captured", contents=[ImageContent(data=png)]),
        ]
        specs = [ToolSpecification("screenshot", None, {"type": "object", "properties": {}})]
        async with GeminiChatModel(
            "gemini-3-pro-preview", base_url=server.base_url, api_key="test-key"
        ) as model:
            await model.chat(ChatRequest(history, specs))

    anyio.run(ours)
    theirs, mine = (r.json["contents"][-1]["parts"][0]["functionResponse"] for r in server.requests)
    # The SDK writes these nested parts with proto field names (inline_data, mime_type), which Google's JSON
    # takes as well as the camelCase ones, and bytes in URL-safe base64: the same request.
    [part] = theirs.pop("parts")
    blob = part["inline_data"]
    data = base64.b64encode(base64.urlsafe_b64decode(blob["data"])).decode()
    assert [{"inlineData": {"mimeType": blob["mime_type"], "data": data}}] == mine.pop("parts")
    assert mine == theirs
