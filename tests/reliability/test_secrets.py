"""The planted API key never shows: not in errors (message, repr, cause chain, traceback), reprs, log records
or request bodies; only in the auth header it belongs to. The package fixture `planted_key` scans everything
the whole suite collected at the end; these tests put the key where it is most likely to escape."""

from __future__ import annotations

import logging

import pytest

from agentloop import Agent, AuthenticationError, BadRequestError, ServerError
from agentloop.models._anthropic import AnthropicChatModel
from agentloop.models._http import RetryPolicy
from agentloop.models._openai import OpenAIChatModel
from agentloop.testing._fake_server import FakeServer

from ._support import PLANTED_KEY, Fault, invoke
from ._wire import MODES, PROVIDERS, Requests, shared

pytestmark = pytest.mark.anyio

MASKED = f"****{PLANTED_KEY[-4:]}"


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("mode", MODES)
async def test_keys_from_the_environment_never_show(
    provider: str,
    mode: str,
    fault: Fault,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    servers: dict[str, FakeServer],
) -> None:
    fault.declare(
        "secrets",
        "key read from the environment, echoed back by a failing server",
        "sent in the auth header only; masked in errors, retry logs, ignored-error warnings and reprs",
        provider=provider,
        mode=mode,
    )
    caplog.set_level(logging.DEBUG)
    with shared(servers[provider]) as server:
        requests = Requests(server)
        monkeypatch.setenv(f"{provider.upper()}_BASE_URL", server.base_url)
        agent = Agent(f"{provider}:some-model")  # the key comes from {PROVIDER}_API_KEY, planted
        agent.model._http.retry = RetryPolicy(max_retries=1, initial_delay=0.001)  # type: ignore[attr-defined]
        echo = f"Internal error while checking key {PLANTED_KEY}"
        for _ in range(2):
            server.add(type(server).error(500, echo))  # type: ignore[attr-defined]
        outcome = await invoke(agent, mode, "hi")
        error = outcome.error
        assert type(error) is ServerError and MASKED in str(error) and PLANTED_KEY not in str(error)
        assert error.provider_message is not None and MASKED in error.provider_message
        retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
        assert len(retries) == 1 and MASKED in retries[0]
        if mode == "stream":  # an ignored error is logged as a warning: masked too
            server.add(type(server).error(401, f"Invalid key {PLANTED_KEY}"))  # type: ignore[attr-defined]
            assert await agent.stream("hi").ignore_errors().start() is None
            warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
            assert warnings and all(PLANTED_KEY not in w for w in warnings) and MASKED in warnings[-1]
        auth = "authorization" if provider == "openai" else "x-api-key"
        assert all(PLANTED_KEY in request.headers[auth] for request in requests)
        assert all(PLANTED_KEY.encode() not in request.body for request in requests)
        for text in (repr(agent), repr(agent.model), str(agent.model.__dict__)):
            assert PLANTED_KEY not in text
        fault.scan(agent, agent.model, *(r.getMessage() for r in caplog.records))
        await agent.model.aclose()  # type: ignore[attr-defined]


async def test_keys_in_custom_auth_headers_are_secrets_too(
    fault: Fault, caplog: pytest.LogCaptureFixture, servers: dict[str, FakeServer]
) -> None:
    fault.declare(
        "secrets",
        "key passed in an `api-key` header (Azure style), echoed in a 400",
        "masked in the error and its provider message",
        provider="openai",
        mode="chat",
    )
    with shared(servers["openai"]) as server:
        Requests(server)
        model = OpenAIChatModel("gpt-4o", base_url=server.base_url, headers={"api-key": PLANTED_KEY})
        server.add(server.error(400, f"Bad key {PLANTED_KEY} for deployment"))  # type: ignore[attr-defined]
        outcome = await invoke(Agent(model), "chat", "hi")
        assert type(outcome.error) is BadRequestError and MASKED in str(outcome.error)
        assert PLANTED_KEY not in repr(outcome.error) and PLANTED_KEY not in repr(model)
        fault.scan(outcome.error, model, *(r.getMessage() for r in caplog.records))
        await model.aclose()


async def test_a_wrong_key_is_reported_without_it(fault: Fault, servers: dict[str, FakeServer]) -> None:
    fault.declare(
        "secrets",
        "a key the provider rejects (401)",
        "AuthenticationError that says to check the key, without showing it",
        provider="anthropic",
        mode="chat",
    )
    with shared(servers["anthropic"]) as server:  # it accepts the planted key only
        Requests(server)
        wrong = "sk-ant-WRONG-" + PLANTED_KEY[::-1]
        rejected = AnthropicChatModel("claude-x", base_url=server.base_url, api_key=wrong, max_retries=0)
        server.add("Hello")  # answered only to the right key
        outcome = await invoke(Agent(rejected), "chat", "hi")
        assert type(outcome.error) is AuthenticationError and "check the API key" in str(outcome.error)
        assert wrong not in str(outcome.error) and wrong not in repr(rejected)
        fault.scan(outcome.error)
        await rejected.aclose()
