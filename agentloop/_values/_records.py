"""`ToolExecution`, the record of one tool call, and `ReturnBehavior`, what happens with a tool's result.

Values: results, events, stored documents and the tool layer all hold them, so they live below the tool layer.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

import msgspec

from ._convert import result_media
from ._messages import ToolExecutionRequest, ToolExecutionResultMessage

__all__ = ["ReturnBehavior", "ToolExecution"]

_MAX_REPR_RESULT = 60


class ReturnBehavior(str, enum.Enum):
    """What happens with a tool's result (LangChain4j's `ReturnBehavior`).

    `TO_LLM` (default): the result goes back to the model, which answers or calls more tools.
    `IMMEDIATE`: the invocation returns the results without asking the model again, when every call of
    the response is `IMMEDIATE`/`IMMEDIATE_IF_LAST` and none failed.
    `IMMEDIATE_IF_LAST`: as `IMMEDIATE`, and also when this call is the response's last one.
    """

    TO_LLM = "to_llm"
    IMMEDIATE = "immediate"
    IMMEDIATE_IF_LAST = "immediate_if_last"

    @classmethod
    def _missing_(cls, value: object) -> ReturnBehavior | None:
        # Accept the names too, in any case: ReturnBehavior("IMMEDIATE").
        if isinstance(value, str):
            for member in cls:
                if value.lower() in (member.value, member.name.lower()):
                    return member
        return None


class ToolExecution(msgspec.Struct, frozen=True):
    """The record of one tool call: what the model asked, what it was told, and when.

    `result` is the text sent to the model and `is_error` the flag sent with it. `error` is the exception
    behind a failed call (`has_failed`). A call to an unknown tool answered by a
    `hallucinated_tool_name_strategy` has no `error` (it counts as a `TO_LLM` call that did not fail), even
    when the strategy flagged its answer `is_error`.
    """

    request: ToolExecutionRequest
    result: str
    result_object: Any
    error: BaseException | None
    index: int
    """Position of the call in the model's response (0-based)."""
    round: int
    started_at: datetime
    """When the call started running (UTC); for a call rejected before running, when it was rejected."""
    finished_at: datetime
    duration: float
    """Seconds from start to finish, from a monotonic clock."""
    return_behavior: ReturnBehavior
    is_error: bool

    @property
    def has_failed(self) -> bool:
        """True when the call raised, timed out, got bad arguments, or returned an unconvertible result."""
        return self.error is not None

    def result_message(self) -> ToolExecutionResultMessage:
        """The message that carries this result to the model (with the pictures the tool returned)."""
        media = () if self.is_error else result_media(self.result_object)
        return ToolExecutionResultMessage(
            self.request.id, self.request.name, self.result, self.is_error, media
        )

    def __repr__(self) -> str:
        result = (
            self.result
            if len(self.result) <= _MAX_REPR_RESULT
            else self.result[: _MAX_REPR_RESULT - 3] + "..."
        )
        error = f", error={self.error!r}" if self.error is not None else ""
        return (
            f"ToolExecution(index={self.index}, name={self.request.name!r}, result={result!r}, "
            f"is_error={self.is_error}{error}, duration={self.duration:.4f})"
        )
