"""`Result`: what one invocation produced, with every tool execution that led to it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic

from typing_extensions import TypeVar

from ._background import BackgroundTask
from ._cost import PriceSource, cost_of
from ._messages import ChatMessage, ChatResponse, FinishReason, TokenUsage
from ._pending import PendingApproval

# Imported for real, not under TYPE_CHECKING, so help(Result) and typing.get_type_hints() resolve the fields.
from ._records import ToolExecution

__all__ = ["Result"]

T = TypeVar("T", default=str)

_SAME_AS_CONTENT: Any = object()


@dataclass(frozen=True, slots=True)
class Result(Generic[T]):
    """The outcome of `Agent.chat()` or a finished `TokenStream`.

    `content` is the final answer text, or None when an immediate-return tool ended the invocation (then
    `finish_reason` is `FinishReason.TOOL_EXECUTION` and the answer is in `tool_executions`), or when tool
    calls wait for a person (then `finish_reason` is `FinishReason.APPROVAL_REQUIRED` and `pending` holds
    them; `Agent.resume(result.pending, ...)` goes on), or when it was cancelled (`finish_reason` is
    `FinishReason.CANCELLED`, `cancel_reason` says why; docs/runtime.md, "Stopping and steering a run").
    `output` is the validated value of the invocation's `output_type` (for `str`, the default, it equals
    `content`; it is None, whatever the type, when an immediate return or a pause ended the invocation).
    """

    content: str | None
    tool_executions: list[ToolExecution] = field(default_factory=list)
    token_usage: TokenUsage | None = None
    finish_reason: FinishReason | None = None
    intermediate_responses: list[ChatResponse] = field(default_factory=list)
    final_response: ChatResponse | None = None
    messages: Sequence[ChatMessage] = ()
    """The messages this invocation added to the conversation: user message, tool rounds, final answer."""
    memory_id: Any = None
    invocation_id: str = ""
    pending: PendingApproval | None = None
    """The paused round, when tool calls wait for approval (`finish_reason` is `APPROVAL_REQUIRED`)."""
    price_source: PriceSource | None = field(default=None, repr=False, compare=False)
    """How `cost` is worked out (set by the agent from its `pricing=`); None: no cost."""

    @property
    def cost(self) -> float | None:
        """What the invocation's model calls cost in US dollars, worked out on each read from their usage;
        None when no price source is set or a call's price is unknown."""
        if self.price_source is None:
            return None
        return cost_of([*self.intermediate_responses, self.final_response], self.price_source)

    output: T = _SAME_AS_CONTENT
    cancel_reason: str | None = None
    """Why the invocation was cancelled (`finish_reason` is `FinishReason.CANCELLED`): the `reason` given to
    `cancel()`; None otherwise, or when none was given."""

    background_tasks: tuple[BackgroundTask, ...] = ()
    """The background tasks this invocation's calls started, each with its status (docs/tools.md,
    "Background tools"); a task's record goes on changing after the invocation ended."""

    def __post_init__(self) -> None:
        if self.output is _SAME_AS_CONTENT:
            object.__setattr__(self, "output", self.content)

    @property
    def new_messages(self) -> list[ChatMessage]:
        """What this invocation added to the conversation, in order: the user message, each tool round (the
        AiMessage with its calls, then their results) and the final AiMessage. Append it to the
        `message_history` you keep for the next call."""
        return list(self.messages)

    @property
    def returned_immediately(self) -> bool:
        """True when an immediate-return tool ended the invocation (no final model answer)."""
        return self.content is None and self.finish_reason is FinishReason.TOOL_EXECUTION

    def __repr__(self) -> str:
        tools = ", ".join(
            f"{e.request.name}#{e.index}@{e.round}{'!' if e.has_failed else ''}" for e in self.tool_executions
        )
        usage = self.token_usage
        tokens = f"{usage.input_tokens}+{usage.output_tokens}" if usage else "?"
        reason = self.finish_reason.value if self.finish_reason else None
        output = "" if self.output is self.content else f"output={self.output!r}, "
        return (
            f"Result({output}content={self.content!r}, tool_executions=[{tools}], "
            f"finish_reason={reason}, tokens={tokens})"
        )
