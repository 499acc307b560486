"""`Middleware.on_answer`: the answer about to end an invocation, checked (and corrected) on the seam.

Structured output judges a text answer through this hook like any middleware; the proof that the hook is
enough: a small structured output written as a user middleware, streamed and not, on both backends.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pydantic
import pytest

from agentloop import (
    CORRECTING,
    NO_ANSWER,
    Agent,
    AiMessage,
    Answer,
    FinishReason,
    MessageWindowChatMemory,
    Middleware,
    ModelRetry,
    OutputValidationError,
    StreamCall,
    ToolExecutionRequest,
    ToolRound,
    ToolRoundsExceededError,
    UserMessage,
    tool,
)
from agentloop.models import ModelEvent
from agentloop.testing import ScriptedChatModel
from tests.runtime.test_middleware import add, invoke, memory_of
from tests.runtime_helpers import assert_valid_for_provider


class City(pydantic.BaseModel):
    name: str
    population: int


class JsonOutput(Middleware):
    """A user's own structured output: the answer's text must be JSON of `type_`; an invalid one goes back
    to the model with the validation errors, at most `retries` times per invocation."""

    def __init__(self, type_: type[pydantic.BaseModel], retries: int = 1) -> None:
        self.adapter = pydantic.TypeAdapter(type_)
        self.retries = retries
        self.failures: dict[str, int] = {}

    async def on_answer(self, answer: Answer) -> Any:
        try:
            return self.adapter.validate_json(answer.output)
        except pydantic.ValidationError as error:
            key = answer.context.invocation_id
            self.failures[key] = self.failures.get(key, 0) + 1
            if self.failures[key] > self.retries:
                raise
            fields = ", ".join(str(e["loc"][0]) for e in error.errors() if e["loc"])
            raise ModelRetry(f"Answer with JSON only; fix: {fields or 'the JSON'}") from None


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_user_middleware_can_be_a_structured_output(streaming: bool) -> None:
    model = ScriptedChatModel(['{"name": "Paris"}', '{"name": "Paris", "population": 2100000}'])
    agent = Agent(model, memory=MessageWindowChatMemory.provider(20), middleware=[JsonOutput(City)])
    result = await invoke(agent, "Which city?", streaming, memory_id="m")
    assert result.output == City(name="Paris", population=2100000)
    assert result.finish_reason is FinishReason.STOP and len(result.intermediate_responses) == 1
    assert model.requests[1].messages[-1] == UserMessage("Answer with JSON only; fix: population")
    stored = await memory_of(agent)  # the invalid answer and its correction, stored with the valid one
    assert [type(m).__name__ for m in stored] == ["UserMessage", "AiMessage", "UserMessage", "AiMessage"]


async def test_a_user_correction_that_runs_out_stores_nothing() -> None:
    model = ScriptedChatModel(["not json", "still not"])
    agent = Agent(model, memory=MessageWindowChatMemory.provider(20), middleware=[JsonOutput(City)])
    with pytest.raises(pydantic.ValidationError):
        await agent.chat("Which city?", memory_id="m")
    assert await memory_of(agent) == []


class Upper(Middleware):
    """Sees what the middleware before it made of the answer, and hands on another value."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def on_answer(self, answer: Answer) -> Any:
        self.seen.append(answer.output)
        return answer.output.name.upper() if isinstance(answer.output, City) else answer.output.upper()


@pytest.mark.parametrize("mode", ["tool", "native", "prompted"])
async def test_user_hooks_see_the_value_structured_output_made(mode: str) -> None:
    city = '{"name": "Oslo", "population": 700000}'
    final: Any = (
        AiMessage(None, [ToolExecutionRequest("o1", "final_result", city)]) if mode == "tool" else city
    )
    upper = Upper()
    agent = Agent(ScriptedChatModel([final]), output_type=City, output_mode=mode, middleware=[upper])  # type: ignore[arg-type]
    result = await agent.chat("Which city?")
    assert upper.seen == [City(name="Oslo", population=700000)] and result.output == "OSLO"


async def test_hooks_run_in_order_each_on_the_one_befores_output() -> None:
    first, second = Upper(), Upper()
    agent = Agent(
        ScriptedChatModel(["paris"]), middleware=[first], memory=MessageWindowChatMemory.provider(9)
    )
    result = await agent.chat("?", middleware=[second], memory_id="m")
    assert (first.seen, second.seen, result.output, result.content) == (
        ["paris"],
        ["PARIS"],
        "PARIS",
        "paris",
    )


class RejectSmall(Middleware):
    """Rejects an output call's value once: the round (call and result) and the correction are held."""

    async def on_answer(self, answer: Answer) -> Any:
        if answer.output.population < 1000:
            raise ModelRetry("That population is too small; check it.")
        return answer.output


@pytest.mark.parametrize("streaming", [False, True])
async def test_an_output_calls_value_may_be_sent_back_for_correction(streaming: bool) -> None:
    def call(population: int, call_id: str) -> AiMessage:
        arguments = json.dumps({"name": "Oslo", "population": population})
        return AiMessage(None, [ToolExecutionRequest(call_id, "final_result", arguments)])

    memory = MessageWindowChatMemory.provider(20)
    model = ScriptedChatModel([call(7, "o1"), call(700000, "o2")])
    agent = Agent(model, output_type=City, memory=memory, middleware=[RejectSmall()], tools=[add])
    result = await invoke(agent, "Which city?", streaming, memory_id="m")
    assert result.output == City(name="Oslo", population=700000)
    assert model.requests[1].messages[-1] == UserMessage("That population is too small; check it.")
    stored = await memory_of(agent)
    assert_valid_for_provider(stored)
    assert len(stored) == 6  # question, call o1, its result, the correction, call o2, its result


async def test_structured_outputs_own_retries_still_end_in_output_validation_error() -> None:
    agent = Agent(ScriptedChatModel(["{}", "{}"]), output_type=City, output_mode="native", output_retries=1)
    with pytest.raises(OutputValidationError):
        await agent.chat("Which city?")


class Fails(Middleware):
    async def on_answer(self, answer: Answer) -> Any:
        raise ValueError(f"refused {answer.output!r}")


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("mode", ["text", "tool"])
async def test_a_failing_answer_hook_stores_nothing_of_the_round(mode: str, streaming: bool) -> None:
    city = '{"name": "Oslo", "population": 700000}'
    answer: Any = (
        AiMessage(None, [ToolExecutionRequest("o1", "final_result", city)]) if mode == "tool" else "Oslo"
    )
    options: dict[str, Any] = {"output_type": City} if mode == "tool" else {}
    memory = MessageWindowChatMemory.provider(20)
    agent = Agent(ScriptedChatModel([answer]), memory=memory, middleware=[Fails()], **options)
    with pytest.raises(ValueError, match="refused"):
        await invoke(agent, "Which city?", streaming, memory_id="m")
    assert await memory_of(agent) == []


# -- on_tool_round and wrap_stream: an output tool of one's own ------------------------------------------


@tool
def submit(name: str, population: int) -> City:
    """Submits the city."""
    return City(name=name, population=population)


class SubmitOutput(Middleware):
    """A user's own output tool: a round in which `submit` ran ends the invocation with its value; a failed
    `submit` (its error went back to the model) is an answer being corrected. It notes each streamed event
    passing by."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def on_tool_round(self, round: ToolRound) -> Any:
        submitted = [e for e in round.executions if e.request.name == "submit"]
        if any(not e.has_failed for e in submitted):
            return next(e.result_object for e in submitted if not e.has_failed)
        return CORRECTING if submitted else NO_ANSWER

    def wrap_stream(self, events: AsyncIterator[ModelEvent], call: StreamCall) -> AsyncIterator[ModelEvent]:
        return self._watch(events, call)

    async def _watch(self, events: AsyncIterator[ModelEvent], call: StreamCall) -> AsyncIterator[ModelEvent]:
        async for event in events:
            self.seen.append(f"{type(event).__name__}:{call.round}")
            yield event


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_user_middleware_can_be_an_output_tool(streaming: bool) -> None:
    bad = AiMessage(None, [ToolExecutionRequest("c1", "submit", '{"name": "Paris", "population": "many"}')])
    good = AiMessage(None, [ToolExecutionRequest("c2", "submit", '{"name": "Paris", "population": 2100000}')])
    model = ScriptedChatModel([bad, good])
    output = SubmitOutput()
    agent = Agent(model, tools=[submit], memory=MessageWindowChatMemory.provider(20), middleware=[output])
    result = await invoke(agent, "Which city?", streaming, memory_id="m")
    assert result.output == City(name="Paris", population=2100000)
    assert result.finish_reason is FinishReason.STOP and len(result.intermediate_responses) == 2
    assert result.tool_executions[0].has_failed and not result.tool_executions[1].has_failed
    stored = await memory_of(agent)  # the failed call, its error and the valid call: stored together
    assert [type(m).__name__ for m in stored] == [
        "UserMessage", "AiMessage", "ToolExecutionResultMessage", "AiMessage", "ToolExecutionResultMessage"
    ]  # fmt: skip
    assert_valid_for_provider(stored)
    # Only streamed calls pass wrap_stream, each response to its end.
    assert output.seen[-1:] == (["ResponseComplete:1"] if streaming else []), output.seen


async def test_correcting_holds_the_rounds_until_the_valid_answer() -> None:
    bad = AiMessage(None, [ToolExecutionRequest("c1", "submit", '{"name": "Paris"}')])
    model = ScriptedChatModel([bad, bad, bad])
    agent = Agent(
        model, tools=[submit], memory=MessageWindowChatMemory.provider(20), middleware=[SubmitOutput()],
        max_tool_rounds=2,
    )  # fmt: skip
    with pytest.raises(ToolRoundsExceededError):
        await agent.chat("Which city?", memory_id="m")
    assert await memory_of(agent) == []  # CORRECTING: nothing of the corrected rounds was stored
