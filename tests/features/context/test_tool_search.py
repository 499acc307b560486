"""`ToolSearch`: a large toolset behind `search_tools(query)` (BM25, offline); found tools join the request
for the rest of the invocation, appended after those already there."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentloop import (
    Agent,
    AiMessage,
    ChatMessage,
    ChatRequest,
    IllegalConfigurationError,
    MessageWindowChatMemory,
    Tool,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolSearch,
    ToolSpecification,
    tool,
)
from agentloop.testing import FunctionChatModel


@tool
def convert_currency(amount: float, from_currency: str, to_currency: str) -> str:
    """Converts an amount of money from one currency to another at today's exchange rate."""
    return f"{amount} {from_currency} = {amount * 2} {to_currency}"


@tool
def create_calendar_event(title: str, start: str) -> str:
    """Creates an event in the user's calendar."""
    return f"created {title} at {start}"


@tool
def get_time() -> str:
    """The current time."""
    return "12:00"


def distractors(n: int) -> list[Tool]:
    """`n` tools about other things, each with its own name and description."""
    topics = ["invoice", "ticket", "repository", "printer", "playlist", "recipe", "flight", "parcel"]
    verbs = ["list", "archive", "rename", "share", "delete"]
    made = []
    for i in range(n):
        topic, verb = topics[i % len(topics)], verbs[(i // len(topics)) % len(verbs)]
        spec = ToolSpecification(
            f"{verb}_{topic}_{i}",
            f"{verb.capitalize()}s a {topic} in the {topic} system (variant {i}).",
            {"type": "object", "properties": {f"{topic}_id": {"type": "string"}}},
        )
        made.append(Tool(spec, lambda request, ctx: "ok"))
    return made


def test_bm25_ranks_by_name_description_and_parameters() -> None:
    search = ToolSearch([convert_currency, create_calendar_event, *distractors(300)], top_k=3)
    assert search.rank("convert money between currencies")[0] == "convert_currency"
    assert search.rank("add an event to my calendar")[0] == "create_calendar_event"
    assert search.rank("to_currency")[0] == "convert_currency"  # a parameter name finds it too
    assert search.rank("zzz qqq") == []


def searching_model(
    query: str, then: str, arguments: dict[str, Any], seen: list[ChatRequest]
) -> FunctionChatModel:
    def answer(messages: list[ChatMessage], tools: Any, request: ChatRequest) -> AiMessage:
        seen.append(request)
        last = messages[-1]
        if not isinstance(last, ToolExecutionResultMessage):
            call = ToolExecutionRequest(None, "search_tools", json.dumps({"query": query}))
            return AiMessage(tool_execution_requests=[call])
        if last.tool_name == "search_tools":
            return AiMessage(
                tool_execution_requests=[ToolExecutionRequest(None, then, json.dumps(arguments))]
            )
        return AiMessage(f"done: {last.text}")

    return FunctionChatModel(answer)


@pytest.mark.parametrize("streaming", [False, True])
async def test_found_tools_join_the_request_after_those_already_there(streaming: bool) -> None:
    seen: list[ChatRequest] = []
    model = searching_model(
        "convert currency",
        "convert_currency",
        {"amount": 5, "from_currency": "EUR", "to_currency": "USD"},
        seen,
    )
    search = ToolSearch([convert_currency, *distractors(300)], always=[get_time], top_k=2)
    agent = Agent(model, tools=[search], memory=MessageWindowChatMemory.provider(50))
    if streaming:
        async with agent.stream("5 EUR in USD?", memory_id="m") as stream:
            async for _ in stream:
                pass
            result = stream.result
    else:
        result = await agent.chat("5 EUR in USD?", memory_id="m")
    assert result.content == "done: 5.0 EUR = 10.0 USD"
    first, second, third = ([s.name for s in r.tool_specifications] for r in seen)
    assert first == ["get_time", "search_tools"]  # 302 tools hidden behind the search
    assert second[:2] == first and "convert_currency" in second[2:]  # appended: the prefix is stable
    assert third == second
    # the next invocation starts from the search again
    seen.clear()
    await agent.chat("again", memory_id="m")
    assert [s.name for s in seen[0].tool_specifications] == ["get_time", "search_tools"]


async def test_a_search_that_finds_nothing_says_so() -> None:
    seen: list[ChatRequest] = []
    model = searching_model("quantum teleportation", "get_time", {}, seen)
    agent = Agent(model, tools=[ToolSearch(distractors(20), always=[get_time])])
    await agent.chat("hi")
    results = [m for m in seen[1].messages if isinstance(m, ToolExecutionResultMessage)]
    assert "No tool matches 'quantum teleportation'" in results[0].text
    assert [s.name for s in seen[1].tool_specifications] == ["get_time", "search_tools"]


def test_bad_settings_are_refused() -> None:
    with pytest.raises(IllegalConfigurationError, match="top_k"):
        ToolSearch([get_time], top_k=0)
    with pytest.raises(IllegalConfigurationError, match="'nope' is not one of its tools"):
        ToolSearch([get_time], always=["nope"])
    search = ToolSearch([get_time, convert_currency], always=["get_time"])
    assert search.rank("time") == []  # an always-shown tool is never "found"
