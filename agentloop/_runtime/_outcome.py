"""How an invocation's loop ends up: its `Result` (whole, or what it had done when it was cancelled), the
memory commits it makes on the way, and the error a failed task group stands for."""

from __future__ import annotations

import sys
from typing import Any

import anyio

from .._conforms import conforms
from .._memory._chat import ChatMemory, FinalCommitMemory
from .._values._messages import AiMessage, ChatMessage, ChatResponse, FinishReason, TokenUsage
from .._values._records import ToolExecution
from .._values._result import Result

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

__all__ = ["CANCELLED", "Sofar", "commit", "first_error", "outcome"]

CANCELLED = ChatResponse(AiMessage(), finish_reason=FinishReason.CANCELLED)
"""The final response of a cancelled invocation: the one the model did not get to give (no text)."""


class Sofar:
    """What an invocation has done so far: what a CANCELLED Result holds."""

    def __init__(self) -> None:
        self.added: list[ChatMessage] = []
        self.executions: list[ToolExecution] = []
        self.intermediate: list[ChatResponse] = []
        self.usage: TokenUsage | None = None

    def cancelled(self, inv: Any, reason: str | None) -> Result[Any]:
        """The Result of an invocation stopped at once: the rounds it committed before, nothing of the one in
        flight."""
        return outcome(
            inv, None, FinishReason.CANCELLED, self.executions, self.intermediate, CANCELLED, self.usage,
            self.added, None, cancel=reason,
        )  # fmt: skip


async def commit(memory: ChatMemory | None, messages: list[ChatMessage], *, final: bool = False) -> None:
    """Writes one unit to memory; shielded, so a cancellation cannot leave half a round behind. The final
    unit goes to `add_final` of a `FinalCommitMemory` (it may give the memory id back with it)."""
    if memory is not None:
        with anyio.CancelScope(shield=True):
            if final and conforms(memory, FinalCommitMemory):
                await memory.add_final(messages)
            else:
                await memory.add(messages)


def outcome(
    inv: Any,
    content: str | None,
    finish_reason: FinishReason | None,
    executions: list[ToolExecution],
    intermediate: list[ChatResponse],
    final: ChatResponse | None,
    usage: TokenUsage | None,
    added: list[ChatMessage],
    output: Any,
    pending: Any = None,
    *,
    cancel: str | None = None,
) -> Result[Any]:
    return Result(
        content=content,
        tool_executions=executions,
        token_usage=usage,
        finish_reason=finish_reason,
        intermediate_responses=intermediate,
        final_response=final,
        messages=tuple(added),
        memory_id=inv.memory_id,
        invocation_id=inv.invocation_id,
        output=output,
        pending=pending,
        cancel_reason=cancel,
    )


def first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The error to raise for a task group's failure: its first real error, not a cancellation."""
    cancelled = anyio.get_cancelled_exc_class()
    first: BaseException | None = None
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            error = first_error(error)
        if not isinstance(error, cancelled):
            return error
        first = first or error
    return first if first is not None else group
