"""JSON schemas generated from tool signatures.

Golden files live in tests/golden/schemas/<case>.json, one per kind of parameter. After an intended change,
regenerate them with `AGENTLOOP_REGEN_GOLDEN=1 pytest tests/tools/test_schema.py` and review the diff.
"""

from __future__ import annotations

import enum
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import pytest
from pydantic import Field

from agentloop import IllegalConfigurationError, P, ToolContext, ToolMemoryId, tool, tool_specification_from
from agentloop._tools._schema import compile_signature
from tests.tool_samples import CASES

GOLDEN = Path(__file__).parents[1] / "golden" / "schemas"
REGENERATE = os.environ.get("AGENTLOOP_REGEN_GOLDEN") == "1"


def _walk(schema: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every schema node (dict) with its path, skipping data keywords (enum, default, const)."""
    nodes: list[tuple[str, dict[str, Any]]] = []
    if isinstance(schema, dict):
        nodes.append((path, schema))
        for key, value in schema.items():
            if key in ("properties", "$defs"):
                for name, sub in value.items():
                    nodes += _walk(sub, f"{path}/{key}/{name}")
            elif key in ("items", "additionalProperties"):
                nodes += _walk(value, f"{path}/{key}")
            elif key in ("anyOf", "prefixItems"):
                for i, sub in enumerate(value):
                    nodes += _walk(sub, f"{path}/{key}/{i}")
    return nodes


@pytest.mark.parametrize("case", sorted(CASES))
def test_schema_matches_golden_file(case: str) -> None:
    spec = tool_specification_from(CASES[case])
    actual = {"name": spec.name, "description": spec.description, "parameters": spec.parameters}
    path = GOLDEN / f"{case}.json"
    if REGENERATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(actual, indent=2) + "\n")
    assert path.exists(), f"no golden file {path}; run with AGENTLOOP_REGEN_GOLDEN=1 to create it"
    assert actual == json.loads(path.read_text())


@pytest.mark.parametrize("case", sorted(CASES))
def test_schemas_are_clean(case: str) -> None:
    parameters = tool_specification_from(CASES[case]).parameters
    assert parameters["type"] == "object"
    assert isinstance(parameters["properties"], dict)
    assert list(parameters)[:2] == ["type", "properties"]
    for path, node in _walk(parameters):
        assert "title" not in node, f"pydantic title left at {path or '/'}"
    json.dumps(parameters)  # plain JSON, nothing pydantic-specific


def test_zero_parameter_tool_has_the_empty_object_schema() -> None:
    assert tool_specification_from(CASES["no_params"]).parameters == {"type": "object", "properties": {}}


def test_required_lists_exactly_the_required_parameters() -> None:
    parameters = tool_specification_from(CASES["optionals"]).parameters
    # Optional[...] without a default is still required (nullable); defaults and P(required=False) are not.
    assert parameters["required"] == ["required_nullable"]
    assert tool_specification_from(CASES["described"]).parameters["required"] == ["city"]


def test_descriptions_come_from_p_and_field() -> None:
    properties = tool_specification_from(CASES["described"]).parameters["properties"]
    assert properties["city"]["description"] == "City name"
    assert properties["days"]["description"] == "Days ahead"
    assert (properties["days"]["minimum"], properties["days"]["maximum"]) == (1, 7)
    assert properties["unit"]["description"] == "Temperature unit"


def test_enum_values_are_listed() -> None:
    defs = tool_specification_from(CASES["enums"]).parameters["$defs"]
    assert defs["Unit"]["enum"] == ["C", "F"]
    assert defs["Priority"]["enum"] == [1, 2]


def test_recursive_types_use_defs_and_refs() -> None:
    parameters = tool_specification_from(CASES["recursive"]).parameters
    assert parameters["properties"]["tree"] == {"$ref": "#/$defs/Node"}
    assert parameters["$defs"]["Node"]["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}


def test_injected_parameters_never_appear() -> None:
    parameters = tool_specification_from(CASES["injected"]).parameters
    assert parameters == {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    }


def test_a_property_called_title_is_kept() -> None:
    @tool
    def rename(title: Annotated[str, P("The new title")], description: str = "") -> None: ...

    properties = tool_specification_from(rename).parameters["properties"]
    assert properties["title"] == {"description": "The new title", "type": "string"}
    assert properties["description"] == {"default": "", "type": "string"}


def test_parameter_names_that_clash_with_pydantic_attributes_work() -> None:
    @tool
    def odd(json: int, model_config: str, _private: bool, schema: float = 1.0) -> None: ...

    parameters = tool_specification_from(odd).parameters
    assert list(parameters["properties"]) == ["json", "model_config", "_private", "schema"]
    assert parameters["required"] == ["json", "model_config", "_private"]


def test_field_as_default_value_describes_the_parameter() -> None:
    @tool
    def limit(count: int = Field(10, description="How many", le=100)) -> None: ...

    assert tool_specification_from(limit).parameters["properties"]["count"] == {
        "default": 10,
        "description": "How many",
        "maximum": 100,
        "type": "integer",
    }


def test_unannotated_parameters_accept_anything() -> None:
    @tool
    def anything(value, other: int = 0):  # type: ignore[no-untyped-def]
        return value

    parameters = tool_specification_from(anything).parameters
    assert parameters["properties"]["value"] == {}
    assert parameters["required"] == ["value"]


def test_schema_is_compiled_once_per_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    import agentloop._tools._decorator as tool_module

    calls: list[Callable[..., Any]] = []

    def counting(fn: Callable[..., Any], **kwargs: Any) -> Any:
        calls.append(fn)
        return compile_signature(fn, **kwargs)

    monkeypatch.setattr(tool_module, "compile_signature", counting)

    @tool
    def once(x: int) -> int:
        return x

    first = tool_specification_from(once)
    assert tool_specification_from(once) is first
    from agentloop._tools._toolset import resolve_tools

    resolve_tools(once)
    resolve_tools([once])
    assert calls == [once]


class Holder:
    @tool
    def use(self, unit: Annotated[Later, P("A type defined after this class")]) -> str:
        return str(unit.value)


class Later(enum.Enum):
    A = "a"


def test_a_type_defined_after_the_tool_resolves_at_first_use() -> None:
    # When Holder.use was decorated, Later did not exist yet: its schema was compiled on first use.
    unit = tool_specification_from(Holder().use).parameters["properties"]["unit"]
    assert unit == {"$ref": "#/$defs/Later", "description": "A type defined after this class"}


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        ("def f(*args: int) -> None: ...", r"takes \*args: a model can only fill in named parameters"),
        ("def f(**kwargs: int) -> None: ...", r"takes \*\*kwargs"),
        ("def f(a: int, /) -> None: ...", "'a' is positional-only"),
        ("def f(a: socket.socket) -> None: ...", "parameter 'a' has type socket: a model sends JSON"),
    ],
)
def test_unusable_signatures_are_rejected_at_definition(definition: str, message: str) -> None:
    namespace: dict[str, Any] = {"socket": __import__("socket")}
    exec(definition, namespace)
    with pytest.raises(IllegalConfigurationError, match=message):
        tool(namespace["f"])


class _Client:
    """A runtime object: not something a model can send as JSON."""


@pytest.mark.parametrize(
    ("annotation", "shown"),
    [
        (_Client, "type _Client: a model sends JSON"),
        (list[_Client], r"type list\[_Client\] \(its part _Client is not a JSON type\)"),
        (Optional[dict[str, _Client]], r"type dict\[str, _Client\] \| None \(its part _Client"),
    ],
)
def test_an_unsupported_parameter_type_names_parameter_type_and_what_is_accepted(
    annotation: Any, shown: str
) -> None:
    def f(count: int, client: Any) -> None: ...

    f.__annotations__["client"] = annotation
    with pytest.raises(IllegalConfigurationError) as caught:
        tool(f)
    message = str(caught.value)
    assert re.search(rf"Tool 'f': parameter 'client' has {shown}", message), message
    assert "Tool parameters may be str, int, float, bool" in message  # what agentloop accepts
    assert "ToolContext" in message  # and how to hand a tool a runtime object instead
    assert "arbitrary_types_allowed" not in message  # pydantic's advice is not for tool users
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_a_type_without_json_schema_names_the_parameter() -> None:
    def f(callback: Callable[[int], int]) -> None: ...

    with pytest.raises(
        IllegalConfigurationError,
        match=r"parameter 'callback' has type Callable\[\[int\], int\], "
        "which has no JSON schema",
    ):
        tool(f)


def test_an_unknown_type_name_is_reported_at_first_use() -> None:
    @tool
    def f(a: NoSuchType) -> None: ...  # type: ignore[name-defined]  # noqa: F821

    # Not at definition: the name may be defined later in the module.
    with pytest.raises(IllegalConfigurationError, match=r"'a'.*NoSuchType.*cannot be resolved"):
        tool_specification_from(f)


def test_injected_parameter_detection_by_marker_and_type() -> None:
    def f(
        a: Annotated[str, ToolMemoryId],
        b: Annotated[int, ToolMemoryId()],
        c: ToolContext,
        d: ToolContext | None = None,
        e: Annotated[ToolContext, "meta"] | None = None,
        keep: str = "",
    ) -> None: ...

    signature = compile_signature(f, owner="'f'")
    assert signature.memory_id_params == ("a", "b")
    assert signature.context_params == ("c", "d", "e")
    assert signature.names == ("keep",)
    assert signature.parameters["properties"] == {"keep": {"default": "", "type": "string"}}
