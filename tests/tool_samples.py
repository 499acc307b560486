"""One tool per kind of parameter agentloop supports; shared by the schema golden tests and property tests.

String annotations (`from __future__ import annotations`) on purpose: they must resolve like real code.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import uuid
from collections.abc import Sequence
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from agentloop import P, ToolContext, ToolMemoryId, tool


class Unit(str, enum.Enum):
    """A temperature unit."""

    C = "C"
    F = "F"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Address(BaseModel):
    """A postal address."""

    street: str = Field(description="Street and number")
    zip_code: str
    country: str = "FR"


class Person(BaseModel):
    name: str
    age: int = Field(ge=0, description="Age in years")
    address: Address | None = None


@dataclasses.dataclass
class Point:
    """A point on a plane."""

    x: float
    y: float = 0.0


class Movie(TypedDict):
    title: str
    year: int


class Node(BaseModel):
    """A tree node."""

    value: int
    children: list[Node] = []


class Category(TypedDict):
    name: str
    parent: Optional[Category]


@tool
def no_params() -> str:
    """Takes nothing."""
    return "ok"


@tool
def primitives(text: str, count: int, ratio: float, flag: bool) -> dict[str, Any]:
    return {"text": text, "count": count, "ratio": ratio, "flag": flag}


@tool("Weather for a city")
def described(
    city: Annotated[str, P("City name")],
    days: Annotated[int, Field(description="Days ahead", ge=1, le=7)] = 1,
    unit: Annotated[Unit, P("Temperature unit", required=False)] = Unit.C,
) -> str:
    return f"{city}:{days}:{unit.value}"


@tool
def enums(unit: Unit, priority: Priority) -> list[Any]:
    return [unit, priority]


@tool
def literals(mode: Literal["fast", "slow"], level: Literal[1, 2, 3]) -> list[Any]:
    return [mode, level]


@tool
def collections(
    numbers: list[int],
    tags: set[str],
    pair: tuple[int, str],
    ratios: tuple[float, ...],
    names: Sequence[str],
) -> list[Any]:
    return [numbers, sorted(tags), list(pair), list(ratios), list(names)]


@tool
def mappings(scores: dict[str, int], nested: dict[str, list[float]]) -> dict[str, Any]:
    return {"scores": scores, "nested": nested}


@tool
def optionals(
    required_nullable: str | None,
    maybe: Optional[int] = None,
    fallback: int = 5,
    unset: Annotated[str, P("Left out when unknown", required=False)] = "",
) -> list[Any]:
    return [required_nullable, maybe, fallback, unset]


@tool
def unions(value: Union[int, str], choice: Literal["a"] | float) -> list[Any]:
    return [value, choice]


@tool
def models(person: Person, people: list[Person]) -> Person:
    return person


@tool
def dataclasses_(point: Point, points: list[Point]) -> Point:
    return point


@tool
def typed_dicts(movie: Movie) -> Movie:
    return movie


@tool
def recursive(tree: Node, category: Category) -> int:
    return tree.value


@tool
def formats(
    when: datetime.datetime, day: datetime.date, ident: uuid.UUID, amount: decimal.Decimal
) -> list[Any]:
    return [when, day, ident, amount]


@tool
def injected(
    query: str,
    user: Annotated[str, ToolMemoryId] = "",
    ctx: ToolContext | None = None,
    other: Annotated[Any, ToolMemoryId()] = None,
    context: Optional[ToolContext] = None,
) -> list[Any]:
    return [query, user, ctx is not None, other, context is not None]


CASES = {
    f.__name__.rstrip("_"): f
    for f in [
        no_params,
        primitives,
        described,
        enums,
        literals,
        collections,
        mappings,
        optionals,
        unions,
        models,
        dataclasses_,
        typed_dicts,
        recursive,
        formats,
        injected,
    ]
}
