"""Human approval of tool calls: inline decisions, paused rounds, resuming them (here and in other processes),
and the checks that keep any call from running twice or with altered arguments."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import (
    Agent,
    AiMessage,
    ApprovalError,
    ApprovalRequired,
    CompleteResponse,
    Defer,
    Denied,
    FinishReason,
    IllegalConfigurationError,
    InMemoryChatMemoryStore,
    MessageWindowChatMemory,
    PendingApproval,
    PendingApprovalStore,
    ReturnBehavior,
    ToolApprovalRequest,
    ToolContext,
    ToolDeniedError,
    ToolExecuted,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolSpecification,
    UserMessage,
    tool,
)
from agentloop._tools._tool import Tool
from agentloop.testing import ScriptedChatModel
from tests.approval_agent import RunLog, SharedTestStore, build_agent
from tests.runtime_helpers import assert_valid_for_provider, calls
from tests.snippets import python_blocks, run_snippets

TESTS = Path(__file__).resolve().parents[2]
ROOT = TESTS.parent


class Tools:
    """A gated `pay`, a gated `delete_file`, an ungated `lookup`; every run counted."""

    def __init__(self) -> None:
        self.runs: Counter[str] = Counter()

    @tool("Pays an amount", requires_approval=True)
    def pay(self, to: str, amount: int) -> str:
        self.runs["pay"] += 1
        return f"paid {amount} to {to}"

    @tool("Deletes a file", requires_approval=True)
    async def delete_file(self, path: str) -> str:
        self.runs["delete_file"] += 1
        return f"deleted {path}"

    @tool("Looks someone up")
    async def lookup(self, name: str) -> str:
        self.runs["lookup"] += 1
        return f"{name} is a friend"


MIXED = calls(
    ("pay", {"to": "bob", "amount": 5}, "c_pay"),
    ("lookup", {"name": "bob"}, "c_look"),
    ("delete_file", {"path": "/tmp/x"}, "c_del"),
)


def memory_messages(agent: Agent, memory_id: Any) -> Any:
    return agent._memory_for(memory_id).messages()  # type: ignore[union-attr]


# -- inline -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_inline_handler_approves_and_denies(kind: str) -> None:
    tools = Tools()
    asked: list[ToolApprovalRequest] = []

    def decide(request: ToolApprovalRequest) -> bool | Denied:
        asked.append(request)
        return True if request.tool_name == "pay" else Denied("Keep that file")

    async def decide_async(request: ToolApprovalRequest) -> bool | Denied:
        return decide(request)

    model = ScriptedChatModel([MIXED, "Paid bob; the file stays."])
    agent = Agent(model, tools=[tools], approval_handler=decide if kind == "sync" else decide_async)
    result = await agent.chat("pay bob, delete /tmp/x")

    assert result.content == "Paid bob; the file stays."
    assert result.finish_reason is FinishReason.STOP and result.pending is None
    assert tools.runs == {"pay": 1, "lookup": 1}  # the denied call never ran
    assert sorted(r.tool_name for r in asked) == [
        "delete_file",
        "pay",
    ]  # the ungated call was not asked about
    pay_request = next(r for r in asked if r.tool_name == "pay")
    assert (pay_request.call_id, pay_request.args, pay_request.index, pay_request.round) == (
        "c_pay",
        {"to": "bob", "amount": 5},
        0,
        1,
    )
    denied = result.tool_executions[2]
    assert isinstance(denied.error, ToolDeniedError) and denied.is_error and denied.result == "Keep that file"
    # The model read the reason as the call's error result, in call order with the others.
    sent = model.requests[1].messages
    results = [m for m in sent if isinstance(m, ToolExecutionResultMessage)]
    assert [(r.id, r.text, r.is_error) for r in results] == [
        ("c_pay", "paid 5 to bob", False),
        ("c_look", "bob is a friend", False),
        ("c_del", "Keep that file", True),
    ]


async def test_false_sends_a_default_denial_text() -> None:
    tools = Tools()
    model = ScriptedChatModel([calls(("pay", {"to": "eve", "amount": 1})), "ok"])
    result = await Agent(model, tools=[tools], approval_handler=lambda r: False).chat("pay eve")
    assert tools.runs["pay"] == 0
    assert result.tool_executions[0].result == "The user denied this call of tool 'pay'; it did not run."


async def test_waiting_for_a_decision_does_not_block_the_other_calls() -> None:
    sibling_done = anyio.Event()
    thread_saw_sibling = threading.Event()

    @tool
    async def quick() -> str:
        sibling_done.set()
        return "quick"

    @tool(requires_approval=True)
    def gated() -> str:
        return "gated"

    async def async_handler(request: ToolApprovalRequest) -> bool:
        await sibling_done.wait()  # only returns if the sibling ran while this waits
        return True

    def sync_handler(request: ToolApprovalRequest) -> bool:
        # A blocking handler (a console prompt) runs in a worker thread: the sibling still runs meanwhile.
        thread_saw_sibling.wait(timeout=10)
        return thread_saw_sibling.is_set()

    for handler in (async_handler, sync_handler):
        sibling_done = anyio.Event()

        async def report(execution: Any) -> None:
            if execution.request.name == "quick":
                thread_saw_sibling.set()

        model = ScriptedChatModel([calls(("gated", {}), ("quick", {})), "done"])
        agent = Agent(model, tools=[quick, gated], approval_handler=handler)
        with anyio.fail_after(10):
            result = await agent.stream("go").on_tool_executed(report).start()
        assert result is not None
        assert [e.result for e in result.tool_executions] == ["gated", "quick"]
        thread_saw_sibling.clear()


async def test_cancellation_while_waiting_for_an_inline_handler() -> None:
    tools = Tools()
    handler_waiting = anyio.Event()
    handler_cancelled = anyio.Event()

    async def never(request: ToolApprovalRequest) -> bool:
        handler_waiting.set()
        try:
            await anyio.sleep_forever()
        finally:
            handler_cancelled.set()
        return True

    memory = MessageWindowChatMemory(20)
    agent = Agent(ScriptedChatModel([MIXED]), tools=[tools], approval_handler=never, memory=memory)
    async with anyio.create_task_group() as group:

        async def run() -> None:
            await agent.chat("go")

        group.start_soon(run)
        with anyio.fail_after(10):
            await handler_waiting.wait()
        group.cancel_scope.cancel()
    assert handler_cancelled.is_set()
    assert tools.runs["pay"] == 0 and tools.runs["delete_file"] == 0
    assert await memory.messages() == []  # nothing of the round, not even the user message
    # The memory id is free again and the conversation goes on.
    agent.model = ScriptedChatModel(["hello"])
    assert (await agent.chat("hi")).content == "hello"


async def test_closing_a_stream_while_a_sync_handler_blocks() -> None:
    release = threading.Event()
    started = threading.Event()

    def blocking(request: ToolApprovalRequest) -> bool:
        started.set()
        release.wait(timeout=10)
        return True

    tools = Tools()
    agent = Agent(ScriptedChatModel([MIXED]), tools=[tools], approval_handler=blocking)
    stream = agent.stream("go")
    events = stream.events()
    with anyio.fail_after(10):
        async for event in events:
            if isinstance(event, ToolExecuted):
                break  # the ungated lookup finished while both gated calls wait in threads
        await anyio.to_thread.run_sync(started.wait)
        await stream.aclose()  # returns although the handler threads still block
    assert stream.done
    release.set()
    assert tools.runs["pay"] == 0 and tools.runs["delete_file"] == 0


async def test_a_handler_that_answers_nonsense_is_a_configuration_error() -> None:
    agent = Agent(
        ScriptedChatModel([calls(("pay", {"to": "a", "amount": 1}))]),
        tools=[Tools()],
        approval_handler=lambda request: "yes",
    )
    with pytest.raises(IllegalConfigurationError, match="must return True, False, Denied"):
        await agent.chat("go")


# -- which calls are gated --------------------------------------------------------------------------------


async def test_a_predicate_gates_per_call() -> None:
    runs: list[int] = []

    def above_100(request: ToolApprovalRequest, ctx: ToolContext) -> bool:
        return bool(request.args["amount"] > ctx.get("limit", 100))

    @tool(requires_approval=above_100)
    async def transfer(amount: int) -> str:
        runs.append(amount)
        return "ok"

    model = ScriptedChatModel(
        [calls(("transfer", {"amount": 50}, "small"), ("transfer", {"amount": 500}, "big")), "done"]
    )
    asked: list[str] = []
    agent = Agent(model, tools=[transfer], approval_handler=lambda r: asked.append(r.call_id) or True)
    await agent.chat("go")
    assert asked == ["big"] and sorted(runs) == [50, 500]


async def test_agent_level_rules_gate_programmatic_tools_by_name_pattern_or_predicate() -> None:
    ran: list[str] = []

    def programmatic(name: str) -> Tool:
        async def run(request: ToolExecutionRequest, ctx: ToolContext) -> str:
            ran.append(name)
            return name

        return Tool(ToolSpecification(name, "an MCP-like tool", {"type": "object", "properties": {}}), run)

    toolset = [programmatic("fs_read"), programmatic("fs_write"), programmatic("search")]
    three = calls(("fs_read", {}), ("fs_write", {}), ("search", {}))

    async def asked_about(rule: Any) -> list[str]:
        asked: list[str] = []
        model = ScriptedChatModel([three, "done"])
        agent = Agent(
            model,
            tools=toolset,
            requires_approval=rule,
            approval_handler=lambda r: asked.append(r.tool_name) or True,
        )
        await agent.chat("go")
        return sorted(asked)

    assert await asked_about(["fs_write"]) == ["fs_write"]
    assert await asked_about("fs_*") == ["fs_read", "fs_write"]
    assert await asked_about(True) == ["fs_read", "fs_write", "search"]
    assert await asked_about(lambda request, ctx: request.tool_name == "search") == ["search"]
    assert ran.count("fs_write") == 4


async def test_bad_rules_are_configuration_errors() -> None:
    with pytest.raises(
        IllegalConfigurationError, match="requires_approval must be True, False or a callable"
    ):

        @tool(requires_approval="yes")  # type: ignore[call-overload, untyped-decorator]
        def f() -> None: ...

    with pytest.raises(IllegalConfigurationError, match="requires_approval must be True, a tool name"):
        Agent(ScriptedChatModel([]), requires_approval=42)
    with pytest.raises(IllegalConfigurationError, match="approval_handler must be a callable"):
        Agent(ScriptedChatModel([]), approval_handler="ask")  # type: ignore[arg-type]

    @tool(requires_approval=lambda request, ctx: None)
    def sloppy() -> str:
        return "ran"

    agent = Agent(ScriptedChatModel([calls(("sloppy", {}))]), tools=[sloppy])
    with pytest.raises(IllegalConfigurationError, match="must return True or False, got None"):
        await agent.chat("go")


async def test_calls_with_invalid_arguments_fail_without_asking_anyone() -> None:
    tools = Tools()
    asked: list[str] = []
    model = ScriptedChatModel([calls(("pay", {"to": "bob"})), "sorry"])
    agent = Agent(model, tools=[tools], approval_handler=lambda r: asked.append(r.call_id) or True)
    result = await agent.chat("go")
    assert (
        asked == [] and result.tool_executions[0].has_failed and "amount" in result.tool_executions[0].result
    )


# -- paused, then resumed in this process -----------------------------------------------------------------


async def test_paused_round_keeps_memory_valid_and_the_memory_id_free() -> None:
    tools = Tools()
    model = ScriptedChatModel(["Hello.", MIXED, "Meanwhile: hi.", "Paid, and the file stays."])
    agent = Agent(model, tools=[tools], memory=MessageWindowChatMemory.provider(50))
    await agent.chat("hi", memory_id="ann")
    before = await memory_messages(agent, "ann")

    paused = await agent.chat("pay bob and delete /tmp/x", memory_id="ann")
    assert paused.finish_reason is FinishReason.APPROVAL_REQUIRED and paused.content is None
    pending = paused.pending
    assert pending is not None and pending.memory_id == "ann" and pending.round == 1
    assert [(r.call_id, r.tool_name, r.arguments) for r in pending.requests] == [
        ("c_pay", "pay", '{"to": "bob", "amount": 5}'),
        ("c_del", "delete_file", '{"path": "/tmp/x"}'),
    ]
    assert [e.request.name for e in pending.executions] == ["lookup"]  # the ungated call already ran
    assert tools.runs == {"lookup": 1}
    assert await memory_messages(agent, "ann") == before  # nothing of the unfinished round

    # Nobody holds the memory id while a person decides: another exchange goes through.
    with anyio.fail_after(5):
        assert (await agent.chat("still there?", memory_id="ann")).content == "Meanwhile: hi."

    resumed = await agent.resume(pending, {"c_pay": True, "c_del": Denied("not that file")})
    assert resumed.content == "Paid, and the file stays."
    assert tools.runs == {"pay": 1, "lookup": 1}  # every call ran exactly once; the denied one never
    assert [(e.request.name, e.result) for e in resumed.tool_executions] == [
        ("pay", "paid 5 to bob"),
        ("lookup", "bob is a friend"),
        ("delete_file", "not that file"),
    ]
    assert resumed.invocation_id == paused.invocation_id
    messages = await memory_messages(agent, "ann")
    assert_valid_for_provider(messages)
    # The round went in as one unit, in the model's call order, after the exchange that happened meanwhile.
    assert messages[len(before) + 2 :] == [
        UserMessage("pay bob and delete /tmp/x"),
        MIXED,
        ToolExecutionResultMessage("c_pay", "pay", "paid 5 to bob"),
        ToolExecutionResultMessage("c_look", "lookup", "bob is a friend"),
        ToolExecutionResultMessage("c_del", "delete_file", "not that file", is_error=True),
        AiMessage("Paid, and the file stays."),
    ]
    # The model saw the whole round, committed, before answering.
    assert model.requests[-1].messages[-5:] == tuple(messages[-6:-1])


async def test_pause_and_resume_without_memory_from_json() -> None:
    tools = Tools()
    agent = Agent(ScriptedChatModel([MIXED, "Done."]), tools=[tools], system_message="Be careful")
    paused = await agent.chat("go")
    assert paused.pending is not None
    data = paused.pending.to_json()
    document = json.loads(data)  # readable JSON: names and argument text as the model sent them
    assert (document["format"], document["kind"]) == (2, "pending_approval")
    document = document["data"]
    assert [(r["tool_name"], r["arguments"]) for r in document["requests"]] == [
        ("pay", '{"to": "bob", "amount": 5}'),
        ("delete_file", '{"path": "/tmp/x"}'),
    ]
    assert document["executions"][0]["result"] == "bob is a friend"
    result = await agent.resume(PendingApproval.from_json(data), {"c_pay": False, "c_del": True})
    assert result.content == "Done."
    # Usage counts the model calls of the resume only: the paused response was counted when it paused.
    assert result.final_response is not None and result.token_usage == result.final_response.token_usage
    assert tools.runs == {"lookup": 1, "delete_file": 1}
    sent = agent.model.requests[-1].messages  # type: ignore[attr-defined]
    assert sent[0].text == "Be careful" and sent[1] == UserMessage("go") and sent[2] == MIXED


async def test_handler_defers_some_calls_and_decides_others() -> None:
    tools = Tools()

    def handler(request: ToolApprovalRequest) -> Any:
        return Defer if request.tool_name == "pay" else Denied("no")

    agent = Agent(ScriptedChatModel([MIXED, "ok"]), tools=[tools], approval_handler=handler)
    paused = await agent.chat("go")
    assert paused.pending is not None
    assert [r.call_id for r in paused.pending.requests] == ["c_pay"]
    assert [e.result for e in paused.pending.executions] == ["bob is a friend", "no"]
    again = PendingApproval.from_json(paused.pending.to_json())
    assert isinstance(again.executions[1].error, ToolDeniedError)  # read back as what it was
    assert again.executions[1] == paused.pending.executions[1]  # a denial is a record: equal by value
    assert PendingApproval.from_json(paused.pending.to_json()).executions == again.executions
    assert again.executions[0].result_object == "bob is a friend"  # kept as JSON by the storage format
    result = await agent.resume(again, {"c_pay": True})
    assert tools.runs == {"pay": 1, "lookup": 1}
    assert [e.result for e in result.tool_executions] == ["paid 5 to bob", "bob is a friend", "no"]


async def test_streaming_pause_emits_approval_required_then_resume_streams() -> None:
    tools = Tools()
    agent = Agent(ScriptedChatModel([MIXED, "All done."]), tools=[tools])
    stream = agent.stream("go")
    events = [event async for event in stream.events()]
    kinds = [type(e).__name__ for e in events]
    assert kinds[-2:] == ["ApprovalRequired", "CompleteResponse"]
    required = events[-2]
    assert isinstance(required, ApprovalRequired) and required.round == 1
    assert [r.call_id for r in required.requests] == ["c_pay", "c_del"]
    assert stream.result.pending is required.pending
    assert isinstance(events[-1], CompleteResponse) and events[-1].result.pending is required.pending

    resumed = agent.resume_stream(required.pending, {"c_pay": True, "c_del": False})
    seen = [event async for event in resumed.events()]
    executed = sorted(e.execution.request.name for e in seen if isinstance(e, ToolExecuted))
    assert executed == ["delete_file", "pay"]  # the lookup ran before the pause: not reported again
    assert resumed.result.content == "All done."
    assert tools.runs == {"pay": 1, "lookup": 1}


async def test_ordered_events_report_the_resumed_round_in_call_order() -> None:
    tools = Tools()
    agent = Agent(ScriptedChatModel([MIXED, "ok"]), tools=[tools], ordered_events=True)
    paused = [e async for e in agent.stream("go").events()]
    # Calls that wait are passed over, so the calls that ran are reported, in call order, when they ran.
    assert [e.execution.request.name for e in paused if isinstance(e, ToolExecuted)] == ["lookup"]
    pending = next(e for e in paused if isinstance(e, ApprovalRequired)).pending
    resumed = [e async for e in agent.resume_stream(pending, {"c_pay": True, "c_del": False}).events()]
    executed = [e.execution.request.name for e in resumed if isinstance(e, ToolExecuted)]
    assert executed == ["pay", "delete_file"]  # each call reported once: lookup was, before the pause
    assert tools.runs == {"pay": 1, "lookup": 1}


async def test_text_only_stream_and_callbacks_see_the_pause() -> None:
    agent = Agent(ScriptedChatModel([MIXED]), tools=[Tools()])
    stream = agent.stream("go")
    assert [t async for t in stream] == []
    assert stream.result.finish_reason is FinishReason.APPROVAL_REQUIRED and stream.result.pending is not None

    seen: list[ApprovalRequired] = []
    agent = Agent(ScriptedChatModel([MIXED]), tools=[Tools()])
    result = await agent.stream("go").on_approval_required(seen.append).start()
    assert result is not None and seen[0].pending is result.pending


async def test_ask_refuses_a_paused_invocation() -> None:
    agent = Agent(ScriptedChatModel([MIXED]), tools=[Tools()])
    with pytest.raises(ApprovalError, match="wait for approval"):
        await agent.ask("go")


async def test_a_resumed_invocation_can_pause_again() -> None:
    tools = Tools()
    second = calls(("pay", {"to": "amy", "amount": 7}, "c_pay2"))
    agent = Agent(ScriptedChatModel([MIXED, second, "Both paid."]), tools=[tools])
    first = (await agent.chat("go")).pending
    assert first is not None
    result = await agent.resume(first, {"c_pay": True, "c_del": False})
    assert result.finish_reason is FinishReason.APPROVAL_REQUIRED and result.pending is not None
    assert result.pending.round == 2 and [r.call_id for r in result.pending.requests] == ["c_pay2"]
    final = await agent.resume(result.pending.to_json(), {"c_pay2": True})
    assert final.content == "Both paid." and tools.runs == {"pay": 2, "lookup": 1}


async def test_an_agent_used_as_a_tool_cannot_pause() -> None:
    tools = Tools()
    inner = Agent(ScriptedChatModel([MIXED]), tools=[tools], name="clerk", description="Does paperwork")
    outer_model = ScriptedChatModel([calls(("clerk", {"request": "pay bob"}, "o1")), "The clerk could not."])
    result = await Agent(outer_model, tools=[inner]).chat("get the clerk to pay bob")
    failed = result.tool_executions[0]
    assert failed.has_failed and "wait for approval" in failed.result and "pay, delete_file" in failed.result
    assert tools.runs == {"lookup": 1}


# -- the immediate-return rule ------------------------------------------------------------------------------


class ImmediateTools:
    def __init__(self) -> None:
        self.runs: Counter[str] = Counter()

    @tool(requires_approval=True, return_behavior=ReturnBehavior.IMMEDIATE)
    def cancel_booking(self, number: str) -> str:
        self.runs["cancel"] += 1
        return f"Booking {number} cancelled"

    @tool(return_behavior=ReturnBehavior.IMMEDIATE)
    def booking_status(self, number: str) -> str:
        self.runs["status"] += 1
        return f"Booking {number} is confirmed"


IMMEDIATE_ROUND = calls(("cancel_booking", {"number": "1"}, "c1"), ("booking_status", {"number": "1"}, "c2"))


async def test_immediate_return_is_decided_once_after_the_resumed_round() -> None:
    tools = ImmediateTools()
    model = ScriptedChatModel([IMMEDIATE_ROUND, "unused"])
    agent = Agent(model, tools=[tools], memory=MessageWindowChatMemory(20))
    paused = await agent.chat("cancel booking 1")
    # Every call is IMMEDIATE and the sibling finished, but the round is not complete: no immediate return.
    assert paused.finish_reason is FinishReason.APPROVAL_REQUIRED and paused.pending is not None
    result = await agent.resume(paused.pending, {"c1": True})
    assert result.returned_immediately and result.content is None
    assert [e.result for e in result.tool_executions] == ["Booking 1 cancelled", "Booking 1 is confirmed"]
    assert len(model.requests) == 1 and tools.runs == {"cancel": 1, "status": 1}
    assert_valid_for_provider(await agent.memory.messages())  # type: ignore[union-attr]


async def test_a_denied_immediate_call_goes_back_to_the_model() -> None:
    tools = ImmediateTools()
    model = ScriptedChatModel([IMMEDIATE_ROUND, "I did not cancel it."])
    agent = Agent(model, tools=[tools])
    paused = await agent.chat("cancel booking 1")
    assert paused.pending is not None
    result = await agent.resume(paused.pending, {"c1": Denied("The customer changed their mind")})
    assert result.content == "I did not cancel it." and len(model.requests) == 2
    assert tools.runs == {"status": 1}


# -- refusals: nothing runs ---------------------------------------------------------------------------------


async def paused_state(memory: bool = True) -> tuple[Agent, Tools, PendingApproval]:
    tools = Tools()
    agent = Agent(
        ScriptedChatModel([MIXED, "Done."]),
        tools=[tools],
        memory=MessageWindowChatMemory.provider(20) if memory else None,
    )
    pending = (await agent.chat("go", memory_id="m")).pending
    assert pending is not None
    return agent, tools, pending


@pytest.mark.parametrize("memory", [True, False], ids=["store", "no-store"])
async def test_double_resume_is_refused(memory: bool) -> None:
    agent, tools, pending = await paused_state(memory)
    await agent.resume(pending, {"c_pay": True, "c_del": True})
    for state in (pending, PendingApproval.from_json(pending.to_json())):
        with pytest.raises(ApprovalError, match="already resumed") as caught:
            await agent.resume(state, {"c_pay": True, "c_del": True})
        assert caught.value.pending_id == pending.id
    assert tools.runs == {"pay": 1, "delete_file": 1, "lookup": 1}


async def test_two_concurrent_resumes_run_the_round_once() -> None:
    agent, tools, pending = await paused_state()
    agent.model = ScriptedChatModel(["Done."] * 2)
    outcomes: list[str] = []

    async def attempt() -> None:
        try:
            await agent.resume(pending, {"c_pay": True, "c_del": True})
            outcomes.append("resumed")
        except ApprovalError:
            outcomes.append("refused")

    async with anyio.create_task_group() as group:
        group.start_soon(attempt)
        group.start_soon(attempt)
    assert sorted(outcomes) == ["refused", "resumed"]
    assert tools.runs == {"pay": 1, "delete_file": 1, "lookup": 1}


@pytest.mark.parametrize(
    ("decisions", "call_id", "message"),
    [
        ({"c_pay": True}, "c_del", "No decision for call 'c_del'"),
        ({"c_pay": True, "c_del": True, "c_zzz": True}, "c_zzz", "no call 'c_zzz' waiting"),
        ({"c_pay": True, "c_look": True, "c_del": True}, "c_look", "no call 'c_look' waiting"),
        ({"c_pay": "yes", "c_del": True}, "c_pay", "must be True, False or Denied"),
    ],
)
async def test_bad_decisions_are_refused_and_the_round_stays_resumable(
    decisions: dict[str, Any], call_id: str, message: str
) -> None:
    agent, tools, pending = await paused_state()
    with pytest.raises(ApprovalError, match=message) as caught:
        await agent.resume(pending, decisions)
    assert caught.value.call_id == call_id
    with pytest.raises(ApprovalError, match=message):
        agent.resume_stream(pending, decisions)  # checked before the stream is handed out
    assert tools.runs == {"lookup": 1}
    assert (await agent.resume(pending, {"c_pay": True, "c_del": False})).content == "Done."


def tampered(data: bytes, edit: Any) -> bytes:
    document = json.loads(data)
    edit(document["data"])
    return json.dumps(document).encode()


def set_amount(document: dict[str, Any]) -> None:
    document["requests"][0]["arguments"] = '{"to": "mallory", "amount": 5000}'


def rename_tool(document: dict[str, Any]) -> None:
    document["requests"][1]["tool_name"] = "pay"


def edit_sibling_result(document: dict[str, Any]) -> None:
    document["executions"][0]["result"] = "mallory is a friend"


def edit_response_only(document: dict[str, Any]) -> None:
    document["response"]["ai_message"]["tool_execution_requests"][0]["arguments"] = '{"to": "mallory"}'


@pytest.mark.parametrize(
    ("edit", "call_id"),
    [
        (set_amount, "c_pay"),
        (rename_tool, "c_del"),
        (edit_sibling_result, "c_look"),
        (edit_response_only, "c_pay"),
    ],
)
@pytest.mark.parametrize("memory", [True, False], ids=["store", "no-store"])
async def test_altered_state_is_refused_naming_the_call(edit: Any, call_id: str, memory: bool) -> None:
    agent, tools, pending = await paused_state(memory)
    altered = tampered(pending.to_json(), edit)
    with pytest.raises(ApprovalError, match=rf"call '{call_id}'.*altered") as caught:
        await agent.resume(altered, {"c_pay": True, "c_del": True})
    assert caught.value.call_id == call_id
    assert tools.runs == {"lookup": 1}
    await agent.resume(pending, {"c_pay": True, "c_del": True})  # the genuine state still resumes
    assert tools.runs == {"pay": 1, "delete_file": 1, "lookup": 1}


def recompute_check(document: dict[str, Any]) -> None:
    """What a deliberate forger does: edit, then recompute every digest (no secret protects them)."""
    from agentloop._values._pending import _decoder, _encoder, check_of

    set_amount(document)
    calls = document["response"]["ai_message"]["tool_execution_requests"]
    calls[0]["arguments"] = document["requests"][0]["arguments"]
    state = _decoder.decode(json.dumps({"format": 1, "kind": "pending_approval", "data": document})).data
    document["check"] = json.loads(_encoder.encode(check_of(state)))


async def test_a_recomputed_forgery_is_refused_by_the_memory_store() -> None:
    agent, tools, pending = await paused_state(memory=True)
    forged = tampered(pending.to_json(), recompute_check)
    with pytest.raises(ApprovalError, match=r"call 'c_pay'.*altered.*record in the memory store") as caught:
        await agent.resume(forged, {"c_pay": True, "c_del": True})
    assert caught.value.call_id == "c_pay" and tools.runs == {"lookup": 1}
    await agent.resume(pending, {"c_pay": True, "c_del": True})
    assert tools.runs == {"pay": 1, "delete_file": 1, "lookup": 1}


async def test_a_recomputed_forgery_is_refused_in_the_process_that_paused_without_a_store() -> None:
    agent, tools, pending = await paused_state(memory=False)
    forged = tampered(pending.to_json(), recompute_check)
    with pytest.raises(ApprovalError, match=r"call 'c_pay'.*record in this process"):
        await agent.resume(forged, {"c_pay": True, "c_del": True})
    assert tools.runs == {"lookup": 1}


def forge_new_round(document: dict[str, Any]) -> None:
    """The attack on a process without a store: a made-up invocation id (so a pending id never issued), new
    arguments, and every digest recomputed, so the state is consistent with itself."""
    from agentloop._values._pending import _pending_id

    document["invocation_id"] = "forged-invocation"
    document["id"] = _pending_id("forged-invocation", document["round"])
    recompute_check(document)


@pytest.mark.parametrize("memory", [True, False], ids=["store", "no-store"])
async def test_a_forged_round_with_a_new_id_is_refused_and_the_original_runs_once(memory: bool) -> None:
    agent, tools, pending = await paused_state(memory)
    forged = tampered(pending.to_json(), forge_new_round)
    state = PendingApproval.from_json(forged)
    assert state.id != pending.id and "mallory" in state.requests[0].arguments  # consistent with itself
    where = "not recorded in the memory store" if memory else "did not pause in this process"
    with pytest.raises(ApprovalError, match=where) as caught:
        await agent.resume(forged, {"c_pay": True, "c_del": True})
    assert caught.value.pending_id == state.id
    assert tools.runs == {"lookup": 1}  # the forged call did not run
    with pytest.raises(ApprovalError, match=where):  # nor on a second try
        await agent.resume(forged, {"c_pay": True, "c_del": True})
    await agent.resume(pending, {"c_pay": True, "c_del": True})  # the genuine round, once
    with pytest.raises(ApprovalError, match="already resumed"):
        await agent.resume(pending, {"c_pay": True, "c_del": True})
    assert tools.runs == {"pay": 1, "delete_file": 1, "lookup": 1}


async def test_not_a_paused_state() -> None:
    agent = Agent(ScriptedChatModel([]), tools=[Tools()])
    with pytest.raises(ApprovalError, match="Not the JSON of a PendingApproval"):
        PendingApproval.from_json(b'{"hello": 1}')
    with pytest.raises(ApprovalError, match="takes the PendingApproval"):
        await agent.resume(42, {})  # type: ignore[arg-type]


async def test_a_tool_missing_on_resume_is_refused() -> None:
    _, tools, pending = await paused_state(memory=False)
    other = Agent(ScriptedChatModel(["x"]), tools=[Tools().lookup, Tools().delete_file])
    with pytest.raises(ApprovalError, match="no tool 'pay'") as caught:
        await other.resume(pending, {"c_pay": True, "c_del": False})
    assert caught.value.call_id == "c_pay" and tools.runs == {"lookup": 1}


async def test_in_memory_store_records_paused_rounds() -> None:
    store = InMemoryChatMemoryStore()
    assert isinstance(store, PendingApprovalStore)
    await store.save_pending_approval("m", "p1", "record")
    assert await store.take_pending_approval("m", "p1", "other") == "record"  # a mismatch is left in place
    assert await store.take_pending_approval("m", "p1", "record") == "record"
    assert await store.take_pending_approval("m", "p1", "record") is None


async def test_context_is_given_again_on_resume() -> None:
    seen: list[Any] = []

    @tool(requires_approval=True)
    def whoami(ctx: ToolContext) -> str:
        seen.append((ctx["tenant"], ctx.invocation_id))
        return "ok"

    agent = Agent(ScriptedChatModel([calls(("whoami", {})), "done"]), tools=[whoami])
    paused = await agent.chat("who", context={"tenant": "acme"})
    assert paused.pending is not None
    await agent.resume(paused.pending, {paused.pending.requests[0].call_id: True}, context={"tenant": "acme"})
    assert seen == [("acme", paused.invocation_id)]


# -- other processes ----------------------------------------------------------------------------------------


async def resume_elsewhere(
    state: Path, runs: Path, store: Path | None = None, kind: str = "test"
) -> dict[str, Any]:
    command = [sys.executable, str(TESTS / "approval_agent.py"), "resume", str(state), str(runs)]
    if store is not None:
        command += [str(store), kind]
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    done = await anyio.run_process(command, env={**os.environ, "PYTHONPATH": path}, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)  # type: ignore[no-any-return]


MONEY = calls(
    ("pay", {"to": "bob", "amount": 5}, "c_pay"),
    ("lookup", {"name": "bob"}, "c_look"),
    ("delete_file", {"path": "/etc/x"}, "c_del"),
)


async def test_without_a_store_another_process_refuses_the_json(tmp_path: Path) -> None:
    runs = tmp_path / "runs.log"
    agent = build_agent(runs, answers=[MONEY, "All done."])
    paused = await agent.chat("pay bob, delete /etc/x")
    assert paused.pending is not None
    state = tmp_path / "state.json"
    state.write_bytes(paused.pending.to_json())

    # Nothing vouches for the state there (a forger could have recomputed its digests): refused.
    outcome = await resume_elsewhere(state, runs)
    assert "did not pause in this process" in outcome["error"] and "SQLiteChatMemoryStore" in outcome["error"]
    assert outcome["pending_id"] == paused.pending.id
    assert RunLog(runs).count("pay bob 5") == 0
    # The process that paused still resumes it, once.
    decisions = {"c_pay": True, "c_del": Denied("not this file")}
    resumed = await agent.resume(PendingApproval.from_json(state.read_bytes()), decisions)
    assert [[e.request.name, e.result, e.is_error] for e in resumed.tool_executions] == [
        ["pay", "paid 5 to bob", False],
        ["lookup", "bob is a friend", False],
        ["delete_file", "not this file", True],
    ]
    log = RunLog(runs)
    assert (log.count("pay bob 5"), log.count("lookup bob"), log.count("delete /etc/x")) == (1, 1, 0)


async def test_a_shared_store_lets_one_process_resume_and_refuses_a_third(tmp_path: Path) -> None:
    runs, db = tmp_path / "runs.log", tmp_path / "memory.db"
    agent = build_agent(runs, db, answers=[MONEY])
    paused = await agent.chat("pay bob, delete /etc/x", memory_id="carol")
    assert paused.pending is not None
    assert await SharedTestStore(db).get_messages("carol") == []  # nothing of the unfinished round
    state = tmp_path / "state.json"
    state.write_bytes(paused.pending.to_json())

    second = await resume_elsewhere(state, runs, db)
    assert second["content"] == "All done."
    assert second["memory"] == ["UserMessage", "AiMessage"] + ["ToolExecutionResultMessage"] * 3 + [
        "AiMessage"
    ]
    third = await resume_elsewhere(state, runs, db)
    assert "already resumed" in third["error"] and third["pending_id"] == paused.pending.id
    with pytest.raises(ApprovalError, match="already resumed"):  # nor in the process that paused
        await agent.resume(paused.pending, {"c_pay": True, "c_del": True})
    log = RunLog(runs)
    assert (log.count("pay bob 5"), log.count("lookup bob"), log.count("delete /etc/x")) == (1, 1, 0)


async def test_an_in_process_store_is_not_shared_with_another_process(tmp_path: Path) -> None:
    runs = tmp_path / "runs.log"
    agent = Agent(
        ScriptedChatModel([MONEY]), tools=[build_agent(runs).tools], memory=MessageWindowChatMemory(9)
    )
    paused = await agent.chat("go")
    assert paused.pending is not None
    state = tmp_path / "state.json"
    state.write_bytes(paused.pending.to_json())
    # The other process's agent uses a store that never saw this round: refused, nothing runs.
    outcome = await resume_elsewhere(state, runs, tmp_path / "fresh.db")
    assert "not recorded in the memory store" in outcome["error"]
    assert RunLog(runs).count("pay bob 5") == 0


# -- the docs and the example ---------------------------------------------------------------------------


async def test_docs_snippets_run() -> None:
    blocks = python_blocks(ROOT / "docs" / "approval.md")
    assert len(blocks) == 5
    namespace: dict[str, object] = {"__name__": "docs_approval"}
    printed = await run_snippets(blocks, "docs/approval.md", namespace)
    assert (
        "('delete_file', 'Keep every file this week', True), ('transfer', 'sent 500 to bob', False)"
        in printed
    )
    assert "[('c1', 'delete_file', '{\"path\": \"/tmp/x\"}')]" in printed
    assert "Deleted. ['delete_file', 'transfer']" in printed
    assert "I kept /tmp/y. Keep it" in printed  # the web app's steps: paused, kept by run id, denied
    store = namespace["MyStore"]()  # type: ignore[operator]
    assert isinstance(store, PendingApprovalStore)


async def test_the_example_runs_and_each_call_runs_at_most_once(monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import approval as example  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(ROOT / "examples"))
    monkeypatch.setattr(example, "ANSWERS", iter(["n", "y", "y"]))
    example.RUNS.clear()
    await example.main()  # asserts its own outcome as well
    assert example.RUNS == {"transfer cafe 4": 1, "delete /tmp/report.txt": 1, "transfer bob 250": 1}


async def test_resume_after_a_restart_with_a_sqlite_store(tmp_path: Path) -> None:
    runs, db = tmp_path / "runs.log", tmp_path / "memory.db"
    agent = build_agent(runs, db, answers=["Hello.", MONEY], kind="sqlite")
    await agent.chat("hi", memory_id="dave")
    paused = await agent.chat("pay bob, delete /etc/x", memory_id="dave")
    assert paused.pending is not None
    state = tmp_path / "state.json"
    state.write_bytes(paused.pending.to_json())
    # The process that paused is gone; a fresh one opens the same file and resumes from the JSON.
    restarted = await resume_elsewhere(state, runs, db, "sqlite")
    assert restarted["content"] == "All done."
    assert restarted["memory"] == ["UserMessage", "AiMessage", "UserMessage", "AiMessage"] + [
        "ToolExecutionResultMessage"
    ] * 3 + ["AiMessage"]
    log = RunLog(runs)
    assert (log.count("pay bob 5"), log.count("lookup bob"), log.count("delete /etc/x")) == (1, 1, 0)


async def test_a_sqlite_store_refuses_a_second_resume_from_another_process(tmp_path: Path) -> None:
    runs, db = tmp_path / "runs.log", tmp_path / "memory.db"
    agent = build_agent(runs, db, answers=[MONEY], kind="sqlite")
    paused = await agent.chat("pay bob, delete /etc/x", memory_id="erin")
    assert paused.pending is not None
    state = tmp_path / "state.json"
    state.write_bytes(paused.pending.to_json())
    assert (await resume_elsewhere(state, runs, db, "sqlite"))["content"] == "All done."
    third = await resume_elsewhere(state, runs, db, "sqlite")
    assert "already resumed" in third.get("error", "")
    assert RunLog(runs).count("pay bob 5") == 1


async def test_check_decisions_refuses_what_resume_would_refuse_before_anything_runs() -> None:
    """`PendingApproval.check_decisions` is the check `resume()` makes, for a process that forwards the
    decisions elsewhere (agentloop.dbos sends them to a workflow) and must refuse bad ones first."""
    agent, tools, pending = await paused_state()
    waiting = sorted(r.call_id for r in pending.requests)
    assert waiting == ["c_del", "c_pay"]
    good = {"c_pay": True, "c_del": Denied("no")}
    assert PendingApproval.from_json(pending.to_json()).check_decisions(good) == good
    for bad, match in [
        ({"c_pay": True}, "No decision for call 'c_del'"),
        ({"c_pay": True, "c_del": True, "c_x": True}, "has no call 'c_x'"),
        ({"c_pay": True, "c_del": "yes"}, "must be True, False or Denied"),
        ([("c_pay", True)], "as a dict"),
    ]:
        with pytest.raises(ApprovalError, match=match) as caught:
            pending.check_decisions(bad)  # type: ignore[arg-type]
        assert caught.value.pending_id == pending.id
    assert tools.runs == {"lookup": 1}  # nothing waiting ran
    await agent.resume(pending, good)
    assert tools.runs == {"pay": 1, "lookup": 1}
