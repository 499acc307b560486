"""What a tool returned, as the text the model reads.

`str` goes as is, `None` becomes "Success" (the tool ran and had nothing to say), anything else becomes
compact JSON through pydantic's serializer: models, dataclasses, TypedDicts, datetimes, enums, sets, UUIDs...
"""

from __future__ import annotations

from typing import Any

import pydantic_core

from ._text import valid_text, valid_value

__all__ = ["SUCCESS", "ResultConversionError", "result_to_text"]

SUCCESS = "Success"


class ResultConversionError(ValueError):
    """The tool's result has no JSON form (e.g. an arbitrary object); `message` says what to do instead."""


def result_to_text(result: Any) -> str:
    """`result` as text for the model; raises `ResultConversionError` when it cannot be serialised."""
    if type(result) is str:
        return valid_text(result)  # lone surrogates (os.listdir, subprocess output) become U+FFFD
    if result is None:
        return SUCCESS
    if isinstance(result, str):
        return valid_text(str.__str__(result))  # str subclasses, str enums included: their plain text
    try:
        return pydantic_core.to_json(result).decode()
    except (pydantic_core.PydanticSerializationError, ValueError, TypeError, RecursionError) as exc:
        error = exc
    try:  # strings with lone surrogates fail to serialise: repaired, then serialised again
        return pydantic_core.to_json(valid_value(pydantic_core.to_jsonable_python(result))).decode()
    except (pydantic_core.PydanticSerializationError, ValueError, TypeError, RecursionError):
        raise ResultConversionError(
            f"cannot convert a result of type {type(result).__name__} to JSON ({error}); return a str, a "
            "JSON-serialisable value (dict, list, pydantic model, dataclass...), or give the tool a "
            "result_converter"
        ) from error
