"""The gate each invocation's tool calls pass: ask, wait, pause, resume."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec

from agentloop._runtime._hooks import DEFERRED
from agentloop._runtime._seam import CallContext, HeldRound, Middleware, NextToolCall, ToolCall
from agentloop._tools._threads import is_async_callable, run_sync_in_worker
from agentloop._tools._tool import Tool
from agentloop._tools._toolset import Toolset
from agentloop._values._context import ToolContext
from agentloop._values._errors import (
    ApprovalError,
    IllegalConfigurationError,
    ToolArgumentsError,
    ToolDeniedError,
)
from agentloop._values._messages import ChatResponse
from agentloop._values._records import ReturnBehavior, ToolExecution

if TYPE_CHECKING:
    pass
from agentloop._features.approval._records import claim_pending, record_pending
from agentloop._values._approval import ApprovalRules, Defer, Denied, ToolApprovalRequest
from agentloop._values._pending import PendingApproval, decisions_of, paused_round_record, verify

# -- the gate each invocation's calls pass ----------------------------------------------------------------


class Resume:
    """A paused round to finish first: the state, checked, and a decision for each waiting call."""

    __slots__ = ("_waiting", "decisions", "pending")

    def __init__(self, pending: Any, decisions: Any) -> None:
        if isinstance(pending, (bytes, bytearray, memoryview, str)):
            pending = PendingApproval.from_json(bytes(pending) if not isinstance(pending, str) else pending)
        if not isinstance(pending, PendingApproval):
            raise ApprovalError(
                "resume() takes the PendingApproval of a paused result (result.pending) or its to_json() "
                f"bytes, got {type(pending).__name__}"
            )
        verify(pending)
        self.pending = pending
        self.decisions = decisions_of(pending, decisions)
        self._waiting = {r.index: r for r in pending.requests}

    def settle(self, index: int, tool: Tool | None, clock: Callable[[], datetime]) -> ToolExecution | None:
        """A waiting call of the resumed round: None when approved (it runs now), else its denied execution.
        (The calls that finished before the pause never get here: the loop keeps their executions.)"""
        request = self._waiting[index]
        decision = self.decisions[request.call_id]
        if decision is True:
            return None
        return _denied(request, tool, decision, clock)


class ApprovalGate(Middleware):
    """Approval of one invocation, on the seam: its `wrap_tool_call` asks about gated calls (denied ones
    get their error result without running, deferred ones return `DEFERRED`), and as the invocation's
    its `on_hold` / `on_resume` hooks it saves a round whose calls wait and goes on from a resumed one.

    The agent puts it outside every other middleware (see docs/middleware.md): a user's `wrap_tool_call`
    and tracing see only the calls that run."""

    __slots__ = ("_clock", "_rules", "_waiting", "restart", "resumed")

    def __init__(self, rules: ApprovalRules, resumed: Resume | None, clock: Callable[[], datetime]) -> None:
        self._rules = rules
        self._clock = clock
        self.resumed = resumed
        self.restart = resumed.pending if resumed is not None else None
        self._waiting: list[ToolApprovalRequest] = []

    def needed(self, toolset: Toolset, dynamic: bool) -> bool:
        """Whether any call of this invocation may pass the gate: a resume, an agent-wide rule, a gated tool,
        or a tool provider (its tools are known only when it is asked)."""
        if self.resumed is not None or self._rules.requires is not None or dynamic:
            return True
        return any(tool.requires_approval is not None for tool in toolset)

    async def wrap_tool_call(self, call: ToolCall, call_next: NextToolCall) -> ToolExecution:
        tool = call.tool
        if (
            self.resumed is None
            and self._rules.requires is None
            and (tool is None or tool.requires_approval is None)
        ):
            return await call_next(call)
        settled = await self._settle(call)
        return await call_next(call) if settled is None else settled

    async def _settle(self, call: ToolCall) -> ToolExecution | None:
        """None when the call runs now; else its denied execution, or `DEFERRED` while it waits."""
        resumed, request, tool = self.resumed, call.request, call.tool
        if resumed is not None and call.round == resumed.pending.round:
            return resumed.settle(call.index, tool, self._clock)
        if tool is None:
            return None  # an unknown tool runs nothing: the hallucination rules answer it
        try:
            tool.prepare(request.arguments)
        except ToolArgumentsError:
            return None  # bad arguments: the call fails without asking anyone
        context = call.context
        asked = ToolApprovalRequest(
            request.id or "",
            request.name,
            request.arguments,
            call.index,
            call.round,
            context.memory_id,
            context.invocation_id,
        )
        if not await self._needs_approval(tool, asked, context):
            return None
        answer = await self._ask(asked)
        if answer is True:
            return None
        if answer is Defer or isinstance(answer, Defer):
            self._waiting.append(asked)
            return DEFERRED
        return _denied(asked, tool, answer, self._clock)

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
        if is_async_callable(handler):
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

    async def on_hold(self, held: HeldRound) -> PendingApproval | None:
        """The held round's state, recorded where a resume will claim it, and announced to listeners."""
        if not self._waiting:
            return None  # no call of this round waits for approval
        pending = paused_round_record(held, self._waiting)
        self._waiting = []
        await record_pending(held.memory, pending)
        if held.announce is not None:
            from agentloop._values._events import (
                ApprovalRequired,  # here: _events imports this package (annotations)
            )

            await held.announce(ApprovalRequired(pending))
        return pending

    async def on_resume(self, context: CallContext) -> _Resuming | None:
        """The paused round a `resume()` goes on from."""
        return None if self.resumed is None else _Resuming(self.resumed)


class _Resuming:
    """A paused round, as the loop goes on from it (a `SavedRound`)."""

    __slots__ = ("_resumed", "executions", "messages", "round", "user_message")

    def __init__(self, resumed: Resume) -> None:
        pending = resumed.pending
        self._resumed = resumed
        self.messages, self.round, self.user_message = pending.messages, pending.round, pending.user_message
        self.executions = pending.executions

    async def claim(self, tools: Toolset, memory: Any) -> ChatResponse:
        """Claims the paused round (once) and hands back its response, to run as if the model just sent it
        (without its usage, which the paused invocation counted)."""
        resumed = self._resumed
        pending = resumed.pending
        for request in pending.requests:
            if resumed.decisions[request.call_id] is True and request.tool_name not in tools:
                raise ApprovalError(
                    f"Call {request.call_id!r} was approved, but this agent has no tool "
                    f"{request.tool_name!r} (build the agent with the same tools as the one that paused); "
                    "nothing ran",
                    call_id=request.call_id,
                    pending_id=pending.id,
                )
        await claim_pending(memory, pending)
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
