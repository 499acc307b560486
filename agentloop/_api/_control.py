"""The agent's side of run control: each invocation registered with the agent's `RunControl` while it runs,
the commands sent to it applied to it, and what a second invocation on a busy memory id does (`if_busy`).

With the default `LocalRunControl` an invocation registers a callback (no inbox, no task); with a shared
control (SQLite, Redis) a task reads its inbox for as long as it runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Literal, Protocol

import anyio

from .._runtime._flag import Flag
from .._runtime._handle import RunHandle
from .._values._errors import IllegalConfigurationError, MemoryBusyError
from .._values._messages import FinishReason, UserMessage
from .._values._result import Result
from ..control import Inbox, LocalRunControl, RunCommand, RunControl

__all__ = ["IF_BUSY", "IfBusy", "RunTarget", "check_control", "check_if_busy", "registered", "when_busy"]

IfBusy = Literal["wait", "steer", "interrupt", "reject"]
IF_BUSY: tuple[IfBusy, ...] = ("wait", "steer", "interrupt", "reject")


class Steerable(Protocol):
    """What run control needs of a running invocation (the loop's handle on it)."""

    async def cancel(self, *, after_round: bool = False, reason: str | None = None) -> None: ...

    async def steer(self, message: UserMessage | str) -> None: ...


class RunTarget:
    """One registered invocation: where its commands go and, once it ended, its outcome (what a call that
    steered it with `if_busy="steer"` in this process returns)."""

    __slots__ = ("ended", "handle", "result")

    def __init__(self, handle: Steerable) -> None:
        self.handle = handle
        self.ended = Flag()
        self.result: Result[Any] | None = None  # None when it ended in an error

    async def apply(self, command: RunCommand) -> None:
        if command.kind == "cancel":
            await self.handle.cancel(after_round=command.after_round, reason=command.reason)
        else:
            assert command.message is not None
            await self.handle.steer(command.message)


def check_control(control: Any) -> RunControl:
    """`Agent(control=...)`: a `RunControl` (or None for a `LocalRunControl` of the agent's own)."""
    if control is None:
        return LocalRunControl()
    if not isinstance(control, RunControl):
        raise IllegalConfigurationError(
            "Agent(control=...) takes a RunControl (agentloop.control.LocalRunControl(), "
            f"SQLiteRunControl(path) or RedisRunControl(url)), not {type(control).__name__}"
        )
    return control


def check_if_busy(value: Any) -> IfBusy:
    if value not in IF_BUSY:
        raise IllegalConfigurationError(
            f"if_busy={value!r}: choose 'wait' (run after the invocation running on the memory id), 'steer' "
            "(hand the message to it), 'interrupt' (cancel it, then run) or 'reject' (raise MemoryBusyError)"
        )
    return value  # type: ignore[no-any-return]


# What each backend's targets are, for `if_busy="steer"` in this process: LocalRunControl -> memory id ->
# the targets running on it (a shared control's other processes are reached through `busy` / `send`).
_targets: dict[int, dict[Any, set[RunTarget]]] = {}


def registered(
    control: RunControl, invocation_id: str, memory_id: Any, target: RunTarget
) -> AbstractAsyncContextManager[None]:
    """Registers the invocation for as long as the block runs; its commands go to `target`."""
    if isinstance(control, LocalRunControl):
        return _LocalRegistration(control, invocation_id, memory_id, target)
    return _shared_registration(control, invocation_id, memory_id, target)


class _LocalRegistration:
    """`registered()` with a `LocalRunControl`: commands go straight to the target. A plain object, not a
    generator: an invocation held open (a stream waiting on its model) keeps no frame for it."""

    __slots__ = ("_attached", "_control", "_memory_id", "_target")

    def __init__(
        self, control: LocalRunControl, invocation_id: str, memory_id: Any, target: RunTarget
    ) -> None:
        self._control = control
        self._memory_id = memory_id
        self._target = target
        self._attached = control.attach(invocation_id, memory_id, target.apply)

    async def __aenter__(self) -> None:
        _track(self._control, self._memory_id, self._target)
        try:
            self._attached.__enter__()
        except BaseException:
            _untrack(self._control, self._memory_id, self._target)
            raise

    async def __aexit__(self, *exc_info: Any) -> None:
        try:
            self._attached.__exit__(*exc_info)
        finally:
            _untrack(self._control, self._memory_id, self._target)


@asynccontextmanager
async def _shared_registration(
    control: RunControl, invocation_id: str, memory_id: Any, target: RunTarget
) -> AsyncIterator[None]:
    """`registered()` with a shared control: a task reads the invocation's inbox while it runs."""
    _track(control, memory_id, target)
    try:
        async with control.running(invocation_id, memory_id) as inbox, anyio.create_task_group() as group:
            group.start_soon(_listen, inbox, target)

            async def check_inbox() -> None:
                while (command := await inbox.poll()) is not None:
                    await target.apply(command)

            if isinstance(target.handle, RunHandle):
                target.handle.check_inbox = check_inbox
            try:
                yield
            finally:
                group.cancel_scope.cancel()
    finally:
        _untrack(control, memory_id, target)


def _track(control: RunControl, memory_id: Any, target: RunTarget) -> None:
    """Notes `target` as running on `memory_id` (for `if_busy="steer"` in this process)."""
    if memory_id is not None:
        _targets.setdefault(id(control), {}).setdefault(memory_id, set()).add(target)


def _untrack(control: RunControl, memory_id: Any, target: RunTarget) -> None:
    """The invocation ended: forgets it, and tells whoever waits for its end."""
    local = _targets.get(id(control))
    if local is not None:
        if memory_id is not None:
            running = local.get(memory_id)
            if running is not None:
                running.discard(target)
                if not running:
                    del local[memory_id]
        if not local:
            del _targets[id(control)]
    target.ended.set()


async def _listen(inbox: Inbox, target: RunTarget) -> None:
    while True:
        await target.apply(await inbox.receive())


async def when_busy(
    control: RunControl,
    if_busy: IfBusy,
    memory_id: Any,
    message: UserMessage,
    invocation_id: str,
    poll: float = 0.05,
) -> Result[Any] | None:
    """What `if_busy` does before an invocation on `memory_id` starts: None to run it now (nothing runs on the
    memory id, or "interrupt" stopped what ran), a Result to return instead ("steer"), or MemoryBusyError."""
    if if_busy == "wait" or memory_id is None or not await control.busy(memory_id):
        return None
    if if_busy == "reject":
        raise MemoryBusyError(
            f"An invocation is running on memory id {memory_id!r}, and this call said if_busy='reject'. "
            "Try again once it finished, or choose if_busy='wait' (queue behind it), 'steer' (hand it this "
            "message) or 'interrupt' (cancel it and run this one)",
            memory_id=memory_id,
        )
    if if_busy == "interrupt":
        reason = f"interrupted by invocation {invocation_id} (if_busy='interrupt')"
        await control.send(RunCommand.cancel(reason=reason), memory_id=memory_id)
        await _until_free(control, memory_id, poll)
        return None
    running = set(_targets.get(id(control), {}).get(memory_id, ()))
    if not await control.send(RunCommand.steer(message), memory_id=memory_id):
        return None  # it ended meanwhile: run this one as usual
    if running:  # in this process: its own Result, which answered this message too
        target = next(iter(running))
        await target.ended.wait()
        if target.result is not None:
            return target.result
    await _until_free(control, memory_id, poll)
    return None if running else _answered_elsewhere(memory_id, invocation_id)


async def _until_free(control: RunControl, memory_id: Any, poll: float) -> None:
    """Waits until no invocation runs on `memory_id` in any process sharing the control."""
    local = _targets.get(id(control), {}).get(memory_id)
    while local:
        await next(iter(local)).ended.wait()
        local = _targets.get(id(control), {}).get(memory_id)
    while await control.busy(memory_id):  # noqa: ASYNC110  (another process's: polled, nothing pushes)
        await anyio.sleep(poll)


def _answered_elsewhere(memory_id: Any, invocation_id: str) -> Result[Any]:
    """The Result of a call whose message another process's invocation took: that invocation committed the
    message and its answer to the shared memory; this call added nothing itself."""
    return Result(
        None,
        finish_reason=FinishReason.STEERED,
        memory_id=memory_id,
        invocation_id=invocation_id,
    )
