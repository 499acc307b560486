"""The gate each invocation's tool calls pass: ask, wait, pause, resume."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec

from agentloop._context import ToolContext
from agentloop._errors import (
    ApprovalError,
    IllegalConfigurationError,
    ToolArgumentsError,
    ToolDeniedError,
)
from agentloop._execution import ToolExecution
from agentloop._messages import ChatMessage, ChatResponse, ToolExecutionRequest
from agentloop._threads import _is_async_callable, run_sync_in_worker
from agentloop._tool import ReturnBehavior, Tool
from agentloop._toolset import Toolset

if TYPE_CHECKING:
    from agentloop._loop import Invocation, Listener
from agentloop._features.approval._decisions import ApprovalRules, Defer, Denied, ToolApprovalRequest
from agentloop._features.approval._format import PendingApproval, _decisions, _paused, _verify
from agentloop._features.approval._records import _claim, _record

# -- the gate each invocation's calls pass ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Settled:
    """A gated call that does not run now: its `execution` (None while it waits), and whether it is news
    (a `ToolExecuted` event is due)."""

    execution: ToolExecution | None
    report: bool


_WAITS = Settled(None, False)


class Resume:
    """A paused round to finish first: the state, checked, and a decision for each waiting call."""

    __slots__ = ("_finished", "_waiting", "decisions", "pending")

    def __init__(self, pending: Any, decisions: Any) -> None:
        if isinstance(pending, (bytes, bytearray, memoryview, str)):
            pending = PendingApproval.from_json(bytes(pending) if not isinstance(pending, str) else pending)
        if not isinstance(pending, PendingApproval):
            raise ApprovalError(
                "resume() takes the PendingApproval of a paused result (result.pending) or its to_json() "
                f"bytes, got {type(pending).__name__}"
            )
        _verify(pending)
        self.pending = pending
        self.decisions = _decisions(pending, decisions)
        self._finished = {e.index: e for e in pending.executions}
        self._waiting = {r.index: r for r in pending.requests}

    def settle(self, index: int, toolset: Toolset, clock: Callable[[], datetime]) -> Settled | None:
        finished = self._finished.get(index)
        if finished is not None:
            return Settled(finished, False)  # ran before the pause: never again
        request = self._waiting[index]
        decision = self.decisions[request.call_id]
        if decision is True:
            return None
        return Settled(_denied(request, toolset.get(request.tool_name), decision, clock), True)


class ApprovalGate:
    """The approval side of one invocation: asks about gated calls, collects those that wait, pauses the
    round, and finishes a resumed one."""

    __slots__ = ("_rules", "_waiting", "resumed")

    def __init__(self, rules: ApprovalRules, resumed: Resume | None = None) -> None:
        self._rules = rules
        self.resumed = resumed
        self._waiting: list[ToolApprovalRequest] = []

    def concerns(self, name: str, toolset: Toolset) -> bool:
        """Cheap first look: whether the call named `name` may need the gate at all."""
        if self.resumed is not None or self._rules.requires is not None:
            return True
        tool = toolset.get(name)
        return tool is not None and tool.requires_approval is not None

    async def settle(
        self, request: ToolExecutionRequest, index: int, round: int, toolset: Toolset, inv: Invocation
    ) -> Settled | None:
        """None when the call runs now; else what became of it (denied, or waiting for a person)."""
        resumed = self.resumed
        if resumed is not None and round == resumed.pending.round:
            return resumed.settle(index, toolset, inv.options.now)
        tool = toolset.get(request.name)
        if tool is None:
            return None  # an unknown tool runs nothing: the hallucination rules answer it
        try:
            tool.prepare(request.arguments)
        except ToolArgumentsError:
            return None  # bad arguments: the call fails without asking anyone
        asked = ToolApprovalRequest(
            request.id or "", request.name, request.arguments, index, round, inv.memory_id, inv.invocation_id
        )
        context = ToolContext(inv.invocation_id, inv.memory_id, inv.context, request, round, inv.deadline)
        if not await self._needs_approval(tool, asked, context):
            return None
        answer = await self._ask(asked)
        if answer is True:
            return None
        if answer is Defer or isinstance(answer, Defer):
            self._waiting.append(asked)
            return _WAITS
        return Settled(_denied(asked, tool, answer, inv.options.now), True)

    async def _needs_approval(self, tool: Tool, request: ToolApprovalRequest, context: ToolContext) -> bool:
        rule = tool.requires_approval
        if rule is True:
            return True
        if rule is not None and await _truth(
            rule(request, context), f"requires_approval of tool {tool.name!r}"
        ):
            return True
        agent_rule = self._rules.requires
        if agent_rule is None:
            return False
        return await _truth(agent_rule(request, context), "Agent(requires_approval=...)")

    async def _ask(self, request: ToolApprovalRequest) -> bool | Denied | Defer | type[Defer]:
        handler = self._rules.handler
        if handler is None:
            return Defer
        if _is_async_callable(handler):
            answer = await handler(request)
        else:  # a sync handler may block (a console prompt): the other calls go on meanwhile
            answer = await run_sync_in_worker(handler, request)
        if inspect.isawaitable(answer):
            answer = await answer
        if answer is True or answer is False or isinstance(answer, (Denied, Defer)) or answer is Defer:
            return answer
        raise IllegalConfigurationError(
            f"approval_handler must return True, False, Denied(reason) or Defer for call {request.call_id!r} "
            f"(tool {request.tool_name!r}), got {answer!r}"
        )

    # -- pausing and resuming ----------------------------------------------------------------------------

    @property
    def waiting(self) -> bool:
        """True when calls of the current round wait for a person: the round pauses instead of committing."""
        return bool(self._waiting)

    async def pause(
        self,
        inv: Invocation,
        response: ChatResponse,
        round: int,
        finished: list[ToolExecution],
        carried: list[ChatMessage],
        emit: Listener | None,
    ) -> PendingApproval:
        """The paused round's state, recorded where a resume will claim it, and announced to listeners."""
        pending = _paused(inv, response, round, self._waiting, finished, carried)
        self._waiting = []
        await _record(inv.memory, pending)
        if emit is not None:
            from agentloop._events import ApprovalRequired  # here: _events imports this package (annotations)

            await emit(ApprovalRequired(pending))
        return pending

    async def resume(self, toolset: Toolset, inv: Invocation) -> ChatResponse:
        """Claims the paused round (once) and hands back its response, to run as if the model just sent it
        (without its usage, which the paused invocation counted)."""
        resumed = self.resumed
        assert resumed is not None
        pending = resumed.pending
        for request in pending.requests:
            if resumed.decisions[request.call_id] is True and request.tool_name not in toolset:
                raise ApprovalError(
                    f"Call {request.call_id!r} was approved, but this agent has no tool "
                    f"{request.tool_name!r} (build the agent with the same tools as the one that paused); "
                    "nothing ran",
                    call_id=request.call_id,
                    pending_id=pending.id,
                )
        await _claim(inv.memory, pending)
        return msgspec.structs.replace(pending.response, token_usage=None)


def _denied(
    request: ToolApprovalRequest,
    tool: Tool | None,
    decision: bool | Denied | Defer | type[Defer],
    clock: Callable[[], datetime],
) -> ToolExecution:
    reason = decision.reason if isinstance(decision, Denied) else None
    text = reason or f"The user denied this call of tool {request.tool_name!r}; it did not run."
    now = clock()
    return ToolExecution(
        request.request,
        text,
        None,
        ToolDeniedError(text, call_id=request.call_id, tool_name=request.tool_name),
        request.index,
        request.round,
        now,
        now,
        0.0,
        tool.return_behavior if tool is not None else ReturnBehavior.TO_LLM,
        True,
    )


async def _truth(value: Any, what: str) -> bool:
    if inspect.isawaitable(value):
        value = await value
    if not isinstance(value, bool):
        raise IllegalConfigurationError(
            f"{what} must return True or False, got {value!r} (a missing return must not let a call run "
            "unasked)"
        )
    return value
