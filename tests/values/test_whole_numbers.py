"""Numbers read from text that others wrote (approval ids, stored rows, error codes, addresses) are ASCII
digits only: `str.isdigit()` also takes "²" (which `int()` refuses: a crash) and other scripts' digits (which
`int()` reads as other numbers), so every such reader goes through `whole_number`."""

from __future__ import annotations

import pytest

from agentloop._values._errors import IllegalConfigurationError
from agentloop._values._text import whole_number
from agentloop.stores._rows import Damaged, stored_int
from agentloop.ui._record import split_approval_id


@pytest.mark.parametrize("text", ["²", "٣", "1²", "", " 1", "+1", "-1", "1.0", "１"])
def test_anything_but_ascii_digits_is_no_number(text: str) -> None:
    assert whole_number(text) is None
    assert whole_number(text.encode()) is None


def test_ascii_digits_are_their_number_within_a_length() -> None:
    assert whole_number("0042") == 42 and whole_number(b"7") == 7
    assert whole_number("1234567", 6) is None and whole_number("123456", 6) == 123456


def test_each_reader_refuses_unicode_digits_cleanly() -> None:
    assert split_approval_id("tok.²") is None and split_approval_id("tok.٣") is None
    assert split_approval_id("tok.3") == ("tok", 3)
    with pytest.raises(Damaged, match="not a whole number"):
        stored_int("²", "version")
    assert stored_int(" 12 ", "version") == 12
    pytest.importorskip("mcp")
    from agentloop.mcp._server import parse_address

    with pytest.raises(IllegalConfigurationError, match="HOST:PORT"):
        parse_address("127.0.0.1:８０")
