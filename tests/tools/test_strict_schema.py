"""`strict_schema`: pydantic-generated schemas rewritten to OpenAI's and Anthropic's strict rules."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
from typing import Annotated, Any, Literal, Optional, Union

import jsonschema
import pydantic
import pytest
from typing_extensions import TypedDict

from agentloop._features.output import output_schema
from agentloop.models import strict_schema
from agentloop.testing._schema_rules import schema_problem


class Kind(enum.Enum):
    A = "a"
    B = "b"


class Line(pydantic.BaseModel):
    """One line."""

    sku: str = pydantic.Field(pattern=r"^[A-Z]+$", description="Stock keeping unit")
    qty: int = pydantic.Field(ge=1, le=99)


class Tree(pydantic.BaseModel):
    name: str
    children: list[Tree] = []


@dataclasses.dataclass
class Box:
    width: float
    label: Optional[str] = None


class Meta(TypedDict, total=False):
    source: str


class Order(pydantic.BaseModel):
    id: str = pydantic.Field(min_length=3, max_length=10)
    when: datetime.date
    kind: Kind
    status: Literal["open", "closed"] = "open"
    note: str | None = None
    lines: list[Line] = pydantic.Field(min_length=1)
    box: Box | None = None
    meta: Meta = {}
    tree: Tree | None = None
    choice: Union[Line, Box] = pydantic.Field(discriminator=None, default_factory=lambda: Box(1.0))
    rank: Annotated[int, pydantic.Field(multiple_of=5)] = 0


SCHEMAS = [Order, Line, Tree, Box, Meta, int, list[Line], Union[Line, Box], Literal["x", "y"]]


@pytest.mark.parametrize("output_type", SCHEMAS, ids=lambda t: getattr(t, "__name__", str(t)))
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_rewritten_schemas_meet_the_providers_rules(output_type: Any, provider: Any) -> None:
    schema = output_schema(output_type).whole.schema
    strict = strict_schema(schema, provider=provider)
    assert schema_problem(strict, provider) is None
    jsonschema.Draft202012Validator.check_schema(strict)
    assert output_schema(output_type).whole.schema == schema  # the input is left alone


def test_openai_optional_fields_become_required_and_nullable() -> None:
    strict = strict_schema(Order.model_json_schema())
    assert set(strict["required"]) == set(Order.model_fields)
    note = strict["properties"]["note"]
    assert {"type": "null"} in note["anyOf"]
    status = strict["properties"]["status"]
    assert status["type"] == ["string", "null"] and None in status["enum"]
    assert "default" not in json.dumps(strict)
    # Values a user may send: what the rewritten schema accepts still validates with pydantic after nulls
    # are dropped (pydantic fills the defaults).
    sample = {
        "id": "abc",
        "when": "2026-01-02",
        "kind": "a",
        "status": None,
        "note": None,
        "lines": [{"sku": "AB", "qty": 2}],
        "box": None,
        "meta": {"source": None},
        "tree": None,
        "choice": {"width": 2.0, "label": None},
        "rank": None,
    }
    jsonschema.validate(sample, strict)


async def test_native_output_reads_null_as_a_field_left_out() -> None:
    from agentloop import Agent, AiMessage
    from agentloop.testing import ScriptedChatModel

    wire = {"width": 2.5, "label": None, "meta": {"source": None}}

    class Shelf(pydantic.BaseModel):
        width: float
        label: str = "none"  # optional, but not nullable
        meta: Meta = {}

    model = ScriptedChatModel([AiMessage(json.dumps(wire))])
    result = await Agent(model, output_type=Shelf, output_mode="native").chat("x")
    assert result.output == Shelf(width=2.5, label="none", meta={})


def test_constraints_a_provider_cannot_enforce_move_into_the_description() -> None:
    anthropic = strict_schema(Line.model_json_schema(), provider="anthropic")
    qty = anthropic["properties"]["qty"]
    assert "minimum" not in qty and "maximum" not in qty
    assert qty["description"] == "(maximum: 99; minimum: 1)"
    sku = anthropic["properties"]["sku"]
    assert sku["description"] == "Stock keeping unit (pattern: ^[A-Z]+$)"
    openai = strict_schema(Line.model_json_schema())
    assert openai["properties"]["qty"]["minimum"] == 1  # OpenAI enforces it
    assert openai["properties"]["sku"]["pattern"] == "^[A-Z]+$"


def test_refs_with_siblings_are_inlined_and_recursion_kept() -> None:
    schema = {
        "type": "object",
        "properties": {
            "line": {"$ref": "#/$defs/Line", "description": "the line"},
            "tree": {"$ref": "#/$defs/T"},
        },
        "required": ["line", "tree"],
        "$defs": {
            "Line": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            "T": {
                "type": "object",
                "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/T"}}},
            },
        },
    }
    strict = strict_schema(schema)
    assert strict["properties"]["line"]["description"] == "the line"
    assert strict["properties"]["line"]["properties"] == {"a": {"type": "string"}}
    assert strict["properties"]["tree"] == {"$ref": "#/$defs/T"}
    assert strict["$defs"]["T"]["additionalProperties"] is False
    assert schema_problem(strict, "openai") is None


def test_unknown_provider_is_refused() -> None:
    with pytest.raises(ValueError, match="provider"):
        strict_schema({"type": "object"}, provider="gemini")  # type: ignore[arg-type]
