"""Issue 23's classes, as fault rows: a forged or replayed paused round, durable records compared, and the
edges of structured output (JSON among prose, free-form maps under strict modes, deep recursive models,
retries used up, partials across a retry)."""

from __future__ import annotations

import json
from typing import Any, Optional

import pydantic
import pytest

from agentloop import (
    Agent,
    AiMessage,
    ApprovalError,
    MessageWindowChatMemory,
    OutputValidationError,
    PartialOutput,
    PendingApproval,
    tool,
)
from agentloop._values._codec import RecordedToolError
from agentloop._values._pending import _decoder, _encoder, _pending_id, check_of
from agentloop.testing import ScriptedChatModel
from agentloop.testing._fake_server import FakeServer
from tests.runtime_helpers import calls

from ._support import Fault, invoke, running_tasks, seed_messages
from ._wire import MODES, PROVIDERS, Requests, provider_model, shared

pytestmark = pytest.mark.anyio
mode_param = pytest.mark.parametrize("mode", MODES)


async def seeded_memory() -> MessageWindowChatMemory:
    memory = MessageWindowChatMemory(200)
    await memory.add(seed_messages())
    return memory


# -- approval ---------------------------------------------------------------------------------------------


def gated(runs: list[str]) -> Any:
    @tool(requires_approval=True)
    def pay(to: str, amount: int) -> str:
        """Pays someone."""
        runs.append(f"{to} {amount}")
        return f"paid {amount} to {to}"

    return pay


def forged(data: bytes) -> bytes:
    """A new invocation id (so a pending id never issued), new arguments, every digest recomputed."""
    document = json.loads(data)
    state = document["data"]
    state["invocation_id"] = "forged"
    state["id"] = _pending_id("forged", state["round"])
    arguments = '{"to": "mallory", "amount": 5000}'
    state["requests"][0]["arguments"] = arguments
    state["response"]["ai_message"]["tool_execution_requests"][0]["arguments"] = arguments
    state["check"] = None
    decoded = _decoder.decode(json.dumps(document)).data
    state["check"] = json.loads(_encoder.encode(check_of(decoded)))
    return json.dumps(document).encode()


async def resume(agent: Agent[Any], state: Any, mode: str) -> Any:
    if mode == "chat":
        return await agent.resume(state, {"c1": True})
    async with agent.resume_stream(state, {"c1": True}) as stream:
        async for _ in stream.events():
            pass
    return stream.result


@mode_param
@pytest.mark.parametrize("store", [False, True], ids=["no-store", "store"])
async def test_a_forged_paused_round_is_refused(mode: str, store: bool, fault: Fault) -> None:
    fault.declare(
        "approval",
        "paused round's JSON given a new id, new arguments and recomputed digests "
        + ("(memory store)" if store else "(no memory store)"),
        "ApprovalError (not recorded in the store / did not pause in this process); nothing runs; the "
        "genuine round resumes once, a second resume is refused",
        mode=mode,
    )
    before = running_tasks()
    runs: list[str] = []
    memory = await seeded_memory() if store else None
    script = [calls(("pay", {"to": "bob", "amount": 5}, "c1")), "Paid.", "Paid."]
    agent = Agent(ScriptedChatModel(script), tools=[gated(runs)], memory=memory)
    paused = await agent.chat("pay bob")
    assert paused.pending is not None
    with pytest.raises(ApprovalError) as caught:
        await resume(agent, forged(paused.pending.to_json()), mode)
    fault.scan(caught.value)
    assert runs == []
    assert (await resume(agent, paused.pending, mode)).content == "Paid."
    with pytest.raises(ApprovalError, match="already resumed"):
        await resume(agent, PendingApproval.from_json(paused.pending.to_json()), mode)
    assert runs == ["bob 5"]
    if memory is not None:
        fault.check_memory(await memory.messages())
    fault.check_tasks(before)


def test_durable_records_compare_by_value(fault: Fault) -> None:
    fault.declare(
        "approval",
        "a durable tool record (failed call) read back twice and compared",
        "equal by value (RecordedToolError by class name and message), so a replayed Result equals the first",
    )
    record = RecordedToolError("no stock", error_type="ValueError")
    assert record == RecordedToolError("no stock", error_type="ValueError")
    assert record != RecordedToolError("no stock left", error_type="ValueError")
    assert len({record, RecordedToolError("no stock", error_type="ValueError")}) == 1


# -- structured output --------------------------------------------------------------------------------------


class Point(pydantic.BaseModel):
    x: int
    y: int


class Chain(pydantic.BaseModel):
    name: str
    next: Optional[Chain] = None


class Scores(pydantic.BaseModel):
    scores: dict[str, float]


def chain(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"name": "end"}
    for level in range(depth):
        node = {"name": f"n{level}", "next": node}
    return node


@mode_param
async def test_prompted_json_followed_by_prose(mode: str, fault: Fault) -> None:
    fault.declare(
        "output",
        "prompted output: JSON followed by prose (`{...}` then `Hope this helps.`)",
        "the first whole JSON object is read; no correction; memory valid",
        mode=mode,
    )
    memory = await seeded_memory()
    model = ScriptedChatModel(['{"x": 1, "y": 2}\nHope this helps {as always}.'], chunk_size=3)
    agent = Agent(model, output_type=Point, output_mode="prompted", memory=memory)
    outcome = await invoke(agent, mode, "point?")
    assert outcome.result is not None and outcome.result.output == Point(x=1, y=2)
    assert len(model.requests) == 1
    fault.check_memory(await memory.messages())


@mode_param
async def test_a_recursive_model_nested_200_levels(mode: str, fault: Fault) -> None:
    fault.declare(
        "output",
        "recursive output model nested 200 levels deep (beyond pydantic's JSON parser's 200-level limit)",
        "accepted: the object itself, decoded by msgspec and validated (no 'recursion limit exceeded')",
        mode=mode,
    )
    model = ScriptedChatModel([calls(("final_result", chain(200)))], chunk_size=64)
    outcome = await invoke(Agent(model, output_type=Chain), mode, "chain?")
    assert outcome.result is not None and outcome.result.output.name == "n199"


@mode_param
async def test_output_retries_used_up_store_nothing(mode: str, fault: Fault) -> None:
    fault.declare(
        "output",
        "output retries used up (tool, native and prompted modes, a function round between attempts)",
        "OutputValidationError; memory exactly as before the invocation in every output mode",
        mode=mode,
    )

    @tool
    def lookup(name: str) -> str:
        """Looks a name up."""
        return name

    for output_mode in ("tool", "native", "prompted"):
        memory = await seeded_memory()
        bad: AiMessage = (
            calls(("final_result", {"x": 1})) if output_mode == "tool" else AiMessage(json.dumps({"x": 1}))
        )
        model = ScriptedChatModel([bad, calls(("lookup", {"name": "a"})), bad])
        agent = Agent(
            model,
            output_type=Point,
            output_mode=output_mode,  # type: ignore[arg-type]
            memory=memory,
            tools=[lookup],
        )
        outcome = await invoke(agent, mode, "point?")
        assert isinstance(outcome.error, OutputValidationError), outcome.error
        assert await memory.messages() == seed_messages()
        fault.check_memory(await memory.messages())


async def test_partials_across_an_output_retry(fault: Fault) -> None:
    fault.declare(
        "output",
        "an invalid output streamed, then corrected (partials of two attempts)",
        "each partial carries its attempt (1, then 2); monotone within an attempt; the retry starts afresh",
        mode="stream",
    )
    script = [
        calls(("final_result", {"x": 7, "y": "seven"})),
        calls(("final_result", {"x": 1, "y": 2}, "c2")),
    ]
    stream = Agent(ScriptedChatModel(script, chunk_size=2), output_type=Point).stream("point?")
    events = [e async for e in stream.events() if isinstance(e, PartialOutput)]
    attempts = [e.attempt for e in events]
    assert attempts[0] == 1 and attempts[-1] == 2 and attempts == sorted(attempts)
    assert stream.result.output == Point(x=1, y=2)


@pytest.mark.parametrize("provider", PROVIDERS)
@mode_param
async def test_a_free_form_map_in_native_mode(
    provider: str, mode: str, servers: dict[str, FakeServer], fault: Fault
) -> None:
    fault.declare(
        "output",
        "native output with a free-form map (dict[str, float]) under the provider's strict mode",
        "sent as {key, value} entries the strict rules accept; the answer's entries become the dict",
        provider=provider,
        mode=mode,
    )
    before = running_tasks()
    with shared(servers[provider]) as server:
        requests = Requests(server)
        model = provider_model(provider, server)
        memory = await seeded_memory()
        server.add(AiMessage(json.dumps({"scores": [{"key": "ada", "value": 9.5}]})))
        agent = Agent(model, output_type=Scores, output_mode="native", memory=memory)
        outcome = await invoke(agent, mode, "scores?")
        assert outcome.result is not None, outcome.error
        assert outcome.result.output == Scores(scores={"ada": 9.5})
        assert len(requests) == 1
        fault.check_memory(await memory.messages())
        await fault.check_connections(model, server)
    fault.check_tasks(before)
