"""Property: a conversation that mixes structured output, approval pauses and resumes, memory store
failures and cancellations keeps its memory valid for a provider, and no tool call ever runs twice.

Hypothesis draws a conversation of one to four turns on one memory id, each turn one of: plain tool calls,
structured output (valid at once, or after a correction), or a call that needs approval (paused, then
resumed with a yes or a no, and then resumed a second time, which must be refused). Any turn may be
cancelled (after some streamed items, or when a tool starts), and the store may fail the turn's write. The
model is the real `OpenAIChatModel` talking over a loopback socket to `FakeOpenAIServer`, whose answers
follow the conversation it is sent. After every turn: the stored conversation is valid for a provider,
every call ran at most once, every call answered in memory ran exactly once, and the caller saw a result,
an `AgentLoopError` or the cancellation it asked for. `AGENTLOOP_MIXED_EXAMPLES` examples per backend (15
by default).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import anyio
import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloop import (
    Agent,
    AgentLoopError,
    AiMessage,
    ApprovalError,
    ChatMessage,
    MessageWindowChatMemory,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    tool,
)
from agentloop.models import OpenAIChatModel
from agentloop.stores import ChatMemoryStoreError
from agentloop.testing import FakeOpenAIServer

from ._support import Fault, checked_out, running_tasks

EXAMPLES = int(os.environ.get("AGENTLOOP_MIXED_EXAMPLES", "15"))
MEMORY_ID = "conversation"


@dataclass(frozen=True)
class Turn:
    kind: str  # "tools", "structured", "structured_retry", "approve", "deny"
    mode: str  # "chat" or "stream"
    calls: int  # tool calls besides the gated one
    cancel_after_items: int | None  # stream mode: the consumer cancels after this many items
    cancel_in_tool: bool  # the invocation is cancelled when its first tool starts
    fail_write: bool  # the store fails the turn's next write


turns = st.builds(
    Turn,
    kind=st.sampled_from(["tools", "structured", "structured_retry", "approve", "deny"]),
    mode=st.sampled_from(["chat", "stream"]),
    calls=st.integers(0, 2),
    cancel_after_items=st.one_of(st.none(), st.none(), st.none(), st.integers(1, 12)),
    cancel_in_tool=st.sampled_from([False, False, False, True]),
    fail_write=st.sampled_from([False, False, True]),
)


@dataclass(frozen=True)
class City:
    name: str


class FlakyStore:
    """A user-written store (the simple protocol) whose next write fails when asked."""

    def __init__(self) -> None:
        self.data: dict[Any, list[ChatMessage]] = {}
        self.fail_next = False
        self.failed = 0

    async def get_messages(self, memory_id: Any) -> list[ChatMessage]:
        await anyio.lowlevel.checkpoint()
        return list(self.data.get(memory_id, []))

    async def update_messages(self, memory_id: Any, messages: list[ChatMessage]) -> None:
        await anyio.lowlevel.checkpoint()
        if self.fail_next:
            self.fail_next = False
            self.failed += 1
            raise ChatMemoryStoreError("FlakyStore: the write failed (injected)", store="FlakyStore")
        self.data[memory_id] = list(messages)

    async def delete_messages(self, memory_id: Any) -> None:
        self.data.pop(memory_id, None)


@dataclass
class Ledger:
    runs: Counter[str] = field(default_factory=Counter)
    cancel: anyio.CancelScope | None = None
    calls: int = 0


def _tools(ledger: Ledger) -> list[Any]:
    def begin(key: str) -> None:
        ledger.runs[key] += 1
        if ledger.cancel is not None:
            ledger.cancel.cancel()

    @tool
    async def act(key: str) -> str:
        """Does something once."""
        begin(key)
        await anyio.lowlevel.checkpoint()
        return f"{key} done"

    @tool(requires_approval=True)
    def pay(key: str) -> str:
        """Pays, once a person said yes."""
        begin(key)
        return f"{key} paid"

    return [act, pay]


def _responder(ledger: Ledger) -> Any:
    """The fake server's answer to whatever conversation it is sent: the user's last word says what to do."""

    def call(name: str, arguments: dict[str, Any]) -> ToolExecutionRequest:
        ledger.calls += 1
        return ToolExecutionRequest(f"call_{ledger.calls}", name, msgspec.json.encode(arguments).decode())

    def answer(request: Any) -> Any:
        messages = request.json["messages"]
        last = messages[-1]
        if last["role"] == "tool":
            asked = next(m for m in reversed(messages) if m["role"] == "assistant")
            if any(c["function"]["name"] == "final_result" for c in asked.get("tool_calls") or []):
                return AiMessage(tool_execution_requests=[call("final_result", {"name": "Paris"})])
            return "All done."
        kind, calls = last["content"].split()
        acts = [call("act", {"key": f"k{ledger.calls + 1}"}) for _ in range(int(calls))]
        if kind == "structured":
            return AiMessage(tool_execution_requests=[call("final_result", {"name": "Paris"})])
        if kind == "structured_retry":
            return AiMessage(tool_execution_requests=[call("final_result", {"name": 5})])
        if kind in ("approve", "deny"):
            return AiMessage(tool_execution_requests=[call("pay", {"key": f"k{ledger.calls + 1}"}), *acts])
        return AiMessage("Working on it. ", tool_execution_requests=acts)

    return answer


async def _invoke(agent: Agent, turn: Turn, ledger: Ledger, scope: anyio.CancelScope, **options: Any) -> Any:
    ledger.cancel = scope if turn.cancel_in_tool else None
    message = f"{turn.kind} {turn.calls}"
    if turn.mode == "chat":
        return await agent.chat(message, memory_id=MEMORY_ID, timeout=20, **options)
    items = 0
    async with agent.stream(message, memory_id=MEMORY_ID, timeout=20, **options) as stream:
        async for _ in stream.events():
            items += 1
            if items == turn.cancel_after_items:
                scope.cancel()
                await anyio.lowlevel.checkpoint()
    return stream.result


def _check(store: FlakyStore, ledger: Ledger, fault: Fault) -> None:
    """Memory valid for a provider; every call at most once; every call answered in memory exactly once."""
    messages = store.data.get(MEMORY_ID, [])
    fault.check_memory(messages)
    assert all(n == 1 for n in ledger.runs.values()), ledger.runs
    for message in messages:
        if isinstance(message, ToolExecutionResultMessage) and message.text.endswith(("done", "paid")):
            assert ledger.runs[message.text.split()[0]] == 1, message


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(conversation=st.lists(turns, min_size=1, max_size=4))
async def test_mixed_conversations_keep_memory_valid_and_run_no_call_twice(
    conversation: list[Turn], fault: Fault
) -> None:
    fault.declare(
        "property",
        "random conversations mixing structured output, approval pauses and resumes (and a second resume), "
        "store write failures and cancellations",
        "memory valid after every turn; no tool call ran twice; each answered call ran once; a Result, an "
        "AgentLoopError or the requested cancellation; no leaked task or connection",
        provider="openai",
        mode="property",
    )
    ledger = Ledger()
    store = FlakyStore()
    before = running_tasks()
    server = FakeOpenAIServer([_responder(ledger)] * (12 * len(conversation)))
    async with server:
        model = OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key="test", max_retries=0)
        memory = MessageWindowChatMemory.provider(1000, store=store)
        agent = Agent(model, tools=_tools(ledger), memory=memory)
        structured = Agent(model, tools=_tools(ledger), memory=memory, output_type=City, output_retries=2)
        for turn in conversation:
            store.fail_next = turn.fail_write
            chosen = structured if turn.kind.startswith("structured") else agent
            result, error = None, None
            with anyio.CancelScope() as scope:
                try:
                    result = await _invoke(chosen, turn, ledger, scope)
                except AgentLoopError as caught:
                    error = caught
            fault.scan(error)
            if scope.cancelled_caught:
                assert result is None or turn.mode == "stream"
            if result is not None and result.pending is None and turn.kind.startswith("structured"):
                assert result.output == City("Paris")
            _check(store, ledger, fault)
            if result is not None and result.pending is not None:
                decisions = {r.call_id: turn.kind == "approve" for r in result.pending.requests}
                with anyio.CancelScope() as resume_scope:
                    ledger.cancel = resume_scope if turn.cancel_in_tool else None
                    try:
                        await agent.resume(result.pending, decisions, timeout=20)
                    except AgentLoopError as caught:
                        fault.scan(caught)
                _check(store, ledger, fault)
                ledger.cancel = None
                try:  # a round resumes once: the second resume is refused, and nothing runs
                    await agent.resume(result.pending, decisions, timeout=20)
                    raise AssertionError("a paused round was resumed twice")
                except ApprovalError as refused:
                    fault.scan(refused)
                _check(store, ledger, fault)
            store.fail_next = False
        ledger.cancel = None
        # The conversation goes on: the provider accepts what memory holds.
        final = await agent.chat("tools 1", memory_id=MEMORY_ID, timeout=20)
        assert final.content == "All done."
        _check(store, ledger, fault)
        assert checked_out(model) == 0
        await model.aclose()
    fault.check_tasks(before)
