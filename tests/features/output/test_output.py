"""Structured output (`output_type=`) over the offline models, in every mode: every kind of type, unions,
retries, validators, mixing with function tools, memory, streaming partial outputs and cancellation."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Annotated, Any, Literal, Union

import anyio
import pydantic
import pytest
from typing_extensions import TypedDict

from agentloop import (
    Agent,
    AgentLoopError,
    AiMessage,
    ChatRequest,
    CompleteResponse,
    FinishReason,
    IllegalConfigurationError,
    MessageWindowChatMemory,
    ModelRetry,
    OutputValidationError,
    PartialOutput,
    ReturnBehavior,
    SystemMessage,
    ToolChoice,
    ToolContext,
    ToolExecutionResultMessage,
    UserMessage,
    tool,
)
from agentloop.testing import FunctionChatModel, ScriptedChatModel, TestModel
from tests.runtime_helpers import assert_valid_for_provider, calls

MODES = ["tool", "native", "prompted"]


class Invoice(pydantic.BaseModel):
    """An invoice's key fields."""

    customer: str
    total: float = pydantic.Field(ge=0)
    items: list[str] = []


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Movie(TypedDict):
    title: str
    year: int


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Cat(pydantic.BaseModel):
    meows: int


class Dog(pydantic.BaseModel):
    barks: int


Short = Annotated[str, pydantic.StringConstraints(max_length=5)]

# (output type, what the model sends on the wire, the value the user gets)
KINDS: list[tuple[Any, dict[str, Any], Any]] = [
    (Invoice, {"customer": "Acme", "total": 12.5}, Invoice(customer="Acme", total=12.5)),
    (Point, {"x": 1, "y": 2}, Point(1, 2)),
    (Movie, {"title": "Up", "year": 2009}, {"title": "Up", "year": 2009}),
    (int, {"result": 42}, 42),
    (float, {"result": 2.5}, 2.5),
    (bool, {"result": True}, True),
    (Short, {"result": "hey"}, "hey"),
    (Color, {"result": "green"}, Color.GREEN),
    (Literal["spam", "ham"], {"result": "ham"}, "ham"),
    (list[Invoice], {"result": [{"customer": "A", "total": 1}]}, [Invoice(customer="A", total=1)]),
]
KIND_IDS = ["model", "dataclass", "typeddict", "int", "float", "bool", "str", "enum", "literal", "list"]


def answer(
    mode: str, wire: dict[str, Any], tool_name: str = "final_result", text: str | None = None
) -> AiMessage:
    """What a model answers in `mode` to give `wire` as its output."""
    if mode == "tool":
        return calls((tool_name, wire, f"call_{tool_name}"), text=text)
    return AiMessage(json.dumps(wire))


# -- every kind of type, every mode, scripted and function models --------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("output_type", "wire", "expected"), KINDS, ids=KIND_IDS)
async def test_every_kind_of_type_in_every_mode(
    mode: str, output_type: Any, wire: Any, expected: Any
) -> None:
    model = ScriptedChatModel([answer(mode, wire)])
    memory = MessageWindowChatMemory(max_messages=20)
    agent = Agent(model, output_type=output_type, output_mode=mode, memory=memory)  # type: ignore[arg-type]
    result = await agent.chat("go")
    assert result.output == expected
    assert result.finish_reason is FinishReason.STOP
    assert not result.returned_immediately
    request = model.requests[0]
    if mode == "tool":
        (spec,) = request.tool_specifications
        assert spec.name == "final_result"
        assert spec.parameters["type"] == "object"
        assert ("result" in spec.parameters["properties"]) == ("result" in wire)
        assert request.tool_choice == ToolChoice.REQUIRED
        assert request.response_format is None
        assert result.content is None
        # The output call and its result are a normal round: the next turn sees what was answered.
        stored = await memory.messages()
        assert isinstance(stored[-1], ToolExecutionResultMessage)
        assert stored[-1].text == "Final result processed."
        assert_valid_for_provider(stored)
    elif mode == "native":
        assert request.response_format is not None
        assert request.response_format.schema["type"] == "object"
        assert not request.tool_specifications
        assert result.content == json.dumps(wire)
    else:
        assert request.response_format is None and not request.tool_specifications
        system = request.messages[0]
        assert isinstance(system, SystemMessage)
        assert "JSON schema" in system.text
        assert json.dumps(wire) == result.content


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("output_type", "wire", "expected"), KINDS, ids=KIND_IDS)
async def test_every_kind_of_type_from_a_function_model_streamed(
    mode: str, output_type: Any, wire: Any, expected: Any
) -> None:
    model = FunctionChatModel(lambda messages, tools: answer(mode, wire), chunk_size=3)
    stream = Agent(model, output_type=output_type, output_mode=mode).stream("go")  # type: ignore[arg-type]
    outputs = [o async for o in stream.outputs()]
    assert outputs[-1] == expected == stream.result.output


@pytest.mark.parametrize("mode", MODES)
async def test_function_model_sees_what_the_mode_sends(mode: str) -> None:
    def fn(messages: list[Any], tools: list[Any], request: ChatRequest) -> AiMessage:
        if mode == "native":
            assert request.response_format is not None
            assert request.response_format.name == "Invoice"
            assert request.response_format.description == "An invoice's key fields."
        if mode == "tool":
            assert [t.name for t in tools] == ["final_result"]
            assert tools[0].description == "An invoice's key fields."
        return answer(mode, {"customer": "Zed", "total": 3, "items": ["x"]})

    agent = Agent(FunctionChatModel(fn), output_type=Invoice, output_mode=mode)  # type: ignore[arg-type]
    result = await agent.chat("go")
    assert result.output == Invoice(customer="Zed", total=3, items=["x"])


@pytest.mark.parametrize("mode", ["tool", "native"])
@pytest.mark.parametrize(
    "output_type", [Invoice, Point, Movie, int, bool, Color, Literal["a", "b"], list[Point], Union[Cat, Dog]]
)
async def test_test_model_produces_valid_outputs(mode: str, output_type: Any) -> None:
    agent = Agent(TestModel(), output_type=output_type, output_mode=mode)  # type: ignore[arg-type]
    result = await agent.chat("go")
    pydantic.TypeAdapter(output_type).validate_python(result.output)


async def test_test_model_runs_function_tools_and_the_output_tool_together() -> None:
    ran: list[str] = []

    @tool
    def lookup(name: str) -> str:
        """Looks a customer up."""
        ran.append(name)
        return "found"

    agent = Agent(TestModel(), tools=[lookup], output_type=Point)
    result = await agent.chat("go")
    assert isinstance(result.output, Point)
    assert len(ran) == 1
    assert [e.request.name for e in result.tool_executions] == ["lookup", "final_result"]


# -- the default stays text ---------------------------------------------------------------------------------


async def test_default_output_is_the_text_and_costs_nothing() -> None:
    model = ScriptedChatModel(["hello"])
    result = await Agent(model).chat("hi")
    assert result.output == result.content == "hello"
    request = model.requests[0]
    assert request.tool_choice is None and request.response_format is None
    assert not request.tool_specifications
    assert "output=" not in repr(result)


async def test_per_call_output_type_overrides_the_agents() -> None:
    model = ScriptedChatModel([calls(("final_result", {"result": 7})), "plain"])
    agent = Agent(model)
    result = await agent.chat("number?", output_type=int)
    assert result.output == 7
    text = await agent.chat("text?")
    assert text.output == "plain"
    assert not model.requests[1].tool_specifications


async def test_per_call_str_output_type_turns_structured_output_off() -> None:
    model = ScriptedChatModel(["just text"])
    agent = Agent(model, output_type=Invoice)
    result = await agent.chat("hi", output_type=str)
    assert result.output == "just text"


# -- unions ------------------------------------------------------------------------------------------------


async def test_union_of_models_is_one_output_tool_each_and_the_model_chooses() -> None:
    model = ScriptedChatModel([calls(("final_result_Dog", {"barks": 3}))])
    agent = Agent(model, output_type=Union[Cat, Dog])
    result = await agent.chat("which?")
    assert result.output == Dog(barks=3)
    names = [spec.name for spec in model.requests[0].tool_specifications]
    assert names == ["final_result_Cat", "final_result_Dog"]


async def test_union_given_as_a_list() -> None:
    model = ScriptedChatModel([calls(("final_result_Cat", {"meows": 2}))])
    result = await Agent(model, output_type=[Cat, Dog]).chat("which?")
    assert result.output == Cat(meows=2)


@pytest.mark.parametrize("mode", ["native", "prompted"])
async def test_union_in_text_modes_is_wrapped_and_validated(mode: str) -> None:
    model = ScriptedChatModel([AiMessage(json.dumps({"result": {"barks": 1}}))])
    result = await Agent(model, output_type=Union[Cat, Dog], output_mode=mode).chat("x")  # type: ignore[arg-type]
    assert result.output == Dog(barks=1)


async def test_union_of_scalars_is_one_wrapped_tool() -> None:
    model = ScriptedChatModel([calls(("final_result", {"result": "x"}))])
    result = await Agent(model, output_type=Union[int, str]).chat("x")
    assert result.output == "x"
    assert [s.name for s in model.requests[0].tool_specifications] == ["final_result"]


# -- retries -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_invalid_output_gets_a_correction_naming_the_field_then_succeeds(mode: str) -> None:
    model = ScriptedChatModel(
        [answer(mode, {"customer": "Acme", "total": "lots"}), answer(mode, {"customer": "Acme", "total": 5})]
    )
    memory = MessageWindowChatMemory(max_messages=20)
    agent = Agent(model, output_type=Invoice, output_mode=mode, memory=memory)  # type: ignore[arg-type]
    result = await agent.chat("extract")
    assert result.output == Invoice(customer="Acme", total=5)
    correction = model.requests[1].messages[-1]
    if mode == "tool":
        assert isinstance(correction, ToolExecutionResultMessage) and correction.is_error
        assert result.tool_executions[0].has_failed
    else:
        assert isinstance(correction, UserMessage)
    assert "total" in correction.text
    assert "valid number" in correction.text
    assert "'lots'" in correction.text
    assert_valid_for_provider(await memory.messages())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("retries", [0, 2])
async def test_retries_exhausted_raise_output_validation_error(mode: str, retries: int) -> None:
    bad = answer(mode, {"customer": "Acme"})  # total missing
    model = ScriptedChatModel([bad] * (retries + 1))
    memory = MessageWindowChatMemory(max_messages=50)
    agent = Agent(
        model,
        output_type=Invoice,
        output_mode=mode,  # type: ignore[arg-type]
        output_retries=retries,
        memory=memory,
    )
    with pytest.raises(OutputValidationError) as caught:
        await agent.chat("extract")
    assert len(model.requests) == retries + 1
    error = caught.value
    assert isinstance(error, AgentLoopError)
    assert json.loads(error.output or "") == {"customer": "Acme"}
    assert error.errors[0]["loc"] == ("total",)
    assert error.errors[0]["type"] == "missing"
    assert f"output_retries={retries}" in str(error)
    assert_valid_for_provider(await memory.messages())


async def test_invalid_json_is_corrected() -> None:
    model = ScriptedChatModel(['{"customer": "A", "total": ', '{"customer": "A", "total": 1}'])
    result = await Agent(model, output_type=Invoice, output_mode="prompted").chat("x")
    assert result.output.total == 1
    correction = model.requests[1].messages[-1]
    assert "(the whole output): Invalid JSON" in correction.text


async def test_text_answer_in_tool_mode_asks_for_the_tool() -> None:
    model = ScriptedChatModel(
        ["It is Acme, 5 dollars.", calls(("final_result", {"customer": "Acme", "total": 5}))]
    )
    result = await Agent(model, output_type=Invoice).chat("x")
    assert result.output.customer == "Acme"
    correction = model.requests[1].messages[-1]
    assert isinstance(correction, UserMessage)
    assert "'final_result'" in correction.text


async def test_prompted_output_may_come_in_a_code_fence_or_with_prose() -> None:
    model = ScriptedChatModel(['Sure:\n```json\n{"x": 1, "y": 2}\n```'])
    result = await Agent(model, output_type=Point, output_mode="prompted").chat("x")
    assert result.output == Point(1, 2)


async def test_failing_pydantic_validator_is_a_correction() -> None:
    class Even(pydantic.BaseModel):
        n: int

        @pydantic.field_validator("n")
        @classmethod
        def even(cls, value: int) -> int:
            if value % 2:
                raise ValueError("n must be even")
            return value

    model = ScriptedChatModel([calls(("final_result", {"n": 3})), calls(("final_result", {"n": 4}))])
    result = await Agent(model, output_type=Even).chat("x")
    assert result.output.n == 4
    assert "n must be even" in model.requests[1].messages[-1].text


# -- output validators and ModelRetry ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_output_validator_may_ask_for_another_try(mode: str) -> None:
    seen: list[tuple[Any, Any]] = []

    async def validate(value: Invoice, ctx: ToolContext) -> Invoice:
        seen.append((value.customer, ctx.get("tenant")))
        if value.customer != value.customer.upper():
            raise ModelRetry("Write the customer in capitals")
        return value.model_copy(update={"items": ["checked"]})

    model = ScriptedChatModel(
        [answer(mode, {"customer": "acme", "total": 1}), answer(mode, {"customer": "ACME", "total": 1})]
    )
    agent = Agent(model, output_type=Invoice, output_mode=mode, output_validator=validate)  # type: ignore[arg-type]
    result = await agent.chat("x", context={"tenant": "t1"})
    assert result.output == Invoice(customer="ACME", total=1, items=["checked"])
    assert seen == [("acme", "t1"), ("ACME", "t1")]
    assert "Write the customer in capitals" in model.requests[1].messages[-1].text


async def test_output_validator_on_text_output() -> None:
    def validate(value: str, ctx: ToolContext) -> str:
        if "please" not in value:
            raise ModelRetry("Be polite")
        return value.upper()

    model = ScriptedChatModel(["no", "yes please"])
    result = await Agent(model, output_validator=validate).chat("x")
    assert result.output == "YES PLEASE"
    assert result.content == "yes please"
    assert model.requests[1].messages[-1] == UserMessage("Be polite")


async def test_output_validator_retries_exhausted() -> None:
    def validate(value: Point, ctx: ToolContext) -> Point:
        raise ModelRetry("never good enough")

    model = ScriptedChatModel([calls(("final_result", {"x": 1, "y": 1}))] * 2)
    with pytest.raises(OutputValidationError) as caught:
        await Agent(model, output_type=Point, output_validator=validate).chat("x")
    assert caught.value.errors == [{"loc": (), "msg": "never good enough", "type": "model_retry"}]


async def test_a_tool_raising_model_retry_sends_its_message_even_with_an_error_handler() -> None:
    @tool
    def find(name: str) -> str:
        """Finds someone."""
        if name != "Bob":
            raise ModelRetry("No such person; try 'Bob'")
        return "Bob is here"

    def strict_handler(error: Exception, request: Any) -> str:
        raise error  # would abort on any other error

    model = ScriptedChatModel([calls(("find", {"name": "Al"})), calls(("find", {"name": "Bob"})), "done"])
    agent = Agent(model, tools=[find], tool_execution_error_handler=strict_handler)
    result = await agent.chat("find someone")
    assert result.content == "done"
    first = result.tool_executions[0]
    assert first.is_error and first.result == "No such person; try 'Bob'"


# -- output calls mixed with function calls ------------------------------------------------------------------


@tool
def log_it(note: str) -> str:
    """Writes a note to the log."""
    return f"logged {note}"


@tool(return_behavior=ReturnBehavior.IMMEDIATE)
def stop_now(note: str) -> str:
    """Ends the conversation."""
    return "stopped"


@pytest.mark.parametrize("output_first", [True, False])
async def test_function_tools_beside_a_valid_output_call_still_run_and_the_output_wins(
    output_first: bool,
) -> None:
    output = ("final_result", {"x": 1, "y": 2}, "call_out")
    function = ("log_it", {"note": "n"}, "call_log")
    response = calls(output, function) if output_first else calls(function, output)
    model = ScriptedChatModel([response])
    memory = MessageWindowChatMemory(max_messages=20)
    result = await Agent(model, tools=[log_it], output_type=Point, memory=memory).chat("x")
    assert result.output == Point(1, 2)
    assert len(model.requests) == 1
    by_name = {e.request.name: e for e in result.tool_executions}
    assert by_name["log_it"].result == "logged n"
    assert by_name["final_result"].result == "Final result processed."
    assert_valid_for_provider(await memory.messages())


async def test_first_valid_output_call_wins() -> None:
    model = ScriptedChatModel(
        [
            calls(
                ("final_result", {"x": "bad", "y": 0}, "a"),
                ("final_result", {"x": 1, "y": 1}, "b"),
                ("final_result", {"x": 2, "y": 2}, "c"),
            )
        ]
    )
    result = await Agent(model, output_type=Point).chat("x")
    assert result.output == Point(1, 1)


async def test_invalid_output_call_beside_function_calls_runs_them_and_retries() -> None:
    model = ScriptedChatModel(
        [
            calls(("log_it", {"note": "a"}), ("final_result", {"x": 1})),
            calls(("final_result", {"x": 1, "y": 3})),
        ]
    )
    result = await Agent(model, tools=[log_it], output_type=Point).chat("x")
    assert result.output == Point(1, 3)
    assert [e.request.name for e in result.tool_executions] == ["log_it", "final_result", "final_result"]
    assert result.tool_executions[1].has_failed


async def test_a_valid_output_wins_over_an_immediate_return_tool() -> None:
    model = ScriptedChatModel([calls(("stop_now", {"note": "n"}), ("final_result", {"x": 5, "y": 6}))])
    result = await Agent(model, tools=[stop_now], output_type=Point).chat("x")
    assert result.output == Point(5, 6)
    assert not result.returned_immediately


async def test_an_immediate_return_tool_alone_still_returns_immediately() -> None:
    model = ScriptedChatModel([calls(("stop_now", {"note": "n"}))])
    result = await Agent(model, tools=[stop_now], output_type=Point).chat("x")
    assert result.returned_immediately
    assert result.output is None and result.content is None


async def test_function_rounds_before_the_output_do_not_count_as_retries() -> None:
    model = ScriptedChatModel(
        [
            calls(("log_it", {"note": "1"})),
            calls(("log_it", {"note": "2"})),
            calls(("final_result", {"x": 0, "y": 0})),
        ]
    )
    result = await Agent(model, tools=[log_it], output_type=Point, output_retries=0).chat("x")
    assert result.output == Point(0, 0)


# -- memory -------------------------------------------------------------------------------------------------


async def test_next_turn_sees_the_output_round() -> None:
    model = ScriptedChatModel([calls(("final_result", {"x": 1, "y": 2}, "c1")), "It was (1, 2)."])
    agent = Agent(model, output_type=Point, memory=MessageWindowChatMemory(max_messages=20))
    await agent.chat("point?")
    follow = await agent.chat("what did you say?", output_type=str)
    assert follow.output == "It was (1, 2)."
    messages = model.requests[1].messages
    assert isinstance(messages[1], AiMessage)
    assert messages[1].tool_execution_requests[0].name == "final_result"
    assert isinstance(messages[2], ToolExecutionResultMessage) and messages[2].id == "c1"
    assert_valid_for_provider(list(messages))


# -- streaming --------------------------------------------------------------------------------------------


def _field_set(value: Any) -> set[str]:
    if isinstance(value, pydantic.BaseModel):
        return set(value.model_fields_set)
    if isinstance(value, dict):
        return set(value)
    return set()


@pytest.mark.parametrize("mode", MODES)
async def test_outputs_stream_partials_monotone_then_the_final(mode: str) -> None:
    wire = {"customer": "Acme Corporation", "total": 1234.5, "items": ["apples", "pears", "plums"]}
    model = ScriptedChatModel([answer(mode, wire)], chunk_size=3)
    stream = Agent(model, output_type=Invoice, output_mode=mode).stream("x")  # type: ignore[arg-type]
    outputs = [o async for o in stream.outputs()]
    assert len(outputs) > 5
    assert outputs[-1] == Invoice(**wire)
    assert stream.result.output == outputs[-1]
    previous: set[str] = set()
    previous_items: list[str] = []
    for partial in outputs[:-1]:
        assert isinstance(partial, Invoice)
        fields = _field_set(partial)
        assert fields >= previous, (fields, previous)  # never loses a field
        assert len(partial.items) >= len(previous_items)
        if "customer" in fields:
            assert "Acme Corporation".startswith(partial.customer)
        previous, previous_items = fields, list(partial.items)
    assert any(_field_set(p) == {"customer"} for p in outputs)  # a field arrives before the others


async def test_typeddict_partials_fill_field_by_field() -> None:
    model = ScriptedChatModel(
        [calls(("final_result", {"title": "Spirited Away", "year": 2001}))], chunk_size=2
    )
    outputs = [o async for o in Agent(model, output_type=Movie).stream("x").outputs()]
    assert outputs[0] == {"title": ""} or outputs[0]["title"] in "Spirited Away"
    assert {"title": "Spirited Away"} in outputs
    assert outputs[-1] == {"title": "Spirited Away", "year": 2001}


async def test_list_partials_grow_item_by_item() -> None:
    model = ScriptedChatModel([calls(("final_result", {"result": [1, 22, 333]}))], chunk_size=1)
    outputs = [o async for o in Agent(model, output_type=list[int]).stream("x").outputs()]
    assert outputs[-1] == [1, 22, 333]
    lengths = [len(o) for o in outputs]
    assert lengths == sorted(lengths)
    assert [1] in outputs and [1, 22] in outputs


async def test_partial_output_events_and_callbacks() -> None:
    model = ScriptedChatModel([calls(("final_result", {"x": 10, "y": 20}))], chunk_size=2)
    stream = Agent(model, output_type=Movie).stream("x", output_type=Point)
    events = [e async for e in stream.events()]
    # Dataclass partials appear once the value validates as a whole.
    assert [e for e in events if isinstance(e, PartialOutput)] == []
    assert isinstance(events[-1], CompleteResponse) and events[-1].result.output == Point(10, 20)

    model = ScriptedChatModel([calls(("final_result", {"customer": "Bob", "total": 1}))], chunk_size=2)
    seen: list[Any] = []
    result = await Agent(model, output_type=Invoice).stream("x").on_partial_output(seen.append).start()
    assert result is not None and result.output.customer == "Bob"
    assert seen and all(isinstance(s, Invoice) for s in seen)


@pytest.mark.parametrize("mode", ["native", "prompted"])
async def test_text_streaming_of_a_structured_answer_yields_no_json(mode: str) -> None:
    model = ScriptedChatModel([AiMessage(json.dumps({"x": 1, "y": 2}))])
    stream = Agent(model, output_type=Point, output_mode=mode).stream("x")  # type: ignore[arg-type]
    tokens = [t async for t in stream]
    assert tokens == []
    assert stream.result.output == Point(1, 2)


async def test_text_streaming_in_tool_mode_yields_the_models_prose() -> None:
    model = ScriptedChatModel([calls(("final_result", {"x": 1, "y": 2}), text="Here it is.")])
    stream = Agent(model, output_type=Point).stream("x")
    assert "".join([t async for t in stream]) == "Here it is."
    assert stream.result.output == Point(1, 2)
    assert stream.result.content == "Here it is."


async def test_outputs_of_a_text_invocation_grow_then_end_with_the_answer() -> None:
    model = ScriptedChatModel(["one two three"])
    outputs = [o async for o in Agent(model).stream("x").outputs()]
    assert outputs[0] == "one"
    assert outputs[-2:] == ["one two three", "one two three"]


@pytest.mark.parametrize("mode", MODES)
async def test_leaving_outputs_early_cancels_the_invocation(mode: str) -> None:
    wire = {"customer": "A very long customer name " * 5, "total": 1}
    model = ScriptedChatModel([answer(mode, wire)], chunk_size=2)
    memory = MessageWindowChatMemory(max_messages=20)
    stream = Agent(model, output_type=Invoice, output_mode=mode, memory=memory).stream("x")  # type: ignore[arg-type]
    async with stream:
        async for partial in stream.outputs():
            assert isinstance(partial, Invoice)
            break
    assert stream.done
    assert await memory.messages() == []  # nothing half-done was stored
    with pytest.raises(Exception, match="has not finished"):
        stream.result


async def test_cancelling_the_consumer_mid_output_stops_the_model() -> None:
    model = ScriptedChatModel(
        [calls(("final_result", {"customer": "x" * 400, "total": 1}))], chunk_size=1, delay=0.001
    )
    stream = Agent(model, output_type=Invoice).stream("x")
    seen = 0
    with anyio.move_on_after(0.2):
        async for _ in stream.outputs():
            seen += 1
    await stream.aclose()
    assert 0 < seen < 400
    assert stream.done


# -- configuration ------------------------------------------------------------------------------------------


def test_bad_settings_are_clear_errors() -> None:
    model = ScriptedChatModel([])
    with pytest.raises(IllegalConfigurationError, match="output_mode"):
        Agent(model, output_type=Point, output_mode="json")  # type: ignore[arg-type]
    with pytest.raises(IllegalConfigurationError, match="output_retries"):
        Agent(model, output_type=Point, output_retries=-1)
    with pytest.raises(IllegalConfigurationError, match="output_tool_name"):
        Agent(model, output_type=Point, output_tool_name="final result")
    with pytest.raises(IllegalConfigurationError, match="output_validator"):
        Agent(model, output_type=Point, output_validator="nope")  # type: ignore[arg-type]
    with pytest.raises(IllegalConfigurationError, match="cannot be validated"):
        Agent(model, output_type=object())  # type: ignore[call-overload,arg-type]


async def test_an_output_tool_name_clash_is_reported() -> None:
    @tool
    def final_result(x: int) -> int:
        """Mine."""
        return x

    agent = Agent(ScriptedChatModel([]), tools=[final_result], output_type=Point)
    with pytest.raises(IllegalConfigurationError, match="final_result"):
        await agent.chat("x")
    renamed = Agent(
        ScriptedChatModel([calls(("answer", {"x": 1, "y": 1}))]),
        tools=[final_result],
        output_type=Point,
        output_tool_name="answer",
    )
    assert (await renamed.chat("x")).output == Point(1, 1)


async def test_ask_refuses_a_structured_agent() -> None:
    with pytest.raises(IllegalConfigurationError, match="chat"):
        await Agent(ScriptedChatModel([]), output_type=Point).ask("x")


async def test_native_falls_back_to_tool_mode_for_a_model_without_response_format() -> None:
    class Plain:
        def __init__(self) -> None:
            self.inner = ScriptedChatModel([calls(("final_result", {"x": 1, "y": 1}))])

        async def chat(self, request: ChatRequest) -> Any:
            return await self.inner.chat(request)

        def stream(self, request: ChatRequest) -> Any:
            return self.inner.stream(request)

    plain = Plain()
    result = await Agent(plain, output_type=Point, output_mode="native").chat("x")
    assert result.output == Point(1, 1)
    assert plain.inner.requests[0].response_format is None


async def test_structured_agent_as_a_tool_answers_json() -> None:
    inner = Agent(
        ScriptedChatModel([calls(("final_result", {"x": 3, "y": 4}))]), output_type=Point, name="pointer"
    )
    outer_model = ScriptedChatModel([calls(("pointer", {"request": "a point"})), "ok"])
    result = await Agent(outer_model, tools=[inner]).chat("x")
    assert json.loads(result.tool_executions[0].result) == {"x": 3, "y": 4}


@pytest.mark.parametrize("mode", MODES)
async def test_a_validator_that_crashes_uses_up_the_retries(mode: str) -> None:
    def broken(value: Point, ctx: ToolContext) -> Point:
        raise KeyError("oops")

    model = ScriptedChatModel([answer(mode, {"x": 1, "y": 1})] * 2)
    agent = Agent(model, output_type=Point, output_mode=mode, output_validator=broken)  # type: ignore[arg-type]
    with pytest.raises(OutputValidationError) as caught:
        await agent.chat("x")
    assert len(model.requests) == 2
    assert caught.value.errors[0]["type"] == "KeyError"
