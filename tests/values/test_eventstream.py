"""The AWS event-stream codec: decoded incrementally whatever the cuts, checked against botocore's decoder."""

from __future__ import annotations

import struct
import uuid
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop.models._eventstream import (
    EventStreamDecoder,
    EventStreamError,
    EventStreamMessage,
    encode_message,
)

_names = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1, max_size=20)
_values = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
    st.text(max_size=60),
    st.binary(max_size=60),
    st.uuids(),
)
_messages = st.tuples(st.dictionaries(_names, _values, max_size=5), st.binary(max_size=400))


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, start = [], 0
    for point in [*points, len(data)]:
        pieces.append(data[start:point])
        start = point
    return pieces


@settings(max_examples=200, deadline=None)
@given(st.lists(_messages, min_size=1, max_size=6), st.lists(st.integers(min_value=0), max_size=30))
def test_messages_decode_alike_whatever_the_cuts(
    messages: list[tuple[dict[str, Any], bytes]], cuts: list[int]
) -> None:
    wire = b"".join(encode_message(headers, payload) for headers, payload in messages)
    decoder = EventStreamDecoder()
    decoded: list[EventStreamMessage] = []
    for piece in _cut(wire, cuts):
        decoded.extend(decoder.feed(piece))
    assert decoder.pending == 0
    assert [(dict(m.headers), m.payload) for m in decoded] == messages


@settings(max_examples=100, deadline=None)
@given(st.lists(_messages, min_size=1, max_size=4), st.integers(min_value=1, max_value=64))
def test_botocore_reads_our_frames_and_we_read_its_reading(
    messages: list[tuple[dict[str, Any], bytes]], size: int
) -> None:
    eventstream = pytest.importorskip("botocore.eventstream")
    wire = b"".join(encode_message(headers, payload) for headers, payload in messages)
    buffer = eventstream.EventStreamBuffer()
    theirs = []
    for start in range(0, len(wire), size):
        buffer.add_data(wire[start : start + size])
        theirs.extend(buffer)
    as_botocore = [
        ({k: v.bytes if isinstance(v, uuid.UUID) else v for k, v in h.items()}, p) for h, p in messages
    ]
    assert [(m.headers, m.payload) for m in theirs] == as_botocore  # botocore gives UUIDs as their bytes


def test_every_header_type_botocore_knows_is_read() -> None:
    """Frames built by hand with the types `encode_message` never writes (int8, int16, int64, timestamp)."""

    def header(name: str, kind: int, value: bytes) -> bytes:
        return bytes([len(name)]) + name.encode() + bytes([kind]) + value

    headers = b"".join(
        [
            header("b", 2, struct.pack(">b", -5)),
            header("s", 3, struct.pack(">h", -300)),
            header("l", 5, struct.pack(">q", 2**40)),
            header("t", 8, struct.pack(">q", 1_700_000_000_000)),
            header("u", 9, uuid.UUID(int=7).bytes),
            header("f", 1, b""),
        ]
    )
    total = 12 + len(headers) + 2 + 4
    prelude = struct.pack(">II", total, len(headers))
    body = prelude + struct.pack(">I", zlib.crc32(prelude)) + headers + b"{}"
    frame = body + struct.pack(">I", zlib.crc32(body))
    [ours] = EventStreamDecoder().feed(frame)
    expected = {"b": -5, "s": -300, "l": 2**40, "t": 1_700_000_000_000, "u": uuid.UUID(int=7), "f": False}
    assert dict(ours.headers) == expected
    eventstream = pytest.importorskip("botocore.eventstream")
    buffer = eventstream.EventStreamBuffer()
    buffer.add_data(frame)
    [theirs] = list(buffer)
    assert theirs.headers["s"] == -300 and theirs.headers["l"] == 2**40


def test_a_corrupted_frame_is_an_error_not_a_garbled_event() -> None:
    frame = bytearray(encode_message({":event-type": "messageStop"}, b'{"stopReason":"end_turn"}'))
    frame[-6] ^= 0x01  # a payload bit flipped
    with pytest.raises(EventStreamError, match="message CRC mismatch"):
        EventStreamDecoder().feed(bytes(frame))
    misaligned = encode_message({}, b"x")[1:] + b"\0"
    with pytest.raises(EventStreamError, match="prelude CRC mismatch"):
        EventStreamDecoder().feed(misaligned)


def test_an_absurd_length_is_refused_before_buffering() -> None:
    prelude = struct.pack(">II", 2**31, 0)
    with pytest.raises(EventStreamError, match="too large"):
        EventStreamDecoder().feed(prelude + struct.pack(">I", zlib.crc32(prelude)))


def test_a_partial_frame_stays_pending() -> None:
    frame = encode_message({":event-type": "metadata"}, b"{}")
    decoder = EventStreamDecoder()
    assert decoder.feed(frame[:-1]) == []
    assert decoder.pending == len(frame) - 1
    assert [m.payload for m in decoder.feed(frame[-1:])] == [b"{}"]
