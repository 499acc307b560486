"""`Agent(tool_result_limit=N)` / `@tool(result_limit=N)`: a longer result is kept aside; the model gets its
beginning and reads on with `read_tool_result(id, offset, limit)`."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from agentloop import (
    Agent,
    AiMessage,
    ChatMessage,
    IllegalConfigurationError,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    tool,
)
from agentloop.testing import FunctionChatModel

PAGE = "".join(f"line {n:04d}\n" for n in range(400))  # 4,000 characters: about 1,000 tokens


@tool
def fetch() -> str:
    """Fetches the page."""
    return PAGE


@tool(result_limit=1000)
def fetch_whole() -> str:
    """Fetches the page, whole."""
    return PAGE


def reader_model(first: str, seen: list[str]) -> FunctionChatModel:
    """Calls `first`, then reads the kept result to its end with read_tool_result, then answers."""

    def answer(messages: list[ChatMessage], tools: Any) -> AiMessage:
        last = messages[-1]
        if not isinstance(last, ToolExecutionResultMessage):
            return AiMessage(tool_execution_requests=[ToolExecutionRequest(None, first, "{}")])
        seen.append(last.text)
        match = re.search(r'read_tool_result\(id="(tr_\w+)", offset=(\d+), limit=(\d+)\)', last.text)
        match = match or re.search(r"more with offset=(\d+)", last.text)
        if match is None:
            return AiMessage("done")
        if len(match.groups()) == 3:
            key, offset, limit = match.group(1), int(match.group(2)), int(match.group(3))
            seen.append(key)
        else:
            key, offset, limit = seen[1], int(match.group(1)), 400
        arguments = json.dumps({"id": key, "offset": offset, "limit": limit})
        return AiMessage(tool_execution_requests=[ToolExecutionRequest(None, "read_tool_result", arguments)])

    return FunctionChatModel(answer)


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_long_result_is_read_in_parts(streaming: bool) -> None:
    seen: list[str] = []
    agent = Agent(reader_model("fetch", seen), tools=[fetch], tool_result_limit=100)
    if streaming:
        async with agent.stream("read the page") as stream:
            async for _ in stream:
                pass
            result = stream.result
    else:
        result = await agent.chat("read the page")
    assert result.content == "done"
    first = seen[0]
    assert first.startswith(PAGE[:400]) and PAGE[400:410] not in first.split("\n[")[0]
    assert "4000 characters long; the first 400 are shown" in first
    parts = [first.split("\n[")[0]] + [s.split("\n[")[0] for s in seen[2:]]
    assert "".join(parts) == PAGE  # read to the end, nothing lost or repeated
    assert [e.request.name for e in result.tool_executions][:2] == ["fetch", "read_tool_result"]


async def test_a_tools_own_limit_wins_and_short_results_pass_whole() -> None:
    seen: list[str] = []
    agent = Agent(reader_model("fetch_whole", seen), tools=[fetch_whole], tool_result_limit=100)
    assert (await agent.chat("go")).content == "done"
    assert seen == [PAGE]


async def test_no_limit_offers_no_reader() -> None:
    offered: list[list[str]] = []

    def answer(messages: list[ChatMessage], tools: Any) -> str:
        offered.append([t.name for t in tools])
        return "ok"

    await Agent(FunctionChatModel(answer), tools=[fetch]).chat("hi")
    await Agent(FunctionChatModel(answer), tools=[fetch], tool_result_limit=50).chat("hi")
    assert offered == [["fetch"], ["fetch", "read_tool_result"]]


async def test_an_unknown_id_is_told_to_the_model() -> None:
    told: list[str] = []

    def answer(messages: list[ChatMessage], tools: Any) -> AiMessage:
        if isinstance(messages[-1], ToolExecutionResultMessage):
            told.append(messages[-1].text)
            return AiMessage("ok")
        arguments = '{"id": "tr_nope", "offset": 0, "limit": 10}'
        return AiMessage(tool_execution_requests=[ToolExecutionRequest(None, "read_tool_result", arguments)])

    await Agent(FunctionChatModel(answer), tools=[fetch], tool_result_limit=50).chat("hi")
    assert "no kept result has the id 'tr_nope'" in told[0]


def test_bad_limits_are_refused() -> None:
    with pytest.raises(IllegalConfigurationError, match="tool_result_limit"):
        Agent(FunctionChatModel(lambda m, t: "x"), tool_result_limit=0)
    with pytest.raises(IllegalConfigurationError, match="result_limit"):

        @tool(result_limit=-5)
        def bad() -> str:
            """Bad."""
            return ""
