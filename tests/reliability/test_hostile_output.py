"""Hostile or broken model output: invalid or ill-typed arguments, extra ones, attempts to set injected
parameters, unknown or empty tool names, tools the invocation did not offer, 1,000 calls in one response,
arguments nested 10,000 levels deep, repeated or missing call ids. The loop stays alive where it can, the
model gets an actionable message, injected values are never overridden, nothing the invocation did not
offer ever runs, and memory stays valid for the provider."""

from __future__ import annotations

import json
from typing import Annotated, Any

import pytest

from agentloop import (
    Agent,
    AiMessage,
    BadResponseError,
    HallucinatedToolError,
    MessageWindowChatMemory,
    ToolContext,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolMemoryId,
    tool,
    tool_specification_from,
)
from agentloop._values._messages import ChatMessage
from agentloop.testing import Reply, ScriptedChatModel
from agentloop.testing._fake_server import FakeServer
from tests.runtime_helpers import calls

from ._support import Fault, ToolProbe, invoke, running_tasks, seed_messages
from ._wire import (
    CALLS,
    MODES,
    PROVIDERS,
    QUESTION,
    Requests,
    provider_model,
    replace_bytes,
    shared,
    tool_results_sent,
    weather_tool,
)

pytestmark = pytest.mark.anyio

mode_param = pytest.mark.parametrize("mode", MODES)


def call(name: str, arguments: str, call_id: str = "call_1") -> AiMessage:
    return AiMessage(tool_execution_requests=[ToolExecutionRequest(call_id, name, arguments)])


def forecast_tool(probe: ToolProbe) -> Any:
    @tool
    async def forecast(city: str, days: int) -> str:
        """The forecast for a city, for a number of days."""
        await probe.run(f"{city}/{days}", seconds=0)
        return f"{days} sunny days in {city}"

    return forecast


async def seeded_memory() -> MessageWindowChatMemory:
    memory = MessageWindowChatMemory(200)
    await memory.add(seed_messages())
    return memory


def sent_results(model: ScriptedChatModel, request: int) -> list[ToolExecutionResultMessage]:
    return [m for m in model.requests[request].messages if isinstance(m, ToolExecutionResultMessage)]


ARGUMENT_CASES = {  # what the model sent, and phrases of what it is told
    "invalid JSON arguments": (
        '{"city": Paris, "days": 2}',
        "Invalid arguments for tool 'forecast': not valid JSON (",
        "send the arguments as one JSON object",
    ),
    "arguments of the wrong type": (
        '{"city": ["Paris"], "days": "a few"}',
        "Invalid arguments for tool 'forecast': city: Input should be a valid string",
        "days: Input should be a valid integer, unable to parse string as an integer (got 'a few')",
    ),
    "arguments that are not an object": (
        '["Paris", 2]',
        "Invalid arguments for tool 'forecast': expected a JSON object of named arguments, got an array",
    ),
    "a required argument missing": ('{"city": "Paris"}', "days: required field is missing"),
}
ARGUMENT_OUTCOMES = {
    "invalid JSON arguments": "says the JSON is invalid and to send one JSON object",
    "arguments of the wrong type": "names each field and the type it needs",
    "arguments that are not an object": "says a JSON object of named arguments is expected",
    "a required argument missing": "names the missing field",
}


@pytest.mark.parametrize("case", list(ARGUMENT_CASES))
@mode_param
async def test_bad_arguments_are_explained_to_the_model(case: str, mode: str, fault: Fault) -> None:
    arguments, *phrases = ARGUMENT_CASES[case]
    fault.declare(
        "output",
        case,
        f"not run; the model's error result {ARGUMENT_OUTCOMES[case]}; the loop goes on",
        mode=mode,
    )
    before = running_tasks()
    probe = ToolProbe()
    model = ScriptedChatModel([call("forecast", arguments), "Let me fix that."])
    memory = await seeded_memory()
    outcome = await invoke(Agent(model, tools=[forecast_tool(probe)], memory=memory), mode, QUESTION)
    assert outcome.result is not None and outcome.result.content == "Let me fix that."
    (execution,) = outcome.result.tool_executions
    assert execution.is_error and type(execution.error).__name__ == "ToolArgumentsError"
    for phrase in phrases:
        assert phrase in execution.result
    assert probe.started == []
    assert [(m.text, m.is_error) for m in sent_results(model, 1)] == [(execution.result, True)]
    fault.check_memory(await memory.messages())
    fault.check_tasks(before)


@mode_param
async def test_extra_arguments_are_ignored(mode: str, fault: Fault) -> None:
    fault.declare(
        "output", "extra arguments", "ignored; the tool runs with the arguments it declares", mode=mode
    )
    probe = ToolProbe()
    arguments = '{"city": "Paris", "days": 2, "units": "kelvin", "__class__": {"x": 1}, "debug": true}'
    model = ScriptedChatModel([call("forecast", arguments), "Two sunny days."])
    outcome = await invoke(Agent(model, tools=[forecast_tool(probe)]), mode, QUESTION)
    assert outcome.result is not None
    assert outcome.result.tool_executions[0].result == "2 sunny days in Paris" and probe.finished == [
        "Paris/2"
    ]


@mode_param
async def test_the_model_cannot_set_injected_parameters(mode: str, fault: Fault) -> None:
    fault.declare(
        "output",
        "attempts to set injected parameters (memory id, context)",
        "ignored: the tool gets the invocation's memory id and context",
        mode=mode,
    )
    seen: list[tuple[str, Any]] = []

    @tool
    async def balance(
        account: str, user: Annotated[str, ToolMemoryId] = "", ctx: ToolContext | None = None
    ) -> str:
        """The balance of one of the user's accounts."""
        assert ctx is not None
        seen.append((user, dict(ctx.context)))
        return f"{account} of {user} at {ctx['tenant']}: 12.50"

    spoof = {
        "account": "savings",
        "user": "admin",
        "ctx": {"tenant": "evil-corp"},
        "memory_id": "admin",
        "context": {"tenant": "evil-corp"},
    }
    model = ScriptedChatModel([call("balance", json.dumps(spoof)), "12.50"])
    agent = Agent(
        model, tools=[balance], memory=MessageWindowChatMemory.provider(50), context={"tenant": "acme"}
    )
    outcome = await invoke(agent, mode, "My savings?", memory_id="alice")
    assert outcome.result is not None
    assert outcome.result.tool_executions[0].result == "savings of alice at acme: 12.50"
    assert seen == [("alice", {"tenant": "acme"})]
    assert list(tool_specification_from(balance).parameters["properties"]) == ["account"]


UNKNOWN = {"hallucinated tool name": "delete_all_files", "empty tool name": ""}


# How an agent answers a call to a tool that does not exist: the default tells the model, a strategy function
# answers in its place, None raises (the default before round 3).
UNKNOWN_POLICIES = {
    "default": (
        {},
        "an error result naming the tools offered goes to the model, the loop goes on",
    ),
    "strategy": (
        {"hallucinated_tool_name_strategy": lambda r: f"There is no tool named {r.name!r}; use weather."},
        "the strategy's answer goes to the model, the loop goes on",
    ),
    "none": (
        {"hallucinated_tool_name_strategy": None},
        "HallucinatedToolError naming it and the tools offered; nothing runs on; memory unchanged",
    ),
}
POLICY_LABELS = {
    "default": "by default",
    "strategy": "with hallucinated_tool_name_strategy",
    "none": "hallucinated_tool_name_strategy=None",
}


@pytest.mark.parametrize("case", list(UNKNOWN))
@pytest.mark.parametrize("policy", list(UNKNOWN_POLICIES))
@mode_param
async def test_unknown_tool_names(case: str, policy: str, mode: str, fault: Fault) -> None:
    name = UNKNOWN[case]
    options, outcome_text = UNKNOWN_POLICIES[policy]
    fault.declare("output", f"{case} ({POLICY_LABELS[policy]})", outcome_text, mode=mode)
    before = running_tasks()
    answered = policy != "none"
    probe = ToolProbe(seconds=0.05 if answered else 3600)
    model = ScriptedChatModel([calls(("weather", {"city": "Paris"}), (name, {"path": "/"})), "Done."])
    memory = await seeded_memory()
    agent = Agent(model, tools=[weather_tool(probe)], memory=memory, **options)
    outcome = await invoke(agent, mode, QUESTION)
    if answered:
        assert outcome.result is not None and outcome.result.content == "Done."
        unknown = outcome.result.tool_executions[1]
        if policy == "strategy":
            assert unknown.result == f"There is no tool named {name!r}; use weather."
        else:
            assert unknown.result.startswith(
                f"There is no tool named {name!r}. The tools you can call: 'weather'."
            )
            assert unknown.is_error
        assert not unknown.has_failed
        assert probe.finished == ["Paris"]
    else:
        assert type(outcome.error) is HallucinatedToolError
        assert f"named {name!r}, which does not exist (available tools: 'weather')" in str(outcome.error)
        assert not probe.finished and probe.cancelled == probe.started
        assert await memory.messages() == seed_messages()
    fault.check_memory(await memory.messages())
    fault.check_tasks(before)


@pytest.mark.parametrize("policy", list(UNKNOWN_POLICIES))
@mode_param
async def test_a_tool_this_invocation_did_not_offer_never_runs(policy: str, mode: str, fault: Fault) -> None:
    fault.declare(
        "output",
        f"call to a tool this invocation did not offer ({POLICY_LABELS[policy]})",
        "never runs; treated as an unknown tool ("
        + UNKNOWN_POLICIES[policy][1].split(";")[0].split(",")[0]
        + ")",
        mode=mode,
    )
    wiped: list[str] = []

    @tool
    async def wipe_database(confirm: bool = True) -> str:
        """Deletes every table (an admin tool: the agent's default tools only)."""
        wiped.append("wiped")
        return "wiped"

    probe = ToolProbe()
    model = ScriptedChatModel([call("wipe_database", '{"confirm": true}'), "I cannot do that."])
    options: dict[str, Any] = {}
    if policy == "strategy":
        options["hallucinated_tool_name_strategy"] = lambda r: f"{r.name} is not available to you."
    elif policy == "none":
        options["hallucinated_tool_name_strategy"] = None
    agent = Agent(model, tools=[wipe_database], **options)
    outcome = await invoke(agent, mode, "Clean up", tools=[weather_tool(probe)])
    assert wiped == []
    if policy == "strategy":
        assert outcome.result is not None
        assert outcome.result.tool_executions[0].result == "wipe_database is not available to you."
    elif policy == "default":
        assert outcome.result is not None
        assert "There is no tool named 'wipe_database'. The tools you can call: 'weather'." in (
            outcome.result.tool_executions[0].result
        )
    else:
        assert type(outcome.error) is HallucinatedToolError
        assert "(available tools: 'weather')" in str(outcome.error)
    assert [s.name for s in model.requests[0].tool_specifications] == ["weather"]


# -- over the wire: 1,000 calls, 10,000 levels, repeated and missing ids -----------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
@mode_param
async def test_a_thousand_calls_in_one_response(
    provider: str, mode: str, fault: Fault, servers: dict[str, FakeServer]
) -> None:
    fault.declare(
        "output",
        "1,000 tool calls in one response",
        "128 run (max_tool_calls_per_response); the other 872 get an error result saying why; memory valid",
        provider=provider,
        mode=mode,
    )
    before = running_tasks()
    ran: list[int] = []

    @tool
    async def echo(i: int) -> int:
        """Returns its argument."""
        ran.append(i)
        return i

    many = AiMessage(
        tool_execution_requests=[
            ToolExecutionRequest(f"call_{i}", "echo", f'{{"i": {i}}}') for i in range(1000)
        ]
    )
    with shared(servers[provider], argument_pieces=1) as server:
        requests = Requests(server)
        model = provider_model(provider, server)
        memory = await seeded_memory()
        server.add(many)
        server.add("Done.")
        outcome = await invoke(Agent(model, tools=[echo], memory=memory), mode, "Echo 0 to 999")
        assert outcome.result is not None and outcome.result.content == "Done."
        executions = outcome.result.tool_executions
        assert sorted(ran) == list(range(128))
        assert [e.result for e in executions[:128]] == [str(i) for i in range(128)]
        skipped = executions[128:]
        assert len(skipped) == 872 and all(e.is_error for e in skipped)
        assert skipped[0].result.startswith(
            "Not run: this response asked for 1000 tool calls and at most 128"
        )
        assert len(tool_results_sent(requests[1])) == 1000  # every call answered: the provider accepted it
        fault.check_memory(await memory.messages())
        await fault.check_connections(model, server)
    fault.check_tasks(before)


def deep_arguments(levels: int) -> str:
    return '{"x": ' + "[" * levels + "]" * levels + "}"


@pytest.mark.parametrize("provider", PROVIDERS)
@mode_param
async def test_arguments_nested_ten_thousand_levels_deep(
    provider: str, mode: str, fault: Fault, servers: dict[str, FakeServer]
) -> None:
    anthropic_chat = provider == "anthropic" and mode == "chat"
    fault.declare(
        "output",
        "arguments nested 10,000 levels deep",
        "BadResponseError: the JSON answer itself is too deep to decode (no RecursionError)"
        if anthropic_chat
        else "ToolArgumentsError text to the model (no RecursionError); the loop goes on",
        provider=provider,
        mode=mode,
    )
    before = running_tasks()
    ran: list[str] = []

    @tool
    async def matrix(x: list[Any]) -> str:
        """Stores a matrix."""
        ran.append("matrix")
        return "stored"

    with shared(servers[provider]) as server:
        requests = Requests(server)
        model = provider_model(provider, server)
        memory = await seeded_memory()
        agent = Agent(model, tools=[matrix], memory=memory)
        deep = call("matrix", deep_arguments(10_000), "toolu_deep")
        if anthropic_chat:  # `input` is a JSON object in this answer: render a shallow one, then deepen it
            server.add(
                lambda request: replace_bytes(
                    server.render(call("matrix", '{"x":[]}', "toolu_deep"), request),
                    b'"input":{"x":[]}',
                    b'"input":' + deep_arguments(10_000).replace(" ", "").encode(),
                )
            )
        else:
            server.add(deep)
            server.add("That matrix is too deep.")
        outcome = await invoke(agent, mode, "Store this matrix")
        assert ran == []
        if anthropic_chat:
            assert type(outcome.error) is BadResponseError and "unreadable response body" in str(
                outcome.error
            )
            assert len(requests) == 1 and await memory.messages() == seed_messages()
        else:
            assert outcome.result is not None and outcome.result.content == "That matrix is too deep."
            (execution,) = outcome.result.tool_executions
            assert execution.is_error and execution.result.startswith("Invalid arguments for tool 'matrix': ")
            assert "maximum recursion depth" in execution.result
        server.add("Fine.")  # the conversation goes on
        follow_up = await invoke(agent, mode, "Never mind")
        assert follow_up.result is not None and follow_up.result.content == "Fine."
        fault.check_memory(await memory.messages())
        await fault.check_connections(model, server)
    fault.check_tasks(before)


ID_CASES = {
    "repeated call ids": (b'"call_paris"', b'"call_london"'),
    "missing call ids": (b'"id":"call_paris",', b'"id":"call_london",'),
}


@pytest.mark.parametrize("case", list(ID_CASES))
@pytest.mark.parametrize("provider", PROVIDERS)
@mode_param
async def test_repeated_or_missing_call_ids_get_fresh_unique_ones(
    case: str, provider: str, mode: str, fault: Fault, servers: dict[str, FakeServer]
) -> None:
    fault.declare(
        "output",
        case,
        "each call gets a fresh unique id; every result pairs with its call; the provider accepts the memory",
        provider=provider,
        mode=mode,
    )
    before = running_tasks()
    paris, london = ID_CASES[case]

    def broken(reply: Reply) -> Reply:
        if case == "repeated call ids":
            return replace_bytes(reply, london, paris)
        return replace_bytes(replace_bytes(reply, paris, b""), london, b"")

    probe = ToolProbe()
    with shared(servers[provider]) as server:
        requests = Requests(server)
        model = provider_model(provider, server)
        memory = await seeded_memory()
        server.add(lambda request: broken(server.render(CALLS, request)))
        server.add("Sunny in both.")
        outcome = await invoke(Agent(model, tools=[weather_tool(probe)], memory=memory), mode, QUESTION)
        assert outcome.result is not None and outcome.result.content == "Sunny in both."
        ids = [e.request.id for e in outcome.result.tool_executions]
        assert all(ids) and len(set(ids)) == 2
        assert sorted(probe.finished) == ["London", "Paris"]
        messages = await memory.messages()
        fault.check_memory(messages)
        assert pairs(messages) == {"Paris": "Sunny in Paris", "London": "Sunny in London"}
        assert len(requests) == 2  # the provider accepted the conversation as it went back
        await fault.check_connections(model, server)
    fault.check_tasks(before)


def pairs(messages: list[ChatMessage]) -> dict[str, str]:
    """City asked for -> result text, by call id."""
    cities = {
        r.id: json.loads(r.arguments)["city"]
        for m in messages
        if isinstance(m, AiMessage)
        for r in m.tool_execution_requests
    }
    return {cities[m.id]: m.text for m in messages if isinstance(m, ToolExecutionResultMessage)}
