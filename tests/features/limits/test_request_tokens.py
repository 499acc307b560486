"""`UsageLimits(max_request_tokens=N)`: each request is counted before it is sent, and one past the limit is
never sent (nothing of its round is stored)."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop import Agent, InMemoryChatMemoryStore, MessageWindowChatMemory, UserMessage, tool
from agentloop.middleware import UsageLimitExceeded, UsageLimits
from agentloop.models import AnthropicChatModel
from agentloop.testing import FakeAnthropicServer, ScriptedChatModel
from tests.runtime_helpers import assert_valid_for_provider, calls


@tool
def fetch_page(url: str) -> str:
    """Fetches a web page."""
    return f"<html>{url} " + "lorem ipsum dolor " * 400 + "</html>"


async def invoke(agent: Agent, message: str, streaming: bool, **options: Any) -> Any:
    if not streaming:
        return await agent.chat(message, **options)
    async with agent.stream(message, **options) as stream:
        async for _ in stream:
            pass
        return stream.result


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_request_past_the_limit_is_never_sent(streaming: bool) -> None:
    store = InMemoryChatMemoryStore()
    with FakeAnthropicServer([calls(("fetch_page", {"url": "https://example.com"})), "never sent"]) as server:
        async with AnthropicChatModel("claude-test", base_url=server.base_url, api_key="k") as model:
            agent = Agent(
                model,
                tools=[fetch_page],
                memory=MessageWindowChatMemory.provider(50, store=store),
                middleware=[UsageLimits(max_request_tokens=500)],
            )
            with pytest.raises(UsageLimitExceeded, match="max_request_tokens=500") as info:
                await invoke(agent, "Summarise example.com", streaming, memory_id="m")
    assert info.value.used > 1200  # the page's 1,200 words, counted by the provider's endpoint
    assert "was not sent" in str(info.value)
    assert [r.path for r in server.requests] == [
        "/v1/messages/count_tokens",
        "/v1/messages",
        "/v1/messages/count_tokens",  # the second round was counted, and stopped before /v1/messages
    ]
    assert server.pending == 1
    stored = await store.get_messages("m")  # the finished tool round stays; nothing of the stopped one
    assert [type(m).__name__ for m in stored] == ["UserMessage", "AiMessage", "ToolExecutionResultMessage"]
    assert_valid_for_provider(stored)


async def test_a_model_that_cannot_count_is_limited_by_an_estimate() -> None:
    model = ScriptedChatModel(["fine"])
    agent = Agent(model, middleware=[UsageLimits(max_request_tokens=50)])
    assert (await agent.chat("short question")).content == "fine"
    with pytest.raises(UsageLimitExceeded, match=r"input tokens in one request \(estimated\)"):
        await agent.chat("word " * 400)
    assert model.remaining == 0  # only the first request reached the model


async def test_requests_under_the_limit_go_through() -> None:
    agent = Agent(ScriptedChatModel(["a", "b"]), middleware=[UsageLimits(max_request_tokens=10_000)])
    assert (await agent.chat("one")).content == "a"
    assert (await agent.chat(UserMessage("two"))).content == "b"
