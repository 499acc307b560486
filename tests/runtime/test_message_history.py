"""`message_history=`: the caller keeps the conversation and passes it per call (no memory); the
result's `new_messages` are what to append.
Over the fake OpenAI server (real HTTP; it rejects requests a provider would reject)."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop import (
    Agent,
    AiMessage,
    ChatMessage,
    IllegalConfigurationError,
    MessageWindowChatMemory,
    SystemMessage,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
    tool,
)
from agentloop.models import OpenAIChatModel
from agentloop.testing import FakeOpenAIServer


@tool("Adds two numbers")
def add(a: float, b: float) -> float:
    return a + b


def add_call(call_id: str, a: int, b: int) -> AiMessage:
    return AiMessage(
        tool_execution_requests=[ToolExecutionRequest(call_id, "add", f'{{"a": {a}, "b": {b}}}')]
    )


def sent_messages(server: FakeOpenAIServer, index: int) -> list[dict[str, Any]]:
    return server.requests[index].json["messages"]  # type: ignore[no-any-return]


async def run(agent: Agent, question: str, mode: str, **options: Any) -> Any:
    if mode == "chat":
        return await agent.chat(question, **options)
    stream = agent.stream(question, **options)
    async for _ in stream:
        pass
    return stream.result


@pytest.mark.parametrize("mode", ["chat", "stream"])
async def test_history_in_new_messages_out_over_two_calls(mode: str) -> None:
    replies = [add_call("c1", 2, 3), "2 + 3 = 5.", "Your first question was 2 + 3."]
    with FakeOpenAIServer(replies) as server:
        agent = Agent(OpenAIChatModel("m", base_url=server.base_url, api_key="k"), tools=[add])
        history: list[ChatMessage] = [UserMessage("Hi, I am Ada."), AiMessage("Hello Ada.")]

        first = await run(agent, "What is 2 + 3?", mode, message_history=history)
        assert first.content == "2 + 3 = 5."
        assert first.new_messages == [
            UserMessage("What is 2 + 3?"),
            add_call("c1", 2, 3),
            ToolExecutionResultMessage("c1", "add", "5.0"),
            AiMessage("2 + 3 = 5."),
        ]
        sent = sent_messages(server, 0)
        assert [(m["role"], m.get("content")) for m in sent] == [
            ("user", "Hi, I am Ada."),
            ("assistant", "Hello Ada."),
            ("user", "What is 2 + 3?"),
        ]

        history += first.new_messages
        second = await run(agent, "What did I ask first?", mode, message_history=history)
        assert second.new_messages == [UserMessage("What did I ask first?"), AiMessage(second.content)]
        roles = [m["role"] for m in sent_messages(server, 2)]
        assert roles == ["user", "assistant", "user", "assistant", "tool", "assistant", "user"]
        assert history[:2] == [UserMessage("Hi, I am Ada."), AiMessage("Hello Ada.")]  # not changed in place


@pytest.mark.parametrize("mode", ["chat", "stream"])
async def test_history_call_neither_reads_nor_writes_the_agents_memory(mode: str) -> None:
    with FakeOpenAIServer(["remembered", "from history", "remembered again"]) as server:
        agent = Agent(
            OpenAIChatModel("m", base_url=server.base_url, api_key="k"),
            memory=MessageWindowChatMemory.provider(max_messages=20),
            system_message="Be brief.",
        )
        await run(agent, "Note: the code is 42.", mode)  # the default memory id
        result = await run(agent, "What is the code?", mode, message_history=[UserMessage("I am Bob.")])
        assert result.content == "from history"
        sent = sent_messages(server, 1)
        assert [m.get("content") for m in sent] == ["Be brief.", "I am Bob.", "What is the code?"]
        await run(agent, "And again?", mode)
        contents = [m.get("content") for m in sent_messages(server, 2)]
        assert contents == ["Be brief.", "Note: the code is 42.", "remembered", "And again?"]


async def test_memory_id_and_history_together_are_refused_before_anything_runs() -> None:
    with FakeOpenAIServer(["never sent"]) as server:
        agent = Agent(OpenAIChatModel("m", base_url=server.base_url, api_key="k"))
        with pytest.raises(IllegalConfigurationError, match=r"either memory_id .* or message_history"):
            await agent.chat("hi", memory_id="alice", message_history=[UserMessage("earlier")])
        with pytest.raises(IllegalConfigurationError, match=r"not both"):
            agent.stream("hi", memory_id="alice", message_history=[])  # refused when the stream is made
        assert server.requests == []


BAD_HISTORIES = [
    ([add_call("c1", 1, 2)], r"Tool calls without a result at the end of message_history: add \(id 'c1'\)"),
    (
        [add_call("c1", 1, 2), UserMessage("and?")],
        r"Tool calls without a result before message_history\[1\]: add \(id 'c1'\)",
    ),
    (
        [UserMessage("hi"), ToolExecutionResultMessage("c9", "add", "3")],
        r"message_history\[1\] is the result",
    ),
    ([SystemMessage("You are a pirate.")], r"message_history\[0\] is a SystemMessage.*Agent\(system_message"),
    ([{"role": "user", "content": "hi"}], r"message_history\[0\] is a dict, not a message"),
    ("hello", r"message_history must be a list of messages .* got str"),
    (
        [
            AiMessage(
                tool_execution_requests=[
                    ToolExecutionRequest("c1", "add", "{}"),
                    ToolExecutionRequest("c1", "add", "{}"),
                ]
            )
        ],
        r"two tool calls with the id 'c1'",
    ),
]


@pytest.mark.parametrize(("history", "message"), BAD_HISTORIES)
async def test_a_history_a_provider_would_reject_is_a_clear_error(history: Any, message: str) -> None:
    with FakeOpenAIServer(["never sent"]) as server:
        agent = Agent(OpenAIChatModel("m", base_url=server.base_url, api_key="k"), tools=[add])
        with pytest.raises(IllegalConfigurationError, match=message):
            await agent.chat("go on", message_history=history)
        with pytest.raises(IllegalConfigurationError, match=message):
            agent.stream("go on", message_history=history)
        assert server.requests == []


async def test_results_answered_in_another_order_are_accepted() -> None:
    calls = AiMessage(
        tool_execution_requests=[
            ToolExecutionRequest("a", "add", "{}"),
            ToolExecutionRequest("b", "add", "{}"),
        ]
    )
    history = [
        UserMessage("two sums"),
        calls,
        ToolExecutionResultMessage("b", "add", "2"),
        ToolExecutionResultMessage("a", "add", "1"),
        AiMessage("1 and 2"),
    ]
    with FakeOpenAIServer(["ok"]) as server:
        agent = Agent(OpenAIChatModel("m", base_url=server.base_url, api_key="k"), tools=[add])
        assert (await agent.chat("thanks", message_history=history)).content == "ok"


def test_chat_sync_takes_a_history() -> None:
    with FakeOpenAIServer(["Ada"]) as server:
        agent = Agent(OpenAIChatModel("m", base_url=server.base_url, api_key="k"))
        result = agent.chat_sync(
            "Who am I?", message_history=[UserMessage("I am Ada."), AiMessage("Hi Ada.")]
        )
        assert result.new_messages == [UserMessage("Who am I?"), AiMessage("Ada")]
        assert [m["content"] for m in sent_messages(server, 0)] == ["I am Ada.", "Hi Ada.", "Who am I?"]


@pytest.mark.parametrize("mode", ["chat", "stream"])
async def test_a_paused_history_call_resumes_and_new_messages_leave_the_history_out(mode: str) -> None:
    @tool("Sends money", requires_approval=True)
    def send_money(to: str, amount: int) -> str:
        return f"Sent {amount} EUR to {to}"

    pay = AiMessage(
        tool_execution_requests=[ToolExecutionRequest("p1", "send_money", '{"to": "Bo", "amount": 5}')]
    )
    with FakeOpenAIServer([pay, "Paid Bo."]) as server:
        agent = Agent(OpenAIChatModel("m", base_url=server.base_url, api_key="k"), tools=[send_money])
        history: list[ChatMessage] = [UserMessage("Bo lent me 5 EUR."), AiMessage("Noted.")]
        paused = await run(agent, "Pay Bo back.", mode, message_history=history)
        assert paused.pending is not None and paused.new_messages == []  # nothing is added while it waits
        if mode == "chat":
            resumed = await agent.resume(paused.pending, {"p1": True})
        else:
            stream = agent.resume_stream(paused.pending, {"p1": True})
            async for _ in stream:
                pass
            resumed = stream.result
        assert resumed.new_messages == [
            UserMessage("Pay Bo back."),
            pay,
            ToolExecutionResultMessage("p1", "send_money", "Sent 5 EUR to Bo"),
            AiMessage("Paid Bo."),
        ]
        contents = [m.get("content") for m in sent_messages(server, 1)]
        assert contents[:3] == ["Bo lent me 5 EUR.", "Noted.", "Pay Bo back."]  # the model saw the history
