"""`Compaction`: a conversation past its token budget is sent as system prompt + summary + recent messages;
tool rounds are never split; memory (and the stores) keep the summary, so it is not computed again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agentloop
from agentloop import (
    Agent,
    AiMessage,
    ChatMessage,
    ChatRequest,
    IllegalConfigurationError,
    InMemoryChatMemoryStore,
    MessageWindowChatMemory,
    SystemMessage,
    ToolExecutionResultMessage,
    UserMessage,
    tool,
)
from agentloop.middleware import ClearToolResults, Compaction
from agentloop.stores import SQLiteChatMemoryStore
from agentloop.testing import FunctionChatModel
from tests.runtime_helpers import assert_valid_for_provider

GOLDEN = Path(__file__).parents[2] / "golden" / "context"
HEADER = "Summary of the earlier conversation"


@tool
def lookup(key: str) -> str:
    """Looks a key up in the records."""
    return f"record {key}: " + "value " * 60


class Summarizer:
    """Answers each summary request with a numbered summary, and keeps what it was asked."""

    def __init__(self) -> None:
        self.transcripts: list[str] = []
        self.model = FunctionChatModel(self._answer)

    def _answer(self, messages: list[ChatMessage], tools: Any) -> str:
        assert isinstance(messages[0], SystemMessage) and isinstance(messages[1], UserMessage)
        self.transcripts.append(messages[1].text)
        return f"summary #{len(self.transcripts)}"


def main_model(sent: list[ChatRequest]) -> FunctionChatModel:
    """Calls `lookup` on every "look up" turn, answers other turns with a long text; records each request."""

    def answer(messages: list[ChatMessage], tools: Any, request: ChatRequest) -> AiMessage:
        sent.append(request)
        last = messages[-1]
        if isinstance(last, UserMessage) and last.text.startswith("look up"):
            return AiMessage(
                tool_execution_requests=[agentloop.ToolExecutionRequest(None, "lookup", '{"key": "k"}')]
            )
        return AiMessage("answer " + "words " * 40)

    return FunctionChatModel(answer)


async def converse(agent: Agent, turns: int, streaming: bool, memory_id: str = "m") -> None:
    for n in range(turns):
        text = f"look up record {n}" if n % 3 == 0 else f"turn {n}: " + "question " * 30
        if streaming:
            async with agent.stream(text, memory_id=memory_id) as stream:
                async for _ in stream:
                    pass
        else:
            await agent.chat(text, memory_id=memory_id)


def sent_tokens(request: ChatRequest) -> int:
    return agentloop.models._counting.estimate_tokens(request).tokens


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_long_conversation_stays_under_budget_with_a_stable_prefix(streaming: bool) -> None:
    sent: list[ChatRequest] = []
    summarizer = Summarizer()
    store = InMemoryChatMemoryStore()
    agent = Agent(
        main_model(sent),
        tools=[lookup],
        system_message="You are a records clerk.",
        memory=MessageWindowChatMemory.provider(10_000, store=store),
        middleware=[Compaction(1500, keep_last=6, summarizer=summarizer.model)],
    )
    await converse(agent, 30, streaming)

    assert len(summarizer.transcripts) >= 2  # it compacted, more than once
    for request in sent:
        assert_valid_for_provider(list(request.messages))
        # the budget holds after compaction (the kept part of 6 messages fits on its own here)
        assert sent_tokens(request) <= 1500 + 300
    compacted = [r for r in sent if isinstance(r.messages[1], UserMessage) and HEADER in r.messages[1].text]
    assert compacted, "later requests carry the summary"
    for request in compacted:
        assert request.messages[0] == SystemMessage("You are a records clerk.")  # prefix: system, summary
    # between two compactions the prefix (system prompt + summary) is the same on every request
    by_summary: dict[str, int] = {}
    for request in compacted:
        text = request.messages[1].text
        by_summary[text] = by_summary.get(text, 0) + 1
    assert max(by_summary.values()) > 1
    # each compaction summarises the previous summary plus what came after it
    assert "Summary so far:\nsummary #1" in summarizer.transcripts[1]
    # memory keeps every message, and the summary on the message of the call that compacted
    stored = await store.get_messages("m")
    assert len(stored) > 60
    assert any(isinstance(m, AiMessage) and "agentloop.compaction" in m.provider_state for m in stored)


async def test_tool_calls_are_never_split_from_their_results() -> None:
    sent: list[ChatRequest] = []
    summarizer = Summarizer()
    agent = Agent(
        main_model(sent),
        tools=[lookup],
        memory=MessageWindowChatMemory.provider(10_000),
        middleware=[Compaction(600, keep_last=1, summarizer=summarizer.model)],
    )
    await converse(agent, 12, streaming=False)
    assert summarizer.transcripts
    for request in sent:
        recent = [m for m in request.messages if not isinstance(m, SystemMessage)]
        if HEADER in (getattr(recent[0], "text", None) or ""):
            recent = recent[1:]
        assert not isinstance(recent[0], ToolExecutionResultMessage)
        assert_valid_for_provider(recent)


async def test_a_later_invocation_reuses_the_stored_summary(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite"
    summarizer = Summarizer()
    sent: list[ChatRequest] = []

    def agent_on(store: SQLiteChatMemoryStore) -> Agent:
        return Agent(
            main_model(sent),
            tools=[lookup],
            memory=MessageWindowChatMemory.provider(10_000, store=store),
            middleware=[Compaction(1200, keep_last=4, summarizer=summarizer.model)],
        )

    store = SQLiteChatMemoryStore(path)
    await converse(agent_on(store), 14, streaming=False)
    await store.aclose()
    summaries = len(summarizer.transcripts)
    assert summaries >= 1
    sent.clear()

    reopened = SQLiteChatMemoryStore(path)  # another process, as far as memory goes
    await agent_on(reopened).chat("one more short question", memory_id="m")
    await reopened.aclose()
    first = sent[0]
    assert HEADER in first.messages[0].text  # the stored summary leads the request
    assert f"summary #{len(summarizer.transcripts)}" in first.messages[0].text
    assert len(summarizer.transcripts) == summaries  # within budget: nothing was summarised again
    assert sent_tokens(first) <= 1200


async def test_a_conversation_within_budget_is_sent_unchanged() -> None:
    sent: list[ChatRequest] = []
    summarizer = Summarizer()
    agent = Agent(
        main_model(sent),
        memory=MessageWindowChatMemory.provider(100),
        middleware=[Compaction(100_000, summarizer=summarizer.model)],
    )
    await converse(agent, 4, streaming=False)
    assert summarizer.transcripts == []
    assert all(HEADER not in (getattr(m, "text", None) or "") for r in sent for m in r.messages)


def test_the_stored_summary_format_is_golden() -> None:
    # Written once (tests/golden/context/): a store row holding a summary must stay readable as one.
    from agentloop._values import _codec
    from agentloop.middleware._compaction import latest_summary

    messages = _codec.decode((GOLDEN / "compaction-v1.json").read_bytes(), "messages")
    summary, base = latest_summary([m for m in messages if not isinstance(m, SystemMessage)])
    assert summary == "The user is Ada; she asked for record 7 (value 42)."
    assert base == 3  # the message before the summary-carrying answer is sent as it is


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(IllegalConfigurationError, match="max_tokens"):
        Compaction(0)
    with pytest.raises(IllegalConfigurationError, match="keep_last"):
        Compaction(1000, keep_last=0)
    with pytest.raises(IllegalConfigurationError, match="instructions"):
        Compaction(1000, instructions=" ")


# -- ClearToolResults ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [False, True])
async def test_older_tool_results_are_cleared_in_what_is_sent_only(streaming: bool) -> None:
    sent: list[ChatRequest] = []
    store = InMemoryChatMemoryStore()
    agent = Agent(
        main_model(sent),
        tools=[lookup],
        memory=MessageWindowChatMemory.provider(1000, store=store),
        middleware=[ClearToolResults(keep_last=2, min_tokens=50)],
    )
    await converse(agent, 15, streaming)  # 5 lookups of ~70 tokens each
    last = sent[-1]
    results = [m for m in last.messages if isinstance(m, ToolExecutionResultMessage)]
    assert len(results) == 5
    assert all("was cleared to save context" in r.text for r in results[:3])
    assert all(r.text.startswith("record k: value") for r in results[3:])
    assert_valid_for_provider(list(last.messages))
    stored = [m for m in await store.get_messages("m") if isinstance(m, ToolExecutionResultMessage)]
    assert all(r.text.startswith("record k: value") for r in stored)  # memory keeps them whole


async def test_small_results_are_not_cleared() -> None:
    sent: list[ChatRequest] = []
    agent = Agent(
        main_model(sent),
        tools=[lookup],
        memory=MessageWindowChatMemory.provider(1000),
        middleware=[ClearToolResults(keep_last=0, min_tokens=10_000)],
    )
    await converse(agent, 7, streaming=False)
    assert not any(
        "cleared" in m.text for r in sent for m in r.messages if isinstance(m, ToolExecutionResultMessage)
    )
    with pytest.raises(IllegalConfigurationError, match="keep_last"):
        ClearToolResults(keep_last=-1)
