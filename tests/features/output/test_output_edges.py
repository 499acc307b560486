"""Structured output at its edges (issue 23): JSON with prose after it, recursive models nested deep, memory
when the retries run out, partial outputs across a retry, free-form maps under the providers' strict modes."""

from __future__ import annotations

import json
from typing import Any, Literal, Optional

import pydantic
import pytest

from agentloop import (
    Agent,
    AiMessage,
    MessageWindowChatMemory,
    OutputValidationError,
    PartialOutput,
    UserMessage,
    tool,
)
from agentloop.testing import ScriptedChatModel
from tests.runtime_helpers import assert_valid_for_provider, calls

MODES = ["tool", "native", "prompted"]


class Point(pydantic.BaseModel):
    x: int
    y: int


class Invoice(pydantic.BaseModel):
    customer: str
    total: float
    items: list[str] = []


def answer(mode: str, wire: dict[str, Any], call_id: str = "call_out") -> AiMessage:
    if mode == "tool":
        return calls(("final_result", wire, call_id))
    return AiMessage(json.dumps(wire))


# -- prompted mode: the JSON among prose --------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"x": 1, "y": 2}\nHope this helps.',
        'Here it is: {"x": 1, "y": 2}',
        'Here it is:\n{"x": 1, "y": 2}\nHope this helps {as always}.',
        'Sure, {as asked}: {"x": 1, "y": 2} (done)',
        '```json\n{"x": 1, "y": 2}\n```\nAnything else?',
        '  {"x": 1, "y": 2}  ',
    ],
    ids=["prose-after", "prose-before", "both-with-braces", "brace-before", "fence-then-prose", "spaces"],
)
async def test_prompted_json_among_prose_is_found(text: str) -> None:
    model = ScriptedChatModel([text])
    result = await Agent(model, output_type=Point, output_mode="prompted").chat("x")
    assert result.output == Point(x=1, y=2)
    assert len(model.requests) == 1  # no correction needed

    streamed = Agent(ScriptedChatModel([text], chunk_size=3), output_type=Point, output_mode="prompted")
    stream = streamed.stream("x")
    outputs = [o async for o in stream.outputs()]
    assert outputs[-1] == Point(x=1, y=2) and stream.result.output == Point(x=1, y=2)


async def test_prompted_answer_without_valid_json_is_still_corrected() -> None:
    model = ScriptedChatModel(['{"x": 1, "y": }\nHope this helps.', '{"x": 1, "y": 2}'])
    result = await Agent(model, output_type=Point, output_mode="prompted").chat("x")
    assert result.output == Point(x=1, y=2)
    correction = model.requests[1].messages[-1]
    assert isinstance(correction, UserMessage) and "Invalid JSON" in correction.text


# -- recursive models ----------------------------------------------------------------------------------


class Tree(pydantic.BaseModel):
    """A node of a tree."""

    name: str
    children: list[Tree] = []


class Chain(pydantic.BaseModel):
    name: str
    next: Optional[Chain] = None


def tree(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"name": "leaf", "children": []}
    for level in range(depth):
        node = {"name": f"n{level}", "children": [node]}
    return node


def chain(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"name": "end"}
    for level in range(depth):
        node = {"name": f"n{level}", "next": node}
    return node


def depth_of(value: Any, attribute: str) -> int:
    depth = 0
    while True:
        inner = getattr(value, attribute)
        inner = inner[0] if isinstance(inner, list) and inner else inner
        if not isinstance(value, pydantic.BaseModel) or inner in (None, []):
            return depth
        value, depth = inner, depth + 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("model_type", "wire", "attribute"), [(Tree, tree(100), "children"), (Chain, chain(200), "next")]
)
async def test_a_recursive_model_nested_deep_is_accepted(
    mode: str, model_type: Any, wire: dict[str, Any], attribute: str
) -> None:
    model = ScriptedChatModel([answer(mode, wire)])
    agent = Agent(model, output_type=model_type, output_mode=mode)  # type: ignore[arg-type]
    result = await agent.chat("x")
    assert depth_of(result.output, attribute) == (100 if model_type is Tree else 200)
    # Its schema is the object itself (not wrapped in {"result": ...}), recursion through $defs.
    request = model.requests[0]
    if mode == "tool":
        sent = request.tool_specifications[0].parameters
    elif mode == "native":
        assert request.response_format is not None
        sent = request.response_format.schema
    else:
        sent = json.loads(str(request.messages[0].text).split("\n", 1)[1])
    assert sent["type"] == "object" and "result" not in sent["properties"] and "$defs" in sent

    chunked = ScriptedChatModel([answer(mode, wire)], chunk_size=50)
    streamed = Agent(chunked, output_type=model_type, output_mode=mode)  # type: ignore[arg-type]
    stream = streamed.stream("x")
    outputs = [o async for o in stream.outputs()]
    assert outputs[-1] == result.output and len(outputs) > 2


@pytest.mark.parametrize("mode", MODES)
async def test_a_model_nested_past_what_validation_handles_is_a_correction(mode: str) -> None:
    model = ScriptedChatModel([answer(mode, chain(400)), answer(mode, chain(3))])
    result = await Agent(model, output_type=Chain, output_mode=mode).chat("x")  # type: ignore[arg-type]
    assert result.output.name == "n2"
    correction = model.requests[1].messages[-1]
    assert "levels" in correction.text and len(correction.text) < 2000  # a deep path, shortened


# -- memory when the retries run out -------------------------------------------------------------------


@tool
def lookup(name: str) -> str:
    """Looks a customer up."""
    return f"{name} is a customer"


@pytest.mark.parametrize("mode", MODES)
async def test_output_validation_error_stores_nothing_in_any_mode(mode: str) -> None:
    memory = MessageWindowChatMemory(max_messages=100)
    await memory.add([UserMessage("earlier"), AiMessage("earlier answer")])
    bad = answer(mode, {"customer": "Acme"})  # total missing
    if mode == "tool":  # a failed output call beside a function call, between two failed outputs
        script = [bad, calls(("lookup", {"name": "Acme"}), ("final_result", {"customer": "Acme"})), bad]
    else:  # a function round between failed answers
        script = [bad, calls(("lookup", {"name": "Acme"})), bad, bad]
    model = ScriptedChatModel(script)
    agent = Agent(
        model,
        output_type=Invoice,
        output_mode=mode,  # type: ignore[arg-type]
        output_retries=2,
        memory=memory,
        tools=[lookup],
    )
    with pytest.raises(OutputValidationError):
        await agent.chat("extract")
    assert len(model.requests) == len(script)
    assert await memory.messages() == [UserMessage("earlier"), AiMessage("earlier answer")]
    # The conversation goes on from where it was.
    agent.model = ScriptedChatModel([answer(mode, {"customer": "Acme", "total": 1})])
    assert (await agent.chat("again")).output == Invoice(customer="Acme", total=1)
    assert_valid_for_provider(await memory.messages())


@pytest.mark.parametrize("mode", MODES)
async def test_a_corrected_output_stores_the_attempts_with_it(mode: str) -> None:
    memory = MessageWindowChatMemory(max_messages=100)
    model = ScriptedChatModel(
        [
            answer(mode, {"customer": "Acme"}, "c1"),
            calls(("lookup", {"name": "Acme"})),
            answer(mode, {"customer": "Acme", "total": 3}, "c2"),
        ]
    )
    agent = Agent(
        model,
        output_type=Invoice,
        output_mode=mode,  # type: ignore[arg-type]
        memory=memory,
        tools=[lookup],
    )
    result = await agent.chat("extract")
    assert result.output == Invoice(customer="Acme", total=3)
    stored = await memory.messages()
    assert stored == list(result.messages)
    assert stored[0] == UserMessage("extract") and len(stored) == (7 if mode == "tool" else 6)
    assert_valid_for_provider(stored)


async def test_function_rounds_before_the_first_invalid_output_stay() -> None:
    memory = MessageWindowChatMemory(max_messages=100)
    bad = answer("tool", {"customer": "Acme"})
    model = ScriptedChatModel([calls(("lookup", {"name": "Acme"}, "l1")), bad, bad])
    agent = Agent(model, output_type=Invoice, memory=memory, tools=[lookup])
    with pytest.raises(OutputValidationError):
        await agent.chat("extract")
    stored = await memory.messages()
    assert [type(m).__name__ for m in stored] == ["UserMessage", "AiMessage", "ToolExecutionResultMessage"]
    assert_valid_for_provider(stored)


# -- partial outputs across a retry --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_retry_starts_a_new_sequence_of_partials(mode: str) -> None:
    script = [
        answer(mode, {"customer": "Acme Corporation", "items": ["a", "b", "c"]}, "c1"),  # total missing
        answer(mode, {"customer": "Acme", "total": 2}, "c2"),
    ]
    agent = Agent(ScriptedChatModel(script, chunk_size=4), output_type=Invoice, output_mode=mode)  # type: ignore[arg-type]
    events = [e async for e in agent.stream("x").events() if isinstance(e, PartialOutput)]
    attempts = [e.attempt for e in events]
    assert attempts == sorted(attempts) and attempts[0] == 1 and attempts[-1] == 2
    for attempt in (1, 2):  # monotone within an attempt
        seen: set[str] = set()
        for event in (e for e in events if e.attempt == attempt):
            fields = set(event.output.model_fields_set)
            assert fields >= seen
            seen = fields
    second = [e for e in events if e.attempt == 2]
    assert set(second[0].output.model_fields_set) < {"customer", "items"}  # it starts again from nothing

    again = Agent(ScriptedChatModel(script, chunk_size=4), output_type=Invoice, output_mode=mode)  # type: ignore[arg-type]
    stream = again.stream("x")
    seen_attempts = []
    async for _ in stream.outputs():
        seen_attempts.append(stream.output_attempt)
    assert seen_attempts[0] == 1 and seen_attempts[-1] == 2 and seen_attempts == sorted(seen_attempts)


# -- free-form maps under the providers' strict modes --------------------------------------------------------


class Stock(pydantic.BaseModel):
    sku: str
    count: int


class Scores(pydantic.BaseModel):
    """Scores per player."""

    scores: dict[str, float]
    notes: dict[str, Any] = {}
    grades: dict[Literal["a", "b"], int] = {}
    series: dict[str, list[int]] = {}
    stock: Optional[dict[str, Stock]] = None


SCORES = Scores(
    scores={"ada": 9.5, "bob": 7.0},
    notes={"why": "tie-break", "rounds": 3},
    grades={"a": 1},
    series={"ada": [1, 2]},
    stock={"north": Stock(sku="x", count=2)},
)


def entries(mapping: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": key, "value": value} for key, value in mapping.items()]


# What a strict provider's model writes: every map as its entries (and, for OpenAI, every field present).
SCORES_STRICT: dict[str, Any] = {
    "scores": entries({"ada": 9.5, "bob": 7.0}),
    "notes": entries({"why": "tie-break", "rounds": 3}),
    "grades": entries({"a": 1}),
    "series": entries({"ada": [1, 2]}),
    "stock": entries({"north": {"sku": "x", "count": 2}}),
}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_map_becomes_entries_that_the_strict_rules_accept(provider: Any) -> None:
    import jsonschema

    from agentloop._features.output import output_schema
    from agentloop.models import strict_schema
    from agentloop.models._strict import restore_maps
    from agentloop.testing._schema_rules import schema_problem

    schema = output_schema(Scores).whole.schema
    strict = strict_schema(schema, provider=provider)
    assert schema_problem(strict, provider) is None
    scores = strict["properties"]["scores"]
    assert scores["type"] == "array" and scores["items"]["required"] == ["key", "value"]
    assert scores["items"]["additionalProperties"] is False
    assert strict["properties"]["grades"]["items"]["properties"]["key"]["enum"] == ["a", "b"]
    jsonschema.validate(SCORES_STRICT, strict)  # the strict schema admits the value's strict form...
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**SCORES_STRICT, "scores": {"ada": 9.5}}, strict)  # ...and only that form
    assert Scores.model_validate(restore_maps(schema, SCORES_STRICT)) == SCORES
    assert restore_maps(schema, SCORES.model_dump()) == SCORES.model_dump()  # an object map stays


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("streaming", [False, True])
async def test_a_map_output_through_the_fake_providers(provider: str, streaming: bool) -> None:
    from agentloop.models import AnthropicChatModel, ChatModel, OpenAIChatModel
    from agentloop.testing import FakeAnthropicServer, FakeOpenAIServer

    server: Any = FakeOpenAIServer() if provider == "openai" else FakeAnthropicServer()
    with server:
        model: ChatModel
        if provider == "openai":
            model = OpenAIChatModel("gpt-test", base_url=server.base_url, api_key="k", max_retries=0)
        else:
            model = AnthropicChatModel("claude-test", base_url=server.base_url, api_key="k", max_retries=0)
        server.add(AiMessage(json.dumps(SCORES_STRICT)))
        agent = Agent(model, output_type=Scores, output_mode="native")
        if streaming:
            sent: list[Scores] = []  # every partial sent (the callbacks see them all)
            stream = agent.stream("scores?").on_partial_output(sent.append)
            outputs = [o async for o in stream.outputs()]  # the latest at the loop's pace: may skip some
            result = stream.result
            grown = [len(o.scores) for o in sent if "scores" in o.model_fields_set]
            assert grown[0] < 2 and grown[-1] == 2 and grown == sorted(grown)  # the map grows as it streams
            assert outputs[-1] == result.output and all(o in sent for o in outputs[:-1])
        else:
            result = await agent.chat("scores?")
        assert result.output == SCORES
        body = server.requests[0].json
        schema = (
            body["response_format"]["json_schema"]["schema"]
            if provider == "openai"
            else body["output_config"]["format"]["schema"]
        )
        assert schema["properties"]["scores"]["type"] == "array"


@pytest.mark.parametrize("mode", ["tool", "prompted"])
async def test_a_map_written_as_an_object_is_still_accepted(mode: str) -> None:
    model = ScriptedChatModel([answer(mode, SCORES.model_dump())])
    result = await Agent(model, output_type=Scores, output_mode=mode).chat("x")  # type: ignore[arg-type]
    assert result.output == SCORES


async def test_a_map_output_type_is_wrapped_and_restored() -> None:
    model = ScriptedChatModel([AiMessage(json.dumps({"result": entries({"x": 1.5})}))])
    agent = Agent(model, output_type=dict[str, float], output_mode="native")
    assert (await agent.chat("x")).output == {"x": 1.5}


# -- partial outputs, validated incrementally --------------------------------------------------------------


class Line(pydantic.BaseModel):
    sku: str
    quantity: int


class Order(pydantic.BaseModel):
    customer: str
    lines: list[Line]
    note: str = ""


ORDER = {
    "customer": "Northwind",
    "lines": [{"sku": f"S{n}", "quantity": n} for n in range(1, 30)],
    "note": "deliver before noon",
}


@pytest.mark.parametrize("output_type", [Order, list[Line]], ids=["model", "wrapped-list"])
async def test_partials_of_a_long_list_grow_item_by_item_and_match_the_final(output_type: Any) -> None:
    wire = ORDER if output_type is Order else {"result": ORDER["lines"]}
    model = ScriptedChatModel([calls(("final_result", wire))], chunk_size=3)
    outputs = [o async for o in Agent(model, output_type=output_type).stream("x").outputs()]
    final = outputs[-1]
    lines = [
        o.lines if isinstance(o, Order) else o
        for o in outputs[:-1]
        if not isinstance(o, Order) or "lines" in o.model_fields_set
    ]
    whole = final.lines if isinstance(final, Order) else final
    assert len(whole) == 29
    lengths = [len(items) for items in lines]
    assert lengths == sorted(lengths) and len(set(lengths)) >= 25  # one partial (at least) per item
    for items in lines:  # every item shown is whole and validated, as in the final value
        assert items == whole[: len(items)]
    if isinstance(final, Order):
        assert final == Order.model_validate(ORDER)
        notes = [o.note for o in outputs[:-1] if "note" in o.model_fields_set]
        assert notes and all("deliver before noon".startswith(n) for n in notes)
