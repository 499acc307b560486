"""One module per contender, each imported only inside its own fresh subprocess by `_driver.py`.

Every module defines `LABEL` (the name in the tables), `PACKAGES` (distributions whose versions are
reported) and `Contender(base_url, tool)` with `async session(question, on_delta) -> Outcome` and
`async aclose()`. `tool` is the benchmark's `async get_value(key: str) -> str`; `on_delta` must be called
once per streamed text delta, as it arrives. The module's top-level imports are what "import time" measures.
"""

from __future__ import annotations

from typing import NamedTuple


class Outcome(NamedTuple):
    """What a contender reports about one session, checked against what the tool and server saw."""

    tool_executions: int
    output_tokens: int | None  # summed over the session's model calls; None when the framework has none
