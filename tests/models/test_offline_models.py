"""The offline models of `agentloop.testing`: scripted, function-backed and schema-driven test models."""

from __future__ import annotations

import datetime
import enum
import json
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Annotated, Any, Literal, Optional

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, TypeAdapter

from agentloop import (
    AgentLoopError,
    AiMessage,
    ChatRequest,
    ChatResponse,
    FinishReason,
    ModelError,
    SystemMessage,
    TokenUsage,
    ToolChoice,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolSpecification,
    UserMessage,
)
from agentloop.models import (
    ChatModel,
    ModelEvent,
    ResponseComplete,
    TextDelta,
    ThinkingDelta,
    ToolCallComplete,
    ToolCallDelta,
)
from agentloop.testing import FunctionChatModel, ScriptedChatModel, TestModel, example_arguments
from agentloop.testing._scripted import split_tokens

try:  # the reference validator (test extra); a smaller check of our own stands in without it
    import jsonschema
except ImportError:  # pragma: no cover
    jsonschema = None

REQUEST = ChatRequest([SystemMessage("Be brief."), UserMessage("What is the weather in Paris?")])


async def collect(events: AsyncIterator[ModelEvent]) -> list[ModelEvent]:
    return [event async for event in events]


def text_of(events: Sequence[ModelEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def final(events: Sequence[ModelEvent]) -> ChatResponse:
    assert isinstance(events[-1], ResponseComplete)
    assert sum(isinstance(e, ResponseComplete) for e in events) == 1
    return events[-1].response


def assert_tool_stream_well_formed(events: Sequence[ModelEvent]) -> dict[int, ToolExecutionRequest]:
    """Reassembles the tool calls of a stream as a runtime would, checking the order rules on the way."""
    pieces: dict[int, list[str]] = {}
    heads: dict[int, ToolCallDelta] = {}
    completed: dict[int, ToolExecutionRequest] = {}
    for position, event in enumerate(events):
        if isinstance(event, ToolCallDelta):
            assert event.index not in completed, "a delta arrived after its call was complete"
            if event.index not in heads:
                assert event.id is not None, "the first delta must carry the call's id"
                assert event.name is not None, "the first delta must carry the tool name"
                heads[event.index] = event
            else:
                assert event.id is None
                assert event.name is None
            pieces.setdefault(event.index, []).append(event.arguments)
        elif isinstance(event, ToolCallComplete):
            previous = events[position - 1]
            assert isinstance(previous, ToolCallDelta), "ToolCallComplete must follow its call's last delta"
            assert previous.index == event.index, "ToolCallComplete must follow its call's last delta"
            head = heads[event.index]
            assert event.request == ToolExecutionRequest(
                head.id, head.name or "", "".join(pieces[event.index])
            )
            completed[event.index] = event.request
        elif isinstance(event, ResponseComplete):
            assert position == len(events) - 1
    assert set(completed) == set(heads), "every call that started must complete before ResponseComplete"
    return completed


# -- ScriptedChatModel ---------------------------------------------------------------------------------------


async def test_streamed_text_arrives_in_several_deltas_that_join_exactly() -> None:
    text = "Paris is  sunny,\n22°C — naïve café; x_y=3.5 ok?  "
    model = ScriptedChatModel([text])
    events = await collect(model.stream(REQUEST))
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 5
    assert "".join(deltas) == text
    response = final(events)
    assert response.ai_message == AiMessage(text=text)
    assert response.finish_reason is FinishReason.STOP


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_split_tokens_never_loses_or_adds_a_character(text: str) -> None:
    pieces = split_tokens(text)
    assert "".join(pieces) == text
    assert all(pieces)


async def test_tool_call_deltas_reassemble_to_the_scripted_calls() -> None:
    calls = [
        ToolExecutionRequest(None, "get_weather", '{"city": "Paris", "unit": "C", "days": [1, 2, 3]}'),
        ToolExecutionRequest("toolu_given", "get_time", '{"zone":"Europe/Paris"}'),
        ToolExecutionRequest(None, "noop", "{}"),
    ]
    model = ScriptedChatModel([AiMessage(text="Let me check.", tool_execution_requests=calls)])
    events = await collect(model.stream(REQUEST))

    completed = assert_tool_stream_well_formed(events)
    assert [completed[i].arguments for i in range(3)] == [c.arguments for c in calls]
    assert [completed[i].id for i in range(3)] == ["call_1", "toolu_given", "call_2"]
    first_call_pieces = [e for e in events if isinstance(e, ToolCallDelta) and e.index == 0 and e.arguments]
    assert len(first_call_pieces) > 3, "arguments must arrive in several pieces, as providers send them"
    assert text_of(events) == "Let me check."
    response = final(events)
    assert response.finish_reason is FinishReason.TOOL_EXECUTION
    assert response.ai_message.tool_execution_requests == tuple(completed[i] for i in range(3))


async def test_thinking_is_streamed_before_text() -> None:
    model = ScriptedChatModel([AiMessage(text="42.", thinking="Six times seven.")])
    events = await collect(model.stream(REQUEST))
    kinds = [type(e) for e in events]
    assert kinds.index(TextDelta) > max(i for i, k in enumerate(kinds) if k is ThinkingDelta)
    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == "Six times seven."
    assert final(events).ai_message.thinking == "Six times seven."


async def test_chat_and_stream_give_the_same_response() -> None:
    script: list[Any] = [
        AiMessage(text="a b c", tool_execution_requests=[ToolExecutionRequest("x", "t", "{}")])
    ]
    streamed = final(await collect(ScriptedChatModel(script).stream(REQUEST)))
    assert await ScriptedChatModel(script).chat(REQUEST) == streamed


async def test_fresh_ids_continue_across_responses() -> None:
    call = ToolExecutionRequest(None, "t", "{}")
    model = ScriptedChatModel(
        [AiMessage(tool_execution_requests=[call, call]), AiMessage(tool_execution_requests=[call])]
    )
    first = await model.chat(REQUEST)
    second = final(await collect(model.stream(REQUEST)))
    ids = [c.id for r in (first, second) for c in r.ai_message.tool_execution_requests]
    assert ids == ["call_1", "call_2", "call_3"]


async def test_every_request_is_recorded_in_order() -> None:
    model = ScriptedChatModel(["one", "two", "three"])
    requests = [ChatRequest([UserMessage(f"question {i}")]) for i in range(3)]
    await model.chat(requests[0])
    await collect(model.stream(requests[1]))
    await model.chat(requests[2])
    assert model.requests == requests
    assert model.remaining == 0


async def test_running_out_of_responses_is_a_clear_error() -> None:
    model = ScriptedChatModel(["only"])
    await model.chat(REQUEST)
    with pytest.raises(AgentLoopError, match=r"no response left for request #2; it was given 1"):
        await model.chat(REQUEST)
    with pytest.raises(AgentLoopError, match=r"no response left for request #3; it was given 1"):
        await collect(model.stream(REQUEST))
    assert len(model.requests) == 3


async def test_a_scripted_exception_is_raised_for_its_request() -> None:
    boom = ModelError("provider down", provider="scripted")
    model = ScriptedChatModel([boom, "recovered"])
    with pytest.raises(ModelError, match="provider down"):
        await collect(model.stream(REQUEST))
    assert (await model.chat(REQUEST)).text == "recovered"


async def test_callable_entries_answer_from_the_request() -> None:
    async def echo_async(request: ChatRequest) -> str:
        await anyio.sleep(0)
        return f"async:{request.messages[-1].text}"

    model = ScriptedChatModel([lambda request: f"sync:{request.messages[-1].text}", echo_async])
    assert (await model.chat(ChatRequest([UserMessage("hi")]))).text == "sync:hi"
    assert text_of(await collect(model.stream(ChatRequest([UserMessage("ho")])))) == "async:ho"


async def test_chat_response_entries_are_replayed_exactly() -> None:
    scripted = ChatResponse(
        AiMessage(text="cut", tool_execution_requests=[ToolExecutionRequest(None, "t", "{}")]),
        TokenUsage(11, 7),
        FinishReason.LENGTH,
        model="m",
        id="r1",
    )
    model = ScriptedChatModel([scripted, scripted])
    assert await model.chat(REQUEST) == scripted
    events = await collect(model.stream(REQUEST))
    assert final(events) == scripted
    assert [e.request.id for e in events if isinstance(e, ToolCallComplete)] == [None]


async def test_usage_is_estimated_unless_given() -> None:
    estimated = await ScriptedChatModel(["one two three four"]).chat(REQUEST)
    assert estimated.token_usage is not None
    assert estimated.token_usage.output_tokens == 4
    assert estimated.token_usage.input_tokens >= 8  # "Be brief." + the question
    assert estimated.token_usage.total_tokens == estimated.token_usage.input_tokens + 4
    longer = ChatRequest([*REQUEST.messages, UserMessage("and tomorrow in Lyon and Marseille?")])
    assert (await ScriptedChatModel(["x"]).chat(longer)).token_usage.input_tokens > (  # type: ignore[union-attr]
        estimated.token_usage.input_tokens
    )
    given_usage = TokenUsage(100, 5)
    assert (await ScriptedChatModel(["x"], token_usage=given_usage).chat(REQUEST)).token_usage == given_usage


async def test_chunk_size_and_tokenizer_control_the_pieces() -> None:
    events = await collect(ScriptedChatModel(["abcdefgh"], chunk_size=3).stream(REQUEST))
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["abc", "def", "gh"]
    events = await collect(ScriptedChatModel(["a-b"], tokenizer=list).stream(REQUEST))
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["a", "-", "b"]
    lossy = ScriptedChatModel(["a b"], tokenizer=str.split)
    with pytest.raises(AgentLoopError, match="lost characters"):
        await collect(lossy.stream(REQUEST))
    with pytest.raises(ValueError, match="not both"):
        ScriptedChatModel(["x"], chunk_size=2, tokenizer=list)
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        ScriptedChatModel(["x"], chunk_size=0)
    with pytest.raises(ValueError, match="delay"):
        ScriptedChatModel(["x"], delay=-1)
    with pytest.raises(TypeError, match="sequence of responses"):
        ScriptedChatModel("hello")  # type: ignore[arg-type]


async def test_bad_script_entries_name_their_position() -> None:
    model = ScriptedChatModel(["fine", 42])  # type: ignore[list-item]
    await model.chat(REQUEST)
    with pytest.raises(
        TypeError, match=r"response #2 must be an AiMessage, a str or a ChatResponse, got int"
    ):
        await model.chat(REQUEST)


async def test_delay_paces_the_stream_and_cancellation_stops_it() -> None:
    model = ScriptedChatModel(["one two three four five six seven eight nine ten"], delay=0.05)
    received: list[ModelEvent] = []
    with anyio.move_on_after(0.12) as scope:
        async for event in model.stream(REQUEST):
            received.append(event)
    assert scope.cancelled_caught
    # 11 events in all; at 50 ms each only a few can have arrived in 120 ms.
    assert 0 < len(received) < 6


async def test_the_stream_can_be_closed_early() -> None:
    model = ScriptedChatModel(["one two three", "next"])
    stream = model.stream(REQUEST)
    first = await stream.__anext__()
    assert first == TextDelta("one")
    await stream.aclose()
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()
    assert (await model.chat(REQUEST)).text == "next"


def test_offline_models_satisfy_the_chat_model_protocol() -> None:
    for model in (ScriptedChatModel([]), FunctionChatModel(lambda m, t: "x"), TestModel()):
        assert isinstance(model, ChatModel)


# -- FunctionChatModel -------------------------------------------------------------------------------------


async def test_function_model_answers_with_a_sync_function() -> None:
    seen: list[tuple[list[Any], list[ToolSpecification]]] = []
    spec = ToolSpecification("add", "Adds", {"type": "object", "properties": {"a": {"type": "number"}}})

    def answer(messages: list[Any], tools: list[ToolSpecification]) -> AiMessage | str:
        seen.append((messages, tools))
        if isinstance(messages[-1], ToolExecutionResultMessage):
            return f"The sum is {messages[-1].text}."
        return AiMessage(tool_execution_requests=[ToolExecutionRequest(None, tools[0].name, '{"a": 1.5}')])

    model = FunctionChatModel(answer)
    request = ChatRequest([UserMessage("add")], [spec])
    events = await collect(model.stream(request))
    assert assert_tool_stream_well_formed(events)[0] == ToolExecutionRequest("call_1", "add", '{"a": 1.5}')
    follow_up = ChatRequest(
        [UserMessage("add"), final(events).ai_message, ToolExecutionResultMessage("call_1", "add", "1.5")],
        [spec],
    )
    response = await model.chat(follow_up)
    assert response.text == "The sum is 1.5."
    assert response.finish_reason is FinishReason.STOP
    assert seen[0] == ([UserMessage("add")], [spec])
    assert model.requests == [request, follow_up]


async def test_function_model_awaits_async_functions_and_passes_the_request_when_asked() -> None:
    async def answer(messages: list[Any], tools: list[ToolSpecification], request: ChatRequest) -> str:
        await anyio.sleep(0)
        return f"{len(messages)} messages, choice {request.tool_choice.mode if request.tool_choice else None}"

    model = FunctionChatModel(answer)
    events = await collect(model.stream(ChatRequest([UserMessage("hi")], tool_choice=ToolChoice.NONE)))
    assert text_of(events) == "1 messages, choice none"


async def test_function_model_rejects_bad_functions_and_answers() -> None:
    with pytest.raises(TypeError, match=r"must accept \(messages, tools\)"):
        FunctionChatModel(lambda messages: "x")
    model = FunctionChatModel(lambda messages, tools: None)
    with pytest.raises(TypeError, match="must be an AiMessage, a str or a ChatResponse, got NoneType"):
        await model.chat(REQUEST)


async def test_function_model_errors_propagate() -> None:
    def broken(messages: list[Any], tools: list[ToolSpecification]) -> str:
        raise RuntimeError("model exploded")

    with pytest.raises(RuntimeError, match="model exploded"):
        await collect(FunctionChatModel(broken).stream(REQUEST))


# -- example_arguments and TestModel -----------------------------------------------------------------------


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"


class Address(BaseModel):
    street: str = Field(min_length=3, max_length=40)
    zip_code: Annotated[str, Field(pattern=r"^\d{5}$", examples=["75001"])]
    country: Literal["FR", "DE"] = "FR"


class TreeNode(BaseModel):
    label: str
    children: list[TreeNode] = []
    parent: Optional[TreeNode] = None


class Order(BaseModel):
    id: uuid.UUID
    placed_on: datetime.date
    placed_at: datetime.datetime
    email: Annotated[str, Field(json_schema_extra={"format": "email"})]
    quantity: int = Field(ge=10, le=20, multiple_of=3)
    discount: float = Field(gt=0, lt=1)
    colour: Colour
    tags: set[str]
    pair: tuple[int, str]
    prices: dict[str, float]
    address: Address
    shipping: Optional[Address] = None
    notes: str | None
    tree: TreeNode
    kind: Literal["order"] = "order"
    flags: list[bool] = Field(min_length=2)


HAND_WRITTEN_SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {}},
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "ip": {"type": "string", "format": "ipv4"},
            "site": {"type": "string", "format": "uri"},
            "n": {"type": ["integer", "null"], "minimum": -5, "exclusiveMaximum": -2},
            "ratio": {"type": "number", "exclusiveMinimum": 0.25, "maximum": 0.5, "multipleOf": 0.125},
            "mode": {"enum": ["fast", "slow", None]},
            "fixed": {"const": 7},
            "nullable": {"type": "string", "nullable": True},
            "choice": {"oneOf": [{"type": "null"}, {"type": "integer", "minimum": 100}]},
            "map": {
                "type": "object",
                "additionalProperties": {"type": "array", "items": {"type": "boolean"}},
            },
            "tuple": {
                "type": "array",
                "prefixItems": [{"type": "string"}, {"type": "number"}],
                "items": False,
            },
            "unique": {"type": "array", "items": {"enum": [1, 2, 3]}, "minItems": 3, "uniqueItems": True},
            "merged": {
                "allOf": [
                    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                    {"properties": {"b": {"type": "string", "minLength": 4}}, "required": ["b"]},
                ]
            },
        },
        "required": ["when", "n", "ratio", "mode", "fixed", "choice", "map", "tuple", "unique", "merged"],
        "additionalProperties": False,
    },
    {  # draft-4 style exclusive bounds and tuple items
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {
            "x": {"type": "integer", "minimum": 3, "exclusiveMinimum": True, "maximum": 4},
            "t": {"type": "array", "items": [{"type": "integer"}, {"type": "string"}]},
        },
        "required": ["x", "t"],
    },
    {  # a recursive linked list through $defs, required link but nullable
        "type": "object",
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "value": {"type": "integer"},
                    "next": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]},
                },
                "required": ["value", "next"],
            }
        },
        "properties": {"head": {"$ref": "#/$defs/Node"}},
        "required": ["head"],
    },
]


def validate(arguments: dict[str, Any], schema: dict[str, Any]) -> None:
    json.dumps(arguments)  # plain JSON data only
    if jsonschema is None:
        check(arguments, schema, schema, "$")
        return
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    validator.validate(arguments)


_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "null": type(None),
}


def check(value: Any, schema: Any, root: dict[str, Any], path: str) -> None:
    """The subset of JSON schema the schemas above use: types, required, enum, const, bounds, unions."""
    if schema is True or schema == {}:
        return
    assert schema is not False, f"{path}: no value allowed"
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"][2:].split("/"):
            target = target[part]
        check(value, target, root, path)
    for sub in schema.get("allOf", ()):
        check(value, sub, root, path)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            passed = 0
            for sub in schema[key]:
                try:
                    check(value, sub, root, path)
                    passed += 1
                except AssertionError:
                    pass
            assert passed >= 1 if key == "anyOf" else passed == 1, f"{path}: {key} not satisfied by {value!r}"
    if "const" in schema:
        assert value == schema["const"], path
    if "enum" in schema:
        assert value in schema["enum"], path
    kinds = schema.get("type")
    if kinds is not None:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        ok = any(
            isinstance(value, _TYPES[k]) and not (k in ("integer", "number") and isinstance(value, bool))
            for k in kinds
        )
        assert ok, f"{path}: {value!r} is not {kinds}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        low, high = schema.get("minimum"), schema.get("maximum")
        low_ex, high_ex = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        if low_ex is True:
            low_ex, low = low, None
        if high_ex is True:
            high_ex, high = high, None
        assert low is None or value >= low, path
        assert high is None or value <= high, path
        assert low_ex in (None, False) or value > low_ex, path
        assert high_ex in (None, False) or value < high_ex, path
        if "multipleOf" in schema:
            assert (value / schema["multipleOf"]).is_integer(), path
    if isinstance(value, str):
        assert len(value) >= schema.get("minLength", 0), path
        assert len(value) <= schema.get("maxLength", len(value)), path
    if isinstance(value, list):
        assert len(value) >= schema.get("minItems", 0), path
        prefix = schema.get("prefixItems") or (
            schema["items"] if isinstance(schema.get("items"), list) else []
        )
        rest = schema.get("items", {}) if not isinstance(schema.get("items"), list) else {}
        for i, item in enumerate(value):
            check(item, prefix[i] if i < len(prefix) else rest, root, f"{path}[{i}]")
        if schema.get("uniqueItems"):
            assert len({json.dumps(v, sort_keys=True) for v in value}) == len(value), path
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name in schema.get("required", ()):
            assert name in value, f"{path}: {name} missing"
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in properties:
                check(item, properties[name], root, f"{path}.{name}")
            else:
                assert extra is not False, f"{path}: unexpected {name}"
                check(item, extra, root, f"{path}.{name}")


@pytest.mark.parametrize(
    "schema", HAND_WRITTEN_SCHEMAS, ids=lambda s: ",".join(s.get("properties", {})) or "empty"
)
@pytest.mark.parametrize("seed", [0, 1, 7, 123])
def test_example_arguments_satisfy_hand_written_schemas(schema: dict[str, Any], seed: int) -> None:
    arguments = example_arguments(schema, seed=seed)
    validate(arguments, schema)
    assert set(schema.get("required", ())) <= set(arguments)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 50])
def test_example_arguments_satisfy_pydantic_schemas_and_validate_back(seed: int) -> None:
    schema = TypeAdapter(Order).json_schema()
    arguments = example_arguments(schema, seed=seed)
    validate(arguments, schema)
    order = Order.model_validate(arguments)  # what a tool taking an Order would do with them
    assert order.quantity in (12, 15, 18)
    assert len(order.flags) >= 2
    assert order.address.zip_code == "75001"


def test_example_arguments_are_deterministic_and_vary_with_the_seed() -> None:
    schema = TypeAdapter(Order).json_schema()
    assert example_arguments(schema, seed=4) == example_arguments(schema, seed=4)
    assert example_arguments(schema, seed=4) != example_arguments(schema, seed=5)


def test_example_arguments_explain_impossible_schemas() -> None:
    infinite = {
        "type": "object",
        "$defs": {
            "Loop": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Loop"}}, "required": ["next"]}
        },
        "properties": {"start": {"$ref": "#/$defs/Loop"}},
        "required": ["start"],
    }
    with pytest.raises(ValueError, match="recursive type"):
        example_arguments(infinite)
    with pytest.raises(ValueError, match="points to nothing"):
        example_arguments({"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}})
    with pytest.raises(ValueError, match="only local"):
        example_arguments({"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}})
    with pytest.raises(ValueError, match="no integer satisfies"):
        example_arguments(
            {"type": "object", "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 4}}}
        )
    with pytest.raises(ValueError, match="must describe an object"):
        example_arguments({"type": "string"})


def spec_for(name: str, schema: dict[str, Any]) -> ToolSpecification:
    return ToolSpecification(name, f"The {name} tool", schema)


async def test_test_model_calls_every_tool_with_valid_arguments_then_summarises() -> None:
    specs = [spec_for(f"tool_{i}", schema) for i, schema in enumerate(HAND_WRITTEN_SCHEMAS)]
    specs.append(spec_for("place_order", TypeAdapter(Order).json_schema()))
    model = TestModel()
    request = ChatRequest([UserMessage("go")], specs)
    events = await collect(model.stream(request))
    calls = assert_tool_stream_well_formed(events)
    assert [calls[i].name for i in range(len(specs))] == [s.name for s in specs]
    for spec, call in zip(specs, (calls[i] for i in range(len(specs)))):
        validate(json.loads(call.arguments), spec.parameters)
    assert final(events).finish_reason is FinishReason.TOOL_EXECUTION

    results = [ToolExecutionResultMessage(c.id, c.name, f"result of {c.name}") for c in calls.values()]
    results[1] = ToolExecutionResultMessage(results[1].id, results[1].tool_name, "failed", is_error=True)
    follow_up = ChatRequest([UserMessage("go"), final(events).ai_message, *results], specs)
    answer = await model.chat(follow_up)
    assert answer.finish_reason is FinishReason.STOP
    summary = json.loads(answer.text or "")
    assert list(summary) == [s.name for s in specs]
    assert summary["tool_0"] == "result of tool_0"
    assert summary["tool_1"] == "failed"
    assert model.requests == [request, follow_up]


async def test_test_model_respects_call_tools_tool_choice_and_final_text() -> None:
    specs = [spec_for(name, {"type": "object", "properties": {"x": {"type": "integer"}}}) for name in "abc"]
    only_b = await TestModel(call_tools=["b", "not_offered"]).chat(ChatRequest([UserMessage("go")], specs))
    assert [c.name for c in only_b.ai_message.tool_execution_requests] == ["b"]

    forced = await TestModel().chat(ChatRequest([UserMessage("go")], specs, ToolChoice.tool("c")))
    assert [c.name for c in forced.ai_message.tool_execution_requests] == ["c"]

    none = await TestModel().chat(ChatRequest([UserMessage("go")], specs, ToolChoice.NONE))
    assert none.text == "success (no tool calls)"
    assert (await TestModel(final_text="done").chat(ChatRequest([UserMessage("go")]))).text == "done"

    call = only_b.ai_message.tool_execution_requests[0]
    results = ChatRequest(
        [UserMessage("go"), only_b.ai_message, ToolExecutionResultMessage(call.id, "b", "7")], specs
    )
    assert (await TestModel(final_text="all done").chat(results)).text == "all done"
    with pytest.raises(ValueError, match="call_tools must be 'all'"):
        TestModel(call_tools="b")  # type: ignore[arg-type]


async def test_test_model_summary_lists_repeated_tools() -> None:
    ai = AiMessage(
        tool_execution_requests=[ToolExecutionRequest("1", "t", "{}"), ToolExecutionRequest("2", "t", "{}")]
    )
    request = ChatRequest(
        [
            UserMessage("go"),
            ai,
            ToolExecutionResultMessage("1", "t", "x"),
            ToolExecutionResultMessage("2", "t", "y"),
        ]
    )
    assert json.loads((await TestModel().chat(request)).text or "") == {"t": ["x", "y"]}
