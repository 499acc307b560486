"""One invocation under run control: registered on the agent's control while it runs, cancelled by command.

`controlled()` runs the invocation with a listener that reads its inbox; a cancel command cancels the
invocation at once (the round in flight is not committed, as on a timeout) and the invocation returns a
`Result` whose `finish_reason` is `CANCELLED`. `busy()` says whether an invocation on a memory id runs in
this process on that control (what `if_busy="reject"` checks before waiting for the memory).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import anyio

from .._runtime._control import Inbox, RunCommand, RunControl
from .._values._errors import AgentLoopError, IllegalConfigurationError, MemoryBusyError
from .._values._messages import AiMessage, ChatResponse, FinishReason
from .._values._result import Result

__all__ = ["IfBusy", "before_waiting", "busy", "busy_message", "check_if_busy", "controlled"]

IfBusy = Literal["wait", "interrupt", "reject"]
_IF_BUSY = ("wait", "interrupt", "reject")

_log = logging.getLogger("agentloop.control")

# (id of a control, memory id) -> how many invocations on it run in this process.
_running: dict[tuple[int, Any], int] = {}


def check_if_busy(if_busy: str) -> IfBusy:
    """`if_busy` checked when the call is made, with the values it takes in the error."""
    if if_busy not in _IF_BUSY:
        raise IllegalConfigurationError(
            f"if_busy must be one of {', '.join(repr(v) for v in _IF_BUSY)} (what to do when another "
            f"invocation runs on the memory id), got {if_busy!r}"
        )
    return if_busy  # type: ignore[return-value]


def busy(control: RunControl, memory_id: Any) -> bool:
    """True when an invocation on `memory_id` runs in this process on `control`."""
    return _running.get((id(control), memory_id), 0) > 0


def busy_message(memory_id: Any) -> str:
    """What `MemoryBusyError` (and a web app's 409) says: whose memory is busy and what else to ask for."""
    return (
        f"Another invocation is running on memory id {memory_id!r} (if_busy='reject'). Pass "
        "if_busy='wait' to run after it, 'interrupt' to cancel it and run, or retry later."
    )


async def before_waiting(control: RunControl, memory_id: Any, if_busy: IfBusy) -> None:
    """What `if_busy` does before the invocation waits for its memory: nothing ("wait"), raise
    `MemoryBusyError` ("reject"), or cancel the invocations running on it in any process ("interrupt")."""
    if if_busy == "wait":
        return
    if if_busy == "reject":
        if busy(control, memory_id):
            raise MemoryBusyError(busy_message(memory_id), memory_id=memory_id)
        return
    await control.send(RunCommand.cancel(reason="interrupted by a newer invocation"), memory_id=memory_id)


class _Cancel:
    """What a cancel command left for the invocation: the scope it cancelled and the reason it gave."""

    __slots__ = ("reason", "requested", "scope")

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self.requested = False
        self.reason: str | None = None


async def _listen(inbox: Inbox, cancel: _Cancel, invocation_id: str) -> None:
    """Applies the inbox's commands until the invocation ends (a steering command is not applied yet)."""
    while True:
        try:
            command = await inbox.receive()
        except AgentLoopError as error:  # a backend that failed: the invocation runs on, uncontrolled
            _log.warning("run control stopped listening for invocation %s: %s", invocation_id, error)
            return
        if command.kind == "cancel" and not cancel.requested:
            cancel.requested, cancel.reason = True, command.reason
            cancel.scope.cancel()
        elif command.kind == "steer":
            _log.warning("invocation %s received a steering command; it is not applied", invocation_id)


async def controlled(
    control: RunControl,
    invocation_id: str,
    memory_id: Any,
    run: Callable[[], Awaitable[Result[Any]]],
) -> Result[Any]:
    """Runs `run()` registered on `control`; a cancel command ends it with a CANCELLED `Result`."""
    key = (id(control), memory_id)
    cancel = _Cancel()
    failure: Exception | None = None
    result: Result[Any] | None = None
    async with control.running(invocation_id, memory_id) as inbox:
        _running[key] = _running.get(key, 0) + 1
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(_listen, inbox, cancel, invocation_id)
                try:
                    with cancel.scope:
                        result = await run()
                except Exception as error:  # raised outside the task group, not wrapped in a group
                    failure = error
                group.cancel_scope.cancel()
        finally:
            left = _running[key] - 1
            if left:
                _running[key] = left
            else:
                del _running[key]
    if failure is not None:
        raise failure
    if result is not None:
        return result
    return Result(
        content=None,
        finish_reason=FinishReason.CANCELLED,
        final_response=ChatResponse(AiMessage(None), finish_reason=FinishReason.CANCELLED),
        messages=(),
        memory_id=memory_id,
        invocation_id=invocation_id,
        cancel_reason=cancel.reason,
        output=None,
    )
