"""Background tools at run time: where their tasks run and how their results reach the model.

`BackgroundTasks` is the agent's: while the agent is entered (`async with agent:`) its task group runs
every background task, so tasks outlive the invocation that started them and end when the agent closes.
Outside `async with agent:` an invocation runs its own tasks and waits for them before it ends (the model
answers their results in the same invocation). `InvocationTasks` is one invocation's side: it starts the
tasks of its calls (a `BackgroundStarter`) and, as a feature on the seam, hands finished results to the
model between rounds.

Delivery of a finished task's result, as a user message "background task <id> (<tool>) finished: ...":
to the invocation that started it while it runs; else to the invocation running on its memory id (run
control's steer); else kept and committed at the start of the next invocation on that memory id, before
its user message. A task without a memory id whose invocation ended keeps its result on its
`BackgroundTask` record only.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Any

import anyio
from anyio.abc import TaskGroup

from .._memory._chat import ChatMemory, holding_nothing
from .._tools._execution import error_text
from .._tools._tool import Tool
from .._tools._toolset import Toolset
from .._values._background import STARTED, BackgroundTask, starting_background
from .._values._context import ToolContext, watched_by_nobody
from .._values._errors import AgentLoopError
from .._values._events import BackgroundTaskFinished, BackgroundTaskStarted
from .._values._messages import ChatMessage, ToolExecutionResultMessage, UserMessage
from .._values._result import Result
from ._outcome import first_error
from ._seam import Middleware, RoundEnd, Stop

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

__all__ = ["BackgroundTasks", "InvocationTasks", "has_background", "report_lost"]

_NOTHING: AbstractAsyncContextManager[None] = nullcontext()  # stateless: one for every invocation

logger = logging.getLogger("agentloop.background")

Emit = Callable[[Any], Awaitable[None]]
Deliver = Callable[[BackgroundTask, UserMessage], Awaitable[bool]]


class BackgroundTasks:
    """The agent's background tasks: the task group they run in while the agent is entered, and the ids of
    those running in this process."""

    def __init__(self, deliver: Deliver) -> None:
        self._deliver = deliver
        self._group: TaskGroup | None = None
        self._running: set[str] = set()

    @property
    def owned(self) -> bool:
        """True while the agent is entered: tasks run in its task group and outlive their invocation."""
        return self._group is not None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The agent's task group for as long as the block runs; leaving it cancels the tasks still running
        (each is recorded as cancelled)."""
        if self._group is not None:
            raise AgentLoopError("This agent is already entered (`async with agent:` once at a time)")
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield
            finally:
                self._group = None
                group.cancel_scope.cancel()

    async def hand_over(self, task: BackgroundTask) -> None:
        """A result its own invocation could not take: to the invocation running on its memory id, else
        committed to that memory (without a memory id, or an agent without memory, it stays on the task's
        record). Never raises: a failure here must not end the agent's other tasks."""
        if task.memory_id is None:
            return
        try:
            task.delivered = await self._deliver(task, UserMessage(task.message_text()))
        except Exception:
            logger.exception("The result of background task %s could not be delivered", task.task_id)

    def is_running(self, task_id: str) -> bool:
        """True while a task of that id runs in this process."""
        return task_id in self._running

    def invocation(self, invocation_id: str, memory_id: Any, emit: Emit | None) -> InvocationTasks:
        return InvocationTasks(self, invocation_id, memory_id, emit)


class InvocationTasks(Middleware):
    """One invocation's background tasks: starts them (the `BackgroundStarter` its tool calls use) and
    hands their results to the model after each round while the invocation runs."""

    def __init__(self, owner: BackgroundTasks, invocation_id: str, memory_id: Any, emit: Emit | None) -> None:
        self._owner = owner
        self._invocation_id = invocation_id
        self._memory_id = memory_id
        self._emit = emit
        self._group: TaskGroup | None = None
        self._inbox: list[BackgroundTask] = []
        self.started: list[BackgroundTask] = []
        self.running = True

    def on_result(self, result: Result[Any]) -> Result[Any]:
        """The Result lists the background tasks the invocation started (before the user's hooks see it)."""
        if not self.started:
            return result
        return dataclasses.replace(result, background_tasks=tuple(self.started))

    def scope(self) -> AbstractAsyncContextManager[None]:
        """The invocation's own task group when the agent is not entered: its tasks end with it. An error of
        the invocation comes out as itself, not in a group."""
        return _NOTHING if self._owner.owned else self._own_group()

    @asynccontextmanager
    async def _own_group(self) -> AsyncIterator[None]:
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                try:
                    yield
                except BaseException:
                    group.cancel_scope.cancel()  # an invocation that failed or was cancelled: its tasks too
                    raise
        except BaseExceptionGroup as errors:
            error = first_error(errors)
            raise error from error.__cause__

    def cancel(self) -> None:
        """Cancels the tasks of the invocation's own task group (a cancelled invocation's)."""
        if self._group is not None:
            self._group.cancel_scope.cancel()

    async def start(
        self, tool: Tool, prepared: Any, context: ToolContext, timeout: float | None
    ) -> BackgroundTask:
        request = context.request
        assert request is not None
        task = BackgroundTask(
            f"bg_{os.urandom(6).hex()}", tool.name, request.id or "", self._invocation_id, self._memory_id
        )
        group = self._group if self._group is not None else self._owner._group
        if group is None:
            raise AgentLoopError(f"Background tool {tool.name!r} was called after its invocation ended")
        # Its own context: the invocation's deadline does not bound work that outlives the invocation.
        own = ToolContext(context.invocation_id, context.memory_id, context.context, request, context.round)
        self.started.append(task)
        self._owner._running.add(task.task_id)
        group.start_soon(self._work, task, tool, prepared, own, timeout)
        if self._emit is not None:
            await self._emit(BackgroundTaskStarted(task.task_id, task.call_id, task.tool_name))
        return task

    async def _work(
        self, task: BackgroundTask, tool: Tool, prepared: Any, context: ToolContext, timeout: float | None
    ) -> None:
        try:  # outside the invocation's holds, watchers and starter: the task outlives them
            with holding_nothing(), watched_by_nobody(), starting_background(None):
                await self._run(task, tool, prepared, context, timeout)
        finally:
            self._owner._running.discard(task.task_id)
            if task.status == "cancelled":
                task.settle()
        if self.running:  # taken by this invocation after its round (nothing awaited since `end`)
            self._inbox.append(task)
            if self._emit is not None:
                finished = BackgroundTaskFinished(
                    task.task_id, task.tool_name, task.status, task.result, task.error
                )
                try:
                    await self._emit(finished)
                except Exception:  # a consumer's callback failed: the result still goes to the model
                    logger.exception("BackgroundTaskFinished for task %s was not delivered", task.task_id)
        else:
            with holding_nothing():
                await self._owner.hand_over(task)
        task.settle()

    @staticmethod
    async def _run(
        task: BackgroundTask, tool: Tool, prepared: Any, context: ToolContext, timeout: float | None
    ) -> None:
        try:
            with anyio.CancelScope() if timeout is None else anyio.move_on_after(timeout) as scope:
                value = await tool.invoke(prepared, context)
            if scope.cancelled_caught:
                raise TimeoutError(f"Tool {tool.name!r} timed out after {timeout:g} s")
            text = await tool.text_of(value)
        except Exception as exc:
            task.end("failed", error_text(exc), exc)
        except anyio.get_cancelled_exc_class():
            task.end("cancelled", None)
            raise
        else:
            task.end("finished", text)

    async def after_round(self, end: RoundEnd) -> Sequence[ChatMessage] | Stop | None:
        if end.final and self._group is not None:  # its own tasks: the invocation waits for them
            for task in list(self.started):
                await task.wait()
        if not self._inbox:
            if end.final:  # about to end: a result from now on goes on by run control or to memory
                self.running = False
            return None
        taken, self._inbox = self._inbox, []
        for task in taken:
            task.delivered = True
        return [UserMessage(task.message_text()) for task in taken]

    async def ended(self) -> None:
        """The invocation ended: results it did not take go on to whoever runs on its memory id next."""
        self.running = False
        left, self._inbox = self._inbox, []
        for task in left:
            await self._owner.hand_over(task)


def has_background(tools: Any) -> bool:
    """True when a tool of `tools` (a toolset, or None) runs in the background."""
    return isinstance(tools, Toolset) and any(tool.background for tool in tools)


async def report_lost(memory: ChatMemory, tasks: BackgroundTasks) -> None:
    """Tasks this memory says started, whose outcome it never received, and that run nowhere in this process
    (it restarted, or died while they ran): the model is told each was lost, before the new user message."""
    started: list[tuple[str, str]] = []
    settled: set[str] = set()
    for message in await memory.messages():
        if isinstance(message, ToolExecutionResultMessage) and message.text.startswith(STARTED):
            task_id = message.text[len(STARTED) :].split(" ", 1)[0]
            started.append((task_id, message.tool_name))
        elif isinstance(message, UserMessage) and message.text.startswith("background task "):
            settled.add(message.text.split(" ", 3)[2])
    lost = [
        BackgroundTask(task_id, name, "", "", None, status="lost")
        for task_id, name in started
        if task_id not in settled and not tasks.is_running(task_id)
    ]
    if lost:
        await memory.add([UserMessage(task.message_text()) for task in lost])
