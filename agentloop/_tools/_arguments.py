"""From the model's JSON argument text to validated keyword arguments, or a `ToolArgumentsError`.

Per call: one msgspec decode and one pydantic validation; nothing is "repaired". Error messages name the
tool, the field path and what was expected, and stay short enough for a model to read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from .._values._errors import ToolArgumentsError
from .._values._text import valid_text
from ._schema import Signature

if TYPE_CHECKING:
    import pydantic

__all__ = ["decode_arguments", "validate_arguments"]

_decode = msgspec.json.Decoder().decode
_MAX_ERRORS = 5
_MAX_INPUT_REPR = 60
_JSON_TYPE_NAMES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


def decode_arguments(arguments: str, tool_name: str) -> dict[str, Any]:
    """The JSON object in `arguments` as a dict; blank text means `{}`."""
    if not arguments or arguments.isspace():
        return {}
    try:
        data = _decode(valid_text(arguments))
    except (msgspec.MsgspecError, ValueError, RecursionError) as exc:
        raise ToolArgumentsError(
            f"Invalid arguments for tool {tool_name!r}: not valid JSON ({exc}); "
            "send the arguments as one JSON object",
            tool_name=tool_name,
        ) from exc
    if type(data) is not dict:
        kind = "null" if data is None else _JSON_TYPE_NAMES.get(type(data), type(data).__name__)
        raise ToolArgumentsError(
            f"Invalid arguments for tool {tool_name!r}: expected a JSON object of named arguments, "
            f"got {kind}",
            tool_name=tool_name,
        )
    return data


def validate_arguments(arguments: str, signature: Signature, tool_name: str) -> dict[str, Any]:
    """Decodes and validates `arguments` against `signature`: the keyword arguments the model chose.

    Unknown keys, including the names of injected parameters, are ignored.
    """
    data = decode_arguments(arguments, tool_name)
    try:
        validated = signature.validate(data)
    except (ValueError, TypeError, AssertionError, RecursionError) as exc:
        import pydantic  # loaded already: pydantic compiled `signature`

        if isinstance(exc, pydantic.ValidationError):
            raise ToolArgumentsError(
                f"Invalid arguments for tool {tool_name!r}: {describe_validation_error(exc)}",
                tool_name=tool_name,
            ) from exc
        raise ToolArgumentsError(
            f"Invalid arguments for tool {tool_name!r}: {type(exc).__name__}: {exc}", tool_name=tool_name
        ) from exc
    return dict(zip(signature.names, validated.__dict__.values(), strict=True))


def describe_validation_error(exc: pydantic.ValidationError) -> str:
    """pydantic's errors as `path: message (got value)`, joined with "; " (at most five of them)."""
    parts: list[str] = []
    for error in exc.errors(include_url=False)[:_MAX_ERRORS]:
        path = _path(error["loc"])
        if error["type"] == "missing":
            parts.append(f"{path}: required field is missing")
            continue
        got = repr(error["input"])
        if len(got) > _MAX_INPUT_REPR:
            got = got[: _MAX_INPUT_REPR - 3] + "..."
        message = f"{error['msg']} (got {got})"
        parts.append(f"{path}: {message}" if path else message)
    more = exc.error_count() - _MAX_ERRORS
    if more > 0:
        parts.append(f"and {more} more error{'s' if more > 1 else ''}")
    return "; ".join(parts)


def _path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path
