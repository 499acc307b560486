"""The schema rules of OpenAI's strict structured output and Anthropic's structured output as the fake
servers enforce them: a schema the real API would refuse gets the same kind of 400 from the fakes."""

from __future__ import annotations

from typing import Any, Literal

__all__ = ["schema_problem"]

_OPENAI_REFUSED = frozenset(
    {"default", "minLength", "maxLength", "oneOf", "allOf", "not", "if", "then", "else", "patternProperties"}
)
_ANTHROPIC_REFUSED = frozenset(
    {
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "maxItems",
        "not",
        "if",
        "then",
        "else",
    }
)


def schema_problem(schema: Any, provider: Literal["openai", "anthropic"]) -> str | None:
    """What the provider would say is wrong with `schema` for strict structured output, or None."""
    if not isinstance(schema, dict):
        return "schema must be an object"
    if schema.get("type") != "object":
        return "the root schema must be an object ('type': 'object'), not anyOf or another type"
    return _walk(schema, (), provider)


def _walk(node: Any, context: tuple[str, ...], provider: str) -> str | None:
    if not isinstance(node, dict):
        return None
    where = f"In context={context}"
    refused = _OPENAI_REFUSED if provider == "openai" else _ANTHROPIC_REFUSED
    for key in node:
        if key in refused:
            return f"{where}, '{key}' is not permitted."
    if provider == "anthropic" and isinstance(node.get("minItems"), int) and node["minItems"] > 1:
        return f"{where}, 'minItems' values other than 0 and 1 are not supported."
    if "$ref" in node and len(node) > 1 and provider == "openai":
        return f"{where}, $ref cannot have keywords {sorted(k for k in node if k != '$ref')}."
    properties = node.get("properties")
    if node.get("type") == "object" or isinstance(properties, dict):
        if node.get("additionalProperties") is not False:
            return f"{where}, 'additionalProperties' is required to be supplied and to be false."
        if provider == "openai":
            keys = list(properties or {})
            required = node.get("required") or []
            missing = [key for key in keys if key not in required]
            if missing:
                return (
                    f"{where}, 'required' is required to be supplied and to be an array including every "
                    f"key in properties. Missing '{missing[0]}'."
                )
    for key in ("properties", "$defs"):
        children = node.get(key)
        if isinstance(children, dict):
            for name, child in children.items():
                problem = _walk(child, (*context, key, name), provider)
                if problem:
                    return problem
    for key in ("anyOf", "prefixItems"):
        children = node.get(key)
        if isinstance(children, list):
            for index, child in enumerate(children):
                problem = _walk(child, (*context, key, str(index)), provider)
                if problem:
                    return problem
    items = node.get("items")
    if isinstance(items, dict):
        return _walk(items, (*context, "items"), provider)
    return None
