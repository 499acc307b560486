"""`ToolSpecification`: what a model is told about one tool (name, description, JSON schema)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

from ._errors import IllegalConfigurationError

__all__ = ["TOOL_NAME_RULE", "ToolSpecification", "check_tool_name"]

_NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
TOOL_NAME_RULE = "1-64 letters, digits, '_' or '-'"
"""What every provider accepts as a tool name (OpenAI's rule, the strictest of them)."""


def check_tool_name(name: object, where: str) -> str:
    """`name` if a model can call a tool by it, else an `IllegalConfigurationError` naming `where` it is from.

    The one check every way of making a tool goes through (`@tool`, `Tool(specification, executor)`, tool
    providers, `Agent.as_tool`, MCP), so a bad name fails when the tool is made, not as a 400 at run time.
    """
    if isinstance(name, str) and _NAME_PATTERN.fullmatch(name):
        return name
    raise IllegalConfigurationError(
        f"Tool name {name!r} ({where}) is not usable: models accept {TOOL_NAME_RULE}; "
        "choose another name (e.g. @tool(name=...) or ToolSpecification(name=...))"
    )


def _empty_schema() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


class ToolSpecification(msgspec.Struct, frozen=True, omit_defaults=True):
    """Name, description and parameter schema of one tool, plus provider-specific metadata.

    `parameters` is a JSON schema of type object. `metadata` is never sent to a provider unless the model was
    told which keys to send (e.g. Anthropic's `cache_control`).
    """

    name: str
    description: str | None = None
    parameters: dict[str, Any] = msgspec.field(default_factory=_empty_schema)
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        name: object = self.name
        if not isinstance(name, str) or not name:
            raise ValueError("ToolSpecification.name must be a non-empty string")
        for field in ("parameters", "metadata"):
            value: object = getattr(self, field)
            if not isinstance(value, Mapping):
                raise TypeError(f"ToolSpecification.{field} must be a dict, got {value!r}")
            if not isinstance(value, dict):
                msgspec.structs.force_setattr(self, field, dict(value))

    def to_json(self) -> str:
        """This specification as JSON text (round-trips through `from_json`)."""
        return msgspec.json.encode(self).decode()

    @classmethod
    def from_json(cls, data: str | bytes) -> ToolSpecification:
        """Reads a specification written by `to_json` (or any JSON object with the same keys)."""
        return msgspec.json.decode(data, type=cls)

    def to_dict(self) -> dict[str, Any]:
        """This specification as a plain dict."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "metadata": self.metadata,
        }
