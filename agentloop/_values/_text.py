"""Text that leaves the process must be valid Unicode: lone surrogates are replaced with U+FFFD.

Python strings may hold lone surrogates (`bytes.decode("utf-8", "surrogateescape")`, as `os.listdir` and
subprocess output give for undecodable bytes), which no UTF-8 encoder accepts: sent to a provider, or stored,
they would fail every later request of the conversation. Messages repair their text when they are made, and
JSON bodies are repaired when they fail to encode, so the boundary never sees one. Surrogate pairs are joined
into the character they stand for; what cannot be joined becomes U+FFFD, the replacement character.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["encode_json", "valid_text", "valid_value"]


def valid_text(text: str) -> str:
    """`text` itself when UTF-8 can encode it, else a copy with each lone surrogate replaced by U+FFFD."""
    if text.isascii():  # O(1) in CPython: the common case costs nothing
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def valid_value(value: Any) -> Any:
    """`value` (JSON-like: dicts, lists, tuples, strings...) with every string, key included, made valid."""
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, dict):
        return {valid_value(k): valid_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [valid_value(item) for item in value]
    return value


def encode_json(value: Any, encode: Callable[[Any], bytes]) -> bytes:
    """`encode(value)`; if a string in it is not valid Unicode, `encode` of the repaired value instead (the
    repair costs nothing unless needed)."""
    try:
        return encode(value)
    except UnicodeEncodeError:
        return encode(valid_value(value))
