"""Property: whatever the tools do, wherever the invocation is cancelled, however the stream breaks, the
runtime's guarantees hold.

Hypothesis draws a schedule: model responses of one to four tool calls over one to three rounds, each call's
outcome (returns, raises an Exception, raises a BaseException of its own, hangs until its timeout, raises
CancelledError itself; async or sync), where the invocation is cancelled (when a given call starts, or after
a given number of streamed items), and whether a model stream dies after some chunks. Each schedule runs
over a real socket against the fake OpenAI server, in `chat()`, token and event modes, and then:

* memory is valid for a provider and holds only whole exchanges (the seed, then complete rounds);
* every call of every committed round has exactly one execution record, and ran at most once;
* the caller saw a result, an `AgentLoopError`, or the cancellation it asked for; nothing else;
* no task, tool or pooled connection outlives the invocation.
"""

from __future__ import annotations

import asyncio
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
    MessageWindowChatMemory,
    ToolContext,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    tool,
)
from agentloop.models import OpenAIChatModel
from agentloop.testing import FakeOpenAIServer

from ._support import Fault, checked_out, memory_problem, running_tasks, seed_messages

OUTCOMES = ("return", "raise", "base", "hang", "cancelled_error", "sync_return", "sync_raise")
EXAMPLES = int(os.environ.get("AGENTLOOP_SCHEDULE_EXAMPLES", "25"))
TOOL_TIMEOUT = 0.05


class ToolsOwnError(BaseException):
    """A BaseException raised by a tool on its own (as some libraries do)."""


@dataclass
class Schedule:
    rounds: list[list[str]]
    mode: str
    cancel_at_call: int | None  # the invocation is cancelled when this call (counted over rounds) starts
    cancel_after_items: int | None  # stream modes: the consumer cancels after this many items
    cut_round: int | None  # this round's model stream dies after `cut_chunks` chunks
    cut_chunks: int


@dataclass
class Ledger:
    """What the tools did, by call key."""

    cancel: anyio.CancelScope | None = None
    cancel_key: str | None = None
    runs: Counter[str] = field(default_factory=Counter)
    running: set[str] = field(default_factory=set)


schedules = st.builds(
    Schedule,
    rounds=st.lists(st.lists(st.sampled_from(OUTCOMES), min_size=1, max_size=4), min_size=1, max_size=3),
    mode=st.sampled_from(["chat", "tokens", "events"]),
    cancel_at_call=st.none() | st.integers(0, 8),
    cancel_after_items=st.none() | st.integers(0, 30),
    cut_round=st.none() | st.integers(0, 3),
    cut_chunks=st.integers(1, 8),
)


def _tools(ledger: Ledger) -> list[Any]:
    def begin(key: str) -> None:
        ledger.runs[key] += 1
        if key == ledger.cancel_key and ledger.cancel is not None:
            ledger.cancel.cancel()

    @tool
    async def act(kind: str, key: str, ctx: ToolContext) -> str:
        """Does what `kind` says."""
        begin(key)
        ledger.running.add(key)
        try:
            await anyio.lowlevel.checkpoint()
            if kind == "raise":
                raise ValueError(f"{key} failed")
            if kind == "base":
                raise ToolsOwnError(key)
            if kind == "cancelled_error":
                raise asyncio.CancelledError(key)
            if kind == "hang":
                await anyio.sleep_forever()
            return f"{key} ok"
        finally:
            ledger.running.discard(key)

    @tool
    def act_sync(kind: str, key: str) -> str:
        """Does what `kind` says, in a worker thread."""
        begin(key)
        if kind == "sync_raise":
            raise ValueError(f"{key} failed")
        return f"{key} ok"

    return [act, act_sync]


def _responses(schedule: Schedule) -> list[Any]:
    responses: list[Any] = []
    for r, outcomes in enumerate(schedule.rounds):
        requests = []
        for i, kind in enumerate(outcomes):
            name = "act_sync" if kind.startswith("sync") else "act"
            arguments = msgspec.json.encode({"kind": kind, "key": f"r{r}c{i}"}).decode()
            requests.append(ToolExecutionRequest(f"call_{r}_{i}", name, arguments))
        responses.append(AiMessage(text=f"Round {r}. ", tool_execution_requests=requests))
    responses.append("All done, thank you.")
    return responses


def _call_key(schedule: Schedule, n: int | None) -> str | None:
    if n is None:
        return None
    for r, outcomes in enumerate(schedule.rounds):
        if n < len(outcomes):
            return f"r{r}c{n}"
        n -= len(outcomes)
    return None


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(schedule=schedules)
async def test_random_schedules_keep_every_guarantee(schedule: Schedule, fault: Fault) -> None:
    fault.declare(
        "property",
        "random schedules of tool outcomes (return, raise, BaseException, hang to timeout, CancelledError, "
        "sync), cancellation points and cut model streams",
        "a Result, an AgentLoopError or the requested cancellation; memory valid and whole; one record per "
        "call; no leaked task, tool or connection",
        provider="openai",
        mode="property",
    )
    ledger = Ledger(cancel_key=_call_key(schedule, schedule.cancel_at_call))
    server = FakeOpenAIServer()
    for n, response in enumerate(_responses(schedule)):
        if n == schedule.cut_round:
            server.add(response, disconnect_after_chunks=schedule.cut_chunks)
        else:
            server.add(response)
    before = running_tasks()
    async with server:
        model = OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key="test", max_retries=0)
        memory = MessageWindowChatMemory(1000)
        await memory.add(seed_messages())
        agent = Agent(model, tools=_tools(ledger), memory=memory, tool_timeout=TOOL_TIMEOUT)
        result: Any = None
        error: BaseException | None = None
        with anyio.CancelScope() as scope:
            ledger.cancel = scope
            try:
                result = await _invoke(agent, schedule, scope)
            except Exception as caught:
                error = caught
        fault.scan(error)
        assert error is None or isinstance(error, AgentLoopError), repr(error)
        if scope.cancelled_caught:
            assert result is None

        messages = await memory.messages()
        fault.check_memory(messages)
        assert memory_problem(messages) is None
        assert messages[:2] == seed_messages()
        _check_whole_rounds(messages[2:], schedule, ledger)
        if result is not None:
            rounds = [r.ai_message.tool_execution_requests for r in result.intermediate_responses]
            assert len(result.tool_executions) == sum(len(r) for r in rounds)
            for n, requests in enumerate(rounds, 1):
                executions = [e for e in result.tool_executions if e.round == n]
                assert [e.request.id for e in executions] == [r.id for r in requests]

        assert not ledger.running, f"tools still running: {ledger.running}"
        assert checked_out(model) == 0
        await model.aclose()
    fault.check_tasks(before)


async def _invoke(agent: Agent, schedule: Schedule, scope: anyio.CancelScope) -> Any:
    if schedule.mode == "chat":
        return await agent.chat("go")
    stream = agent.stream("go")
    items = 0
    async with stream:
        iterator = stream if schedule.mode == "tokens" else stream.events()
        async for _ in iterator:
            items += 1
            if items == schedule.cancel_after_items:
                scope.cancel()
                await anyio.lowlevel.checkpoint()
    return stream.result


def _check_whole_rounds(added: list[Any], schedule: Schedule, ledger: Ledger) -> None:
    """What the invocation stored is its user message, whole rounds (each call with one result, each call
    run exactly once), and possibly the answer."""
    if not added:
        return
    assert type(added[0]).__name__ == "UserMessage"
    rest = added[1:]
    while rest and isinstance(rest[0], AiMessage) and rest[0].tool_execution_requests:
        requests = rest[0].tool_execution_requests
        results = rest[1 : 1 + len(requests)]
        assert [m.id for m in results if isinstance(m, ToolExecutionResultMessage)] == [
            r.id for r in requests
        ]
        for request in requests:
            key = msgspec.json.decode(request.arguments)["key"]
            assert ledger.runs[key] == 1, f"{key} ran {ledger.runs[key]} times"
        rest = rest[1 + len(requests) :]
    assert len(rest) <= 1 and all(isinstance(m, AiMessage) for m in rest)
    assert all(count == 1 for count in ledger.runs.values()), ledger.runs
    assert len(schedule.rounds) >= 1
