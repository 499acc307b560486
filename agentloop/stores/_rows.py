"""Reading a store's rows defensively: anything a person (or a crash, or an older tool) may have written by
hand into a row or key becomes a `ChatMemoryStoreError` naming the memory id and the damaged field, never a
bare `TypeError` or `ValueError` from deep inside a step. Only the damaged id fails; every other id is read
from its own rows and keeps working.
"""

from __future__ import annotations

import math
from typing import Any

from .. import ChatMemoryStoreError, ChatMessage
from .._values._codec import CodecError, decode_messages
from .._values._text import whole_number

__all__ = ["Damaged", "memory_key", "messages_of", "stored_float", "stored_int"]


class Damaged(Exception):
    """A field of a stored row holds what the store never writes; `what` says which field and what it holds.

    Raised inside a store's steps (where the memory id is known to the caller) and turned into a
    `ChatMemoryStoreError` by `damaged()`."""

    def __init__(self, what: str, remedy: str | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.remedy = remedy


_DELETE = "restore it, or delete this memory id (delete_messages) to start it afresh"


def damaged(store: str, memory_id: str, what: str, remedy: str | None = None) -> ChatMemoryStoreError:
    """The error a damaged row of `memory_id` gives: which field, and how to get the id working again."""
    return ChatMemoryStoreError(
        f"{store}: the stored data of memory {memory_id!r} is damaged: {what}. It was edited by hand or "
        f"written by something else; {remedy or _DELETE}. Other memory ids are not affected",
        store=store,
    )


def memory_key(store: object, memory_id: Any) -> str:
    """`str(memory_id)`, checked to be storable text (a lone surrogate, as from `os.listdir` of a badly
    named file, cannot be encoded as UTF-8 and so cannot name a row or key). `store` (the store, named by
    its repr) is only formatted when the id is refused."""
    key = str(memory_id)
    if key.isascii():
        return key
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as error:
        name = repr(store)
        raise ChatMemoryStoreError(
            f"{name}: memory id {key!r} cannot be stored: it holds a lone surrogate "
            f"({key[error.start]!r} at position {error.start}), which is not valid Unicode text and "
            "cannot be encoded as UTF-8; repair the id (for example "
            "`text.encode('utf-8', 'surrogateescape').decode('utf-8', 'replace')`) before using it",
            store=name,
        ) from None
    return key


def stored_int(value: Any, field: str, *, minimum: int = 0, maximum: int | None = None) -> int:
    """`value` as the whole number the store wrote in `field` (ints, or their decimal text or bytes)."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, (str, bytes)):
        number = whole_number(value.strip(), 19)
    if number is None or number < minimum or (maximum is not None and number > maximum):
        bound = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
        raise Damaged(f"{field} is {_shown(value)}, not a whole number {bound}")
    return number


def stored_float(value: Any, field: str) -> float:
    """`value` as the finite number the store wrote in `field` (a timestamp)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise Damaged(f"{field} is {_shown(value)}, not a number of seconds")


def messages_of(body: Any, format: Any, field: str, size: Any = None) -> list[ChatMessage]:
    """The messages of a stored row: its format number checked, its body decoded, and (when the row
    records it) their count checked against `size`."""
    number = stored_int(format, f"{field}'s format", minimum=1)
    if not isinstance(body, (bytes, str)):
        raise Damaged(f"{field}'s body is {_shown(body)}, not JSON text")
    try:
        messages = decode_messages(body, number)
    except CodecError as error:
        raise Damaged(f"{field} cannot be read ({error}); a newer release may have written it") from None
    if size is not None:
        count = stored_int(size, f"{field}'s size", minimum=1)
        if count != len(messages):
            raise Damaged(f"{field}'s size is {count} but it holds {len(messages)} messages")
    return messages


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
