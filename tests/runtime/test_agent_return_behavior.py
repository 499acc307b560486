"""Seed 001's 18-row ReturnBehavior matrix, through the Agent, in chat and in stream mode."""

from __future__ import annotations

import pytest

from agentloop import Agent, FinishReason, Result, ReturnBehavior, tool
from agentloop.testing import ScriptedChatModel
from tests.runtime_helpers import calls

T, I, L = ReturnBehavior.TO_LLM, ReturnBehavior.IMMEDIATE, ReturnBehavior.IMMEDIATE_IF_LAST
RETURN, REPROCESS = True, False

MATRIX = [
    ([T], REPROCESS),
    ([T, T], REPROCESS),
    ([I], RETURN),
    ([I, I], RETURN),
    ([T, I], REPROCESS),
    ([I, T], REPROCESS),
    ([L], RETURN),
    ([L, L], RETURN),
    ([T, L], RETURN),
    ([L, T], REPROCESS),
    ([I, L], RETURN),
    ([L, I], RETURN),
    ([T, I, L], RETURN),
    ([T, L, I], REPROCESS),
    ([I, T, L], RETURN),
    ([I, L, T], REPROCESS),
    ([L, T, I], REPROCESS),
    ([L, I, T], REPROCESS),
]


@tool(return_behavior=ReturnBehavior.TO_LLM)
def to_llm(n: int) -> str:
    return f"to_llm {n}"


@tool(return_behavior=ReturnBehavior.IMMEDIATE)
def immediate(n: int) -> str:
    return f"immediate {n}"


@tool(return_behavior=ReturnBehavior.IMMEDIATE_IF_LAST)
def immediate_if_last(n: int) -> str:
    return f"immediate_if_last {n}"


@tool(return_behavior=ReturnBehavior.IMMEDIATE)
def immediate_failing(n: int) -> str:
    raise RuntimeError("immediate tool failed")


TOOLS = {T: "to_llm", I: "immediate", L: "immediate_if_last"}


async def invoke(agent: Agent, mode: str) -> Result[str]:
    if mode == "chat":
        return await agent.chat("go")
    stream = agent.stream("go")
    async for _ in stream:
        pass
    return stream.result


@pytest.mark.parametrize("mode", ["chat", "stream"])
@pytest.mark.parametrize(("behaviours", "returns"), MATRIX, ids=lambda v: str(v))
async def test_matrix_row(behaviours: list[ReturnBehavior], returns: bool, mode: str) -> None:
    model = ScriptedChatModel(
        [calls(*[(TOOLS[b], {"n": n}) for n, b in enumerate(behaviours)]), "the model reprocessed"]
    )
    agent = Agent(model, tools=[to_llm, immediate, immediate_if_last])
    result = await invoke(agent, mode)

    assert [e.request.name for e in result.tool_executions] == [TOOLS[b] for b in behaviours]
    if returns:
        assert result.content is None
        assert result.finish_reason is FinishReason.TOOL_EXECUTION
        assert len(model.requests) == 1
    else:
        assert result.content == "the model reprocessed"
        assert len(model.requests) == 2


@pytest.mark.parametrize("mode", ["chat", "stream"])
async def test_an_error_blocks_immediate_return(mode: str) -> None:
    model = ScriptedChatModel(
        [calls(("immediate", {"n": 1}), ("immediate_failing", {"n": 2})), "I saw the error"]
    )
    agent = Agent(model, tools=[immediate, immediate_failing])
    result = await invoke(agent, mode)
    assert result.content == "I saw the error"
    assert [e.has_failed for e in result.tool_executions] == [False, True]


@pytest.mark.parametrize("mode", ["chat", "stream"])
async def test_invalid_arguments_block_immediate_return(mode: str) -> None:
    model = ScriptedChatModel([calls(("immediate", {"n": "not a number"})), "fixed"])
    result = await invoke(Agent(model, tools=[immediate]), mode)
    assert result.content == "fixed"


@pytest.mark.parametrize("mode", ["chat", "stream"])
async def test_an_answered_hallucination_counts_as_to_llm(mode: str) -> None:
    # [IMMEDIATE, <unknown>] reprocesses (the unknown call counts as TO_LLM, like [I, T]) ...
    model = ScriptedChatModel([calls(("immediate", {"n": 1}), ("ghost", {})), "reprocessed"])
    agent = Agent(model, tools=[immediate], hallucinated_tool_name_strategy=lambda r: f"no tool {r.name}")
    assert (await invoke(agent, mode)).content == "reprocessed"
    # ... and [<unknown>, IMMEDIATE_IF_LAST] returns immediately (like [T, L]): it is not an error.
    model = ScriptedChatModel([calls(("ghost", {}), ("immediate_if_last", {"n": 1})), "unused"])
    agent = Agent(model, tools=[immediate_if_last], hallucinated_tool_name_strategy=lambda r: "no such tool")
    result = await invoke(agent, mode)
    assert result.content is None and result.finish_reason is FinishReason.TOOL_EXECUTION
