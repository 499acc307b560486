"""Background tools' records: `BackgroundTask` (one task a `@tool(background=True)` call started) and the
context variable through which a running invocation takes such calls on (`starting_background`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio

if TYPE_CHECKING:
    from ._context import ToolContext

__all__ = [
    "STARTED",
    "BackgroundStarter",
    "BackgroundStatus",
    "BackgroundTask",
    "current_starter",
    "starting_background",
]

STARTED = "Started background task "
"""How the tool result of a background call begins (followed by the task id): what finds it in memory."""

BackgroundStatus = Literal["running", "finished", "failed", "cancelled", "lost"]
"""A background task's state: running; finished (its result is `result`); failed (`error`, and `result`
the error text the model reads); cancelled (the agent closed while it ran); lost (the process that ran it
ended before it finished: only known for memories in a store that outlives the process)."""


class BackgroundTask:
    """One task started by a background tool's call: its id, the call, its status and, once done, the text
    the model reads (`result`) and the exception behind a failure (`error`). `await task.wait()` waits for
    it to end and its result to be handed on (in the process that runs it)."""

    __slots__ = (
        "_done",
        "call_id",
        "delivered",
        "error",
        "invocation_id",
        "memory_id",
        "result",
        "status",
        "task_id",
        "tool_name",
    )

    def __init__(
        self,
        task_id: str,
        tool_name: str,
        call_id: str,
        invocation_id: str,
        memory_id: Any,
        status: BackgroundStatus = "running",
    ) -> None:
        self.task_id = task_id
        self.tool_name = tool_name
        self.call_id = call_id
        self.invocation_id = invocation_id
        self.memory_id = memory_id
        self.status: BackgroundStatus = status
        self.result: str | None = None
        """The text the model gets: the tool's result as text, or its error text when it failed."""
        self.error: BaseException | None = None
        self.delivered = False
        """True once the result went to the model (a steering message, or committed before a new message)."""
        self._done = anyio.Event()
        if status != "running":
            self._done.set()

    @property
    def done(self) -> bool:
        """True once the task ended (finished, failed, cancelled or lost)."""
        return self.status != "running"

    async def wait(self) -> None:
        """Returns once the task ended and its result was handed on (at once for one already done)."""
        await self._done.wait()

    def end(self, status: BackgroundStatus, result: str | None, error: BaseException | None = None) -> None:
        """Records how the task ended (the runtime calls this once, then `settle` once it handed the
        result on)."""
        self.status, self.result, self.error = status, result, error

    def settle(self) -> None:
        """The task ended and its result went where it goes: `wait()` returns."""
        self._done.set()

    def message_text(self) -> str:
        """The steering message that delivers this task's outcome to the model."""
        head = f"background task {self.task_id} ({self.tool_name})"
        if self.status == "finished":
            return f"{head} finished: {self.result}"
        if self.status == "failed":
            return f"{head} failed with an error: {self.result}"
        if self.status == "lost":
            return (
                f"{head} was lost: the process running it stopped before it finished; start it again "
                "if needed"
            )
        return f"{head} was cancelled before it finished"

    def __repr__(self) -> str:
        return f"BackgroundTask({self.task_id!r}, tool={self.tool_name!r}, status={self.status!r})"


class BackgroundStarter(Protocol):
    """What a running invocation offers its tool calls: starts a background tool's work and returns its
    task at once."""

    async def start(
        self, tool: Any, prepared: Any, context: ToolContext, timeout: float | None
    ) -> BackgroundTask: ...


_starter: ContextVar[BackgroundStarter | None] = ContextVar("agentloop_background_starter", default=None)


def current_starter() -> BackgroundStarter | None:
    """The starter of the invocation whose tool call runs here; None outside an agent's invocation (then a
    background tool runs as an ordinary one)."""
    return _starter.get()


@contextmanager
def starting_background(starter: BackgroundStarter | None) -> Iterator[None]:
    """Background tool calls run inside this block start their work through `starter` (None: they run as
    ordinary calls)."""
    token = _starter.set(starter)
    try:
        yield
    finally:
        _starter.reset(token)
