"""`PartialJSON`: reads one JSON object as it streams in, and shows at any moment what has arrived so far.

Each `feed(chunk)` costs time in proportion to the chunk, not to the document: the parser keeps its place
(a stack of the containers being filled, and the token being read) between chunks. `value` is the document
so far as plain Python: objects and arrays as far as they got, a string that is still being written with the
characters it has so far, and numbers, `true`, `false` and `null` only once they are whole (`12` may still
become `123`). A key appears once its value has begun, so what `value` shows only ever grows.

Text before the first `{` or `[` (a code fence, a sentence) and after the document's end is skipped.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

__all__ = ["PartialJSON"]

_WHITESPACE = frozenset(" \t\r\n")
_LITERALS = {"true": True, "false": False, "null": None}
_NUMBER_CHARS = frozenset("0123456789+-.eE")
_STRING_STOP = re.compile(r'["\\]')
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_HEX = frozenset("0123456789abcdefABCDEF")
_decode = msgspec.json.decode

# What the parser expects next.
_VALUE, _KEY_OR_END, _KEY, _COLON, _COMMA_OR_END, _VALUE_OR_END = range(6)


class PartialJSON:
    """An incremental parser for one JSON document (object or array); see the module docstring."""

    __slots__ = (
        "_changed",
        "_escape",
        "_expect",
        "_high",
        "_key",
        "_root",
        "_shown",
        "_stack",
        "_string",
        "_string_is_key",
        "_text",
        "_token",
        "done",
        "reshaped",
    )

    def __init__(self) -> None:
        self._root: Any = None
        self._stack: list[Any] = []  # containers being filled, innermost last
        self._expect = _VALUE
        self._key: str | None = None  # the key whose value comes next (inside an object)
        self._string: list[str] | None = None  # decoded pieces of the string being read, not yet in _text
        self._text = ""  # the string being read, as far as it was last shown (see `value`)
        self._shown = True  # `value` shows the string being read as far as it arrived
        self._string_is_key = False
        self._escape: str | None = None  # an escape being read: its characters so far, from the backslash
        self._high: str | None = None  # a \uXXXX high surrogate waiting for its low half
        self._token: list[str] | None = None  # a number or literal being read
        self._changed = False
        self.reshaped = False
        """True when the last `feed` did more than grow the string being read: a value began or ended."""
        self.done = False
        """True once the document's outermost container closed."""

    @property
    def started(self) -> bool:
        """True once the document's first `{` or `[` arrived."""
        return self._root is not None

    @property
    def value(self) -> Any:
        """The document so far (None before it starts). Its containers are live: copy to keep a snapshot."""
        if not self._shown:
            self._shown = True
            pieces = self._string
            assert pieces is not None
            if pieces:
                self._text += "".join(pieces)
                pieces.clear()
            self._place(self._text)
        return self._root

    def feed(self, chunk: str) -> bool:
        """Reads the next piece of text; True when `value` changed (grew) because of it."""
        self._changed = self.reshaped = False
        i, n = 0, len(chunk)
        while i < n and not self.done:
            if self._string is not None:
                i = self._read_string(chunk, i)
                continue
            char = chunk[i]
            if self._token is not None:
                if char in _NUMBER_CHARS or char.isalpha():
                    self._token.append(char)
                    i += 1
                    continue
                self._end_token()
                continue  # the character that ended the token is read as usual
            i += 1
            if char in _WHITESPACE:
                continue
            if self._root is None:
                if char == "{" or char == "[":
                    self._open({} if char == "{" else [])
                continue  # text before the document
            expect = self._expect
            if expect in (_KEY_OR_END, _KEY):
                if char == '"':
                    self._start_string(key=True)
                elif char == "}" and expect == _KEY_OR_END:
                    self._close()
                continue  # anything else is malformed: skipped (the final validation reports it)
            if expect == _COLON:
                if char == ":":
                    self._expect = _VALUE
                continue
            if expect == _COMMA_OR_END:
                if char == ",":
                    self._expect = _KEY if isinstance(self._stack[-1], dict) else _VALUE
                elif char == "}" or char == "]":
                    self._close()
                continue
            # A value (or, in an array that just opened, its end).
            if char == "]" and expect == _VALUE_OR_END:
                self._close()
            elif char == "{":
                self._open({})
            elif char == "[":
                self._open([])
            elif char == '"':
                self._start_string(key=False)
                self._place("")
                self.reshaped = True
            else:
                self._token = [char]
        return self._changed

    # -- pieces ---------------------------------------------------------------------------------------

    def _start_string(self, *, key: bool) -> None:
        self._string, self._string_is_key, self._text = [], key, ""

    def _read_string(self, chunk: str, i: int) -> int:
        """Reads string characters from `chunk[i:]` up to the closing quote, decoding escapes as they
        complete; returns where it stopped. Costs time in proportion to what it reads."""
        pieces = self._string
        assert pieces is not None
        n = len(chunk)
        grew = False
        while i < n:
            if self._escape is not None:  # inside an escape: read it up to its end
                i = self._read_escape(chunk, i, pieces)
                grew = True
                continue
            match = _STRING_STOP.search(chunk, i)
            stop = n if match is None else match.start()
            if stop > i:
                self._flush_high(pieces)
                pieces.append(chunk[i:stop])
                grew = True
            if stop == n:
                break
            if chunk[stop] == "\\":
                self._escape = "\\"
                i = stop + 1
                continue
            self._flush_high(pieces)
            text = self._text + "".join(pieces)
            self._string, self._text, self._shown = None, "", True
            if self._string_is_key:
                self._key = text
                self._expect = _COLON
            else:
                self._place(text)
                self._after_value()
                self.reshaped = True
            return stop + 1
        if grew and not self._string_is_key:
            self._shown = False
            self._changed = True
        return n

    def _read_escape(self, chunk: str, i: int, pieces: list[str]) -> int:
        """Reads the escape begun in `_escape` from `chunk[i:]`; a whole one goes to `pieces` decoded."""
        escape = self._escape
        assert escape is not None
        if len(escape) == 1:  # the backslash alone so far
            char = chunk[i]
            if char != "u":
                self._escape = None
                self._flush_high(pieces)
                pieces.append(_ESCAPES.get(char, char))  # unknown: the character (validation reports it)
                return i + 1
        need = 6 - len(escape)  # \uXXXX
        escape += chunk[i : i + need]
        i += min(need, len(chunk) - i)
        if len(escape) < 6:
            self._escape = escape
            return i
        self._escape = None
        if not _HEX.issuperset(escape[2:]):
            self._flush_high(pieces)
            pieces.append(escape)  # malformed: kept as written (the final validation reports it)
            return i
        code = int(escape[2:], 16)
        if 0xD800 <= code < 0xDC00:  # the first half of a surrogate pair: wait for the second
            self._flush_high(pieces)
            self._high = escape
        elif 0xDC00 <= code < 0xE000 and self._high is not None:
            high = int(self._high[2:], 16)
            self._high = None
            pieces.append(chr(0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00)))
        else:
            self._flush_high(pieces)
            pieces.append(chr(code) if not 0xD800 <= code < 0xE000 else "\ufffd")
        return i

    def _flush_high(self, pieces: list[str]) -> None:
        """A high surrogate not followed by its low half: shown as the replacement character."""
        if self._high is not None:
            self._high = None
            pieces.append("\ufffd")

    def _end_token(self) -> None:
        token = self._token
        assert token is not None
        self._token = None
        text = "".join(token)
        if text in _LITERALS:
            value: Any = _LITERALS[text]
        else:
            try:
                value = _decode(text)
            except msgspec.DecodeError:
                self._after_value()  # malformed: skipped (the final validation reports it)
                return
        self._place(value)
        self._after_value()
        self.reshaped = True

    def finish(self) -> None:
        """The text ended: a number or literal still being read is complete now."""
        if self._token is not None:
            self._end_token()

    def _open(self, container: Any) -> None:
        if self._root is None:
            self._root = container
        else:
            self._place(container)
        self._stack.append(container)
        self._expect = _KEY_OR_END if isinstance(container, dict) else _VALUE_OR_END
        self._changed = self.reshaped = True

    def _close(self) -> None:
        self._stack.pop()
        self.reshaped = True
        if not self._stack:
            self.done = True
        self._after_value()

    def _place(self, value: Any) -> None:
        """Puts `value` where the current value goes (replacing a partial string there)."""
        container = self._stack[-1]
        if isinstance(container, dict):
            assert self._key is not None
            container[self._key] = value
        elif self._expect == _COMMA_OR_END and container:  # replacing the partial string just placed
            container[-1] = value
        else:
            container.append(value)
            self._expect = _COMMA_OR_END
        self._changed = True

    def _after_value(self) -> None:
        self._expect = _COMMA_OR_END
        self._key = None if self._stack and isinstance(self._stack[-1], dict) else self._key
