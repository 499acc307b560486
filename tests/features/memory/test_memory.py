"""Chat memory: units are added and evicted whole, so what a provider receives is always valid."""

from __future__ import annotations

from agentloop import (
    Agent,
    AiMessage,
    ChatMemory,
    ChatMemoryStore,
    InMemoryChatMemoryStore,
    MessageWindowChatMemory,
    SystemMessage,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from agentloop._values._messages import ChatMessage
from agentloop.testing import ScriptedChatModel


def tool_round(call_ids: list[str]) -> list[ChatMessage]:
    calls = [ToolExecutionRequest(i, "f", "{}") for i in call_ids]
    return [
        AiMessage(tool_execution_requests=calls),
        *(ToolExecutionResultMessage(i, "f", "ok") for i in call_ids),
    ]


def assert_valid(messages: list[ChatMessage]) -> None:
    """Every tool call has its result right after it, every result has its call, a user speaks first."""
    pending: set[str | None] = set()
    for message in messages:
        if isinstance(message, ToolExecutionResultMessage):
            assert message.id in pending, f"orphan result {message}"
            pending.discard(message.id)
            continue
        assert not pending, f"calls without results before {message}"
        if isinstance(message, AiMessage):
            pending = {r.id for r in message.tool_execution_requests}
    assert not pending
    conversation = [m for m in messages if not isinstance(m, SystemMessage)]
    if conversation:
        assert isinstance(conversation[0], UserMessage)


async def test_protocols_are_satisfied() -> None:
    assert isinstance(MessageWindowChatMemory(), ChatMemory)
    assert isinstance(InMemoryChatMemoryStore(), ChatMemoryStore)


async def test_window_keeps_most_recent_and_evicts_rounds_whole() -> None:
    memory = MessageWindowChatMemory(5)
    await memory.add([UserMessage("q1"), *tool_round(["a", "b"])])
    await memory.add([AiMessage("answer 1")])
    await memory.add([UserMessage("q2"), *tool_round(["c"])])
    messages = await memory.messages()
    assert_valid(messages)
    assert len(messages) <= 5
    assert messages[-2:] == tool_round(["c"])
    # The first round (3 messages) was evicted as a unit, never split.
    assert not any(isinstance(m, ToolExecutionResultMessage) and m.id in {"a", "b"} for m in messages)


async def test_newest_unit_larger_than_window_is_kept_whole() -> None:
    memory = MessageWindowChatMemory(2)
    await memory.add([UserMessage("q"), *tool_round(["a", "b", "c"])])
    messages = await memory.messages()
    assert_valid(messages)
    assert messages[-4:] == tool_round(["a", "b", "c"])


async def test_system_message_is_pinned_and_replaced() -> None:
    memory = MessageWindowChatMemory(3)
    await memory.add([SystemMessage("be brief"), UserMessage("q1"), AiMessage("a1")])
    await memory.add([UserMessage("q2"), AiMessage("a2")])
    await memory.add([SystemMessage("be verbose")])
    messages = await memory.messages()
    assert messages[0] == SystemMessage("be verbose")
    assert sum(isinstance(m, SystemMessage) for m in messages) == 1
    assert messages[1:] == [UserMessage("q2"), AiMessage("a2")]


async def test_window_starts_with_a_user_message_after_eviction() -> None:
    memory = MessageWindowChatMemory(3)
    await memory.add([UserMessage("q1"), AiMessage("a1"), AiMessage("a1 continued")])
    await memory.add([UserMessage("q2")])
    messages = await memory.messages()
    assert messages == [UserMessage("q2")]


async def test_orphan_results_are_never_returned() -> None:
    store = InMemoryChatMemoryStore()
    await store.update_messages("x", [ToolExecutionResultMessage("zz", "f", "stale"), UserMessage("hi")])
    memory = MessageWindowChatMemory(10, id="x", store=store)
    await memory.add([AiMessage("hello")])
    assert await memory.messages() == [UserMessage("hi"), AiMessage("hello")]


async def test_a_small_read_after_the_first_write_drops_no_round_of_the_in_memory_store() -> None:
    """Regression (found by the composition suite, DBOS with a steered message): a window read before the
    memory id's first write was not remembered, so a one-message version probe (as `DBOSAgent` reads the
    version before each commit) became the window and the next round starting with a user message dropped
    every earlier one."""
    store = InMemoryChatMemoryStore()
    assert (await store.load("m", max_messages=50)).messages == []  # the invocation reads first
    call = AiMessage(tool_execution_requests=[ToolExecutionRequest("c1", "f", "{}")])
    first = [UserMessage("q"), call, ToolExecutionResultMessage("c1", "f", "done")]
    await store.append("m", first, expected_version=0)
    assert (await store.load("m", max_messages=1)).version == 1  # the probe
    await store.append("m", [UserMessage("steered"), AiMessage("answer")], expected_version=1)
    assert await store.get_messages("m") == [*first, UserMessage("steered"), AiMessage("answer")]


async def test_provider_gives_one_memory_per_id_in_one_store() -> None:
    store = InMemoryChatMemoryStore()
    provider = MessageWindowChatMemory.provider(10, store=store)
    alice, bob = provider("alice"), provider("bob")
    await alice.add([UserMessage("I am Alice")])
    await bob.add([UserMessage("I am Bob")])
    assert await provider("alice").messages() == [UserMessage("I am Alice")]
    assert await store.get_messages("bob") == [UserMessage("I am Bob")]
    await alice.clear()
    assert await alice.messages() == []
    assert await bob.messages() == [UserMessage("I am Bob")]


async def test_an_agent_keeps_nothing_per_memory_id_of_a_provider_window() -> None:
    store = InMemoryChatMemoryStore()
    agent = Agent(ScriptedChatModel(["ok"] * 10_002), memory=MessageWindowChatMemory.provider(4, store=store))
    for index in range(10_000):
        await agent.chat("hi", memory_id=f"user-{index}")
    assert len(agent._memories) == 0  # 10,000 ids served, nothing held for them
    await agent.chat(
        "again", memory_id="user-7"
    )  # a new window over the same store: the conversation goes on
    assert await store.get_messages("user-7") == [
        UserMessage("hi"),
        AiMessage("ok"),
        UserMessage("again"),
        AiMessage("ok"),
    ]


async def test_windows_of_any_other_provider_are_kept_per_memory_id() -> None:
    class Counted(MessageWindowChatMemory):
        pass

    made: list[str] = []

    def own(memory_id: str) -> MessageWindowChatMemory:
        made.append(memory_id)
        return MessageWindowChatMemory(4)  # its own in-process store: it must be kept to keep its messages

    for provider in (own, Counted.provider(4)):
        agent = Agent(ScriptedChatModel(["ok", "ok"]), memory=provider)
        await agent.chat("hi", memory_id="u")
        await agent.chat("again", memory_id="u")
        memory = agent._memory_for("u")
        assert memory is not None and len(await memory.messages()) == 4
        assert list(agent._memories) == ["u"]
        agent.forget("u")
        assert agent._memories == {}
    assert made == ["u"]


async def test_memory_for_is_the_memory_an_invocation_uses_and_a_copy_keeps_its_own() -> None:
    """`Agent.memory_for(id)` (what integrations wrap) is the memory `chat(memory_id=id)` used; a
    `copy.copy` of the agent given another provider never answers with the original's kept memory."""
    import copy

    kept: dict[str, MessageWindowChatMemory] = {}

    def own(memory_id: str) -> MessageWindowChatMemory:
        return kept.setdefault(memory_id, MessageWindowChatMemory(4))

    agent = Agent(ScriptedChatModel(["ok"]), memory=own)
    await agent.chat("hi", memory_id="u")
    memory = agent.memory_for("u")
    assert memory is kept["u"] and len(await memory.messages()) == 2
    assert Agent(ScriptedChatModel([])).memory_for("u") is None
    fixed = MessageWindowChatMemory(4)
    assert Agent(ScriptedChatModel([]), memory=fixed).memory_for("anyone") is fixed
    other = MessageWindowChatMemory(4)
    twin = copy.copy(agent)
    twin.memory = lambda memory_id: other
    assert twin.memory_for("u") is other
    assert agent.memory_for("u") is kept["u"]  # the original's kept memory is untouched
