"""From the model's argument text to keyword arguments, and the errors a model reads for bad ones."""

from __future__ import annotations

import datetime
import decimal
import enum
import uuid
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field, field_validator

from agentloop import P, ToolArgumentsError, ToolContext, ToolMemoryId, tool
from agentloop._tools._tool import Tool
from agentloop._tools._toolset import resolve_tools
from tests.tool_samples import CASES, Node, Person, Point, Unit


def prepared(func: Any, arguments: str) -> dict[str, Any]:
    (t,) = resolve_tools(func)
    result = t.prepare(arguments)
    assert result is not None
    return result


def error(func: Any, arguments: str) -> str:
    (t,) = resolve_tools(func)
    with pytest.raises(ToolArgumentsError) as info:
        t.prepare(arguments)
    assert info.value.tool_name == t.name
    assert info.value.message == str(info.value)
    return info.value.message


class Temperature(str, enum.Enum):
    C = "C"
    F = "F"


@tool
def get_weather(city: Annotated[str, P("City")], unit: Temperature = Temperature.C, days: int = 1) -> str:
    return city


# -- valid arguments -----------------------------------------------------------------------------------------


def test_arguments_are_validated_and_coerced() -> None:
    assert prepared(get_weather, '{"city": "Paris", "unit": "F", "days": "3"}') == {
        "city": "Paris",
        "unit": Temperature.F,
        "days": 3,
    }


def test_defaults_fill_what_the_model_left_out() -> None:
    assert prepared(get_weather, '{"city": "Paris"}') == {"city": "Paris", "unit": Temperature.C, "days": 1}


@pytest.mark.parametrize("blank", ["", " ", "\n\t "])
def test_blank_arguments_mean_an_empty_object(blank: str) -> None:
    assert prepared(CASES["no_params"], blank) == {}
    assert prepared(CASES["optionals"], blank + '{"required_nullable": null}') == {
        "required_nullable": None,
        "maybe": None,
        "fallback": 5,
        "unset": "",
    }


def test_unknown_fields_are_ignored() -> None:
    assert prepared(get_weather, '{"city": "Paris", "country": "FR", "p0": "x"}') == {
        "city": "Paris",
        "unit": Temperature.C,
        "days": 1,
    }


def test_injected_parameters_cannot_be_set_by_the_model() -> None:
    @tool
    def whoami(user: Annotated[str, ToolMemoryId], ctx: ToolContext, name: str = "") -> str:
        return user

    # Spoofed values for injected parameters are dropped; the runtime injects the real ones.
    assert prepared(whoami, '{"user": "admin", "ctx": {"memory_id": "admin"}, "name": "x"}') == {"name": "x"}


def test_p_required_false_without_default_is_passed_as_none() -> None:
    @tool
    def search(query: str, limit: Annotated[int, P("Max results", required=False)]) -> str:
        return query

    assert prepared(search, '{"query": "q"}') == {"query": "q", "limit": None}
    assert prepared(search, '{"query": "q", "limit": "5"}') == {"query": "q", "limit": 5}


def test_rich_types_are_built_from_json() -> None:
    kwargs = prepared(
        CASES["formats"],
        '{"when": "2024-05-01T10:00:00Z", "day": "2024-05-01", '
        '"ident": "12345678-1234-5678-1234-567812345678", "amount": "10.25"}',
    )
    assert kwargs["when"] == datetime.datetime(2024, 5, 1, 10, tzinfo=datetime.timezone.utc)
    assert kwargs["day"] == datetime.date(2024, 5, 1)
    assert kwargs["ident"] == uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert kwargs["amount"] == decimal.Decimal("10.25")

    kwargs = prepared(
        CASES["collections"],
        '{"numbers": [1], "tags": ["a", "a"], "pair": [1, "x"], "ratios": [], "names": ["n"]}',
    )
    assert kwargs == {"numbers": [1], "tags": {"a"}, "pair": (1, "x"), "ratios": (), "names": ["n"]}

    kwargs = prepared(CASES["models"], '{"person": {"name": "A", "age": 3}, "people": []}')
    assert kwargs["person"] == Person(name="A", age=3)
    assert prepared(CASES["dataclasses"], '{"point": {"x": 1}, "points": [{"x": 2, "y": 3}]}') == {
        "point": Point(1.0, 0.0),
        "points": [Point(2.0, 3.0)],
    }
    tree = prepared(
        CASES["recursive"],
        '{"tree": {"value": 1, "children": [{"value": 2}]}, "category": {"name": "a", "parent": null}}',
    )
    assert tree["tree"] == Node(value=1, children=[Node(value=2)])
    assert prepared(CASES["enums"], '{"unit": "F", "priority": 2}') == {"unit": Unit.F, "priority": 2}


# -- errors the model reads ----------------------------------------------------------------------------------


def test_the_enum_error_reads_as_documented() -> None:
    assert (
        error(get_weather, '{"city": "Paris", "unit": "K"}')
        == "Invalid arguments for tool 'get_weather': unit: Input should be 'C' or 'F' (got 'K')"
    )


def test_a_missing_required_field() -> None:
    assert (
        error(get_weather, '{"unit": "C"}')
        == "Invalid arguments for tool 'get_weather': city: required field is missing"
    )


def test_a_wrong_type() -> None:
    assert error(get_weather, '{"city": "Paris", "days": "soon"}') == (
        "Invalid arguments for tool 'get_weather': days: Input should be a valid integer, "
        "unable to parse string as an integer (got 'soon')"
    )


def test_several_errors_are_all_named() -> None:
    assert error(get_weather, '{"unit": "K", "days": []}') == (
        "Invalid arguments for tool 'get_weather': city: required field is missing; "
        "unit: Input should be 'C' or 'F' (got 'K'); days: Input should be a valid integer (got [])"
    )


def test_nested_paths_name_fields_and_list_positions() -> None:
    message = error(
        CASES["models"],
        '{"person": {"name": "A", "age": 1, "address": {"street": "s"}}, '
        '"people": [{"name": "B", "age": 1}, {"name": "C", "age": -1}]}',
    )
    assert message == (
        "Invalid arguments for tool 'models': person.address.zip_code: required field is missing; "
        "people[1].age: Input should be greater than or equal to 0 (got -1)"
    )


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"city": "Paris"', "not valid JSON (Input data was truncated)"),
        ("{'city': 'Paris'}", "not valid JSON (JSON is malformed"),
        ('{"city": "Paris"} trailing', "not valid JSON (JSON is malformed: trailing characters"),
        ("city=Paris", "not valid JSON"),
        ('{"city": ' + "[" * 100_000 + "]" * 100_000 + "}", "not valid JSON (maximum recursion depth"),
    ],
    ids=["truncated", "single-quotes", "trailing", "not-json", "too-deep"],
)
def test_invalid_json(arguments: str, expected: str) -> None:
    message = error(get_weather, arguments)
    assert message.startswith(f"Invalid arguments for tool 'get_weather': {expected}")
    assert message.endswith("send the arguments as one JSON object")


@pytest.mark.parametrize(
    ("arguments", "kind"),
    [
        ("[1, 2]", "an array"),
        ('"Paris"', "a string"),
        ("3", "a number"),
        ("true", "a boolean"),
        ("null", "null"),
    ],
)
def test_json_that_is_not_an_object(arguments: str, kind: str) -> None:
    assert error(get_weather, arguments) == (
        f"Invalid arguments for tool 'get_weather': expected a JSON object of named arguments, got {kind}"
    )


def test_broken_json_is_never_repaired() -> None:
    # A trailing comma or a missing brace is an error for the model to fix, not a guess.
    error(get_weather, '{"city": "Paris",}')
    error(get_weather, '{"city": "Paris"')


def test_long_inputs_are_shortened_in_messages() -> None:
    message = error(get_weather, '{"city": "Paris", "days": "' + "x" * 500 + '"}')
    assert len(message) < 250
    assert "..." in message


def test_at_most_five_errors_are_listed() -> None:
    @tool
    def many(a: int, b: int, c: int, d: int, e: int, f: int, g: int) -> None: ...

    message = error(many, "{}")
    assert message.count("required field is missing") == 5
    assert message.endswith("; and 2 more errors")


def test_errors_raised_by_a_model_validator_become_argument_errors() -> None:
    class Range(BaseModel):
        low: int
        high: int

        @field_validator("high")
        @classmethod
        def above_low(cls, value: int) -> int:
            if value > 1000:
                raise ValueError("high must be at most 1000")
            return value

    @tool
    def pick(span: Range, limit: Annotated[int, Field(gt=0)] = 1) -> None: ...

    assert error(pick, '{"span": {"low": 1, "high": 5000}, "limit": 0}') == (
        "Invalid arguments for tool 'pick': span.high: Value error, high must be at most 1000 (got 5000); "
        "limit: Input should be greater than 0 (got 0)"
    )


def test_programmatic_tools_see_the_raw_arguments() -> None:
    from agentloop import ToolSpecification

    t = Tool(ToolSpecification(name="raw"), lambda request, context: request.arguments)
    assert t.prepare("{broken") is None


def test_lone_surrogates_in_arguments_are_repaired_not_refused() -> None:
    """Arguments built in code may hold lone surrogates (no model can send one): replaced with U+FFFD, as
    every text that crosses a boundary (agentloop._values._text)."""
    assert prepared(get_weather, '{"city": "Par\ud800is"}')["city"] == "Par\ufffdis"
