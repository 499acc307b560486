"""The immediate-return rule (LangChain4j ReturnBehavior): the 18-row matrix, errors, hallucinations."""

from __future__ import annotations

import pytest

from agentloop import (
    ReturnBehavior,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    execute_tool_calls,
    should_return_immediately,
    tool,
)
from agentloop._tools._execution import any_error, behaviours

TO_LLM = ReturnBehavior.TO_LLM
IMMEDIATE = ReturnBehavior.IMMEDIATE
IMMEDIATE_IF_LAST = ReturnBehavior.IMMEDIATE_IF_LAST

# Copied from ../shared/seeds/001 (ReturnBehaviorCombinationsTest): behaviours in call order -> returns?
MATRIX: list[tuple[list[ReturnBehavior], bool]] = [
    ([TO_LLM], False),
    ([TO_LLM, TO_LLM], False),
    ([IMMEDIATE], True),
    ([IMMEDIATE, IMMEDIATE], True),
    ([TO_LLM, IMMEDIATE], False),
    ([IMMEDIATE, TO_LLM], False),
    ([IMMEDIATE_IF_LAST], True),
    ([IMMEDIATE_IF_LAST, IMMEDIATE_IF_LAST], True),
    ([TO_LLM, IMMEDIATE_IF_LAST], True),
    ([IMMEDIATE_IF_LAST, TO_LLM], False),
    ([IMMEDIATE, IMMEDIATE_IF_LAST], True),
    ([IMMEDIATE_IF_LAST, IMMEDIATE], True),
    ([TO_LLM, IMMEDIATE, IMMEDIATE_IF_LAST], True),
    ([TO_LLM, IMMEDIATE_IF_LAST, IMMEDIATE], False),
    ([IMMEDIATE, TO_LLM, IMMEDIATE_IF_LAST], True),
    ([IMMEDIATE, IMMEDIATE_IF_LAST, TO_LLM], False),
    ([IMMEDIATE_IF_LAST, TO_LLM, IMMEDIATE], False),
    ([IMMEDIATE_IF_LAST, IMMEDIATE, TO_LLM], False),
]
IDS = ["-".join(b.name for b in row) for row, _ in MATRIX]


def test_the_matrix_has_every_row_of_the_seed() -> None:
    assert len(MATRIX) == 18
    assert len({tuple(row) for row, _ in MATRIX}) == 18


@pytest.mark.parametrize(("row", "returns"), MATRIX, ids=IDS)
def test_matrix_row(row: list[ReturnBehavior], returns: bool) -> None:
    assert should_return_immediately(row, any_error=False) is returns


@pytest.mark.parametrize(("row", "returns"), MATRIX, ids=IDS)
def test_any_error_forces_reprocessing(row: list[ReturnBehavior], returns: bool) -> None:
    assert should_return_immediately(row, any_error=True) is False


def test_no_calls_never_return_immediately() -> None:
    assert should_return_immediately([], any_error=False) is False


def test_plain_string_values_work_too() -> None:
    assert should_return_immediately(["to_llm", "immediate_if_last"], False) is True  # type: ignore[list-item]
    assert should_return_immediately(["immediate", "to_llm"], False) is False  # type: ignore[list-item]


# -- through real executions ------------------------------------------------------------------------------


@tool(return_behavior=TO_LLM)
def to_llm(fail: bool = False) -> str:
    if fail:
        raise RuntimeError("to_llm failed")
    return "to_llm"


@tool(return_behavior=IMMEDIATE)
def immediate(fail: bool = False) -> str:
    if fail:
        raise RuntimeError("immediate failed")
    return "immediate"


@tool(return_behavior=IMMEDIATE_IF_LAST)
async def immediate_if_last(fail: bool = False) -> str:
    if fail:
        raise RuntimeError("immediate_if_last failed")
    return "immediate_if_last"


TOOLS = [to_llm, immediate, immediate_if_last]


def _calls(*names: str) -> list[ToolExecutionRequest]:
    requests = []
    for i, name in enumerate(names):
        base, _, suffix = name.partition(":")
        arguments = '{"fail": true}' if suffix == "fail" else ""
        if suffix == "bad":
            arguments = '{"fail": "not a bool"}'
        requests.append(ToolExecutionRequest(f"id-{i}", base, arguments))
    return requests


def _answer(request: ToolExecutionRequest) -> ToolExecutionResultMessage:
    return ToolExecutionResultMessage.from_request(request, f"no tool {request.name}", is_error=True)


async def _decide(*names: str) -> bool:
    executions = await execute_tool_calls(_calls(*names), TOOLS, hallucinated_tool_name_strategy=_answer)
    return should_return_immediately(behaviours(executions), any_error(executions))


@pytest.mark.parametrize(("row", "returns"), MATRIX, ids=IDS)
async def test_matrix_row_through_execute_tool_calls(row: list[ReturnBehavior], returns: bool) -> None:
    executions = await execute_tool_calls(_calls(*(b.value for b in row)), TOOLS)
    assert behaviours(executions) == row
    assert not any_error(executions)
    assert should_return_immediately(behaviours(executions), any_error(executions)) is returns


@pytest.mark.parametrize(
    "names",
    [
        ["immediate:fail"],
        ["immediate", "immediate:fail"],
        ["to_llm:fail", "immediate_if_last"],
        ["immediate_if_last:fail"],
        ["immediate", "immediate_if_last:bad"],  # invalid arguments are an error too
    ],
)
async def test_an_error_anywhere_prevents_immediate_return(names: list[str]) -> None:
    assert await _decide(*names) is False


async def test_an_answered_hallucination_counts_as_to_llm_and_not_as_an_error() -> None:
    # Flagged is_error for the model, but not a failure: IMMEDIATE_IF_LAST last still returns.
    assert await _decide("ghost", "immediate_if_last") is True
    # ... and it is TO_LLM: it breaks the all-immediate rule.
    assert await _decide("immediate", "ghost") is False
    assert await _decide("ghost") is False
