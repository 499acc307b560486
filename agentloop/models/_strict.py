"""`strict_schema`: a JSON schema rewritten to the rules of a provider's strict structured output.

OpenAI's strict mode (`response_format` `json_schema` with `strict: true`) and Anthropic's structured output
reject schemas that pydantic writes as a matter of course: objects must say `additionalProperties: false`;
OpenAI wants every property listed in `required` (an optional one becomes required and nullable); some
keywords are refused. Constraints a provider cannot enforce are removed from the schema and written into the
description instead, so the model still reads them (agentloop validates them on the answer anyway).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["strict_schema"]

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
        if "properties" in out or out.get("type") == "object":
            self._close(out)
        return out

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
