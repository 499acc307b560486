"""The benchmark workload, shared by the fake server and every contender: what is sent, what must arrive.

Standard library only: this module is imported inside the peers' virtualenvs too.

One session = two model requests. Request 1 streams K parallel tool calls `get_value(key="k<i>")`, their
arguments split over several deltas; the client runs the K tools; request 2 (its messages carry the K tool
results `value-k<i>`) streams a final text of T tokens, one chunk per token, then a usage chunk.
"""

from __future__ import annotations

import dataclasses
from urllib.parse import urlsplit

__all__ = [
    "FINAL_INPUT_TOKENS",
    "FIRST_USAGE",
    "QUESTION",
    "TOOL_DESCRIPTION",
    "TOOL_NAME",
    "Scenario",
    "expected_output_tokens",
    "text_tokens",
    "tool_arguments",
    "tool_key",
    "tool_result",
]

QUESTION = "Look up the values of the keys I gave you and summarise them."
TOOL_NAME = "get_value"
TOOL_DESCRIPTION = "Returns the value stored under a key."

# Usage the server reports: request 1 (tool calls), request 2 (final text: output = T).
FIRST_USAGE = (61, 24)
FINAL_INPUT_TOKENS = 118

_WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda")


def text_tokens(count: int) -> list[str]:
    """The T tokens of the final answer, in order (distinct, so a lost or merged delta is caught)."""
    return [("" if i == 0 else " ") + f"{_WORDS[i % len(_WORDS)]}{i}" for i in range(count)]


def tool_key(index: int) -> str:
    """The key the model asks tool call `index` to look up."""
    return f"k{index}"


def tool_arguments(index: int) -> str:
    """The complete JSON arguments of tool call `index`."""
    return '{"key": "' + tool_key(index) + '"}'


def tool_result(key: str) -> str:
    """What `get_value(key)` returns; the server checks every result came back."""
    return f"value-{key}"


def expected_output_tokens(text_token_count: int) -> int:
    """Output tokens summed over both requests, for contenders that report usage."""
    return FIRST_USAGE[1] + text_token_count


@dataclasses.dataclass(frozen=True, slots=True)
class Scenario:
    """One server behaviour, chosen by the URL path prefix `/k<K>/t<T>[/hold<H>][/pause<ms>]/v1`.

    `hold`: request 2 sends its first H tokens, then holds the stream open until the server is told to
    release it (idle streaming sessions). `pause_ms`: request 2 sends its first token, waits, then the rest
    (proves a contender delivers deltas as they arrive rather than after the stream ends).
    """

    tools: int = 3
    tokens: int = 200
    hold: int = 0
    pause_ms: int = 0

    def prefix(self) -> str:
        """The path prefix that selects this scenario (base URL = server + prefix)."""
        path = f"/k{self.tools}/t{self.tokens}"
        if self.hold:
            path += f"/hold{self.hold}"
        if self.pause_ms:
            path += f"/pause{self.pause_ms}"
        return path + "/v1"

    def base_url(self, port: int) -> str:
        """The OpenAI-compatible base URL a client uses for this scenario."""
        return f"http://127.0.0.1:{port}{self.prefix()}"

    @classmethod
    def from_path(cls, path: str) -> Scenario:
        """Reads a scenario from a request path (`.../v1/chat/completions`); ValueError when malformed."""
        head, sep, _ = urlsplit(path).path.partition("/v1/")
        if not sep:
            raise ValueError(f"path {path!r} has no /v1/ segment")
        values: dict[str, int] = {}
        names = {"k": "tools", "t": "tokens", "hold": "hold", "pause": "pause_ms"}
        for part in head.strip("/").split("/"):
            if not part:
                continue
            letters = part.rstrip("0123456789")
            if letters not in names or letters == part:
                raise ValueError(f"unknown scenario segment {part!r} in {path!r}")
            values[names[letters]] = int(part[len(letters) :])
        return cls(**values)
