"""`ToolSearch(native=True)`: the provider's own tool search (Anthropic's tool search tool, OpenAI Responses'
`tool_search`) against the fake servers over real loopback sockets, streamed and not: the deferred tools go
out marked, the searches of an answer come back into memory and go out again with it (also from SQLite),
and other models refuse it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentloop import (
    Agent,
    AiMessage,
    ChatRequest,
    IllegalConfigurationError,
    MessageWindowChatMemory,
    PendingApproval,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolSearch,
    UserMessage,
    count_tokens,
)
from agentloop.models import AnthropicChatModel, OpenAIChatModel, OpenAIResponsesModel
from agentloop.stores import SQLiteChatMemoryStore
from agentloop.testing import (
    FakeAnthropicServer,
    FakeOpenAIResponsesServer,
    FakeOpenAIServer,
    FunctionChatModel,
)
from agentloop.testing._fake_server import FakeServer
from tests.features.context.test_tool_search import (
    convert_currency,
    create_calendar_event,
    distractors,
    get_time,
)

KEY = "sk-test-key-not-real"
CONVERT = {"amount": 5, "from_currency": "EUR", "to_currency": "USD"}


def convert_call(call_id: str) -> AiMessage:
    return AiMessage(
        tool_execution_requests=[ToolExecutionRequest(call_id, "convert_currency", json.dumps(CONVERT))]
    )


def search(native: bool = True) -> ToolSearch:
    return ToolSearch(
        [convert_currency, create_calendar_event, *distractors(30)], always=[get_time], native=native
    )


@pytest.fixture(params=["anthropic", "responses"])
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server(provider: str) -> Iterator[FakeServer]:
    fake: FakeServer = FakeAnthropicServer() if provider == "anthropic" else FakeOpenAIResponsesServer()
    with fake:
        yield fake


def model_for(provider: str, server: FakeServer) -> Any:
    if provider == "anthropic":
        return AnthropicChatModel("claude-test", base_url=server.base_url, api_key=KEY, max_retries=0)
    return OpenAIResponsesModel("gpt-5.4", base_url=server.base_url, api_key=KEY, max_retries=0)


def tools_sent(provider: str, body: dict[str, Any]) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """(names sent loaded, names sent deferred, the provider's search tool entries) of a request body."""
    tools = body["tools"]
    searchers = [t for t in tools if str(t.get("type", "")).startswith("tool_search")]
    functions = [t for t in tools if t not in searchers]
    loaded = [t["name"] for t in functions if not t.get("defer_loading")]
    deferred = [t["name"] for t in functions if t.get("defer_loading") is True]
    return loaded, deferred, searchers


def searches_in(provider: str, body: dict[str, Any]) -> list[str]:
    """The kinds of the tool search blocks / items a request body sends back, in order."""
    if provider == "anthropic":
        blocks = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
        return [b["type"] for b in blocks if b["type"] in ("server_tool_use", "tool_search_tool_result")]
    return [i["type"] for i in body["input"] if i.get("type") in ("tool_search_call", "tool_search_output")]


async def run(agent: Agent[Any], question: str, streaming: bool, memory_id: str) -> Any:
    if not streaming:
        return await agent.chat(question, memory_id=memory_id)
    async with agent.stream(question, memory_id=memory_id) as stream:
        async for _ in stream:
            pass
        return stream.result


@pytest.mark.parametrize("streaming", [False, True])
async def test_the_provider_finds_the_tool_and_its_search_goes_back(
    provider: str, server: FakeServer, streaming: bool
) -> None:
    server.add(convert_call("call_1")).add("5 EUR is 10 USD.").add("Still 10 USD.")
    agent = Agent(model_for(provider, server), tools=[search()], memory=MessageWindowChatMemory.provider(50))
    result = await run(agent, "5 EUR in USD?", streaming, "m")
    assert result.content == "5 EUR is 10 USD."
    assert result.tool_executions[0].result == "5.0 EUR = 10.0 USD"  # the found tool ran as usual
    first, second = (r.json for r in server.requests)
    loaded, deferred, searchers = tools_sent(provider, first)
    assert loaded == ["get_time"]
    assert deferred[:2] == ["convert_currency", "create_calendar_event"] and len(deferred) == 32
    expected = (
        [{"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}]
        if provider == "anthropic"
        else [{"type": "tool_search"}]
    )
    assert searchers == expected
    assert second["tools"] == first["tools"]  # the tool list (the cached prefix) does not change
    search_kinds = (
        ["server_tool_use", "tool_search_tool_result"]
        if provider == "anthropic"
        else ["tool_search_call", "tool_search_output"]
    )
    assert searches_in(provider, second) == search_kinds  # sent back: the fake refuses the call otherwise
    # the search is in memory: the next invocation sends it back again
    again = await run(agent, "and again?", streaming, "m")
    assert again.content == "Still 10 USD."
    assert searches_in(provider, server.requests[2].json) == search_kinds


async def test_a_conversation_reloaded_from_sqlite_still_sends_valid_history(
    provider: str, server: FakeServer, tmp_path: Path
) -> None:
    path = tmp_path / "memory.db"
    server.add(convert_call("call_1")).add("10 USD.")
    store = SQLiteChatMemoryStore(path)
    try:
        agent = Agent(
            model_for(provider, server),
            tools=[search()],
            memory=MessageWindowChatMemory.provider(50, store=store),
        )
        assert (await agent.chat("5 EUR in USD?", memory_id="m")).content == "10 USD."
    finally:
        await store.aclose()
    # a new store on the same file (another process, a restart): the history still holds the search
    server.add("Yes, 10 USD.")
    reopened = SQLiteChatMemoryStore(path)
    try:
        agent = Agent(
            model_for(provider, server),
            tools=[search()],
            memory=MessageWindowChatMemory.provider(50, store=reopened),
        )
        assert (await agent.chat("Sure?", memory_id="m")).content == "Yes, 10 USD."
    finally:
        await reopened.aclose()
    last = server.requests[-1].json
    assert len(searches_in(provider, last)) == 2


def test_without_the_search_the_fakes_refuse_a_deferred_call(provider: str, server: FakeServer) -> None:
    """The fakes check what the real APIs check: a history that calls a deferred tool no search found (the
    model itself never sends one: it sends such a tool loaded, see the test below)."""
    from agentloop.testing._fake_anthropic import _check_request
    from agentloop.testing._fake_responses import check_request

    history = [
        UserMessage("5 EUR in USD?"),
        convert_call("call_1"),
        ToolExecutionResultMessage("call_1", "convert_currency", "10 USD"),
    ]
    specs = [t.specification for t in search().__agentloop_tools__()]
    body = model_for(provider, server).build_body(ChatRequest(history, specs), stream=False)
    check = _check_request if provider == "anthropic" else check_request
    assert check(body) is None
    for tool in body["tools"]:
        if tool.get("name") == "convert_currency":
            tool["defer_loading"] = True
    assert "deferred tool 'convert_currency'" in str(check(body))


async def test_memory_moves_to_a_provider_without_tool_search(provider: str, server: FakeServer) -> None:
    """The search blocks stay with their provider: a plain ToolSearch-less agent on the same memory works."""
    server.add(convert_call("call_1")).add("10 USD.").add("Plain answer.")
    memory = MessageWindowChatMemory.provider(50)
    agent = Agent(model_for(provider, server), tools=[search()], memory=memory)
    await agent.chat("5 EUR in USD?", memory_id="m")
    plain = Agent(model_for(provider, server), tools=[convert_currency, get_time], memory=memory)
    assert (await plain.chat("thanks", memory_id="m")).content == "Plain answer."
    last = server.requests[-1].json
    assert searches_in(provider, last) == []
    assert tools_sent(provider, last)[1:] == ([], [])


def test_other_models_are_refused_at_construction() -> None:
    with FakeOpenAIServer() as server:
        model = OpenAIChatModel("gpt-test", base_url=server.base_url, api_key=KEY)
        with pytest.raises(IllegalConfigurationError, match=r"AnthropicChatModel .* OpenAIResponsesModel"):
            Agent(model, tools=[search()])


async def test_other_models_are_refused_on_the_first_call_with_per_call_tools() -> None:
    model = FunctionChatModel(lambda messages, tools: AiMessage("hi"))
    agent = Agent(model)
    with pytest.raises(IllegalConfigurationError, match="ToolSearch\\(native=True\\) needs a model"):
        await agent.chat("hi", tools=[search()])


def test_native_search_settings() -> None:
    native = search()
    assert repr(native) == "ToolSearch(tools=32, always=1, native=True)"
    tools = list(native.__agentloop_tools__())
    assert [t.name for t in tools][:3] == ["get_time", "convert_currency", "create_calendar_event"]
    assert "search_tools" not in [t.name for t in tools]
    assert tools[0].specification.metadata == {}  # always shown: sent as it is
    assert tools[1].specification.metadata == {"agentloop.defer_loading": True}
    assert native._tools.get("convert_currency").specification.metadata == {}  # the given tool unchanged
    with pytest.raises(IllegalConfigurationError, match=r"native=\.\.\.\) must be True or False"):
        ToolSearch([get_time], native="yes")  # type: ignore[arg-type]


async def test_deferred_tools_are_not_counted_as_prompt_tokens_on_responses() -> None:
    with FakeOpenAIResponsesServer() as server:
        model = model_for("responses", server)
        tools = list(search().__agentloop_tools__())
        deferred = ChatRequest([UserMessage("hi")], tool_specifications=[t.specification for t in tools])
        plain = ChatRequest(
            [UserMessage("hi")], tool_specifications=[t.specification for t in search(native=False)._tools]
        )
        counted, everything = await count_tokens(model, deferred), await count_tokens(model, plain)
        assert counted.tokens < everything.tokens / 5  # 32 tool definitions left out, get_time counted


def test_a_durable_model_keeps_the_tool_search_of_its_model() -> None:
    pytest.importorskip("dbos")
    from agentloop.dbos._agent import _StepModel
    from agentloop.models._base import supports_tool_search

    with FakeAnthropicServer() as server:
        assert supports_tool_search(_StepModel(model_for("anthropic", server), "chat", {})) is True
    plain = FunctionChatModel(lambda messages, tools: AiMessage("hi"))
    assert supports_tool_search(_StepModel(plain, "chat", {})) is False


async def test_an_approval_paused_round_resumed_from_json_sends_the_search_back(
    provider: str, server: FakeServer
) -> None:
    server.add(convert_call("call_1")).add("Converted: 10 USD.")
    agent = Agent(
        model_for(provider, server),
        tools=[search()],
        requires_approval=["convert_currency"],
        memory=MessageWindowChatMemory.provider(50),
    )
    paused = await agent.chat("5 EUR in USD?", memory_id="m")
    assert paused.pending is not None
    assert [r.tool_name for r in paused.pending.requests] == ["convert_currency"]
    pending = PendingApproval.from_json(paused.pending.to_json())
    resumed = await agent.resume(pending, {"call_1": True})
    assert resumed.content == "Converted: 10 USD."
    assert len(searches_in(provider, server.requests[-1].json)) == 2


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_call_whose_search_is_not_in_the_history_has_its_tool_sent_loaded(
    provider: str, server: FakeServer, streaming: bool
) -> None:
    """A memory window or a compaction dropped the search, or another provider's search found the tool:
    the tool goes out loaded (else the API refuses the call in the history); the others stay deferred."""
    history = [
        UserMessage("5 EUR in USD?"),
        convert_call("call_1"),  # no provider_state: no search goes back with it
        ToolExecutionResultMessage("call_1", "convert_currency", "10 USD"),
        AiMessage("10 USD."),
    ]
    server.add("Yes.")
    agent = Agent(model_for(provider, server), tools=[search()])
    if streaming:
        async with agent.stream("Sure?", message_history=history) as stream:
            async for _ in stream:
                pass
            assert stream.result.content == "Yes."
    else:
        assert (await agent.chat("Sure?", message_history=history)).content == "Yes."
    loaded, deferred, _ = tools_sent(provider, server.requests[0].json)
    assert loaded == ["get_time", "convert_currency"]
    assert "convert_currency" not in deferred and "create_calendar_event" in deferred
