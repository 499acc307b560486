"""The AWS event-stream binary framing (`application/vnd.amazon.eventstream`), as Bedrock's ConverseStream
sends it: decoded incrementally from whatever pieces the network delivers, encoded for test servers.

One message on the wire:

    total length (uint32 BE) | headers length (uint32 BE) | prelude CRC32 (of the 8 bytes before)
    headers | payload | message CRC32 (of everything before it)

A header is: name length (uint8), name (UTF-8), value type (uint8), value. Value types: 0 true, 1 false,
2 int8, 3 int16, 4 int32, 5 int64, 6 bytes (uint16 length), 7 string (uint16 length), 8 timestamp (int64
milliseconds), 9 UUID (16 bytes). Both CRCs are checked: a corrupted or misaligned stream is an error, never
a garbled event.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["EventStreamDecoder", "EventStreamError", "EventStreamMessage", "encode_message"]

_PRELUDE = struct.Struct(">III")
_PRELUDE_LENGTH = 12
_CRC_LENGTH = 4
MAX_MESSAGE_BYTES = 24 * 1024 * 1024  # AWS allows 16 MiB of payload and 128 KiB of headers
MAX_HEADER_BYTES = 128 * 1024
_INTS = {2: struct.Struct(">b"), 3: struct.Struct(">h"), 4: struct.Struct(">i"), 5: struct.Struct(">q")}
_U16 = struct.Struct(">H")
_KNOWN_HEADER_SETS = 64
_I64 = struct.Struct(">q")


class EventStreamError(ValueError):
    """The bytes are not a valid event stream (bad length, CRC mismatch, unknown header type)."""


@dataclass(frozen=True, slots=True)
class EventStreamMessage:
    """One decoded message: its headers (`:event-type`, `:message-type`...; shared between messages with the
    same headers: do not change them) and its payload bytes."""

    headers: Mapping[str, Any]
    payload: bytes


class EventStreamDecoder:
    """Feed it the body's bytes in any pieces; it returns each message as soon as the last byte of it came."""

    __slots__ = ("_buffer", "_known")

    def __init__(self) -> None:
        self._buffer = bytearray()
        # Parsed headers by their bytes: a stream repeats a handful of header sets (one per event type), so
        # each is parsed once. The dicts are shared between messages: read them, never change them.
        self._known: dict[bytes, dict[str, Any]] = {}

    @property
    def pending(self) -> int:
        """Bytes received that do not complete a message yet (0 at a clean end of stream)."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[EventStreamMessage]:
        """The messages completed by `data` (maybe none), in order."""
        buffer = self._buffer
        buffer += data
        messages: list[EventStreamMessage] = []
        start = 0
        size = len(buffer)
        while size - start >= _PRELUDE_LENGTH:
            total, headers_length, prelude_crc = _PRELUDE.unpack_from(buffer, start)
            if zlib.crc32(memoryview(buffer)[start : start + 8]) != prelude_crc:
                raise EventStreamError("event stream prelude CRC mismatch (corrupted or misaligned stream)")
            if total > MAX_MESSAGE_BYTES or headers_length > MAX_HEADER_BYTES:
                raise EventStreamError(
                    f"event stream message too large ({total} bytes, {headers_length} of headers)"
                )
            if total < _PRELUDE_LENGTH + headers_length + _CRC_LENGTH:
                raise EventStreamError(f"event stream message length {total} is shorter than its parts")
            if size - start < total:
                break
            view = memoryview(buffer)[start : start + total]
            (message_crc,) = struct.unpack_from(">I", view, total - _CRC_LENGTH)
            if zlib.crc32(view[: total - _CRC_LENGTH]) != message_crc:
                raise EventStreamError("event stream message CRC mismatch (corrupted stream)")
            headers_end = _PRELUDE_LENGTH + headers_length
            raw_headers = bytes(view[_PRELUDE_LENGTH:headers_end])
            headers = self._known.get(raw_headers)
            if headers is None:
                headers = _headers(memoryview(raw_headers))
                if len(self._known) < _KNOWN_HEADER_SETS:
                    self._known[raw_headers] = headers
            payload = bytes(view[headers_end : total - _CRC_LENGTH])
            view.release()
            messages.append(EventStreamMessage(headers, payload))
            start += total
        if start:
            del buffer[:start]
        return messages


def _headers(data: memoryview) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    position = 0
    end = len(data)
    try:
        while position < end:
            name_length = data[position]
            position += 1
            name = bytes(data[position : position + name_length]).decode("utf-8")
            position += name_length
            kind = data[position]
            position += 1
            value: Any
            if kind == 7 or kind == 6:
                (length,) = _U16.unpack_from(data, position)
                position += 2
                raw = bytes(data[position : position + length])
                if len(raw) != length:
                    raise EventStreamError("event stream header value runs past the headers")
                position += length
                value = raw.decode("utf-8") if kind == 7 else raw
            elif kind == 0 or kind == 1:
                value = kind == 0
            elif kind in _INTS:
                codec = _INTS[kind]
                (value,) = codec.unpack_from(data, position)
                position += codec.size
            elif kind == 8:
                (value,) = _I64.unpack_from(data, position)
                position += 8
            elif kind == 9:
                value = uuid.UUID(bytes=bytes(data[position : position + 16]))
                position += 16
            else:
                raise EventStreamError(f"unknown event stream header type {kind} for {name!r}")
            headers[name] = value
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, EventStreamError):
            raise
        raise EventStreamError(f"malformed event stream headers ({exc})") from None
    return headers


def encode_message(headers: Mapping[str, Any], payload: bytes) -> bytes:
    """One event-stream message (str header values as strings, bytes as bytes, bool, int as int32)."""
    encoded = bytearray()
    for name, value in headers.items():
        raw_name = name.encode()
        encoded += bytes([len(raw_name)]) + raw_name
        if isinstance(value, bool):
            encoded.append(0 if value else 1)
        elif isinstance(value, str):
            raw = value.encode()
            encoded += bytes([7]) + _U16.pack(len(raw)) + raw
        elif isinstance(value, bytes):
            encoded += bytes([6]) + _U16.pack(len(value)) + value
        elif isinstance(value, int):
            encoded += bytes([4]) + _INTS[4].pack(value)
        elif isinstance(value, uuid.UUID):
            encoded += bytes([9]) + value.bytes
        else:
            raise TypeError(f"cannot encode event stream header {name!r} of type {type(value).__name__}")
    total = _PRELUDE_LENGTH + len(encoded) + len(payload) + _CRC_LENGTH
    prelude = struct.pack(">II", total, len(encoded))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + bytes(encoded) + payload
    return message + struct.pack(">I", zlib.crc32(message))
