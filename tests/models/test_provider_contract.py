"""The contract every HTTP `ChatModel` keeps, checked the same way for all five providers (OpenAI Chat
Completions, OpenAI Responses, Anthropic, Gemini, Bedrock) against their fake servers, over real sockets, on
both anyio backends:

* streamed text arrives as `TextDelta` pieces in order and the stream ends with exactly one
  `ResponseComplete`; `chat()` gives the same answer, usage and finish reason (STOP, LENGTH, TOOL_EXECUTION);
* parallel tool calls stream as `ToolCallDelta`s (id and name on a call's first piece only), each followed by
  its `ToolCallComplete` before the next call starts, and come back whole;
* a tool result round reaches the server in the provider's wire shape, each result under its call's id;
* error statuses map to the public error types, with the provider's message, type and request id; the key
  never shows in an error, a log line or the model's repr;
* 429 and 5xx are retried (a Retry-After is honoured, one beyond the limit is not waited for), client errors
  are not, and a stream is retried only until its first event reached the consumer (a failure it reports
  midway is raised after the text before it);
* leaving or cancelling a stream closes its connection; finished calls reuse one kept-alive connection; a
  closed model refuses work; a body held open after a complete answer does not hold it back; the total
  timeout bounds a stream; a user's HTTP client is used and left open;
* a tool choice that cannot work is refused before anything is sent.

Provider-specific behaviour (wire shapes, thinking, signatures, credentials) stays in each provider's file.
"""

from __future__ import annotations

import importlib.util
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import msgspec
import pytest

from agentloop import (
    AiMessage,
    AuthenticationError,
    BadRequestError,
    ChatRequest,
    ChatResponse,
    FinishReason,
    IllegalConfigurationError,
    ModelConnectionError,
    ModelError,
    ModelTimeoutError,
    NotFoundError,
    RateLimitError,
    ServerError,
    TokenUsage,
    ToolChoice,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from agentloop.models import (
    AnthropicChatModel,
    ChatModel,
    GeminiChatModel,
    ModelEvent,
    OpenAIChatModel,
    OpenAIResponsesModel,
    TextDelta,
    ToolCallComplete,
    ToolCallDelta,
)
from agentloop.models import _unknown as unknown
from agentloop.models._http import RetryPolicy, Timeouts
from agentloop.testing import (
    FakeAnthropicServer,
    FakeBedrockServer,
    FakeGeminiServer,
    FakeOpenAIResponsesServer,
    FakeOpenAIServer,
    FakeServer,
    RecordedRequest,
    Reply,
)
from agentloop.testing._fake_server import encode_sse
from tests.provider_helpers import TIME, WEATHER, bedrock_model, collect, final

OPENAI_KEY = "sk-proj-SECRETSECRET-0123456789abcdefXYZ"
ANTHROPIC_KEY = "sk-ant-api03-Zm9vYmFyYmF6cXV4LXRlc3Qta2V5LW5vdC1yZWFs-AAAA"
GEMINI_KEY = "AIzaSyD-fake-gemini-key-for-agentloop-tests-9Q7Z"
BEDROCK_SECRET = "fake/secret/key/for/agentloop/tests/0000000"
BEDROCK_MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"
FAST = RetryPolicy(initial_delay=0.01, max_delay=0.02)
QUESTION = ChatRequest([UserMessage("What is the weather like in Paris?")])
TEXT = "Paris is sunny and mild today, around twenty degrees."
CALLS = (
    ToolExecutionRequest("call_a", "get_weather", '{"location": "Paris, France"}'),
    ToolExecutionRequest("call_b", "get_time", "{}"),
)


@dataclass(frozen=True)
class Provider:
    """How the contract drives one provider: its fake, its model, its error answers, its wire shape."""

    name: str
    reported_as: str
    """What the provider's errors say in `error.provider` (and first thing in their message)."""
    secret: str
    model: str
    """The model name the model is built with, which answers report back."""
    id_prefix: str | None
    """How the provider's response ids begin (None: it gives none, or none of a fixed form)."""
    start: Callable[[], FakeServer]
    connect: Callable[..., ChatModel]
    """`connect(server, **options)`: the model pointed at `server`."""
    error: Callable[..., Reply]
    """`error(status, message, error_type, headers=())`: an error answer in the provider's format."""
    request_id_header: str | None
    streamed: Callable[[RecordedRequest], bool]
    """Whether a recorded request asked for a stream."""
    tool_results: Callable[[Any], list[tuple[str, str]]]
    """(call id, result text) of every tool result in a recorded request body."""
    pieces_arguments: bool
    """Whether a call's arguments stream in several pieces (Gemini sends each call whole)."""
    overloaded: Callable[[Any, str], bytes]
    """`overloaded(server, message)`: the event by which a stream reports, midway, that the server failed."""


def _openai_results(body: Any) -> list[tuple[str, str]]:
    return [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]


def _responses_results(body: Any) -> list[tuple[str, str]]:
    return [(i["call_id"], i["output"]) for i in body["input"] if i.get("type") == "function_call_output"]


def _anthropic_results(body: Any) -> list[tuple[str, str]]:
    blocks = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
    return [(b["tool_use_id"], b["content"]) for b in blocks if b["type"] == "tool_result"]


def _gemini_results(body: Any) -> list[tuple[str, str]]:
    parts = [p["functionResponse"] for c in body["contents"] for p in c["parts"] if "functionResponse" in p]
    return [(p["id"], p["response"]["result"]) for p in parts]


def _bedrock_results(body: Any) -> list[tuple[str, str]]:
    blocks = [b["toolResult"] for m in body["messages"] for b in m["content"] if "toolResult" in b]
    return [(b["toolUseId"], b["content"][0]["text"]) for b in blocks]


def _last_chunk(reply: Reply) -> bytes:
    assert reply.chunks is not None
    return reply.chunks[-1]


def _stream_flag(request: RecordedRequest) -> bool:
    return bool(request.json.get("stream"))


def _options(options: dict[str, Any]) -> dict[str, Any]:
    options.setdefault("retry", FAST)
    options.setdefault("max_retries", 0)
    return options


def _bedrock_model(server: Any, **options: Any) -> ChatModel:
    return bedrock_model(server, BEDROCK_MODEL, **_options(options))


PROVIDERS = [
    Provider(
        "openai",
        "openai",
        OPENAI_KEY,
        "gpt-4o-mini",
        "chatcmpl-",
        FakeOpenAIServer,
        lambda server, **options: OpenAIChatModel(
            "gpt-4o-mini", base_url=server.base_url, api_key=OPENAI_KEY, **_options(options)
        ),
        lambda status, message, kind, headers=(): FakeOpenAIServer.error(
            status, message, type=kind, headers=headers
        ),
        "x-request-id",
        _stream_flag,
        _openai_results,
        True,
        lambda server, message: encode_sse({"error": {"message": message, "type": "server_error"}}),
    ),
    Provider(
        "responses",
        "openai",
        OPENAI_KEY,
        "gpt-5-mini",
        "resp_",
        FakeOpenAIResponsesServer,
        lambda server, **options: OpenAIResponsesModel(
            "gpt-5-mini", base_url=server.base_url, api_key=OPENAI_KEY, **_options(options)
        ),
        lambda status, message, kind, headers=(): FakeOpenAIResponsesServer.error(
            status, message, type=kind, headers=headers
        ),
        "x-request-id",
        _stream_flag,
        _responses_results,
        True,
        lambda server, message: _last_chunk(FakeOpenAIResponsesServer.failed(message)),
    ),
    Provider(
        "anthropic",
        "anthropic",
        ANTHROPIC_KEY,
        "claude-test",
        "msg_",
        FakeAnthropicServer,
        lambda server, **options: AnthropicChatModel(
            "claude-test", base_url=server.base_url, api_key=ANTHROPIC_KEY, **_options(options)
        ),
        lambda status, message, kind, headers=(): FakeAnthropicServer.error(
            status, message, type=kind, headers=headers
        ),
        "request-id",
        _stream_flag,
        _anthropic_results,
        True,
        lambda server, message: _last_chunk(server.stream_error("overloaded_error", message)),
    ),
    Provider(
        "gemini",
        "gemini",
        GEMINI_KEY,
        "gemini-2.5-flash",
        None,
        lambda: FakeGeminiServer(api_key=GEMINI_KEY),
        lambda server, **options: GeminiChatModel(
            "gemini-2.5-flash", base_url=server.base_url, api_key=GEMINI_KEY, **_options(options)
        ),
        lambda status, message, kind, headers=(): FakeGeminiServer.error(
            status, message, status_name=kind, headers=headers
        ),
        None,
        lambda request: request.path.endswith(":streamGenerateContent"),
        _gemini_results,
        False,
        lambda server, message: encode_sse(
            {"error": {"code": 503, "message": message, "status": "UNAVAILABLE"}}
        ),
    ),
    pytest.param(
        Provider(
            "bedrock",
            "bedrock",
            BEDROCK_SECRET,
            BEDROCK_MODEL,
            None,
            lambda: FakeBedrockServer(secret_key=BEDROCK_SECRET),
            _bedrock_model,
            lambda status, message, kind, headers=(): FakeBedrockServer.error(
                status, message, type=kind, headers=headers
            ),
            "x-amzn-requestid",
            lambda request: request.path.endswith("/converse-stream"),
            _bedrock_results,
            True,
            lambda server, message: _last_chunk(
                server.stream_exception("modelStreamErrorException", message)
            ),
        ),
        marks=pytest.mark.skipif(
            importlib.util.find_spec("botocore") is None, reason="the bedrock extra is not installed"
        ),
    ),
]


@pytest.fixture(params=PROVIDERS, ids=lambda p: p.name)
def provider(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Provider:
    # No AWS configuration from the machine: Bedrock signs with the fake's credentials only.
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def server(provider: Provider) -> Iterator[Any]:
    with provider.start() as fake:
        yield fake


async def _call(model: ChatModel, request: ChatRequest, streaming: bool) -> ChatResponse:
    return final(await collect(model.stream(request))) if streaming else await model.chat(request)


def _first_text_then(
    server: Any, text: str, then: str, event: bytes = b""
) -> Callable[[RecordedRequest], Reply]:
    """A scripted item: the provider's streamed answer `text` sent up to the piece holding its first word,
    then `"hold"` (the rest never comes, the body is never ended), `"drop"` (the connection is closed) or
    `"fail"` (`event` is sent, and the body ends)."""
    first = text.split()[0].encode()

    def reply(request: RecordedRequest) -> Reply:
        whole = server.render(text, request)
        assert whole.chunks is not None and len(whole.chunks) > 2, "the fake did not stream"
        upto = next(n for n, chunk in enumerate(whole.chunks) if first in chunk) + 1
        if then == "hold":
            return Reply(whole.status, whole.headers, chunks=whole.chunks[:upto], hold_open=True)
        if then == "fail":
            return Reply(whole.status, whole.headers, chunks=(*whole.chunks[:upto], event))
        return whole.with_faults(disconnect_after_chunks=upto)

    return reply


streaming = pytest.mark.parametrize("streaming", [True, False], ids=["stream", "chat"])


# -- answers -------------------------------------------------------------------------------------------------


async def test_text_streams_in_order_and_chat_gives_the_same_answer(provider: Provider, server: Any) -> None:
    scripted = ChatResponse(AiMessage(TEXT), TokenUsage(30, 12), FinishReason.STOP)
    server.add(scripted).add(scripted)
    async with provider.connect(server) as model:
        events = await collect(model.stream(QUESTION))
        whole = await model.chat(QUESTION)
    pieces = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(pieces) > 3 and "".join(pieces) == TEXT
    assert all(isinstance(e, TextDelta) for e in events[:-1])
    streamed = final(events)  # the last event, and the only ResponseComplete
    for response in (streamed, whole):
        assert response.ai_message == AiMessage(TEXT)
        assert response.token_usage is not None
        assert (response.token_usage.input_tokens, response.token_usage.output_tokens) == (30, 12)
        assert response.finish_reason is FinishReason.STOP
        assert response.model == provider.model
        assert provider.id_prefix is None or (response.id or "").startswith(provider.id_prefix)
    assert whole.token_usage == streamed.token_usage
    assert [provider.streamed(r) for r in server.requests] == [True, False]


@streaming
async def test_an_answer_cut_at_the_token_limit_finishes_with_length(
    provider: Provider, server: Any, streaming: bool
) -> None:
    server.add(ChatResponse(AiMessage("Cut sh"), finish_reason=FinishReason.LENGTH))
    async with provider.connect(server) as model:
        response = await _call(model, QUESTION, streaming)
    assert (response.text, response.finish_reason) == ("Cut sh", FinishReason.LENGTH)


async def test_parallel_tool_calls_stream_and_come_back_whole(provider: Provider, server: Any) -> None:
    server.add(AiMessage("Checking both.", CALLS)).add(AiMessage("Checking both.", CALLS))
    request = ChatRequest([UserMessage("Weather and time in Paris?")], [WEATHER, TIME])
    async with provider.connect(server) as model:
        events = await collect(model.stream(request))
        whole = await model.chat(request)
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    starts = [d for d in deltas if d.id is not None]
    assert [(d.index, d.id, d.name) for d in starts] == [
        (0, "call_a", "get_weather"),
        (1, "call_b", "get_time"),
    ]
    assert all(d.name is None for d in deltas if d.id is None)  # id and name come with the first piece only
    for index, call in enumerate(CALLS):
        pieces = [d.arguments for d in deltas if d.index == index]
        assert msgspec.json.decode("".join(pieces) or "{}") == msgspec.json.decode(call.arguments)
    if provider.pieces_arguments:
        assert len([d for d in deltas if d.index == 0 and d.arguments]) > 1
    completes = [e for e in events if isinstance(e, ToolCallComplete)]
    assert [(c.index, c.request.id, c.request.name) for c in completes] == [
        (0, "call_a", "get_weather"),
        (1, "call_b", "get_time"),
    ]
    for complete in completes:  # each right after its call's last piece, before the next call starts
        previous = events[events.index(complete) - 1]
        assert isinstance(previous, ToolCallDelta) and previous.index == complete.index
    assert events.index(completes[0]) < events.index(starts[1])
    assert events.index(completes[1]) < len(events) - 1  # and all before the end
    assert [c.request for c in completes] == list(final(events).ai_message.tool_execution_requests)
    for response in (final(events), whole):
        calls = response.ai_message.tool_execution_requests
        assert response.text == "Checking both."
        assert [(c.id, c.name) for c in calls] == [("call_a", "get_weather"), ("call_b", "get_time")]
        assert [msgspec.json.decode(c.arguments) for c in calls] == [{"location": "Paris, France"}, {}]
        assert response.finish_reason is FinishReason.TOOL_EXECUTION


@streaming
async def test_tool_results_are_sent_under_their_calls_ids(
    provider: Provider, server: Any, streaming: bool
) -> None:
    server.add("Sunny, and it is noon.")
    history = [
        UserMessage("Weather and time in Paris?"),
        AiMessage(None, CALLS),
        ToolExecutionResultMessage("call_a", "get_weather", "18°C"),
        ToolExecutionResultMessage("call_b", "get_time", "noon"),
    ]
    async with provider.connect(server) as model:
        response = await _call(model, ChatRequest(history, [WEATHER, TIME]), streaming)
    assert response.text == "Sunny, and it is noon."  # the fake checks the round as the API does
    assert provider.tool_results(server.requests[0].json) == [("call_a", "18°C"), ("call_b", "noon")]


# -- errors --------------------------------------------------------------------------------------------------

ERRORS = [
    (400, BadRequestError, "invalid_argument"),
    (401, AuthenticationError, "unauthenticated"),
    (403, AuthenticationError, "permission_denied"),
    (404, NotFoundError, "not_found"),
    (429, RateLimitError, "rate_limited"),
    (500, ServerError, "internal"),
    (503, ServerError, "unavailable"),
]


@pytest.mark.parametrize(("status", "cls", "kind"), ERRORS, ids=[str(e[0]) for e in ERRORS])
@streaming
async def test_error_statuses_map_to_public_errors_that_never_show_the_key(
    provider: Provider,
    server: Any,
    status: int,
    cls: type[ModelError],
    kind: str,
    streaming: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    message = f"Problem {status}, the key {provider.secret} was used"
    reply = provider.error(status, message, kind)
    server.add(reply)
    model = provider.connect(server)
    async with model:
        with pytest.raises(cls) as caught:
            await _call(model, QUESTION, streaming)
    error = caught.value
    assert type(error) is cls
    assert (error.status_code, error.provider, error.error_type) == (status, provider.reported_as, kind)
    assert str(error).startswith(f"{provider.reported_as}: ")
    assert f"Problem {status}" in str(error) and f"Problem {status}" in (error.provider_message or "")
    if provider.request_id_header:
        assert error.request_id == reply.header(provider.request_id_header)
        assert (error.request_id or "") in str(error)
    assert "****" + provider.secret[-4:] in str(error)  # masked, yet recognisable
    for text in (str(error), repr(error), error.provider_message or "", caplog.text, repr(model)):
        assert provider.secret not in text and provider.secret[:-4] not in text
    assert len(server.requests) == 1


@pytest.mark.parametrize("status", [400, 401, 403, 404])
async def test_client_errors_are_not_retried(provider: Provider, server: Any, status: int) -> None:
    server.add(provider.error(status, "no", "refused")).add("unused")
    async with provider.connect(server, max_retries=2) as model:
        with pytest.raises(ModelError):
            await model.chat(QUESTION)
    assert len(server.requests) == 1


@streaming
async def test_429_and_5xx_are_retried_until_max_retries(
    provider: Provider, server: Any, streaming: bool
) -> None:
    server.add(provider.error(429, "Slow down", "rate_limited"))
    server.add(provider.error(503, "Busy", "unavailable"))
    server.add("finally")
    server.add(provider.error(500, "Broken", "internal")).add(provider.error(502, "Still broken", "internal"))
    async with provider.connect(server, max_retries=2) as model:
        assert (await _call(model, QUESTION, streaming)).text == "finally"
    async with provider.connect(server, max_retries=1) as model:
        with pytest.raises(ServerError, match="Still broken"):  # the last error, once retries run out
            await _call(model, QUESTION, streaming)
    assert len(server.requests) == 5


@streaming
async def test_retry_after_is_honoured_and_one_beyond_the_limit_is_not_waited_for(
    provider: Provider, server: Any, streaming: bool
) -> None:
    server.add(provider.error(429, "Slow down", "rate_limited", (("retry-after", "0.3"),))).add("waited")
    server.add(provider.error(429, "Come back tomorrow", "rate_limited", (("retry-after", "86400"),)))
    async with provider.connect(server, max_retries=1) as model:
        started = time.monotonic()
        assert (await _call(model, QUESTION, streaming)).text == "waited"
        assert time.monotonic() - started >= 0.3  # the backoff alone would be 0.01 s
        with pytest.raises(RateLimitError) as caught:
            await _call(model, QUESTION, streaming)
    assert caught.value.retry_after == 86400
    assert len(server.requests) == 3
    server.add(provider.error(429, "Never", "rate_limited", (("retry-after", "inf"),)))
    async with provider.connect(server, max_retries=3) as model:
        with pytest.raises(RateLimitError) as caught:  # an endless wait is over any limit: no retry
            await _call(model, QUESTION, streaming)
    assert caught.value.retry_after == float("inf") and len(server.requests) == 4


FUNNEL = [
    ("401", AuthenticationError),
    ("403", AuthenticationError),
    ("429 retry-after", RateLimitError),
    ("500", ServerError),
    ("529 overloaded", ServerError),
    ("midstream event", ServerError),
    ("dropped connection", ModelConnectionError),
]


@pytest.mark.parametrize(("failure", "cls"), FUNNEL, ids=[f[0] for f in FUNNEL])
async def test_one_funnel_gives_every_provider_the_same_error_for_the_same_failure(
    provider: Provider, server: Any, failure: str, cls: type[ModelError], caplog: pytest.LogCaptureFixture
) -> None:
    """All five providers turn a failure into an agentloop error in one place (agentloop/models/_http/
    _errors.py): the same failure gives the same class, the provider first in the message, no key in it."""
    caplog.set_level(logging.DEBUG)
    message = f"Failure ({failure}), the key {provider.secret} was in it"
    status = int(failure.split()[0]) if failure[0].isdigit() else None
    if status is not None:
        headers = (("retry-after", "7"),) if status == 429 else ()
        kind = "overloaded_error" if status == 529 else "failed"
        server.add(provider.error(status, message, kind, headers))
    elif failure == "midstream event":
        server.add(_first_text_then(server, TEXT, "fail", provider.overloaded(server, message)))
    else:
        server.add(_first_text_then(server, TEXT, "drop"))
    received: list[ModelEvent] = []
    async with provider.connect(server) as model:
        with pytest.raises(ModelError) as caught:
            await collect(model.stream(QUESTION), into=received)
    error = caught.value
    assert type(error) is cls, f"{provider.name}: {failure} gave {type(error).__name__}: {error}"
    assert error.provider == provider.reported_as
    assert str(error).startswith(f"{provider.reported_as}: ")
    if status is not None:
        assert error.status_code == status and "Failure" in (error.provider_message or "")
    if status == 429:
        assert error.retry_after == 7
    if failure == "midstream event":
        assert received and "Failure" in str(error)
    if failure == "dropped connection":
        assert "the stream broke before it was complete" in str(error)
    for text in (str(error), repr(error), error.provider_message or "", caplog.text):
        assert provider.secret not in text and provider.secret[:-4] not in text
    assert len(server.requests) == 1


# -- streams and connections ---------------------------------------------------------------------------------


async def test_a_stream_lost_before_its_first_event_is_retried(provider: Provider, server: Any) -> None:
    server.add(Reply.connection_reset())
    server.add(TEXT, disconnect_after_chunks=0)  # headers, then nothing
    server.add("recovered")
    async with provider.connect(server, max_retries=2) as model:
        assert final(await collect(model.stream(QUESTION))).text == "recovered"
    assert len(server.requests) == 3


async def test_no_retry_once_the_first_event_reached_the_consumer(provider: Provider, server: Any) -> None:
    server.add(_first_text_then(server, TEXT, "drop"))
    server.add("must not be requested")
    received: list[ModelEvent] = []
    async with provider.connect(server, max_retries=3) as model:
        with pytest.raises(ModelConnectionError, match="the stream broke before it was complete"):
            await collect(model.stream(QUESTION), into=received)
    assert received and all(isinstance(e, TextDelta) for e in received)
    assert TEXT.startswith("".join(e.text for e in received if isinstance(e, TextDelta)))
    assert len(server.requests) == 1 and server.pending == 1


async def test_a_failure_reported_midway_raises_after_the_text_before_it_and_is_not_retried(
    provider: Provider, server: Any
) -> None:
    server.add(_first_text_then(server, TEXT, "fail", provider.overloaded(server, "Overloaded right now")))
    server.add("must not be requested")
    received: list[ModelEvent] = []
    async with provider.connect(server, max_retries=3) as model:
        with pytest.raises(ServerError, match="Overloaded right now") as caught:
            await collect(model.stream(QUESTION), into=received)
    assert caught.value.provider == provider.reported_as
    assert received and all(isinstance(e, TextDelta) for e in received)
    assert TEXT.startswith("".join(e.text for e in received if isinstance(e, TextDelta)))
    assert len(server.requests) == 1 and server.pending == 1


@pytest.mark.parametrize("how", ["aclose", "cancel"])
async def test_leaving_a_stream_closes_its_connection_and_the_model_goes_on(
    provider: Provider, server: Any, how: str
) -> None:
    server.add(_first_text_then(server, TEXT, "hold"))  # never finishes by itself
    async with provider.connect(server) as model:
        stream = model.stream(QUESTION)
        if how == "aclose":
            first = await stream.__anext__()
            await stream.aclose()  # type: ignore[attr-defined]
        else:
            with anyio.CancelScope() as scope:
                async for first in stream:
                    scope.cancel()  # delivered inside the stream, at its next read
            assert scope.cancelled_caught
        assert isinstance(first, TextDelta) and TEXT.startswith(first.text)
        with anyio.fail_after(5):
            await server.requests[0].wait_disconnected()
        assert not server.requests[0].completed.is_set()
        server.add("again").add("and again")
        assert final(await collect(model.stream(QUESTION))).text == "again"
        assert (await model.chat(QUESTION)).text == "and again"
    assert server.connections_opened == 2  # the dropped one, then one kept alive for both


async def test_finished_calls_reuse_one_kept_alive_connection(provider: Provider, server: Any) -> None:
    for text in ("one", "two", "three", "four"):
        server.add(text)
    async with provider.connect(server) as model:
        assert final(await collect(model.stream(QUESTION))).text == "one"
        assert (await model.chat(QUESTION)).text == "two"
        assert final(await collect(model.stream(QUESTION))).text == "three"
        assert (await model.chat(QUESTION)).text == "four"
    assert server.connections_opened == 1
    assert [r.connection for r in server.requests] == [0, 0, 0, 0]


async def test_a_body_left_open_after_the_answer_does_not_hold_it_back(
    provider: Provider, server: Any
) -> None:
    server.add("one two", hold_open=True)  # the whole answer is sent, the body is never ended
    server.add("three")
    async with provider.connect(server) as model:
        with anyio.fail_after(3):  # the body is held open for an hour
            assert final(await collect(model.stream(QUESTION))).text == "one two"
        assert final(await collect(model.stream(QUESTION))).text == "three"
    assert server.connections_opened == 2  # the held connection was not put back in the pool


async def test_the_total_timeout_bounds_a_stream(provider: Provider, server: Any) -> None:
    server.add(_first_text_then(server, TEXT, "hold"))
    received: list[ModelEvent] = []
    async with provider.connect(server, timeout=Timeouts(total=1.0)) as model:
        with pytest.raises(ModelTimeoutError, match="total timeout of 1s"):
            await collect(model.stream(QUESTION), into=received)
    assert received and TEXT.startswith("".join(e.text for e in received if isinstance(e, TextDelta)))


async def test_a_users_client_is_used_and_left_open(provider: Provider, server: Any) -> None:
    server.add("one").add("two")
    async with httpx2.AsyncClient(headers={"x-from-client": "1"}) as client:
        async with provider.connect(server, http_client=client) as model:
            assert (await model.chat(QUESTION)).text == "one"
        assert not client.is_closed
        async with provider.connect(server, http_client=client) as model:
            assert final(await collect(model.stream(QUESTION))).text == "two"
    assert [r.headers["x-from-client"] for r in server.requests] == ["1", "1"]
    assert server.connections_opened == 1  # one pooled connection served both models


@streaming
async def test_a_tool_choice_that_cannot_work_is_refused_before_sending(
    provider: Provider, server: Any, streaming: bool
) -> None:
    async with provider.connect(server) as model:
        unknown = ChatRequest(QUESTION.messages, [WEATHER], ToolChoice.tool("nope"))
        with pytest.raises(IllegalConfigurationError, match=r"'nope'.*does not offer.*get_weather"):
            await _call(model, unknown, streaming)
        without_tools = ChatRequest(QUESTION.messages, (), ToolChoice.REQUIRED)
        with pytest.raises(IllegalConfigurationError, match="needs at least one tool"):
            await _call(model, without_tools, streaming)
    assert server.requests == []


@streaming
async def test_a_closed_model_refuses_work(provider: Provider, server: Any, streaming: bool) -> None:
    model = provider.connect(server)
    assert isinstance(model, ChatModel)
    await model.aclose()
    with pytest.raises(IllegalConfigurationError, match="closed"):
        await _call(model, QUESTION, streaming)
    assert server.requests == []


# -- what a provider does not know ---------------------------------------------------------------------------
# Each fake's answer, as a newer API would send it: output items, content blocks, parts and streamed events
# of kinds agentloop does not know, with fields of types agentloop's shapes do not expect. The answer must
# come through whole, and each unknown kind be logged once at debug level.


def _json_reply(reply: Reply, change: Callable[[Any], None]) -> Reply:
    body = msgspec.json.decode(reply.body)
    change(body)
    return reply.with_faults(body=msgspec.json.encode(body))


def _insert(reply: Reply, after: bytes, extra: list[bytes]) -> Reply:
    """`extra` chunks inserted after the first chunk holding `after`."""
    assert reply.chunks is not None
    at = next(n for n, chunk in enumerate(reply.chunks) if after in chunk) + 1
    return reply.with_faults(chunks=(*reply.chunks[:at], *extra, *reply.chunks[at:]))


def _newer_openai(server: Any, reply: Reply) -> Reply:
    custom = {"id": "ct_1", "type": "custom", "custom": {"name": "grammar", "input": "x"}}
    if reply.chunks is None:

        def change(body: Any) -> None:
            message = body["choices"][0]["message"]
            message["tool_calls"] = [custom, *(message.get("tool_calls") or [])]
            message["content"] = [{"type": "text", "text": message["content"]}, {"type": "audio", "text": {}}]

        return _json_reply(reply, change)
    extra = [
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 7, **custom}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 7, "custom": {"input": {"y": 1}}}]}}]},
    ]
    return _insert(reply, b"data:", [encode_sse(e) for e in extra])


def _newer_responses(server: Any, reply: Reply) -> Reply:
    search = {"id": "ts_1", "type": "tool_search_call", "arguments": {"query": "weather"}, "status": "done"}
    if reply.chunks is None:

        def change(body: Any) -> None:
            for item in body["output"]:
                if item["type"] == "message":
                    item["content"].append({"type": "output_audio", "text": {"rich": True}})
            body["output"].insert(0, search)

        return _json_reply(reply, change)
    extra = [
        {"type": "response.output_item.added", "output_index": 90, "item": search},
        {"type": "response.tool_search_call.delta", "delta": {"q": 1}, "output_index": "3"},
        {"type": "response.output_item.done", "output_index": 90, "item": search},
    ]
    return _insert(reply, b"response.created", [encode_sse(e, event=e["type"]) for e in extra])


def _newer_anthropic(server: Any, reply: Reply) -> Reply:
    blocks = [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [{"url": "u"}]},
        {"type": "future_block", "text": {"rich": True}, "index": "x"},
    ]
    if reply.chunks is None:
        return _json_reply(reply, lambda body: body.update(content=[*blocks, *body["content"]]))
    unknown = [
        ("content_block_start", {"index": 90, "content_block": blocks[2]}),
        ("content_block_delta", {"index": 90, "delta": {"type": "future_delta", "text": {"x": 1}}}),
        ("content_block_stop", {"index": 90}),
        ("future_event", {"index": "x", "delta": {"x": 1}}),
    ]
    on_known = [  # deltas of unknown kinds on the first (known) block
        ("content_block_delta", {"index": 0, "delta": {"type": "citations_delta", "citation": {"u": 1}}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "future_delta", "text": {"x": 1}}}),
    ]
    reply = _insert(
        reply, b"content_block_start", [encode_sse({"type": n, **d}, event=n) for n, d in on_known]
    )
    return _insert(reply, b"message_start", [encode_sse({"type": n, **d}, event=n) for n, d in unknown])


def _newer_gemini(server: Any, reply: Reply) -> Reply:
    parts = [{"executableCode": {"language": "PYTHON", "code": "print(1)"}}, {"futurePart": {"x": [1]}}]
    if reply.chunks is None:

        def change(body: Any) -> None:
            content = body["candidates"][0]["content"]
            content["parts"] = [*parts, *content["parts"]]

        return _json_reply(reply, change)
    chunk = {"candidates": [{"content": {"parts": parts, "role": "model"}, "index": 0}], "futureField": {}}
    return _insert(reply, b"data:", [encode_sse(chunk)])


def _newer_bedrock(server: Any, reply: Reply) -> Reply:
    from agentloop.models._eventstream import encode_message

    blocks = [{"citationsContent": {"citations": [{"x": 1}]}}, {"image": {"format": "png"}}]
    if reply.chunks is None:

        def change(body: Any) -> None:
            message = body["output"]["message"]
            message["content"] = [*blocks, *message["content"]]

        return _json_reply(reply, change)

    def event(name: str, payload: Any) -> bytes:
        headers = {":event-type": name, ":content-type": "application/json", ":message-type": "event"}
        return encode_message(headers, msgspec.json.encode(payload))

    extra = [
        event("futureEvent", {"contentBlockIndex": "x"}),
        event("contentBlockStart", {"contentBlockIndex": 90, "start": {"image": {"format": "png"}}}),
        event("contentBlockDelta", {"contentBlockIndex": 90, "delta": {"citation": {"x": 1}}}),
        event("contentBlockStop", {"contentBlockIndex": 90}),
    ]
    return _insert(reply, b"messageStart", extra)


def _call_of(call: ToolExecutionRequest) -> tuple[str | None, str, Any]:
    return call.id, call.name, msgspec.json.decode(call.arguments)


NEWER = {  # name: (the change, the unknown kinds it sends when streaming, and not)
    "openai": (_newer_openai, {"custom"}, {"custom", "audio"}),
    "responses": (
        _newer_responses,
        {"response.tool_search_call.delta"},  # a tool_search_call item is kept (ToolSearch(native=True))
        {"output_audio"},
    ),
    "anthropic": (
        _newer_anthropic,
        {"future_block", "future_delta", "future_event"},
        {"server_tool_use", "web_search_tool_result", "future_block"},
    ),
    "gemini": (_newer_gemini, {"executableCode", "futurePart"}, {"executableCode", "futurePart"}),
    "bedrock": (_newer_bedrock, {"futureEvent", "image", "citation"}, {"citationsContent", "image"}),
}


@pytest.mark.parametrize("answer", ["text", "calls"])
@streaming
async def test_what_a_provider_does_not_know_is_ignored_and_logged_once(
    provider: Provider,
    server: Any,
    streaming: bool,
    answer: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    newer, streamed_kinds, chat_kinds = NEWER[provider.name]
    scripted = AiMessage("Checking both.", CALLS) if answer == "calls" else AiMessage(TEXT)
    for _ in range(2):
        server.add(lambda request: newer(server, server.render(scripted, request)))
    request = ChatRequest([UserMessage("Weather and time in Paris?")], [WEATHER, TIME])
    monkeypatch.setattr(unknown, "_noted", set())  # what earlier tests noted is noted again here
    caplog.set_level(logging.DEBUG, logger="agentloop.models")
    async with provider.connect(server) as model:
        first, second = [await _call(model, request, streaming) for _ in range(2)]
    for response in (first, second):
        message = response.ai_message
        assert message.text == scripted.text
        assert [_call_of(c) for c in message.tool_execution_requests] == [
            _call_of(c) for c in scripted.tool_execution_requests
        ]
    notes = [r.getMessage() for r in caplog.records if "of unknown kind" in r.getMessage()]
    for kind in streamed_kinds if streaming else chat_kinds:
        assert len([n for n in notes if kind in n]) >= 1, (kind, notes)
    assert len(notes) == len(set(notes))  # the second answer logged nothing new


# -- history rules, checked before sending -------------------------------------------------------------------

TOOL_ROUND = [
    UserMessage("Weather and time in Paris?"),
    AiMessage("Let me check.", CALLS),
    ToolExecutionResultMessage("call_a", "get_weather", "18°C"),
    ToolExecutionResultMessage("call_b", "get_time", "noon"),
    AiMessage("18°C at noon."),
    UserMessage("Thanks. And tomorrow?"),
]


@streaming
async def test_tool_rounds_in_the_history_of_a_request_without_tools_are_accepted(
    provider: Provider, server: Any, streaming: bool
) -> None:
    """Bedrock and Anthropic take tool blocks only with tools declared: the rounds go as text, in order."""
    server.add("Probably sunny.")
    async with provider.connect(server) as model:
        response = await _call(model, ChatRequest(TOOL_ROUND), streaming)
    assert response.text == "Probably sunny."  # the fake checked the request as the API does
    sent = server.requests[0].body.decode()
    for seen in ("Let me check.", "get_weather", "Paris, France", "18°C", "get_time", "noon", "tomorrow"):
        assert seen in sent, seen
    assert sent.index("get_weather") < sent.index("18") < sent.index("tomorrow")


@streaming
async def test_a_history_that_starts_with_the_assistant(
    provider: Provider, server: Any, streaming: bool
) -> None:
    """Bedrock requires the user to speak first: refused before sending, saying how to fix it; the others
    take it."""
    server.add("Fine.").add("Fine.")
    history = [AiMessage("Hi! How can I help?"), UserMessage("Just saying hello.")]
    async with provider.connect(server) as model:
        if provider.name == "bedrock":
            with pytest.raises(BadRequestError, match="start with a user message; start message_history"):
                await _call(model, ChatRequest(history), streaming)
            assert server.requests == []
        else:
            assert (await _call(model, ChatRequest(history), streaming)).text == "Fine."


@streaming
async def test_a_history_that_starts_with_tool_calls(
    provider: Provider, server: Any, streaming: bool
) -> None:
    """Gemini needs a user turn before a function call turn, Bedrock a user turn first: both refuse before
    sending; the others take it."""
    server.add("Fine.")
    history = [*TOOL_ROUND[1:4], UserMessage("And tomorrow?")]
    async with provider.connect(server) as model:
        request = ChatRequest(history, [WEATHER, TIME])
        if provider.name in ("bedrock", "gemini"):
            with pytest.raises(BadRequestError, match="UserMessage"):
                await _call(model, request, streaming)
            assert server.requests == []
        else:
            assert (await _call(model, request, streaming)).text == "Fine."
