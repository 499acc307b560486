"""Property tests: arguments drawn from a tool's own JSON schema validate; anything else gives
`ToolArgumentsError`, never another exception type."""

from __future__ import annotations

import json
from datetime import timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloop import ToolArgumentsError
from agentloop._tools._tool import Tool
from agentloop._tools._toolset import resolve_tools
from tests.tool_samples import CASES

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MAX_DEPTH = 3

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)


def from_schema(schema: dict[str, Any], defs: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Values matching the subset of JSON schema agentloop generates (recursion cut at MAX_DEPTH)."""
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[-1]]
        return from_schema({**target, **{k: v for k, v in schema.items() if k != "$ref"}}, defs, depth + 1)
    if "anyOf" in schema:
        branches = schema["anyOf"]
        if depth >= MAX_DEPTH:  # stop recursing: prefer branches without references
            branches = [b for b in branches if "$ref" not in b] or branches
        return st.one_of([from_schema(b, defs, depth) for b in branches])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema.get("type")
    if kind == "string":
        fmt = schema.get("format")
        if fmt == "date-time":
            return st.datetimes(timezones=st.none() | st.just(timezone.utc)).map(lambda d: d.isoformat())
        if fmt == "date":
            return st.dates().map(lambda d: d.isoformat())
        if fmt == "uuid":
            return st.uuids().map(str)
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True)
        return st.text(max_size=20)
    if kind == "integer":
        return st.integers(min_value=schema.get("minimum"), max_value=schema.get("maximum"))
    if kind == "number":
        low, high = schema.get("minimum"), schema.get("maximum")
        return st.floats(low, high, allow_nan=False, allow_infinity=False) | st.integers(
            -(2**53) if low is None else int(low), 2**53 if high is None else int(high)
        )
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        if "prefixItems" in schema:
            return st.tuples(*(from_schema(s, defs, depth) for s in schema["prefixItems"])).map(list)
        if depth >= MAX_DEPTH:
            return st.just([])
        items = from_schema(schema.get("items", {}), defs, depth + 1)
        if schema.get("uniqueItems"):
            return st.lists(items, max_size=3, unique_by=lambda v: json.dumps(v, sort_keys=True))
        return st.lists(items, max_size=3)
    if kind == "object":
        if "properties" in schema:
            required = set(schema.get("required", []))
            properties = {
                k: from_schema(v, defs, depth + 1)
                for k, v in schema["properties"].items()
                if k in required or depth < MAX_DEPTH
            }
            return st.fixed_dictionaries(
                {k: v for k, v in properties.items() if k in required},
                optional={k: v for k, v in properties.items() if k not in required},
            )
        values = from_schema(schema.get("additionalProperties", {}), defs, depth + 1)
        return st.dictionaries(st.text(max_size=8), values, max_size=3)
    return json_values  # no constraint: anything


def _tool(case: str) -> Tool:
    (t,) = resolve_tools(CASES[case])
    return t


def _valid_arguments(case: str) -> st.SearchStrategy[dict[str, Any]]:
    parameters = _tool(case).specification.parameters
    return from_schema(parameters, parameters.get("$defs", {}))  # type: ignore[return-value]


def _accepted_or_argument_error(t: Tool, text: str) -> None:
    error: ToolArgumentsError | None = None
    try:
        kwargs = t.prepare(text)
    except ToolArgumentsError as caught:  # anything else fails the test
        error = caught
    if error is None:
        assert kwargs is not None
        assert set(kwargs) <= set(t.specification.parameters["properties"])
    else:
        assert error.message.startswith(f"Invalid arguments for tool {t.name!r}: ")
        assert error.tool_name == t.name


CASE_NAMES = sorted(CASES)


@pytest.mark.parametrize("case", CASE_NAMES)
@SETTINGS
@given(data=st.data())
def test_arguments_drawn_from_the_schema_validate_and_call_the_tool(case: str, data: st.DataObject) -> None:
    t = _tool(case)
    arguments = data.draw(_valid_arguments(case))
    kwargs = t.prepare(json.dumps(arguments))
    assert kwargs is not None
    assert set(kwargs) == set(t.specification.parameters["properties"])  # defaults fill the rest
    CASES[case](**kwargs)  # the function accepts what validation produced


@pytest.mark.parametrize("case", CASE_NAMES)
@SETTINGS
@given(text=st.text(max_size=60) | json_values.map(json.dumps))
def test_arbitrary_text_is_accepted_or_an_argument_error(case: str, text: str) -> None:
    _accepted_or_argument_error(_tool(case), text)


@pytest.mark.parametrize("case", CASE_NAMES)
@SETTINGS
@given(data=st.data())
def test_corrupted_valid_arguments_give_argument_errors_only(case: str, data: st.DataObject) -> None:
    t = _tool(case)
    arguments = data.draw(_valid_arguments(case))
    if arguments:
        key = data.draw(st.sampled_from(sorted(arguments)))
        arguments[key] = data.draw(json_values)
    _accepted_or_argument_error(t, json.dumps(arguments))


CASES_WITH_REQUIRED = [c for c in CASE_NAMES if _tool(c).specification.parameters.get("required")]


@pytest.mark.parametrize("case", CASES_WITH_REQUIRED)
@SETTINGS
@given(data=st.data())
def test_leaving_out_a_required_argument_names_it(case: str, data: st.DataObject) -> None:
    t = _tool(case)
    arguments = data.draw(_valid_arguments(case))
    missing = data.draw(st.sampled_from(t.specification.parameters["required"]))
    del arguments[missing]
    with pytest.raises(ToolArgumentsError, match=f"{missing}: required field is missing"):
        t.prepare(json.dumps(arguments))


SIMPLE_TYPES = {"string", "integer", "number", "boolean"}


@pytest.mark.parametrize("case", CASE_NAMES)
@SETTINGS
@given(data=st.data())
def test_an_object_where_a_primitive_belongs_names_the_field(case: str, data: st.DataObject) -> None:
    t = _tool(case)
    properties = t.specification.parameters["properties"]
    simple = sorted(k for k, v in properties.items() if v.get("type") in SIMPLE_TYPES)
    if not simple:
        return
    arguments = data.draw(_valid_arguments(case))
    key = data.draw(st.sampled_from(simple))
    arguments[key] = {"not": ["a", "primitive"]}
    with pytest.raises(ToolArgumentsError, match=f": {key}: "):
        t.prepare(json.dumps(arguments))
