"""The typed events a `TokenStream` delivers, in the order docs/runtime.md ("Event order") describes.

Each event carries the tool round it belongs to: 0 for the first model call, n for the model call that
follows the n-th round of tool executions.
"""

from __future__ import annotations

from typing import Any, Union

import msgspec

from ._approval import ToolApprovalRequest
from ._messages import ChatResponse, TokenUsage, ToolExecutionRequest
from ._pending import PendingApproval
from ._progress import GenerationProgress

# Imported for real, not under TYPE_CHECKING: the events' annotations name these, and help() and
# typing.get_type_hints() resolve annotations in this module's namespace (a NameError otherwise).
from ._records import ToolExecution
from ._result import Result
from ._tool_events import ToolOutputDelta, ToolProgress

__all__ = [
    "ApprovalRequired",
    "BackgroundTaskFinished",
    "BackgroundTaskStarted",
    "BeforeToolExecution",
    "CompleteResponse",
    "IntermediateResponse",
    "ModelProgress",
    "PartialOutput",
    "PartialResponse",
    "PartialThinking",
    "PartialToolCall",
    "StreamEvent",
    "ToolExecuted",
    "ToolOutputDelta",
    "ToolProgress",
    "ToolRetrying",
]


class PartialResponse(msgspec.Struct, frozen=True, gc=False):
    """A piece of the model's answer text."""

    text: str
    round: int = 0


class PartialThinking(msgspec.Struct, frozen=True, gc=False):
    """A piece of the model's reasoning (providers that stream it)."""

    text: str
    round: int = 0


class PartialToolCall(msgspec.Struct, frozen=True, gc=False):
    """A piece of a tool call as the model streams it; `arguments` is the next slice of JSON text."""

    index: int
    id: str | None
    name: str | None
    arguments: str
    round: int = 0


class ModelProgress(msgspec.Struct, frozen=True, gc=False):
    """The model is working on a call and says how far it got (models that report it: the local model).

    While it reads the prompt, `prompt_processed` grows to `prompt_tokens` (`cached_tokens` of them were
    reused from its prompt cache); then, while it writes a tool-call decision that no other event shows yet,
    `generated_tokens` grows. Useful to show "reading the prompt: 40%" instead of a silent wait.
    """

    prompt_processed: int
    prompt_tokens: int
    cached_tokens: int = 0
    generated_tokens: int = 0
    round: int = 0

    @property
    def reading_prompt(self) -> bool:
        """True until the whole prompt is read (then the model generates)."""
        return self.prompt_processed < self.prompt_tokens

    @classmethod
    def of(cls, progress: GenerationProgress, round: int) -> ModelProgress:
        """The stream event of a model's `GenerationProgress` in `round`."""
        p = progress
        return cls(p.prompt_processed, p.prompt_tokens, p.cached_tokens, p.generated_tokens, round)


class PartialOutput(msgspec.Struct, frozen=True):
    """The structured output so far, while the model writes it (`output_type=`): fields appear as they
    arrive, each validated. The final, whole value is `CompleteResponse.result.output`.

    `attempt` counts the model's tries at the output, from 1. Within one attempt a later partial never loses
    a field an earlier one had; an invalid output sent back for correction starts the next attempt, whose
    partials start again from nothing (drop what the earlier attempt showed)."""

    output: Any
    round: int = 0
    attempt: int = 1


class IntermediateResponse(msgspec.Struct, frozen=True):
    """A complete model response that asked for tools (one per tool round)."""

    response: ChatResponse
    round: int = 0


class BeforeToolExecution(msgspec.Struct, frozen=True):
    """A tool call is about to run (its arguments were valid). `round` is the tool round, from 1."""

    request: ToolExecutionRequest
    index: int
    round: int


class ToolRetrying(msgspec.Struct, frozen=True):
    """A tool call runs again (`ToolRetry`): its previous attempt failed and attempt `attempt` (from 2)
    starts now. A call has one `BeforeToolExecution` and one `ToolExecuted` however many attempts it takes."""

    request: ToolExecutionRequest
    index: int
    round: int
    attempt: int


class ToolExecuted(msgspec.Struct, frozen=True):
    """A tool call finished (successfully or not); emitted in completion order."""

    execution: ToolExecution

    @property
    def index(self) -> int:
        """The call's position in the model's response."""
        return self.execution.index

    @property
    def round(self) -> int:
        """The tool round, from 1."""
        return self.execution.round


class BackgroundTaskStarted(msgspec.Struct, frozen=True):
    """A background tool's call started its task (`task_id`); the model was told so at once."""

    task_id: str
    call_id: str
    tool_name: str


class BackgroundTaskFinished(msgspec.Struct, frozen=True):
    """A background task this invocation started ended while it ran: `status` "finished" with the text the
    model gets in `result`, or "failed" with the `error` (and its text in `result`)."""

    task_id: str
    tool_name: str
    status: str
    result: str | None
    error: BaseException | None = None


class ApprovalRequired(msgspec.Struct, frozen=True):
    """The invocation pauses: some tool calls wait for a person's decision (resume with `Agent.resume`).
    Comes before the `CompleteResponse` of a paused invocation."""

    pending: PendingApproval

    @property
    def requests(self) -> tuple[ToolApprovalRequest, ...]:
        """The calls that wait."""
        return self.pending.requests

    @property
    def round(self) -> int:
        """The tool round that paused, from 1."""
        return self.pending.round


class CompleteResponse(msgspec.Struct, frozen=True):
    """The invocation finished: the final model response, usage summed over every model call, the Result."""

    response: ChatResponse
    token_usage: TokenUsage | None
    result: Result[Any]


StreamEvent = Union[
    PartialResponse,
    ModelProgress,
    PartialThinking,
    PartialToolCall,
    PartialOutput,
    IntermediateResponse,
    BeforeToolExecution,
    ToolRetrying,
    ToolProgress,
    ToolOutputDelta,
    ToolExecuted,
    BackgroundTaskStarted,
    BackgroundTaskFinished,
    ApprovalRequired,
    CompleteResponse,
]
"""Anything `TokenStream.events()` yields."""
