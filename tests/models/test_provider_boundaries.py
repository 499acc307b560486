"""What crosses the provider boundary, over real sockets with the fake servers, on both backends:

* text with lone surrogates (tool results, user and system messages, tool descriptions, parameters) is
  repaired (U+FFFD) so every request encodes, and memory stays sendable;
* nothing but an `AgentLoopError` leaves a provider (unencodable parameters, closed models and clients,
  transports that raise anything);
* empty user messages are never dropped (Anthropic: a clear error; OpenAI: sent as they are);
* an error body is recognised whatever content type it came with, streaming or not.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from agentloop import (
    Agent,
    AgentLoopError,
    AiMessage,
    BadRequestError,
    ChatRequest,
    IllegalConfigurationError,
    MessageWindowChatMemory,
    ModelError,
    RateLimitError,
    ServerError,
    SystemMessage,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolSpecification,
    UserMessage,
    tool,
)
from agentloop.models import AnthropicChatModel, OpenAIChatModel, ResponseComplete
from agentloop.testing import FakeAnthropicServer, FakeOpenAIServer, Reply

PROVIDERS = ("openai", "anthropic")
MODES = ("chat", "stream")
LISTING = os.fsdecode(b"caf\xe9.txt")  # what os.listdir gives for a Latin-1 file name: 'caf\udce9.txt'
REPAIRED = "caf\ufffd.txt"


@pytest.fixture(scope="module")
def started() -> Iterator[dict[str, Any]]:
    with FakeOpenAIServer() as openai, FakeAnthropicServer() as anthropic:
        yield {"openai": openai, "anthropic": anthropic}


@pytest.fixture
def servers(started: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield started
    for server in started.values():
        assert not server.pending, "a scripted reply was not used"


def _model(provider: str, server: Any, **options: Any) -> Any:
    if provider == "openai":
        return OpenAIChatModel(
            "gpt-4o", base_url=server.base_url, api_key="sk-test", max_retries=0, **options
        )
    return AnthropicChatModel(
        "claude-x", base_url=server.base_url, api_key="sk-ant", max_retries=0, **options
    )


async def _ask(agent: Agent, mode: str, text: str, **kwargs: Any) -> Any:
    if mode == "chat":
        return await agent.chat(text, **kwargs)
    stream = agent.stream(text, **kwargs)
    async for _ in stream:
        pass
    return stream.result


async def _model_call(model: Any, mode: str, request: ChatRequest) -> Any:
    if mode == "chat":
        return await model.chat(request)
    async for event in model.stream(request):
        if isinstance(event, ResponseComplete):
            return event.response
    raise AssertionError("no ResponseComplete")


def _texts(value: Any) -> list[str]:
    """Every string inside a decoded JSON body."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in (*_texts(k), *_texts(v))]
    if isinstance(value, list):
        return [t for item in value for t in _texts(item)]
    return []


# -- lone surrogates --------------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("mode", MODES)
async def test_text_with_lone_surrogates_is_repaired_before_it_is_sent_or_stored(
    provider: str, mode: str, servers: dict[str, Any]
) -> None:
    server = servers[provider]
    before = len(server.requests)

    @tool(description=f"Lists a folder ({LISTING})")
    def list_files() -> list[str]:
        return [LISTING, "notes.txt"]

    server.add(AiMessage(tool_execution_requests=[ToolExecutionRequest("call_1", "list_files", "{}")]))
    server.add("There is a café file.").add("Still there.")
    memory = MessageWindowChatMemory(max_messages=20)
    agent = Agent(
        _model(provider, server), tools=[list_files], memory=memory, system_message=f"Look at {LISTING}"
    )
    result = await _ask(agent, mode, f"What is in {LISTING}?")
    assert result.content == "There is a café file."
    assert REPAIRED in result.tool_executions[0].result
    again = await _ask(agent, mode, "And now?")  # the stored conversation is still sendable
    assert again.content == "Still there."
    sent = [request.json for request in server.requests[before:]]
    assert len(sent) == 3
    texts = [text for body in sent for text in _texts(body)]
    assert any(REPAIRED in text for text in texts)
    assert not any(LISTING in text for text in texts)
    stored = [getattr(m, "text", "") or "" for m in await memory.messages()]
    assert not any(LISTING in text for text in stored) and any(REPAIRED in text for text in stored)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("mode", MODES)
async def test_every_text_field_of_a_request_may_hold_lone_surrogates(
    provider: str, mode: str, servers: dict[str, Any]
) -> None:
    server = servers[provider]
    server.add("ok")
    spec = ToolSpecification(
        "lookup",
        description=f"Finds {LISTING}",
        parameters={"type": "object", "properties": {"name": {"type": "string", "description": LISTING}}},
    )
    request = ChatRequest(
        [
            SystemMessage(f"system {LISTING}"),
            UserMessage(f"user {LISTING}"),
            AiMessage(f"ai {LISTING}", [ToolExecutionRequest("c1", "lookup", f'{{"name": "{LISTING}"}}')]),
            ToolExecutionResultMessage("c1", "lookup", f"result {LISTING}"),
            UserMessage("\ud83d\ude00 joined into one character"),
        ],
        tool_specifications=[spec],
        parameters={"stop": [LISTING]} if provider == "openai" else {"metadata": {"user_id": LISTING}},
    )
    response = await _model_call(_model(provider, server), mode, request)
    assert response.text == "ok"
    body = server.requests[-1].json
    texts = _texts(body)
    assert not any(LISTING in text for text in texts)
    assert sum(REPAIRED in text for text in texts) >= 6
    assert any("\U0001f600 joined" in text for text in texts)


# -- nothing but AgentLoopError leaves a provider ------------------------------------------------------------


class _Exploding(httpx2.AsyncBaseTransport):
    """A transport (a user's client may bring any) that fails with an exception httpx does not define."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        raise ValueError("the proxy configuration is broken")


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("mode", MODES)
async def test_only_agentloop_errors_leave_a_provider(
    provider: str, mode: str, servers: dict[str, Any]
) -> None:
    server = servers[provider]
    request = ChatRequest([UserMessage("hi")])
    # A parameter JSON cannot carry.
    model = _model(provider, server)
    with pytest.raises(IllegalConfigurationError, match="cannot be sent as JSON"):
        await _model_call(model, mode, ChatRequest([UserMessage("hi")], parameters={"seed": object()}))
    # Something that is not a message.
    with pytest.raises(IllegalConfigurationError, match="not a chat message"):
        await _model_call(model, mode, ChatRequest(["hi"]))  # type: ignore[list-item]
    # A model used after aclose().
    await model.aclose()
    with pytest.raises(IllegalConfigurationError, match="closed"):
        await _model_call(model, mode, request)
    # A user's client whose transport raises something else; and the same client once closed.
    async with httpx2.AsyncClient(transport=_Exploding()) as client:
        broken = _model(provider, server, http_client=client)
        with pytest.raises(ModelError, match=r"unexpected ValueError.*proxy configuration is broken") as info:
            await _model_call(broken, mode, request)
        assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(AgentLoopError):
        await _model_call(broken, mode, request)


# -- empty user messages ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("text", ["", "  \n "])
async def test_anthropic_refuses_an_empty_user_message_instead_of_dropping_it(
    mode: str, text: str, servers: dict[str, Any]
) -> None:
    server = servers["anthropic"]
    before = len(server.requests)
    server.add("The first answer.")
    memory = MessageWindowChatMemory(max_messages=10)
    agent = Agent(_model("anthropic", server), memory=memory)
    await _ask(agent, mode, "Hello")
    with pytest.raises(
        BadRequestError, match=r"no text \(empty or only whitespace\).*continue its previous answer"
    ):
        await _ask(agent, mode, text)
    assert len(server.requests) == before + 1  # nothing was sent for the empty message
    assert [type(m).__name__ for m in await memory.messages()] == ["UserMessage", "AiMessage"]


@pytest.mark.parametrize("mode", MODES)
async def test_openai_sends_an_empty_user_message_as_it_is(mode: str, servers: dict[str, Any]) -> None:
    server = servers["openai"]
    server.add("Go on?")
    result = await _ask(Agent(_model("openai", server)), mode, "")
    assert result.content == "Go on?"
    assert server.requests[-1].json["messages"][-1] == {"role": "user", "content": ""}


@pytest.mark.parametrize("mode", MODES)
async def test_anthropic_leaves_out_an_empty_answer_and_keeps_both_user_turns(
    mode: str, servers: dict[str, Any]
) -> None:
    server = servers["anthropic"]
    server.add("Now I answer.")
    request = ChatRequest([UserMessage("first"), AiMessage(""), UserMessage("second")])
    response = await _model_call(_model("anthropic", server), mode, request)
    assert response.text == "Now I answer."
    [turn] = server.requests[-1].json["messages"]  # the fake checks the request as the API does
    assert [block["text"] for block in turn["content"]] == ["first", "second"]


# -- error bodies in any content type ------------------------------------------------------------------------

_OPENAI_ERROR = b'{"error": {"message": "Rate limit reached for gpt-4o", "type": "rate_limit_exceeded"}}'
_ANTHROPIC_ERROR = b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded now"}}'
_EXPECTED = {
    "openai": (RateLimitError, "Rate limit reached for gpt-4o"),
    "anthropic": (ServerError, "Overloaded now"),
}


def _error_body(provider: str) -> bytes:
    return _OPENAI_ERROR if provider == "openai" else _ANTHROPIC_ERROR


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("content_type", ["text/event-stream", "text/plain", "application/octet-stream"])
@pytest.mark.parametrize("framing", ["json", "sse"])
async def test_an_error_body_is_recognised_whatever_its_content_type(
    provider: str, mode: str, content_type: str, framing: str, servers: dict[str, Any]
) -> None:
    server = servers[provider]
    body = _error_body(provider)
    if framing == "sse":
        body = b"event: error\ndata: " + body + b"\n\n"
    server.add(Reply.stream([body], status=200, content_type=content_type))
    expected, message = _EXPECTED[provider]
    with pytest.raises(expected, match=message):
        await _model_call(_model(provider, server), mode, ChatRequest([UserMessage("hi")]))


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("mode", MODES)
async def test_an_error_status_with_an_event_stream_body_keeps_the_providers_message(
    provider: str, mode: str, servers: dict[str, Any]
) -> None:
    server = servers[provider]
    body = b"event: error\ndata: " + _error_body(provider) + b"\n\n"
    server.add(Reply.stream([body], status=400, content_type="text/event-stream"))
    with pytest.raises(BadRequestError) as info:
        await _model_call(_model(provider, server), mode, ChatRequest([UserMessage("hi")]))
    _, message = _EXPECTED[provider]
    assert info.value.provider_message == message


def test_stored_documents_repair_lone_surrogates_too() -> None:
    """The storage format (what persistent stores write) is a boundary like a provider's request."""
    from agentloop._values._codec import decode, encode

    messages = [
        UserMessage(f"list {LISTING}"),
        AiMessage(tool_execution_requests=[ToolExecutionRequest("c1", "ls", f'{{"path": "{LISTING}"}}')]),
        ToolExecutionResultMessage("c1", "ls", LISTING),
    ]
    restored = decode(encode(messages))
    assert restored[0].text == f"list {REPAIRED}" and restored[2].text == REPAIRED
    assert restored[1].tool_execution_requests[0].arguments == f'{{"path": "{REPAIRED}"}}'
