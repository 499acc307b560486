"""A call's own options (`output_type=`, `middleware=`) travel with its paused round: resumed in this process
from the same object, or from JSON with the options given again; anything else is refused before it runs."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from agentloop import (
    Agent,
    ApprovalError,
    ChatResponse,
    FinishReason,
    Middleware,
    ModelCall,
    PendingApproval,
    tool,
)
from agentloop.testing import ScriptedChatModel
from tests.runtime_helpers import calls


class Invoice(BaseModel):
    total: int


@tool(requires_approval=True)
def charge(amount: int) -> str:
    """Charges the card."""
    return f"charged {amount}"


class Count(Middleware):
    def __init__(self) -> None:
        self.model_calls = 0

    async def wrap_model_call(self, call: ModelCall, call_next: Any) -> ChatResponse:
        self.model_calls += 1
        return await call_next(call)


def script() -> ScriptedChatModel:
    return ScriptedChatModel(
        [calls(("charge", {"amount": 9})), calls(("final_result", {"total": 9}), text="done")]
    )


@pytest.mark.parametrize("streaming", [False, True])
async def test_resuming_a_paused_call_with_its_own_output_type(streaming: bool) -> None:
    """Was: HallucinatedToolError 'final_result' (the paused run forgot the call's output_type)."""
    counter = Count()
    agent = Agent(script(), tools=[charge])
    paused = await agent.chat("bill me", output_type=Invoice, middleware=[counter])
    assert paused.finish_reason is FinishReason.APPROVAL_REQUIRED and paused.pending is not None
    assert paused.pending.paused_with == (f"{__name__}.Invoice", ("Count",))
    if streaming:
        async with agent.resume_stream(paused.pending, {paused.pending.requests[0].call_id: True}) as stream:
            async for _ in stream:
                pass
            resumed = stream.result
    else:
        resumed = await agent.resume(paused.pending, {paused.pending.requests[0].call_id: True})
    assert resumed.output == Invoice(total=9)
    assert counter.model_calls == 2  # the call's middleware ran when it resumed too


async def test_a_round_read_back_from_json_needs_the_options_again() -> None:
    agent = Agent(script(), tools=[charge])
    paused = await agent.chat("bill me", output_type=Invoice, middleware=[Count()])
    assert paused.pending is not None
    data = paused.pending.to_json()
    decisions = {paused.pending.requests[0].call_id: True}
    with pytest.raises(ApprovalError, match=r"paused under output_type=.*Invoice and middleware=\['Count'\]"):
        await agent.resume(PendingApproval.from_json(data), decisions)
    with pytest.raises(ApprovalError, match="middleware="):
        await agent.resume(PendingApproval.from_json(data), decisions, output_type=Invoice)
    counter = Count()
    again = PendingApproval.from_json(data)
    resumed = await agent.resume(again, decisions, output_type=Invoice, middleware=[counter])
    assert resumed.output == Invoice(total=9) and counter.model_calls == 1


async def test_a_round_paused_without_options_resumes_as_before() -> None:
    agent = Agent(ScriptedChatModel([calls(("charge", {"amount": 1})), "ok"]), tools=[charge])
    paused = await agent.chat("bill me")
    assert paused.pending is not None and paused.pending.paused_with == (None, ())
    again = PendingApproval.from_json(paused.pending.to_json())
    resumed = await agent.resume(again, {again.requests[0].call_id: True})
    assert resumed.content == "ok"
