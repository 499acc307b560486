"""The incremental SSE parser: the event-stream rules, chunk-boundary independence, and bad input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import BadResponseError
from agentloop.models._http._sse import ServerSentEvent, SSEDecoder, iter_sse


def parse(data: bytes, *, max_line_bytes: int = 1 << 24) -> list[ServerSentEvent]:
    decoder = SSEDecoder(max_line_bytes=max_line_bytes)
    events = decoder.feed(data)
    decoder.close()
    return events


def parse_split(data: bytes, cuts: list[int], *, max_line_bytes: int = 1 << 24) -> list[ServerSentEvent]:
    decoder = SSEDecoder(max_line_bytes=max_line_bytes)
    events: list[ServerSentEvent] = []
    start = 0
    for cut in sorted(cuts):  # a repeated cut feeds an empty chunk, which must change nothing
        events.extend(decoder.feed(data[start:cut]))
        start = cut
    events.extend(decoder.feed(data[start:]))
    decoder.close()
    return events


def test_data_lines_are_joined_and_blank_line_dispatches() -> None:
    events = parse(b"data: first\ndata: second\n\ndata:third\n\n")
    assert events == [ServerSentEvent(data="first\nsecond"), ServerSentEvent(data="third")]


def test_event_id_and_retry_fields() -> None:
    events = parse(b"event: delta\nid: 7\nretry: 1500\ndata: {}\n\ndata: x\n\n")
    assert events[0] == ServerSentEvent(event="delta", data="{}", id="7", retry=1500)
    # The last event id persists; the event type and retry do not.
    assert events[1] == ServerSentEvent(event="message", data="x", id="7", retry=None)


def test_comments_and_unknown_fields_are_ignored() -> None:
    assert parse(b": keep-alive\n: OPENROUTER PROCESSING\nfoo: bar\ndata: ok\n\n") == [
        ServerSentEvent(data="ok")
    ]


def test_only_one_leading_space_is_dropped_and_a_field_without_colon_is_empty() -> None:
    events = parse(b"data:  two spaces\ndata\ndata:x:y\n\n")
    assert events == [ServerSentEvent(data=" two spaces\n\nx:y")]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_every_line_ending(newline: bytes) -> None:
    data = newline.join([b"event: e", b"data: a", b"data: b", b"", b"data: c", b"", b""])
    assert parse(data) == [ServerSentEvent(event="e", data="a\nb"), ServerSentEvent(data="c")]


def test_crlf_split_between_cr_and_lf_is_one_line_ending() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n\r") == [ServerSentEvent(data="a")]
    assert decoder.feed(b"\ndata: b\r\n\r\n") == [ServerSentEvent(data="b")]


def test_fields_before_a_one_line_data_chunk_still_count() -> None:
    """The one-event fast path takes a whole `data:` chunk only when nothing of the event came before it."""
    for fields, expected in [
        (b"retry: 100\n", ServerSentEvent(data="x", retry=100)),
        (b"event: e\n", ServerSentEvent(event="e", data="x")),
        (b"id: 7\n", ServerSentEvent(data="x", id="7")),
        (b"data: w\n", ServerSentEvent(data="w\nx")),
    ]:
        decoder = SSEDecoder()
        assert decoder.feed(fields) == []
        assert decoder.feed(b"data: x\n\n") == [expected]
        assert decoder.feed(b"data: y\n\ndata: z\n\n") == [
            ServerSentEvent(data="y", id=expected.id),
            ServerSentEvent(data="z", id=expected.id),
        ]


def test_an_empty_chunk_between_cr_and_lf_changes_nothing() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"") == []
    assert decoder.feed(b"\ndata: b\n\n") == [ServerSentEvent(data="a\nb")]


def test_blocks_without_data_dispatch_nothing() -> None:
    assert parse(b"event: ping\n\nid: 3\n\n\n\n") == []


def test_unterminated_event_at_end_of_stream_is_discarded() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: complete\n\ndata: partial\n") == [ServerSentEvent(data="complete")]
    decoder.close()
    assert decoder.feed(b"\n") == []


def test_leading_byte_order_mark_is_ignored_only_at_the_start() -> None:
    assert parse(b"\xef\xbb\xbfdata: x\n\n") == [ServerSentEvent(data="x")]
    # Split inside the BOM: still ignored.
    assert parse_split(b"\xef\xbb\xbfdata: x\n\n", [1, 2]) == [ServerSentEvent(data="x")]
    # Later on, a BOM is part of the line (an unknown field here).
    assert parse(b"data: x\n\n\xef\xbb\xbfdata: y\n\n") == [ServerSentEvent(data="x")]


def test_multibyte_utf8_split_across_chunks() -> None:
    data = "data: héllo → 世界\n\n".encode()
    for cut in range(1, len(data)):
        assert parse_split(data, [cut]) == [ServerSentEvent(data="héllo → 世界")]


def test_invalid_utf8_raises_bad_response() -> None:
    with pytest.raises(BadResponseError, match="not valid UTF-8"):
        parse(b"data: \xff\xfe\n\n")


def test_line_longer_than_the_limit_raises_bad_response() -> None:
    decoder = SSEDecoder(max_line_bytes=16)
    with pytest.raises(BadResponseError, match="longer than 16 bytes"):
        decoder.feed(b"data: " + b"x" * 20)  # no newline yet: the buffered partial line already exceeds it
    with pytest.raises(BadResponseError, match="longer than 16 bytes"):
        parse(b"data: " + b"x" * 20 + b"\n\n", max_line_bytes=16)


def test_retry_must_be_ascii_digits() -> None:
    events = parse("retry: ١٢\ndata: a\n\nretry: 12x\ndata: b\n\n".encode())
    assert [e.retry for e in events] == [None, None]


def test_id_with_nul_is_ignored() -> None:
    assert parse(b"id: a\0b\ndata: x\n\n") == [ServerSentEvent(data="x", id=None)]


async def test_iter_sse_over_an_async_byte_stream() -> None:
    async def chunks():
        for piece in (b'data: {"a"', b": 1}\n", b"\ndata: [DONE]\n\n"):
            yield piece

    events = [event async for event in iter_sse(chunks())]
    assert events == [ServerSentEvent(data='{"a": 1}'), ServerSentEvent(data="[DONE]")]


# -- property tests -----------------------------------------------------------------------------------------

_text = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n"), max_size=20)
_newline = st.sampled_from([b"\n", b"\r\n", b"\r"])


@st.composite
def event_streams(draw: st.DrawFn) -> tuple[bytes, list[ServerSentEvent]]:
    """A well-formed stream with the events it must parse to."""
    out: list[bytes] = []
    expected: list[ServerSentEvent] = []
    last_id: str | None = None
    for _ in range(draw(st.integers(0, 6))):
        nl = draw(_newline)
        if draw(st.booleans()):
            out.append(b":" + draw(_text).encode() + nl)
        event = draw(st.none() | st.from_regex(r"[a-z_]{1,10}", fullmatch=True))
        if event is not None:
            out.append(b"event: " + event.encode() + nl)
        if draw(st.booleans()):
            last_id = draw(st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True))
            out.append(b"id: " + last_id.encode() + nl)
        retry = draw(st.none() | st.integers(0, 99_999))
        if retry is not None:
            out.append(b"retry: %d" % retry + nl)
        lines = draw(st.lists(_text, min_size=1, max_size=4))
        for line in lines:
            out.append(b"data: " + line.encode() + nl)
        out.append(nl)
        expected.append(
            ServerSentEvent(event=event or "message", data="\n".join(lines), id=last_id, retry=retry)
        )
    return b"".join(out), expected


@given(event_streams(), st.lists(st.integers(0, 400), max_size=30))
@settings(max_examples=300)
def test_any_chunk_boundaries_give_the_expected_events(
    stream: tuple[bytes, list[ServerSentEvent]], cuts: list[int]
) -> None:
    data, expected = stream
    assert parse(data) == expected
    assert parse_split(data, [c for c in cuts if c <= len(data)]) == expected
    assert parse_split(data, list(range(len(data)))) == expected  # one byte at a time


@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=20), st.integers(4, 64))
@settings(max_examples=500)
def test_arbitrary_bytes_raise_nothing_but_bad_response_and_do_not_depend_on_boundaries(
    data: bytes, cuts: list[int], max_line: int
) -> None:
    outcomes = []
    for split in ([], [c for c in cuts if c <= len(data)]):
        try:
            outcomes.append(parse_split(data, split, max_line_bytes=max_line))
        except BadResponseError:
            outcomes.append("error")
    assert outcomes[0] == outcomes[1]


@given(
    st.from_regex(r"[a-z_.]{0,30}", fullmatch=True),
    _text,
    st.sampled_from([None, "7"]),
    st.integers(4, 64),
)
@settings(max_examples=300)
def test_a_whole_named_event_chunk_parses_as_the_general_path_does(
    name: str, data: str, last_id: str | None, max_line: int
) -> None:
    """`event: x\\ndata: y\\n\\n` in one chunk (OpenAI Responses, Anthropic): a shorter way, same result."""
    head = b"" if last_id is None else b"id: 7\n\n"
    chunk = b"event: " + name.encode() + b"\ndata: " + data.encode() + b"\n\n"
    outcomes = []
    for split in ([len(head)], list(range(len(head + chunk)))):  # the chunk whole; one byte at a time
        try:
            outcomes.append(parse_split(head + chunk, split, max_line_bytes=max_line))
        except BadResponseError:
            outcomes.append("error")
    assert outcomes[0] == outcomes[1]


@given(_text, st.sampled_from([None, "7"]), st.integers(4, 64))
@settings(max_examples=300)
def test_a_whole_crlf_data_chunk_parses_as_the_general_path_does(
    data: str, last_id: str | None, max_line: int
) -> None:
    """`data: y\\r\\n\\r\\n` in one chunk (Google's APIs): a shorter way, same result."""
    head = b"" if last_id is None else b"id: 7\r\n\r\n"
    chunk = b"data: " + data.encode() + b"\r\n\r\n"
    outcomes = []
    for split in ([len(head)], list(range(len(head + chunk)))):  # the chunk whole; one byte at a time
        try:
            outcomes.append(parse_split(head + chunk, split, max_line_bytes=max_line))
        except BadResponseError:
            outcomes.append("error")
    assert outcomes[0] == outcomes[1]


def _payload_events(data: bytes, cuts: list[int], max_line: int) -> list[ServerSentEvent] | str:
    """`feed_payloads` over `data` cut at `cuts`, each payload read back as the event it stands for (a
    `message` event of that data, carrying the last id); "error" for a `BadResponseError`."""
    decoder = SSEDecoder(max_line_bytes=max_line)
    events: list[ServerSentEvent] = []
    last_id = None
    start = 0
    try:
        for end in [*sorted(cuts), len(data)]:
            for item in decoder.feed_payloads(data[start:end]):
                if isinstance(item, bytes):
                    events.append(ServerSentEvent(data=item.decode("utf-8"), id=last_id))
                else:
                    last_id = item.id
                    events.append(item)
            start = end
        decoder.close()
    except (BadResponseError, UnicodeDecodeError):
        return "error"
    return events


@given(event_streams(), st.lists(st.integers(0, 400), max_size=30))
@settings(max_examples=300)
def test_feed_payloads_gives_the_events_feed_gives(
    stream: tuple[bytes, list[ServerSentEvent]], cuts: list[int]
) -> None:
    """A payload is exactly the data of the one-line `data:` event its chunk held; anything else comes as
    the same events `feed` makes (the OpenAI reader's path: no text decoded, no event object per token)."""
    data, expected = stream
    assert _payload_events(data, [], 1 << 24) == expected
    assert _payload_events(data, [c for c in cuts if c <= len(data)], 1 << 24) == expected


def test_feed_payloads_hands_a_one_line_data_chunk_over_as_its_bytes() -> None:
    decoder = SSEDecoder()
    assert decoder.feed_payloads(b'data: {"a":1}\n\n') == [b'{"a":1}']
    assert decoder.feed_payloads(b"data: \xff\n\n") == [b"\xff"]  # the JSON decoder checks UTF-8
    assert decoder.feed_payloads(b"data: a\ndata: b\n\n") == [ServerSentEvent(data="a\nb")]
    assert decoder.feed_payloads(b"event: e\ndata: x\n\n") == [ServerSentEvent(event="e", data="x")]
    assert decoder.feed_payloads(b"data: a") == []  # a line under way: the next chunk is no whole event
    assert decoder.feed_payloads(b"b\n\n") == [ServerSentEvent(data="ab")]


@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=20), st.integers(4, 64))
@settings(max_examples=300)
def test_feed_payloads_on_arbitrary_bytes_agrees_with_feed(
    data: bytes, cuts: list[int], max_line: int
) -> None:
    split = [c for c in cuts if c <= len(data)]
    try:
        expected: list[ServerSentEvent] | str = parse_split(data, split, max_line_bytes=max_line)
    except BadResponseError:
        expected = "error"
    assert _payload_events(data, split, max_line) == expected


def test_a_payload_that_is_not_utf8_gets_the_general_paths_error() -> None:
    """The payload's reader asks `check_payload` when its JSON decoder rejects a payload: the error names
    the bad UTF-8 exactly as the general path does for the same line."""
    with pytest.raises(BadResponseError) as general:
        parse(b"data: ok\xff\xfe\n\n")
    with pytest.raises(BadResponseError) as payload:
        SSEDecoder().check_payload(b"ok\xff\xfe")
    assert "not valid UTF-8" in str(general.value)
    assert str(payload.value) == str(general.value)
    SSEDecoder().check_payload(b'{"a": "\xc3\xa9"}')  # valid UTF-8: nothing raised
