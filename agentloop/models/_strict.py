"""`strict_schema`: a JSON schema rewritten to the rules of a provider's strict structured output.

OpenAI's strict mode (`response_format` `json_schema` with `strict: true`) and Anthropic's structured output
reject schemas that pydantic writes as a matter of course: objects must say `additionalProperties: false`;
OpenAI wants every property listed in `required` (an optional one becomes required and nullable); some
keywords are refused. Constraints a provider cannot enforce are removed from the schema and written into the
description instead, so the model still reads them (agentloop validates them on the answer anyway).

A free-form map (`dict[str, float]`: an object with `additionalProperties` but no `properties`) cannot be
said in either strict mode (every object is closed, so it would admit only `{}`): it becomes an array of
`{"key": ..., "value": ...}` entries, and `restore_maps` turns such an answer back into the object the
original schema describes (agentloop's structured output does it for you).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["has_maps", "restore_maps", "strict_schema"]

Provider = Literal["openai", "anthropic"]

# Keywords neither strict mode accepts, dropped silently (annotations and rarely used validation keywords).
_DROPPED = frozenset(
    {
        "default",
        "title",
        "examples",
        "readOnly",
        "writeOnly",
        "deprecated",
        "discriminator",
        "contentEncoding",
        "contentMediaType",
        "$schema",
        "$id",
        "$comment",
        "patternProperties",
        "propertyNames",
        "unevaluatedProperties",
        "dependentRequired",
        "dependentSchemas",
        "if",
        "then",
        "else",
        "not",
        "contains",
        "minContains",
        "maxContains",
        "minProperties",
        "maxProperties",
        "uniqueItems",
    }
)

# Constraints a provider does not enforce: dropped from the schema, kept in the description as a hint.
_HINTED: dict[str, frozenset[str]] = {
    "openai": frozenset({"minLength", "maxLength"}),
    "anthropic": frozenset(
        {
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "exclusiveMaximum",
            "multipleOf",
            "minLength",
            "maxLength",
            "pattern",
            "maxItems",
        }
    ),
}

_FORMATS: dict[str, frozenset[str]] = {
    "openai": frozenset(
        {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
    ),
    "anthropic": frozenset(
        {"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"}
    ),
}


def strict_schema(schema: Mapping[str, Any], *, provider: Provider = "openai") -> dict[str, Any]:
    """`schema` (a JSON schema whose root is an object) rewritten for `provider`'s strict structured output.

    Every object gets `additionalProperties: false`; for OpenAI every property becomes required and those
    that were optional accept null; `oneOf` becomes `anyOf`; a `$ref` with sibling keywords is inlined;
    keywords the provider refuses are removed (constraints it cannot enforce move into the description).
    The input is not modified.
    """
    if provider not in _HINTED:
        raise ValueError(f"strict_schema: provider must be 'openai' or 'anthropic', got {provider!r}")
    definitions = dict(schema.get("$defs") or {})
    rewritten: dict[str, Any] = _Rewriter(provider, definitions).node(schema)
    return rewritten


class _Rewriter:
    __slots__ = ("definitions", "formats", "hinted", "provider")

    def __init__(self, provider: Provider, definitions: dict[str, Any]) -> None:
        self.provider = provider
        self.definitions = definitions
        self.hinted = _HINTED[provider]
        self.formats = _FORMATS[provider]

    def node(self, schema: Any) -> Any:
        if not isinstance(schema, Mapping):
            return schema
        source = dict(schema)
        ref = source.get("$ref")
        if isinstance(ref, str) and len(source) > 1:
            target = self._resolve(ref)
            if target is not None:  # siblings beside a $ref are refused: inline the definition
                del source["$ref"]
                source = {**target, **source}
        all_of = source.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], Mapping):
            del source["allOf"]
            source = {**self._inline(all_of[0]), **source}
        out: dict[str, Any] = {}
        hints: list[str] = []
        for key, value in source.items():
            if key in _DROPPED:
                continue
            if key in self.hinted:
                hints.append(f"{key}: {value}")
                continue
            if key == "minItems" and self.provider == "anthropic" and isinstance(value, int) and value > 1:
                hints.append(f"minItems: {value}")
                continue
            if key == "format" and value not in self.formats:
                hints.append(f"format: {value}")
                continue
            if key == "propertyNames":
                continue  # a map's key schema: kept in its entries (see `_map`)
            if key in ("properties", "$defs", "definitions") and isinstance(value, Mapping):
                out[key] = {name: self.node(sub) for name, sub in value.items()}
            elif key in ("anyOf", "oneOf", "allOf", "prefixItems") and isinstance(value, list):
                out["anyOf" if key == "oneOf" else key] = [self.node(sub) for sub in value]
            elif key in ("items", "additionalProperties") and isinstance(value, Mapping):
                out[key] = self.node(value)
            else:
                out[key] = value
        if hints:
            note = "(" + "; ".join(hints) + ")"
            out["description"] = f"{out['description']} {note}" if out.get("description") else note
        if _is_map(source):
            return self._map(out, source)
        if "properties" in out or out.get("type") == "object":
            self._close(out)
        return out

    def _map(self, out: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
        """A free-form map as the array of its `{key, value}` entries (strict modes close every object)."""
        values = out.get("additionalProperties")
        value = values if isinstance(values, Mapping) and values else dict(_ANY_SCALAR)
        names = source.get("propertyNames")
        key = {"type": "string", **self.node(names)} if isinstance(names, Mapping) else {"type": "string"}
        entry: dict[str, Any] = {
            "type": "object",
            "properties": {"key": key, "value": value},
            "required": ["key", "value"],
            "additionalProperties": False,
        }
        note = "A map, written as a list of {key, value} entries with distinct keys."
        described = out.get("description")
        mapped: dict[str, Any] = {
            "type": "array",
            "items": entry,
            "description": f"{described} ({note})" if described else note,
        }
        return mapped

    def _close(self, obj: dict[str, Any]) -> None:
        obj["additionalProperties"] = False
        properties: dict[str, Any] = obj.setdefault("properties", {})
        if self.provider != "openai":
            return
        required = set(obj.get("required") or ())
        for name, sub in properties.items():
            if name not in required:
                properties[name] = _nullable(sub)
        obj["required"] = list(properties)

    def _resolve(self, ref: str) -> dict[str, Any] | None:
        prefix = "#/$defs/"
        if not ref.startswith(prefix):
            return None
        found = self.definitions.get(ref[len(prefix) :])
        return dict(found) if isinstance(found, Mapping) else None

    def _inline(self, schema: Mapping[str, Any]) -> dict[str, Any]:
        ref = schema.get("$ref")
        if isinstance(ref, str) and len(schema) == 1:
            target = self._resolve(ref)
            if target is not None:
                return target
        return dict(schema)


_ANY_SCALAR = {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}, {"type": "null"}]}
"""A map value of any type, as far as strict modes can say it (they need a type for every value)."""


def _is_map(schema: Mapping[str, Any]) -> bool:
    """A free-form map: an object that takes any keys (`additionalProperties` not false) and names none."""
    if schema.get("type") != "object" or schema.get("properties"):
        return False
    return schema.get("additionalProperties", True) is not False


def has_maps(schema: Mapping[str, Any]) -> bool:
    """Whether `schema` holds a free-form map anywhere (which `strict_schema` writes as entries)."""
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            if _is_map(node):
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def restore_maps(schema: Mapping[str, Any], value: Any) -> Any:
    """`value`, an answer to `strict_schema(schema)`, as `schema` describes it: each map that came as a list
    of `{key, value}` entries becomes an object again (a map that came as an object stays). Returns `value`
    itself when nothing changed."""
    return _Restorer(dict(schema.get("$defs") or {})).walk(schema, value)


class _Restorer:
    __slots__ = ("definitions",)

    def __init__(self, definitions: dict[str, Any]) -> None:
        self.definitions = definitions

    def resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        for _ in range(32):  # a chain of references (never a loop in pydantic's schemas, but bounded)
            ref = schema.get("$ref")
            all_of = schema.get("allOf")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                target = self.definitions.get(ref[len("#/$defs/") :])
                if not isinstance(target, Mapping):
                    return schema
                schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
            elif isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], Mapping):
                schema = {**all_of[0], **{k: v for k, v in schema.items() if k != "allOf"}}
            else:
                return schema
        return schema

    def walk(self, schema: Any, value: Any) -> Any:
        if not isinstance(schema, Mapping) or not isinstance(value, (dict, list)):
            return value
        schema = self.resolve(schema)
        if _is_map(schema):
            if isinstance(value, list):  # never valid where an object belongs: entries (a cut one left out)
                value = {
                    entry["key"]: entry["value"]
                    for entry in value
                    if isinstance(entry, dict) and "value" in entry and isinstance(entry.get("key"), str)
                }
            inner = schema.get("additionalProperties")
            if isinstance(value, dict) and isinstance(inner, Mapping):
                return self._each(value, lambda key: inner)
            return value
        options = schema.get("anyOf", schema.get("oneOf"))
        if isinstance(options, list):
            for option in options:
                changed = self.walk(option, value)
                if changed is not value:
                    return changed
            return value
        properties = schema.get("properties")
        if isinstance(value, dict) and isinstance(properties, Mapping):
            return self._each(value, properties.get)
        items = schema.get("items")
        if isinstance(value, list) and isinstance(items, Mapping):
            return self._each(value, lambda index: items)
        prefix = schema.get("prefixItems")
        if isinstance(value, list) and isinstance(prefix, list):
            return self._each(value, lambda index: prefix[index] if index < len(prefix) else None)
        return value

    def _each(self, value: Any, schema_of: Any) -> Any:
        """`value` (a dict or list) with each item walked by its schema; `value` itself if none changed."""
        keys = value.keys() if isinstance(value, dict) else range(len(value))
        changed: dict[Any, Any] = {}
        for key in keys:
            item = value[key]
            walked = self.walk(schema_of(key), item)
            if walked is not item:
                changed[key] = walked
        if not changed:
            return value
        copy = dict(value) if isinstance(value, dict) else list(value)
        for key, item in changed.items():
            copy[key] = item
        return copy


def _nullable(schema: Any) -> Any:
    """`schema` that also accepts null (OpenAI's form of an optional property)."""
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if isinstance(kind, str) and "$ref" not in schema and "anyOf" not in schema:
        if kind == "null":
            return schema
        out = {**schema, "type": [kind, "null"]}
        if isinstance(schema.get("enum"), list) and None not in schema["enum"]:
            out["enum"] = [*schema["enum"], None]
        return out
    if isinstance(kind, list):
        return schema if "null" in kind else {**schema, "type": [*kind, "null"]}
    options = schema.get("anyOf")
    if isinstance(options, list) and len(schema) <= 2:
        if any(isinstance(o, dict) and o.get("type") == "null" for o in options):
            return schema
        return {**schema, "anyOf": [*options, {"type": "null"}]}
    description = schema.get("description")
    inner = {k: v for k, v in schema.items() if k != "description"}
    out = {"anyOf": [inner, {"type": "null"}]}
    if description is not None:
        out["description"] = description
    return out
