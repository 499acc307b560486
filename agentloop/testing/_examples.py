"""Deterministic example arguments for a tool, generated from its JSON schema.

`TestModel` calls every tool with these, so a tool set can be exercised end to end without a real model. The
generator covers what pydantic and hand-written tool schemas use: objects, required and optional properties,
strings with formats and lengths, numbers with bounds and `multipleOf`, enums, consts, arrays and tuples,
maps (`additionalProperties`), unions, nullable types, `allOf`, and local `$ref`s including recursive ones.
`pattern` is not solved: a string with a pattern uses the schema's first example or default if it has one.
"""

from __future__ import annotations

import datetime
import math
import uuid
from collections.abc import Mapping
from typing import Any

from agentloop._values._text import whole_number

__all__ = ["example_arguments"]

_SHALLOW = 3
"""Below this nesting depth optional properties and first array items are generated; deeper only what is
required, so recursive types end."""

_MAX_DEPTH = 48
"""Nesting beyond this means the schema requires infinitely deep values."""

_FORMATS: dict[str, Any] = {
    "date": lambda n: (datetime.date(2024, 1, 1) + datetime.timedelta(days=n)).isoformat(),
    "date-time": lambda n: (
        f"{(datetime.date(2024, 1, 1) + datetime.timedelta(days=n)).isoformat()}T12:00:00Z"
    ),
    "time": lambda n: f"12:{n % 60:02d}:00Z",
    "duration": lambda n: f"P{n + 1}D",
    "uuid": lambda n: str(uuid.UUID(int=n + 1, version=4)),
    "email": lambda n: f"user{n + 1}@example.com",
    "idn-email": lambda n: f"user{n + 1}@example.com",
    "uri": lambda n: f"https://example.com/{n + 1}",
    "url": lambda n: f"https://example.com/{n + 1}",
    "iri": lambda n: f"https://example.com/{n + 1}",
    "uri-reference": lambda n: f"/items/{n + 1}",
    "hostname": lambda n: f"host{n + 1}.example.com",
    "idn-hostname": lambda n: f"host{n + 1}.example.com",
    "ipv4": lambda n: f"192.0.2.{n % 254 + 1}",
    "ipv6": lambda n: f"2001:db8::{n % 65535 + 1:x}",
    "byte": lambda n: "ZXhhbXBsZQ==",
    "binary": lambda n: "example",
    "password": lambda n: f"secret{n + 1}",
}


def example_arguments(schema: Mapping[str, Any], *, seed: int = 0) -> dict[str, Any]:
    """Arguments that satisfy `schema` (a tool's parameter schema, a JSON schema of type object).

    The same schema and `seed` always give the same arguments; another seed gives other values. Raises
    `ValueError` naming the place in the schema when no value can be made (a required infinite recursion, an
    unresolvable `$ref`, bounds that exclude every number).
    """
    if not isinstance(schema, Mapping):
        raise TypeError(f"example_arguments needs a JSON schema dict, got {type(schema).__name__}")
    value = _Generator(schema, seed).value(schema, 0, "#")
    if not isinstance(value, dict):
        raise ValueError(f"tool parameter schemas must describe an object, this one gives {value!r}")
    return value


def _is_null(schema: Any) -> bool:
    return isinstance(schema, Mapping) and (schema.get("type") == "null" or schema.get("const", 0) is None)


def _merge(parts: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The schemas of an `allOf` combined into one (properties and required lists united)."""
    merged: dict[str, Any] = {}
    for part in parts:
        for key, item in part.items():
            if key == "properties" and "properties" in merged:
                merged["properties"] = {**merged["properties"], **item}
            elif key == "required" and "required" in merged:
                merged["required"] = [*merged["required"], *(r for r in item if r not in merged["required"])]
            else:
                merged[key] = item
    return merged


class _Generator:
    """Walks a schema; `count` advances at each scalar, so values differ between fields and with the seed."""

    def __init__(self, root: Mapping[str, Any], seed: int) -> None:
        self.root = root
        self.count = seed

    def next(self) -> int:
        n = self.count
        self.count += 1
        return n

    def resolve(self, ref: str, path: str) -> Mapping[str, Any]:
        if ref != "#" and not ref.startswith("#/"):
            raise ValueError(f"{path}: only local $refs ('#/...') can be followed, got {ref!r}")
        target: Any = self.root
        for token in ref[2:].split("/") if ref != "#" else []:
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(target, Mapping) and token in target:
                target = target[token]
            elif (
                isinstance(target, list) and (item := whole_number(token)) is not None and item < len(target)
            ):
                target = target[item]
            else:
                raise ValueError(f"{path}: $ref {ref!r} points to nothing in the schema")
        if not isinstance(target, (Mapping, bool)):
            raise ValueError(f"{path}: $ref {ref!r} does not point to a schema")
        return target if isinstance(target, Mapping) else {} if target else {"not": {}}

    def value(self, schema: Any, depth: int, path: str) -> Any:
        if depth > _MAX_DEPTH:
            raise ValueError(
                f"{path}: the schema requires values nested more than {_MAX_DEPTH} levels deep "
                "(a recursive type with no optional way out?)"
            )
        if schema is True:
            schema = {}
        if schema is False or not isinstance(schema, Mapping) or schema.get("not", 0) in ({}, True):
            raise ValueError(f"{path}: the schema accepts no value at all")
        if "$ref" in schema:
            target = self.resolve(schema["$ref"], path)
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            return self.value(_merge([target, rest]) if rest else target, depth + 1, path)
        if "allOf" in schema:
            parts = [self.resolve(p["$ref"], path) if "$ref" in p else p for p in schema["allOf"]]
            rest = {k: v for k, v in schema.items() if k != "allOf"}
            return self.value(_merge([*parts, rest]), depth, path)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            options = list(schema["enum"])
            if not options:
                raise ValueError(f"{path}: empty enum")
            return options[self.next() % len(options)]
        for key in ("anyOf", "oneOf"):
            if key in schema:
                options = schema[key]
                concrete = [s for s in options if not _is_null(s)]
                if not concrete or (depth > _SHALLOW and len(concrete) < len(options)):
                    return None
                rest = {k: v for k, v in schema.items() if k != key}
                return self.value(_merge([rest, concrete[0]]) if rest else concrete[0], depth, path)
        kind = schema.get("type")
        if isinstance(kind, list):
            kinds = [k for k in kind if k != "null"]
            if not kinds:
                return None
            kind = kinds[0]
        if kind is None:
            if "properties" in schema or "additionalProperties" in schema or "required" in schema:
                kind = "object"
            elif "items" in schema or "prefixItems" in schema:
                kind = "array"
            else:
                kind = "string"
        if kind == "object":
            return self.object(schema, depth, path)
        if kind == "array":
            return self.array(schema, depth, path)
        if kind == "string":
            return self.string(schema, path)
        if kind == "integer":
            return self.integer(schema, path)
        if kind == "number":
            return self.number(schema, path)
        if kind == "boolean":
            return self.next() % 2 == 0
        if kind == "null":
            return None
        raise ValueError(f"{path}: unknown JSON schema type {kind!r}")

    def object(self, schema: Mapping[str, Any], depth: int, path: str) -> dict[str, Any]:
        properties: Mapping[str, Any] = schema.get("properties") or {}
        required = list(schema.get("required") or ())
        names = list(properties) if depth <= _SHALLOW else [n for n in properties if n in required]
        names += [n for n in required if n not in properties]
        result = {name: self.value(properties.get(name, {}), depth + 1, f"{path}/{name}") for name in names}
        extra = schema.get("additionalProperties")
        if not properties and isinstance(extra, Mapping) and depth <= _SHALLOW:
            wanted = max(1, int(schema.get("minProperties", 0)))
        else:
            wanted = int(schema.get("minProperties", 0))
        key = 0
        while len(result) < wanted:
            if extra is False:
                raise ValueError(f"{path}: minProperties cannot be met without additional properties")
            key += 1
            name = f"key{key}"
            if name not in result:
                sub = extra if isinstance(extra, Mapping) else {}
                result[name] = self.value(sub, depth + 1, f"{path}/{name}")
        return result

    def array(self, schema: Mapping[str, Any], depth: int, path: str) -> list[Any]:
        prefix = schema.get("prefixItems")
        items = schema.get("items", {})
        if isinstance(items, list):  # draft 4-7 tuples
            prefix, items = items, schema.get("additionalItems", {})
        prefix = list(prefix or ())
        low = int(schema.get("minItems", 0))
        high = schema.get("maxItems")
        count = max(low, len(prefix), 1 if depth <= _SHALLOW else 0)
        if high is not None:
            count = min(count, int(high))
        unique = bool(schema.get("uniqueItems"))
        result: list[Any] = []
        for i in range(count):
            sub = prefix[i] if i < len(prefix) else items
            if sub is False:
                break
            for _ in range(16):
                item = self.value(sub, depth + 1, f"{path}/{i}")
                if not unique or item not in result:
                    break
            result.append(item)
        return result

    def string(self, schema: Mapping[str, Any], path: str) -> str:
        n = self.next()
        if "pattern" in schema:
            for key in ("examples", "default"):
                found = schema.get(key)
                sample = found[0] if key == "examples" and isinstance(found, list) and found else found
                if isinstance(sample, str):
                    return sample
        make = _FORMATS.get(schema.get("format", ""))
        text = make(n) if make is not None else _letters(n)
        low = int(schema.get("minLength", 0))
        high = schema.get("maxLength")
        if len(text) < low:
            text += text[-1:] * (low - len(text)) if text else "a" * low
        if high is not None and len(text) > int(high):
            text = text[: int(high)]
        return text

    def integer(self, schema: Mapping[str, Any], path: str) -> int:
        low, high = _bounds(schema)
        lo = None if low is None else (math.floor(low[0]) + 1 if low[1] else math.ceil(low[0]))
        hi = None if high is None else (math.ceil(high[0]) - 1 if high[1] else math.floor(high[0]))
        value = self.next() + 1
        if lo is not None and value < lo:
            value = lo
        if hi is not None and value > hi:
            value = hi
        step = schema.get("multipleOf")
        if step:
            value = math.ceil(value / step) * step
            if hi is not None and value > hi:
                value = math.floor(hi / step) * step
            value = int(value)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise ValueError(f"{path}: no integer satisfies the bounds of {dict(schema)!r}")
        return int(value)

    def number(self, schema: Mapping[str, Any], path: str) -> float:
        low, high = _bounds(schema)
        value = self.next() + 0.5

        def fits(x: float) -> bool:
            above = low is None or (x > low[0] if low[1] else x >= low[0])
            below = high is None or (x < high[0] if high[1] else x <= high[0])
            return above and below

        if not fits(value):
            if low is not None and high is not None:
                value = (low[0] + high[0]) / 2 if (low[1] or high[1]) else float(low[0])
            elif low is not None:
                value = low[0] + 1.0 if low[1] else float(low[0])
            elif high is not None:
                value = high[0] - 1.0 if high[1] else float(high[0])
        step = schema.get("multipleOf")
        if step:
            candidates = [math.ceil(value / step) * step, math.floor(value / step) * step]
            if low is not None:
                candidates.append(math.ceil(low[0] / step) * step)
            value = next((c for c in candidates if fits(c)), math.nan)
        if math.isnan(value) or not fits(value):
            raise ValueError(f"{path}: no number satisfies the bounds of {dict(schema)!r}")
        return float(value)


def _bounds(schema: Mapping[str, Any]) -> tuple[tuple[float, bool] | None, tuple[float, bool] | None]:
    """(lower, upper) bounds as (limit, exclusive), from draft-4 boolean or numeric exclusive keywords."""

    def bound(inclusive_key: str, exclusive_key: str) -> tuple[float, bool] | None:
        limit = schema.get(inclusive_key)
        exclusive = schema.get(exclusive_key)
        if isinstance(exclusive, bool):  # draft 4: a flag on the inclusive limit
            return None if limit is None else (limit, exclusive)
        found = [(limit, False)] if limit is not None else []
        if exclusive is not None:
            found.append((exclusive, True))
        if not found:
            return None
        return max(found) if inclusive_key == "minimum" else min(found, key=lambda b: (b[0], not b[1]))

    return bound("minimum", "exclusiveMinimum"), bound("maximum", "exclusiveMaximum")


def _letters(n: int) -> str:
    """`a`, `b`, ... `z`, `ba`, `bb`, ...: short, distinct, deterministic strings."""
    text = ""
    while True:
        text = chr(ord("a") + n % 26) + text
        n //= 26
        if not n:
            return text
