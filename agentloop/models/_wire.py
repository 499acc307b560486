"""Small rules every provider applies the same way when it writes a request."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from agentloop._errors import IllegalConfigurationError
from agentloop._messages import ToolChoice
from agentloop._spec import ToolSpecification
from agentloop._text import valid_text

__all__ = ["arguments_object", "check_tool_offered"]

_decoder = msgspec.json.Decoder()


def arguments_object(arguments: str) -> dict[str, Any]:
    """A call's arguments as the JSON object the APIs that take them as an object require ({} when they
    are not one: empty, invalid, nested too deep for msgspec, or not an object)."""
    try:
        value = _decoder.decode(valid_text(arguments)) if arguments.strip() else {}
    except (msgspec.DecodeError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def check_tool_offered(choice: ToolChoice, specs: Sequence[ToolSpecification]) -> None:
    """Raises `IllegalConfigurationError` when `ToolChoice.tool(name)` names a tool the request lacks."""
    if all(spec.name != choice.tool_name for spec in specs):
        offered = ", ".join(spec.name for spec in specs) or "none"
        raise IllegalConfigurationError(
            f"ToolChoice.tool({choice.tool_name!r}) names a tool this request does not offer "
            f"(offered: {offered})"
        )
