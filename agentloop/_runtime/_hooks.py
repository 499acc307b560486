"""The markers the seam's hooks return to the loop: `DEFERRED` (a call waits), `NO_ANSWER` and `CORRECTING`.

Features change an invocation only through `Middleware` (`_seam.py`): approval asks, denies and defers in its
`wrap_tool_call` and saves and resumes a held round in its `on_hold` / `on_resume`; structured output shapes
requests in its `wrap_model_call`, watches the stream for partial outputs in its `wrap_stream`, finds the
output call of a tool round in its `on_tool_round` and judges answers in its `on_answer`. The loop
(`_loop.py`, `_calls.py`) knows only the hooks and these markers, never the features' modules.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, final

from .._values._messages import ToolExecutionRequest
from .._values._records import ReturnBehavior, ToolExecution

__all__ = ["CORRECTING", "DEFERRED", "NOT_FOUND", "NO_ANSWER"]


@final
class _Marker:
    """A named marker value, compared by identity."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name

    def __reduce__(self) -> str:
        return self._name  # unpickled as the module's own marker


NO_ANSWER: Any = _Marker("NO_ANSWER")
"""What `Middleware.on_tool_round` returns when the round gave no answer that ends the invocation."""

NOT_FOUND: Any = NO_ANSWER
"""The same marker, as the structured-output code names a value it did not find."""

CORRECTING: Any = _Marker("CORRECTING")
"""What `Middleware.on_tool_round` returns when the round gave no answer but one is being corrected (a
failed output call went back to the model): from then on the invocation's messages are held and stored with
the valid answer, or never."""


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

DEFERRED = ToolExecution(
    ToolExecutionRequest("", "", "{}"),
    "",
    None,
    None,
    -1,
    0,
    _EPOCH,
    _EPOCH,
    0.0,
    ReturnBehavior.TO_LLM,
    False,
)
"""What a tool-call layer returns for a call that did not run and waits for a decision from outside the
invocation (a person): the call is neither stored nor reported, and its round is saved through the
invocation's middleware (`Middleware.on_hold`) instead of committed."""
