"""What a tool returned, as the text the model reads.

`str` goes as is, `None` becomes "Success" (the tool ran and had nothing to say), anything else becomes
compact JSON through pydantic's serializer: models, dataclasses, TypedDicts, datetimes, enums, sets, UUIDs...
A picture or document (`ImageContent`, `DocumentContent`, or a list of them and strings) becomes its text
with a placeholder per picture (`[image 1: image/png, 1234 bytes]`); `result_media` gives the pictures
themselves, which go to the model beside the text (see `ToolExecutionResultMessage.contents`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ._content import Content, DocumentContent, ImageContent, TextContent
from ._text import valid_text, valid_value

__all__ = [
    "SUCCESS",
    "CarriesMedia",
    "ResultConversionError",
    "media_placeholder",
    "result_media",
    "result_to_text",
]


@runtime_checkable
class CarriesMedia(Protocol):
    """A tool result object that carries pictures or documents for the model (an MCP tool's result)."""

    @property
    def media(self) -> Sequence[ImageContent | DocumentContent]: ...


def media_placeholder(number: int, part: ImageContent | DocumentContent) -> str:
    """How the text of a result refers to its `number`th picture or document."""
    kind = "image" if isinstance(part, ImageContent) else "document"
    size = f"{len(part.data)} bytes" if part.data is not None else part.url
    return f"[{kind} {number}: {part.media_type or 'unknown type'}, {size}]"


def _parts(result: Any) -> list[Any] | None:
    """`result` as a list of parts when it is (or holds) pictures or documents; None otherwise."""
    if isinstance(result, (ImageContent, DocumentContent)):
        return [result]
    if isinstance(result, (list, tuple)) and any(
        isinstance(p, (ImageContent, DocumentContent)) for p in result
    ):
        return list(result)
    return None


def result_media(result: Any) -> tuple[Content, ...]:
    """The pictures and documents a tool returned (none for any other result)."""
    if type(result) is str or result is None:  # most results: no Protocol check (tens of microseconds)
        return ()
    if isinstance(result, CarriesMedia):
        return tuple(result.media)
    parts = _parts(result)
    if parts is None:
        return ()
    return tuple(p for p in parts if isinstance(p, (ImageContent, DocumentContent)))


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
    parts = _parts(result)
    if parts is not None:
        texts, number = [], 0
        for part in parts:
            if isinstance(part, (ImageContent, DocumentContent)):
                number += 1
                texts.append(media_placeholder(number, part))
            else:
                texts.append(part.text if isinstance(part, TextContent) else result_to_text(part))
        return "\n".join(texts)
    import pydantic_core  # loads with the first non-text result, not with `import agentloop`

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
