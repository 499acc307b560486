"""`Middleware.on_hold` / `on_resume`: a round whose call waits is held on the seam, and gone on from.

Approval saves and resumes its paused rounds through these hooks; the proof that they are enough: a small
"ask a person" written as a user middleware, streamed and not, on both backends, memory valid throughout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from agentloop import (
    DEFERRED,
    Agent,
    CallContext,
    ChatMessage,
    ChatResponse,
    FinishReason,
    HeldRound,
    IllegalConfigurationError,
    MessageWindowChatMemory,
    Middleware,
    ToolCall,
    ToolExecution,
    UserMessage,
    tool,
)
from agentloop.testing import ScriptedChatModel
from tests.runtime.test_middleware import invoke, memory_of
from tests.runtime_helpers import assert_valid_for_provider, calls


@dataclass
class Held:
    """A held round, kept by the middleware until a person approves it (a `SavedRound`)."""

    round_held: HeldRound

    @property
    def messages(self) -> tuple[ChatMessage, ...]:
        return self.round_held.messages

    @property
    def round(self) -> int:
        return self.round_held.round

    @property
    def user_message(self) -> UserMessage:
        return self.round_held.user_message

    @property
    def executions(self) -> tuple[ToolExecution, ...]:
        return self.round_held.finished

    async def claim(self, tools: Any, memory: Any) -> ChatResponse:
        return self.round_held.response


class AskAPerson(Middleware):
    """Calls of `gated` wait for a person: the round is held per memory id; once `approve(memory_id)` is
    called, the next invocation on that memory id goes on from it and runs them."""

    def __init__(self, gated: str) -> None:
        self.gated = gated
        self.held: dict[Any, Held] = {}
        self.approved: set[Any] = set()

    def approve(self, memory_id: Any) -> None:
        self.approved.add(memory_id)

    async def wrap_tool_call(self, call: ToolCall, call_next: Any) -> ToolExecution:
        if call.request.name == self.gated and call.context.memory_id not in self.approved:
            return DEFERRED  # waits: neither run nor stored
        return await call_next(call)  # type: ignore[no-any-return]

    async def on_hold(self, held: HeldRound) -> Any:
        self.held[held.context.memory_id] = Held(held)
        return f"held round {held.round} of {held.context.memory_id}"

    async def on_resume(self, context: CallContext) -> Held | None:
        if context.memory_id in self.approved:
            return self.held.pop(context.memory_id, None)
        return None


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_user_middleware_can_hold_a_round_for_a_person(streaming: bool) -> None:
    paid: list[int] = []

    @tool
    def pay(amount: int) -> str:
        """Pays amount."""
        paid.append(amount)
        return f"paid {amount}"

    quoted: list[int] = []

    @tool
    def quote(amount: int) -> str:
        """Quotes amount."""
        quoted.append(amount)
        return f"quote {amount}"

    script = [calls(("quote", {"amount": 5}, "q1"), ("pay", {"amount": 5}, "p1")), "Paid 5."]
    model = ScriptedChatModel(script)
    person = AskAPerson("pay")
    agent = Agent(model, tools=[pay, quote], middleware=[person], memory=MessageWindowChatMemory.provider(20))

    first = await invoke(agent, "pay 5", streaming, memory_id="m")
    assert first.finish_reason is FinishReason.APPROVAL_REQUIRED and first.pending == "held round 1 of m"
    assert paid == [] and await memory_of(agent) == []  # the held round commits nothing
    assert [e.result for e in first.tool_executions] == ["quote 5"]

    person.approve("m")
    second = await invoke(agent, "go on", streaming, memory_id="m")
    assert second.content == "Paid 5." and paid == [5]
    assert [e.result for e in second.tool_executions] == ["quote 5", "paid 5"]  # the round, whole
    assert quoted == [5]  # the call that finished before the hold was kept, not run again
    stored = await memory_of(agent)
    assert_valid_for_provider(stored)
    assert [m.text for m in stored if isinstance(m, UserMessage)] == ["pay 5"]
    assert len(model.requests) == 2  # the held response was not asked for again


async def test_a_deferred_call_nobody_holds_is_a_clear_error() -> None:
    class DefersOnly(Middleware):
        async def wrap_tool_call(self, call: ToolCall, call_next: Any) -> ToolExecution:
            return DEFERRED

    @tool
    def noop() -> str:
        """Does nothing."""
        return "ok"

    memory = MessageWindowChatMemory.provider(20)
    agent = Agent(
        ScriptedChatModel([calls(("noop", {}))]), tools=[noop], middleware=[DefersOnly()], memory=memory
    )
    with pytest.raises(IllegalConfigurationError, match=r"DEFERRED .* no middleware saved the round"):
        await agent.chat("go", memory_id="m")
    assert await memory_of(agent) == []
