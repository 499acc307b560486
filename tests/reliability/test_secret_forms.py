"""API keys as they come from files and secret mounts (trailing newline) or pasted (non-ASCII): stripped or
refused at construction without showing them; and a key never shows in any form (raw, escaped, repr, bytes
repr, JSON, percent-encoded, or a recognisable piece of it) in errors, tracebacks, reprs or any log record,
with every logger of the process at DEBUG, across succeeding and failing requests of both providers."""

from __future__ import annotations

import json
import logging
import socket
import traceback
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, quote_plus

import pytest

from agentloop import (
    AuthenticationError,
    ChatRequest,
    IllegalConfigurationError,
    ModelConnectionError,
    ModelTimeoutError,
    ServerError,
    UserMessage,
)
from agentloop.models import AnthropicChatModel, OpenAIChatModel, ResponseComplete
from agentloop.models._http import RetryPolicy
from agentloop.testing import FakeAnthropicServer, FakeOpenAIServer

KEY = "sk-proj-LEAK+Tq/9Zx=Wv7Kd3Rm8Np2Bs"
PIECES = ("LEAK+Tq/9Zx=Wv7K", "Zx=Wv7Kd3Rm8", "LEAK%2BTq%2F9Zx%3DWv7K")  # recognisable parts of it
FORMS = {
    KEY,
    repr(KEY),
    repr(KEY.encode()),
    repr(f"Bearer {KEY}\n".encode()),
    json.dumps(KEY),
    quote(KEY, safe=""),
    quote_plus(KEY),
    *PIECES,
}
ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
AUTH = {"openai": "authorization", "anthropic": "x-api-key"}
REQUEST = ChatRequest([UserMessage("hi")])


def _leaks(texts: list[str]) -> list[str]:
    return [text for text in texts for form in FORMS if form in text]


def _error_texts(error: BaseException) -> list[str]:
    return [str(error), repr(error), "".join(traceback.format_exception(error))]


@pytest.fixture(scope="module")
def started() -> Iterator[dict[str, Any]]:
    with FakeOpenAIServer() as openai, FakeAnthropicServer() as anthropic:
        yield {"openai": openai, "anthropic": anthropic}


class _Everything(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.texts: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(self.format(record))  # the message, its arguments and any exception


@pytest.fixture
def debug_logs() -> Iterator[_Everything]:
    """The root logger and every logger of the process at DEBUG, captured."""
    handler = _Everything()
    root = logging.getLogger()
    saved = {
        name: logger.level
        for name, logger in logging.root.manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    saved_root = root.level
    for name in saved:
        logging.getLogger(name).setLevel(logging.DEBUG)
    root.setLevel(logging.DEBUG)
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(saved_root)
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def _model(provider: str, base_url: str, key: str | None = KEY, **options: Any) -> Any:
    if provider == "openai":
        return OpenAIChatModel("gpt-4o", base_url=base_url, api_key=key, **options)
    return AnthropicChatModel("claude-x", base_url=base_url, api_key=key, **options)


async def _call(model: Any, mode: str) -> Any:
    if mode == "chat":
        return await model.chat(REQUEST)
    async for event in model.stream(REQUEST):
        if isinstance(event, ResponseComplete):
            return event.response
    raise AssertionError("no response")


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_key_with_a_trailing_newline_is_stripped(
    provider: str, started: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = started[provider]
    expected = f"Bearer {KEY}" if provider == "openai" else KEY
    server.add("one").add("two")
    explicit = _model(provider, server.base_url, f"  {KEY}\r\n")
    assert (await _call(explicit, "chat")).text == "one"
    assert server.requests[-1].headers[AUTH[provider]] == expected
    monkeypatch.setenv(ENV[provider], f"{KEY}\n")  # as read from a file or a secret mount
    monkeypatch.delenv(f"{provider.upper()}_BASE_URL", raising=False)
    from_env = OpenAIChatModel("gpt-4o") if provider == "openai" else AnthropicChatModel("claude-x")
    assert from_env._http._headers[AUTH[provider]] == expected
    monkeypatch.setenv(ENV[provider], " \n")  # nothing but whitespace: no key at all
    if provider == "openai":
        assert "authorization" not in OpenAIChatModel("gpt-4o")._http._headers
    else:
        with pytest.raises(IllegalConfigurationError, match="needs an API key"):
            AnthropicChatModel("claude-x")
    await explicit.aclose()
    assert (await _call(_model(provider, server.base_url, f"{KEY}\n"), "stream")).text == "two"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize(
    ("bad", "what"),
    [
        (KEY[:10] + "é" + KEY[10:], "non-ASCII character at position 10"),
        (KEY[:10] + "\n" + KEY[10:], "space or control character at position 10"),
        (KEY[:10] + "\u200b" + KEY[10:], "non-ASCII character at position 10"),  # a zero-width space
        (KEY[:10] + " " + KEY[10:], "space or control character at position 10"),
    ],
)
def test_a_key_that_cannot_be_sent_is_refused_without_showing_it(
    provider: str, bad: str, what: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(IllegalConfigurationError, match=what) as info:
        _model(provider, "http://127.0.0.1:9", bad)
    assert "api_key=" in str(info.value) and not _leaks(_error_texts(info.value))
    monkeypatch.setenv(ENV[provider], bad)
    monkeypatch.delenv(f"{provider.upper()}_BASE_URL", raising=False)
    with pytest.raises(IllegalConfigurationError, match=what) as info:
        OpenAIChatModel("gpt-4o") if provider == "openai" else AnthropicChatModel("claude-x")
    assert ENV[provider] in str(info.value) and not _leaks(_error_texts(info.value))


def test_a_header_that_cannot_be_sent_is_refused_without_showing_it() -> None:
    for headers in (
        {"authorization": f"Bearer {KEY}\n"},
        {"api-key": f"{KEY}é"},
        {"x-custom": f"a\r\n{KEY}"},
    ):
        with pytest.raises(IllegalConfigurationError, match=r"header .* cannot carry") as info:
            OpenAIChatModel("gpt-4o", base_url="http://127.0.0.1:9/v1", headers=headers)
        assert not _leaks(_error_texts(info.value))


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("mode", ["chat", "stream"])
async def test_no_form_of_the_key_shows_in_debug_logs_errors_or_reprs(
    provider: str, mode: str, started: dict[str, Any], debug_logs: _Everything
) -> None:
    server = started[provider]
    fake = type(server)
    echo = [("x-echo-key", KEY), ("x-echo-auth", f"Bearer {KEY}")]  # a proxy that reflects the key
    retry = RetryPolicy(max_retries=1, initial_delay=0.001, max_delay=0.002)
    model = _model(provider, server.base_url, f"{KEY}\n", retry=retry, max_retries=1, timeout=0.3)
    errors: list[BaseException] = []
    server.add("fine")  # a request that succeeds
    assert (await _call(model, mode)).text == "fine"
    server.add(fake.error(401, f"Incorrect API key provided: {KEY}", headers=echo))
    with pytest.raises(AuthenticationError) as info:
        await _call(model, mode)
    errors.append(info.value)
    for _ in range(2):  # retried once, then raised
        server.add(fake.error(500, f"Internal error checking {json.dumps(KEY)} / {quote(KEY)}", headers=echo))
    with pytest.raises(ServerError) as info:
        await _call(model, mode)
    errors.append(info.value)
    server.add("late", headers_delay=1.0)  # slower than the read timeout
    with pytest.raises(ModelTimeoutError) as info:
        await _call(model, mode)
    errors.append(info.value)
    refused = _model(provider, f"http://127.0.0.1:{_closed_port()}", f"{KEY}\n", max_retries=0)
    with pytest.raises(ModelConnectionError) as info:
        await _call(refused, mode)
    errors.append(info.value)
    texts = [*debug_logs.texts, *(t for e in errors for t in _error_texts(e)), repr(model), repr(refused)]
    assert any("httpcore" in t for t in debug_logs.texts), "the HTTP libraries' DEBUG logs were not captured"
    assert any("****" in t for t in texts)  # the echoes were there, masked
    assert not _leaks(texts)
    await model.aclose()
    await refused.aclose()
