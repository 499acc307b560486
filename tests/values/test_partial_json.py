"""`PartialJSON`: the document so far, chunk by chunk, for any JSON and any way of cutting it."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentloop._partial_json import PartialJSON

scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
documents = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
).filter(lambda d: isinstance(d, (dict, list)))


def is_prefix_of(partial: Any, whole: Any) -> bool:
    """`partial` is what `whole` looks like while it is being written."""
    if isinstance(whole, dict):
        return isinstance(partial, dict) and all(
            k in whole and is_prefix_of(v, whole[k]) for k, v in partial.items()
        )
    if isinstance(whole, list):
        return (
            isinstance(partial, list)
            and len(partial) <= len(whole)
            and all(is_prefix_of(p, w) for p, w in zip(partial, whole))
        )
    if isinstance(whole, str):
        return isinstance(partial, str) and whole.startswith(partial)
    return partial == whole


@settings(max_examples=300, deadline=None)
@given(documents, st.lists(st.integers(1, 9), min_size=1, max_size=40), st.booleans())
@example({"": "\x1f\\"}, [1], False)  # a cut right after an escaped backslash that ends the string
def test_every_prefix_is_a_growing_prefix_of_the_document(doc: Any, cuts: list[int], indent: bool) -> None:
    text = json.dumps(doc, indent=2 if indent else None, ensure_ascii=False)
    parser = PartialJSON()
    previous: Any = None
    position = 0
    n = 0
    while position < len(text):
        size = cuts[n % len(cuts)]
        n += 1
        parser.feed(text[position : position + size])
        position += size
        snapshot = json.loads(json.dumps(parser.value))
        if snapshot is not None:
            assert is_prefix_of(snapshot, doc), (snapshot, doc)
        if previous is not None:
            assert is_prefix_of(previous, snapshot), (previous, snapshot)  # only ever grows
        previous = snapshot
    parser.finish()
    assert parser.done
    assert parser.value == doc


def test_what_the_value_shows_while_it_streams() -> None:
    parser = PartialJSON()
    seen = []
    for piece in [
        'Sure! ```json\n{"na',
        'me": "Ac',
        'me", "total": 12',
        '3.5, "ok": tr',
        "ue, ",
        '"items": [{"x"',
        ": 1}",
    ]:
        parser.feed(piece)
        seen.append(json.dumps(parser.value))
    assert seen == [
        "{}",
        '{"name": "Ac"}',
        '{"name": "Acme"}',  # 12 may become 123: not shown yet
        '{"name": "Acme", "total": 123.5}',
        '{"name": "Acme", "total": 123.5, "ok": true}',
        '{"name": "Acme", "total": 123.5, "ok": true, "items": [{}]}',
        '{"name": "Acme", "total": 123.5, "ok": true, "items": [{"x": 1}]}',
    ]
    assert not parser.done
    parser.feed("]} and then some prose {")
    assert parser.done
    assert parser.value["items"] == [{"x": 1}]


def test_escapes_split_across_chunks() -> None:
    text = json.dumps({"s": 'a"b\\c\né\u2603'})
    parser = PartialJSON()
    for char in text:
        parser.feed(char)
        value = parser.value
        assert value is None or isinstance(value, dict)
    assert parser.value == {"s": 'a"b\\c\né\u2603'}


def test_feed_reports_growth_only() -> None:
    parser = PartialJSON()
    assert parser.feed("text before ") is False
    assert parser.feed('{"a"') is True  # the object opened
    assert parser.feed(": ") is False
    assert parser.feed("1") is False  # the number is not whole yet
    assert parser.feed(",") is True


def test_feed_tells_a_value_beginning_or_ending_from_a_string_growing() -> None:
    parser = PartialJSON()
    steps = [('{"a": "x', True), ("yz", False), ('", "n": 1', True), ("2", False), (", ", True)]
    steps += [('"l": [', True), ('"p', True), ("q", False), ('"', True), ("]}", True)]
    for chunk, reshaped in steps:
        parser.feed(chunk)
        assert parser.reshaped is reshaped, chunk
    assert parser.value == {"a": "xyz", "n": 12, "l": ["pq"]} and parser.done


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=12), st.lists(st.integers(1, 7), min_size=1, max_size=10))
@example('caf\u00e9 \U0001f600\n"\\/', [1])
@example("\U0001f600\U0001f680", [3, 5])
def test_escapes_cut_by_chunks_show_only_once_whole(text: str, cuts: list[int]) -> None:
    """`\\uXXXX` escapes, surrogate pairs and short escapes cut anywhere by the chunks: the string shown
    is always a prefix of the real one (no half escape, no lone surrogate), and whole at the end."""
    document = json.dumps({"s": text, "after": [text]}, ensure_ascii=True)
    parser = PartialJSON()
    position = n = 0
    while position < len(document):
        size = cuts[n % len(cuts)]
        n += 1
        parser.feed(document[position : position + size])
        position += size
        value = parser.value
        if value is not None and "s" in value:
            assert text.startswith(value["s"]), (value["s"], text)
            after = value.get("after")
            assert not after or text.startswith(after[-1]), (after, text)
    assert parser.done and parser.value == {"s": text, "after": [text]}
