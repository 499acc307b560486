"""What the model reads for what a tool returned."""

from __future__ import annotations

import datetime
import decimal
import enum
import uuid
from typing import Any

import pytest
from pydantic import BaseModel

from agentloop import ToolExecutionError, ToolExecutionRequest, execute_tool_calls, tool
from agentloop._values._convert import ResultConversionError, result_to_text
from tests.tool_samples import Address, Person, Point, Priority, Unit


class Color(enum.Enum):
    RED = "red"


class Tagged(str):
    pass


class Report(BaseModel):
    when: datetime.datetime
    tags: set[str]
    people: list[Person]


UTC = datetime.timezone.utc

TABLE: list[tuple[str, Any, str]] = [
    ("str as is", "689706.486532", "689706.486532"),
    ("empty str", "", ""),
    ("str with quotes", 'say "hi"', 'say "hi"'),
    ("str subclass", Tagged("plain"), "plain"),
    ("str enum", Unit.F, "F"),
    ("None", None, "Success"),
    ("int", 3, "3"),
    ("float", 1.5, "1.5"),
    ("bool", True, "true"),
    ("list", [1, "a", None], '[1,"a",null]'),
    ("tuple", (1, 2), "[1,2]"),
    ("set", {3}, "[3]"),
    ("frozenset", frozenset({"x"}), '["x"]'),
    ("dict", {"a": 1, "b": [True]}, '{"a":1,"b":[true]}'),
    ("pydantic model", Person(name="A", age=3), '{"name":"A","age":3,"address":null}'),
    (
        "nested model",
        Person(name="A", age=3, address=Address(street="1 rue", zip_code="75001")),
        '{"name":"A","age":3,"address":{"street":"1 rue","zip_code":"75001","country":"FR"}}',
    ),
    ("dataclass", Point(1.0), '{"x":1.0,"y":0.0}'),
    ("TypedDict value", {"title": "Heat", "year": 1995}, '{"title":"Heat","year":1995}'),
    ("datetime", datetime.datetime(2024, 5, 1, 10, 30, tzinfo=UTC), '"2024-05-01T10:30:00Z"'),
    ("naive datetime", datetime.datetime(2024, 5, 1, 10, 30), '"2024-05-01T10:30:00"'),
    ("date", datetime.date(2024, 5, 1), '"2024-05-01"'),
    ("time delta", datetime.timedelta(minutes=90), '"PT1H30M"'),
    ("enum", Color.RED, '"red"'),
    ("int enum", Priority.HIGH, "2"),
    ("uuid", uuid.UUID(int=1), '"00000000-0000-0000-0000-000000000001"'),
    ("decimal", decimal.Decimal("10.25"), '"10.25"'),
    ("bytes", b"abc", '"abc"'),
    (
        "model with datetime and set",
        Report(when=datetime.datetime(2024, 1, 1, tzinfo=UTC), tags={"t"}, people=[]),
        '{"when":"2024-01-01T00:00:00Z","tags":["t"],"people":[]}',
    ),
    ("dict of enums", {"unit": Unit.C, "color": Color.RED}, '{"unit":"C","color":"red"}'),
]


@pytest.mark.parametrize(("value", "text"), [(v, t) for _, v, t in TABLE], ids=[n for n, _, _ in TABLE])
def test_conversion_table(value: Any, text: str) -> None:
    assert result_to_text(value) == text


@pytest.mark.parametrize(
    "value", [object(), {"key": object()}, [1, lambda: 2]], ids=["object", "nested", "lambda"]
)
def test_unserialisable_results_raise_a_clear_error(value: Any) -> None:
    with pytest.raises(
        ResultConversionError, match=r"cannot convert a result of type .* to JSON.*result_converter"
    ):
        result_to_text(value)


def _call(name: str, arguments: str = "{}") -> ToolExecutionRequest:
    return ToolExecutionRequest(f"id-{name}", name, arguments)


async def test_an_unserialisable_result_becomes_an_error_result_not_a_crash() -> None:
    class Opaque:
        pass

    @tool
    def opaque() -> Opaque:
        return Opaque()

    @tool
    def fine() -> int:
        return 1

    first, second = await execute_tool_calls([_call("opaque"), _call("fine")], [opaque, fine])
    assert first.is_error
    assert first.has_failed
    assert isinstance(first.error, ToolExecutionError)
    assert first.result.startswith(
        "Tool 'opaque' returned a result that cannot be sent to the model: "
        "cannot convert a result of type Opaque"
    )
    assert (second.result, second.is_error) == ("1", False)


async def test_a_result_converter_replaces_the_default_rules() -> None:
    seen: list[Any] = []

    def as_celsius(value: Any) -> str:
        seen.append(value)
        return f"{value} °C" if value is not None else "no reading"

    @tool(result_converter=as_celsius)
    def temperature(city: str) -> float | None:
        return 21.5 if city == "Paris" else None

    paris, nowhere = await execute_tool_calls(
        [_call("temperature", '{"city": "Paris"}'), _call("temperature", '{"city": "?"}')], temperature
    )
    assert paris.result == "21.5 °C"
    assert paris.result_object == 21.5
    assert nowhere.result == "no reading"  # the converter sees None too
    assert sorted(seen, key=repr) == [21.5, None]  # calls ran concurrently: any order


async def test_a_converter_that_fails_or_returns_a_non_string_gives_an_error_result() -> None:
    @tool(result_converter=lambda value: 42)  # type: ignore[arg-type, return-value]
    def wrong_type() -> str:
        return "x"

    def explode(value: Any) -> str:
        raise RuntimeError("converter broke")

    @tool(result_converter=explode)
    def broken() -> str:
        return "x"

    wrong, failed = await execute_tool_calls([_call("wrong_type"), _call("broken")], [wrong_type, broken])
    assert wrong.is_error
    assert "result_converter of tool 'wrong_type' returned int, expected str" in wrong.result
    assert failed.is_error
    assert "converter broke" in failed.result


async def test_result_object_keeps_what_the_tool_returned() -> None:
    person = Person(name="A", age=1)

    @tool
    def who() -> Person:
        return person

    (execution,) = await execute_tool_calls([_call("who")], who)
    assert execution.result_object is person
    assert execution.result == '{"name":"A","age":1,"address":null}'
    assert execution.result_message().text == execution.result
