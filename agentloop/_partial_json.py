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
_PARTIAL_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\(?:u[0-9a-fA-F]{0,3})?$")
"""A string's unfinished last escape: a backslash (and the start of a \\uXXXX) not itself escaped, after any
number of whole escaped backslashes (kept, group 1)."""
_decode = msgspec.json.decode

# What the parser expects next.
_VALUE, _KEY_OR_END, _KEY, _COLON, _COMMA_OR_END, _VALUE_OR_END = range(6)


class PartialJSON:
    """An incremental parser for one JSON document (object or array); see the module docstring."""

    __slots__ = (
        "_changed",
        "_escape",
        "_expect",
        "_key",
        "_root",
        "_stack",
        "_string",
        "_string_is_key",
        "_token",
        "done",
    )

    def __init__(self) -> None:
        self._root: Any = None
        self._stack: list[Any] = []  # containers being filled, innermost last
        self._expect = _VALUE
        self._key: str | None = None  # the key whose value comes next (inside an object)
        self._string: list[str] | None = None  # raw pieces of the string being read (escapes undecoded)
        self._string_is_key = False
        self._escape = False  # the string's last character was a backslash
        self._token: list[str] | None = None  # a number or literal being read
        self._changed = False
        self.done = False
        """True once the document's outermost container closed."""

    @property
    def started(self) -> bool:
        """True once the document's first `{` or `[` arrived."""
        return self._root is not None

    @property
    def value(self) -> Any:
        """The document so far (None before it starts). Its containers are live: copy to keep a snapshot."""
        if self._string is not None and not self._string_is_key and self._stack:
            self._place(_decode_partial("".join(self._string)))
        return self._root

    def feed(self, chunk: str) -> bool:
        """Reads the next piece of text; True when `value` changed (grew) because of it."""
        self._changed = False
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
                    self._string, self._string_is_key = [], True
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
                self._string, self._string_is_key = [], False
                self._place("")
            else:
                self._token = [char]
        return self._changed

    # -- pieces ---------------------------------------------------------------------------------------

    def _read_string(self, chunk: str, i: int) -> int:
        """Reads string characters from `chunk[i:]` up to the closing quote; returns where it stopped."""
        pieces = self._string
        assert pieces is not None
        n = len(chunk)
        while i < n:
            if self._escape:  # the escaped character, whatever it is
                self._escape = False
                pieces.append(chunk[i])
                i += 1
                continue
            match = _STRING_STOP.search(chunk, i)
            if match is None:
                pieces.append(chunk[i:])
                self._changed = self._changed or not self._string_is_key
                return n
            stop = match.start()
            if stop > i:
                pieces.append(chunk[i:stop])
            if chunk[stop] == "\\":
                pieces.append("\\")
                self._escape = True
                i = stop + 1
                continue
            raw = "".join(pieces)
            self._string = None
            text = _decode_string(raw)
            if self._string_is_key:
                self._key = text
                self._expect = _COLON
            else:
                self._place(text)
                self._after_value()
            return stop + 1
        self._changed = self._changed or not self._string_is_key
        return n

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
        self._changed = True

    def _close(self) -> None:
        self._stack.pop()
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


def _decode_string(raw: str) -> str:
    if "\\" not in raw:
        return raw
    try:
        result: str = _decode(f'"{raw}"')
    except msgspec.DecodeError:
        return raw
    return result


def _decode_partial(raw: str) -> str:
    """A string that is still being written: drop a trailing escape that is not whole yet."""
    if "\\" not in raw:
        return raw
    return _decode_string(_PARTIAL_ESCAPE.sub(r"\1", raw))
