"""What a provider sends that agentloop does not know (output items, content blocks, parts, streamed events
added to an API after this was written) is skipped, not fatal, and logged once per kind at debug level.

Only the kind of such a thing is read, never its other fields, so an unknown item whose fields have types
agentloop's shapes do not expect (a Responses `tool_search_call` with object `arguments`) cannot break the
answer around it. Things of a known kind are still decoded strictly: a broken known item is a bad response.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, TypeVar

import msgspec

__all__ = ["Decodes", "ignore_unknown", "keys_of", "kind_of", "known_items"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Decodes(Protocol[T_co]):
    """What `known_items` decodes a known item with: a `msgspec.json.Decoder`, or any object with its
    `decode`."""

    def decode(self, buf: Any, /) -> T_co: ...


logger = logging.getLogger("agentloop.models")

_MAX_NOTED = 1024  # a server that invents a new kind on every event cannot grow this without bound
_noted: set[tuple[str, str, str]] = set()
_any = msgspec.json.Decoder()


class _Kind(msgspec.Struct, gc=False):
    type: Any = None


_kind = msgspec.json.Decoder(_Kind)


def ignore_unknown(provider: str, what: str, kind: str) -> None:
    """Notes that one `what` (e.g. "output item") of an unknown `kind` was ignored: a debug log line the
    first time this provider sends that kind, nothing after."""
    key = (provider, what, kind[:100])
    if key in _noted:
        return
    if len(_noted) < _MAX_NOTED:
        _noted.add(key)
    logger.debug("%s: ignored %s of unknown kind %r (agentloop does not use it)", provider, what, key[2])


def kind_of(raw: bytes | msgspec.Raw | str) -> str:
    """The `type` of a JSON object, read without its other fields ("" when it has none, or is not an
    object; the type's JSON text when it is not a string)."""
    try:
        value = _kind.decode(raw).type
    except (msgspec.DecodeError, RecursionError):
        return ""
    if value is None or isinstance(value, str):
        return value or ""
    return msgspec.json.encode(value).decode()[:100]


def keys_of(raw: bytes | msgspec.Raw) -> str:
    """The keys of a JSON object, comma-separated: the kind of a keyed-union member (a Gemini part, a Bedrock
    content block) that agentloop does not know."""
    try:
        value = _any.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return "?"
    return ",".join(sorted(value)) if isinstance(value, dict) else type(value).__name__


def known_items(
    raws: Iterable[msgspec.Raw],
    decoders: Mapping[str, Decodes[T]],
    provider: str,
    what: str,
) -> list[T]:
    """The items of `raws` whose `type` has a decoder, decoded by it in order; the others ignored (and noted
    once). A known item that does not decode raises `msgspec.DecodeError` as before."""
    items: list[T] = []
    for raw in raws:
        kind = kind_of(raw)
        decoder = decoders.get(kind)
        if decoder is None:
            ignore_unknown(provider, what, kind)
            continue
        items.append(decoder.decode(raw))
    return items
