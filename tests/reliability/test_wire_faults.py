"""Wire faults: each one injected through a fake provider (OpenAI and Anthropic), in chat and in stream mode,
through the `Agent`. Every fault has one defined outcome (answered after retries, or one specific
`ModelError` subclass with a useful message); a failed invocation leaves memory as it was; afterwards the
conversation goes on, no task runs on, and no connection is left open."""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentloop import (
    AiMessage,
    AuthenticationError,
    BadResponseError,
    ChatResponse,
    FinishReason,
    ModelConnectionError,
    ModelTimeoutError,
    RateLimitError,
    ResponseTruncatedError,
    ServerError,
    ToolExecutionRequest,
)
from agentloop.models._http import MAX_BODY_BYTES, Timeouts
from agentloop.testing import Reply
from agentloop.testing._fake_server import FakeServer, encode_sse

from ._support import PLANTED_KEY, Fault, running_tasks
from ._wire import (
    ANSWER,
    CALLS,
    MODES,
    PROVIDERS,
    Scenario,
    chunk_index,
    is_text_event,
    replace_bytes,
    with_chunks,
)

pytestmark = pytest.mark.anyio

Script = Callable[[Scenario], Awaitable[None]]


@dataclass(frozen=True)
class WireFault:
    name: str
    expected: dict[str, str]  # by "provider-mode", mode, provider or "" (most specific wins)
    script: Script
    providers: tuple[str, ...]
    modes: tuple[str, ...]
    backends: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)
    leave_out: tuple[str, ...] = ()  # "provider-mode" combinations where the fault cannot happen

    def outcome(self, provider: str, mode: str) -> str:
        for key in (f"{provider}-{mode}", mode, provider, ""):
            if key in self.expected:
                return self.expected[key]
        raise KeyError(key)


FAULTS: list[WireFault] = []


def wire_fault(
    name: str,
    expected: str | dict[str, str],
    *,
    providers: tuple[str, ...] = PROVIDERS,
    modes: tuple[str, ...] = MODES,
    backends: tuple[str, ...] = ("asyncio", "trio"),
    leave_out: tuple[str, ...] = (),
    **options: Any,
) -> Callable[[Script], Script]:
    def register(script: Script) -> Script:
        outcomes = {"": expected} if isinstance(expected, str) else expected
        FAULTS.append(WireFault(name, outcomes, script, providers, modes, backends, options, leave_out))
        return script

    return register


def text_chunks(reply: Reply) -> list[int]:
    assert reply.chunks is not None
    return [i for i, chunk in enumerate(reply.chunks) if is_text_event(chunk)]


def after_text(reply: Reply, pieces: int) -> int:
    """How many chunks of `reply` carry its first `pieces` pieces of text (and what came before them)."""
    return text_chunks(reply)[pieces - 1] + 1


# -- status codes and retries --------------------------------------------------------------------------------


@wire_fault("429 with Retry-After in seconds", "retried after the wait the server asked for, then answered")
async def rate_limited_retry_after_seconds(sc: Scenario) -> None:
    sc.add(sc.timed(sc.error(429, "Rate limit reached for requests", [("retry-after", "0.1")])))
    sc.add(sc.timed(ANSWER))
    await sc.expect_answer(await sc.run(), ANSWER, requests=2)
    assert sc.stamps[1] - sc.stamps[0] >= 0.1 - 0.01, "the retry came before Retry-After elapsed"


# Up to a second of waiting per case (HTTP dates have whole seconds): on one backend only, since the wait is
# a plain anyio.sleep; the other backend waits for Retry-After in seconds above.
@wire_fault(
    "429 with Retry-After as an HTTP date",
    "retried once the date has passed, then answered",
    backends=("asyncio",),
)
async def rate_limited_retry_after_date(sc: Scenario) -> None:
    until: list[float] = []

    def rate_limited(request: Any) -> Reply:
        date = math.floor(time.time()) + 1  # HTTP dates have whole seconds: the next second boundary
        until.append(date)
        retry_after = email.utils.formatdate(date, usegmt=True)
        return sc.error(429, "Rate limit reached for requests", [("retry-after", retry_after)])

    sc.add(rate_limited)
    sc.add(sc.timed(ANSWER))
    await sc.expect_answer(await sc.run(), ANSWER, requests=2)
    assert sc.stamps[0] >= until[0] - 0.05, "the retry came before the Retry-After date"


@wire_fault(
    "429 with Retry-After beyond max_retry_after",
    "RateLimitError at once (no retry), `retry_after` set to the server's wait",
)
async def rate_limited_for_too_long(sc: Scenario) -> None:
    date = email.utils.formatdate(time.time() + 120, usegmt=True)
    sc.add(sc.error(429, "Rate limit reached for requests", [("retry-after", date)]))
    outcome = await sc.run()
    error = await sc.expect_error(outcome, RateLimitError, "HTTP 429", "Rate limit reached", requests=1)
    assert error.retry_after is not None and 110 < error.retry_after <= 120  # type: ignore[attr-defined]
    assert outcome.elapsed < 5


@wire_fault("500 once", "retried, then answered")
async def server_error_once(sc: Scenario) -> None:
    sc.add(sc.error(500, "The server had an error while processing your request"))
    sc.add(ANSWER)
    await sc.expect_answer(await sc.run(), ANSWER, requests=2)


@wire_fault("503 on every attempt", "ServerError after 1 + max_retries attempts, the server's message quoted")
async def unavailable_on_every_attempt(sc: Scenario) -> None:
    for _ in range(3):  # the server echoes the key back: it must come out masked
        sc.add(sc.error(503, f"Service unavailable for key {PLANTED_KEY}"))
    error = await sc.expect_error(await sc.run(), ServerError, "HTTP 503", "Service unavailable", requests=3)
    assert f"****{PLANTED_KEY[-4:]}" in str(error) and PLANTED_KEY not in str(error)


@wire_fault("401 echoing the API key", "AuthenticationError, not retried, the key masked")
async def unauthorized_echoing_the_key(sc: Scenario) -> None:
    sc.add(sc.error(401, f"Incorrect API key provided: {PLANTED_KEY}"))
    error = await sc.expect_error(
        await sc.run(), AuthenticationError, "HTTP 401", "check the API key", requests=1
    )
    assert f"****{PLANTED_KEY[-4:]}" in str(error) and PLANTED_KEY not in str(error)


@wire_fault("connection reset before the headers", "retried, then answered")
async def reset_before_headers(sc: Scenario) -> None:
    sc.add(Reply.connection_reset())
    sc.add(ANSWER)
    await sc.expect_answer(await sc.run(), ANSWER, requests=2)


# -- broken streams and bodies ----------------------------------------------------------------------------


@wire_fault(
    "disconnect in the middle of the text",
    {
        "chat": "the body was cut: retried, then answered",
        "stream": "ModelConnectionError after the first tokens (never retried once tokens were delivered)",
    },
)
async def disconnect_mid_text(sc: Scenario) -> None:
    if sc.mode == "chat":
        sc.add(ANSWER, disconnect_after_bytes=40)
        sc.add(ANSWER)
        await sc.expect_answer(await sc.run(), ANSWER, requests=2)
        return
    sc.add(sc.transformed(ANSWER, lambda r: r.with_faults(disconnect_after_chunks=after_text(r, 3))))
    outcome = await sc.run()
    await sc.expect_error(
        outcome, ModelConnectionError, "the stream broke before it was complete", requests=1
    )
    assert len(outcome.tokens) == 3 and ANSWER.startswith("".join(outcome.tokens))


@wire_fault(
    "disconnect in the middle of tool-call arguments",
    {
        "chat": "the body was cut: retried; each tool ran once; answered",
        "stream": "ModelConnectionError; the call started early observed cancellation; no result kept",
    },
)
async def disconnect_mid_tool_arguments(sc: Scenario) -> None:
    if sc.mode == "chat":
        sc.add(CALLS, disconnect_after_bytes=60)
        sc.add(CALLS)
        sc.add(ANSWER)
        outcome = await sc.run()
        await sc.expect_answer(outcome, ANSWER, requests=3)
        assert sorted(sc.probe.finished) == ["London", "Paris"]
        return
    # London's arguments are cut after `{"city": "Lo`; Paris is whole, so it already runs (for long).
    sc.probe.seconds = 30.0
    sc.add(
        sc.transformed(CALLS, lambda r: r.with_faults(disconnect_after_chunks=chunk_index(r, b'\\"Lo') + 1))
    )
    await sc.expect_error(await sc.run(), ModelConnectionError, "the stream broke", requests=1)
    assert sc.probe.started == ["Paris"] and sc.probe.cancelled == ["Paris"] and not sc.probe.finished


GARBAGE = (
    b"this line has no colon\n",
    b": a comment\n",
    b"unknown-field: some value\n",
    b"retry: soon\n",
    b"id: 7\n",
    b"\n",
)


@wire_fault(
    "malformed SSE lines (no colon, unknown fields, comments, bad retry)",
    "ignored as the SSE standard says; the whole answer arrives",
    modes=("stream",),
)
async def malformed_sse_lines(sc: Scenario) -> None:
    def corrupt(reply: Reply) -> Reply:
        assert reply.chunks is not None
        return with_chunks(reply, (part for chunk in reply.chunks for part in (chunk, *GARBAGE)))

    sc.add(sc.transformed(ANSWER, corrupt))
    outcome = await sc.run()
    await sc.expect_answer(outcome, ANSWER, requests=1)
    assert "".join(outcome.tokens) == ANSWER


def inserted_after_text(pieces: int, *extra: bytes, end: bool = False) -> Callable[[Reply], Reply]:
    """Inserts `extra` chunks after the first `pieces` pieces of text (and ends the stream there if `end`)."""

    def change(reply: Reply) -> Reply:
        assert reply.chunks is not None
        cut = after_text(reply, pieces)
        rest = () if end else reply.chunks[cut:]
        return with_chunks(reply, (*reply.chunks[:cut], *extra, *rest))

    return change


@wire_fault("invalid UTF-8 in the event stream", "BadResponseError naming the problem", modes=("stream",))
async def invalid_utf8(sc: Scenario) -> None:
    sc.add(sc.transformed(ANSWER, inserted_after_text(2, b"data: \xff\xfe broken\n\n")))
    outcome = await sc.run()
    await sc.expect_error(outcome, BadResponseError, "not valid UTF-8", requests=1)
    assert len(outcome.tokens) == 2


INVALID_CHUNK = {
    "openai": b'data: {"choices": [{"index": 0, "delta": {"content": "tru\n\n',
    "anthropic": b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, "de\n\n',
}


@wire_fault("invalid JSON chunk / body", "BadResponseError quoting the unreadable JSON, not retried")
async def invalid_json(sc: Scenario) -> None:
    if sc.mode == "chat":
        sc.add(Reply.json(b'{"id": "msg_1", "content": [{"type": "text", "text": "It is sun'))
        await sc.expect_error(
            await sc.run(), BadResponseError, "unreadable response body", "It is sun", requests=1
        )
        return
    sc.add(sc.transformed(ANSWER, inserted_after_text(2, INVALID_CHUNK[sc.provider])))
    outcome = await sc.run()
    await sc.expect_error(outcome, BadResponseError, "unreadable", requests=1)
    assert len(outcome.tokens) == 2


@wire_fault(
    "stream ends inside tool-call arguments",
    "BadResponseError (the response is incomplete); the unfinished call never runs",
    modes=("stream",),
)
async def stream_ends_inside_arguments(sc: Scenario) -> None:
    def cut(reply: Reply) -> Reply:
        assert reply.chunks is not None
        return with_chunks(
            reply, reply.chunks[: chunk_index(reply, b'\\"Pa') + 1]
        )  # `{"city": "Pa`, then EOF

    sc.add(sc.transformed(CALLS, cut))
    await sc.expect_error(await sc.run(), BadResponseError, "ended before", requests=1)
    assert sc.probe.started == []


@wire_fault(
    "tool-call arguments truncated by max tokens",
    "ResponseTruncatedError naming the length limit; the call does not run and nothing is stored (a cut "
    "call sent back makes servers such as llama.cpp answer 500)",
    leave_out=("anthropic-chat",),  # a non-streaming Anthropic answer has `input` as a JSON object: never cut
)
async def truncated_arguments(sc: Scenario) -> None:
    cut = AiMessage(tool_execution_requests=[ToolExecutionRequest("call_paris", "weather", '{"city": "Par')])
    sc.add(ChatResponse(cut, finish_reason=FinishReason.LENGTH))
    await sc.expect_error(
        await sc.run(), ResponseTruncatedError, "output token limit", "max_tokens", requests=1
    )
    assert sc.probe.started == []


EMPTY_USAGE = {"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5}


@wire_fault(
    "empty choices (OpenAI) / empty content (Anthropic)",
    {
        "openai": "BadResponseError: the response has no choices",
        "anthropic": "an empty answer (content None), legal for the Messages API; the conversation goes on",
    },
)
async def empty_answer(sc: Scenario) -> None:
    if sc.provider == "anthropic":
        sc.add(AiMessage())
        await sc.expect_answer(await sc.run(), None, requests=1)
        return
    head = {"id": "chatcmpl-1", "model": "gpt-4o-mini", "choices": [], "usage": EMPTY_USAGE}
    if sc.mode == "chat":
        sc.add(Reply.json({**head, "object": "chat.completion"}))
    else:
        sc.add(Reply.sse([encode_sse({**head, "object": "chat.completion.chunk"}), encode_sse("[DONE]")]))
    await sc.expect_error(await sc.run(), BadResponseError, "no choices", requests=1)


FINISH_FIELD = {"openai": b'"finish_reason":"stop"', "anthropic": b'"stop_reason":"end_turn"'}


@wire_fault("unknown finish reason", "answered; finish_reason is FinishReason.OTHER")
async def unknown_finish_reason(sc: Scenario) -> None:
    old = FINISH_FIELD[sc.provider]
    new = old.split(b":")[0] + b':"brand_new_reason"'
    sc.add(sc.transformed(ANSWER, lambda r: replace_bytes(r, old, new)))
    result = await sc.expect_answer(await sc.run(), ANSWER, requests=1)
    assert result.finish_reason is FinishReason.OTHER


@wire_fault(
    "server trickles slower than the read timeout",
    "ModelTimeoutError when the read timeout passes, not retried",
    timeout=Timeouts(connect=5, read=0.2, write=5, pool=5, total=30),
)
async def trickle(sc: Scenario) -> None:
    if sc.mode == "chat":
        sc.add(ANSWER, headers_delay=2.0)
    else:
        sc.add(
            sc.transformed(ANSWER, lambda r: r.with_faults(chunk_delay=(0.0,) * after_text(r, 2) + (2.0,)))
        )
    outcome = await sc.run()
    await sc.expect_error(outcome, ModelTimeoutError, "timed out", requests=1)
    assert outcome.elapsed < 1.5
    assert len(outcome.tokens) == (0 if sc.mode == "chat" else 2)


@wire_fault(
    "oversize body (a 2xx body, or one event, over 16 MiB)",
    {
        "chat": "BadResponseError once 16 MiB were read, not retried",
        "stream": "BadResponseError once one event line passes 16 MiB, not retried",
    },
)
async def oversize_body(sc: Scenario) -> None:
    size = MAX_BODY_BYTES + (1 << 20)
    if sc.mode == "chat":
        sc.add(Reply.json(b'{"padding": "' + b"x" * size + b'"}'))
        await sc.expect_error(
            await sc.run(), BadResponseError, f"larger than {MAX_BODY_BYTES:,} bytes", requests=1
        )
        return
    line = b"data: " + b"x" * size
    pieces = [line[i : i + (1 << 20)] for i in range(0, len(line), 1 << 20)]
    sc.add(sc.transformed(ANSWER, inserted_after_text(2, *pieces, b"\n\n", end=True)))
    outcome = await sc.run()
    await sc.expect_error(outcome, BadResponseError, f"longer than {MAX_BODY_BYTES} bytes", requests=1)
    assert len(outcome.tokens) == 2


GATEWAY_PAGE = (
    b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>"
)
PORTAL_PAGE = (
    b"<!DOCTYPE html><html><head><title>Sign in to the network</title></head><body>...</body></html>"
)
HTML = (("content-type", "text/html; charset=utf-8"),)


@wire_fault("HTML error page (502 text/html)", "retried; then ServerError quoting the page")
async def html_error_page(sc: Scenario) -> None:
    for _ in range(3):
        sc.add(Reply(502, HTML, GATEWAY_PAGE))
    await sc.expect_error(
        await sc.run(), ServerError, "HTTP 502 Bad Gateway", "<h1>502 Bad Gateway</h1>", requests=3
    )


@wire_fault(
    "HTML page with status 200 (proxy or captive portal)",
    {
        "chat": "BadResponseError quoting the page, not retried",
        "stream": "BadResponseError: expected an event stream, got an HTML page (quoted), not retried",
    },
)
async def html_page_with_200(sc: Scenario) -> None:
    sc.add(Reply(200, HTML, PORTAL_PAGE))
    phrase = "unreadable response body" if sc.mode == "chat" else "expected an event stream, got an HTML page"
    await sc.expect_error(await sc.run(), BadResponseError, phrase, "Sign in to the network", requests=1)


@wire_fault(
    "error event in the middle of the stream",
    "ServerError with the provider's message, after the first tokens, not retried",
    modes=("stream",),
)
async def error_event_mid_stream(sc: Scenario) -> None:
    if sc.provider == "anthropic":
        sc.add(sc.server.stream_error("overloaded_error", "Overloaded", after="It is sunny"))  # type: ignore[attr-defined]
        outcome = await sc.run()
        await sc.expect_error(outcome, ServerError, "Overloaded", "overloaded_error", requests=1)
    else:
        error = {
            "error": {
                "message": "The server had an error while processing your request",
                "type": "server_error",
            }
        }
        sc.add(sc.transformed(ANSWER, inserted_after_text(2, encode_sse(error), end=True)))
        outcome = await sc.run()
        await sc.expect_error(outcome, ServerError, "The server had an error", requests=1)
    assert outcome.tokens and not outcome.tokens[0].isspace()


# Provider and mode outermost: consecutive cases differ in fault (the HTTP-date case then starts at a random
# point of a second instead of just after the previous one ended on a second boundary).
def cases(backends: tuple[str, ...]) -> list[Any]:
    return [
        pytest.param(spec, provider, mode, id=f"{spec.script.__name__}-{provider}-{mode}")
        for provider in PROVIDERS
        for mode in MODES
        for spec in FAULTS
        if provider in spec.providers
        and mode in spec.modes
        and f"{provider}-{mode}" not in spec.leave_out
        and spec.backends == backends
    ]


@pytest.mark.parametrize(("spec", "provider", "mode"), cases(("asyncio", "trio")))
async def test_wire_fault(
    spec: WireFault, provider: str, mode: str, fault: Fault, servers: dict[str, FakeServer]
) -> None:
    await inject(spec, provider, mode, fault, servers[provider])


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize(("spec", "provider", "mode"), cases(("asyncio",)))
async def test_wire_fault_on_one_backend(
    spec: WireFault, provider: str, mode: str, fault: Fault, servers: dict[str, FakeServer]
) -> None:
    await inject(spec, provider, mode, fault, servers[provider])


async def inject(spec: WireFault, provider: str, mode: str, fault: Fault, server: FakeServer) -> None:
    """Injects `spec`'s fault, checks its outcome, then that the conversation goes on and nothing leaked."""
    fault.declare("wire", spec.name, spec.outcome(provider, mode), provider=provider, mode=mode)
    before = running_tasks()
    sc = Scenario(provider, mode, server, fault, **spec.options)
    await sc.seed()
    await spec.script(sc)
    # The conversation goes on: the provider accepts the memory as it is now.
    sc.add("You're welcome.")
    outcome = await sc.run("Thanks!")
    assert outcome.error is None and outcome.result is not None, outcome.error
    assert outcome.result.content == "You're welcome."
    fault.check_memory(await sc.memory.messages())
    assert not sc.requests.unanswered, "the fake was asked more often than scripted"
    assert server.pending == 0, "scripted replies were left unused"
    sc.check_requests()
    fault.scan(sc.model, sc.agent, sc.model._http)
    await fault.check_connections(sc.model, server)
    fault.check_tasks(before)
