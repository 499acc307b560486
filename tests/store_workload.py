"""The exchanges the store tests run (in this process or in worker processes), and the check of what a store
holds afterwards: every completed exchange present once, contiguous, in a valid order, no orphan call/result.

Run as a worker: `python -m tests.store_workload "<sqlite PATH | redis URL>" <memory id> <tag> <count> <tool
seconds> <asyncio | trio>` runs `count` concurrent invocations, each calling the `note` tool once, and prints
one line per finished one.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
import msgspec

from agentloop import (
    Agent,
    AiMessage,
    ChatMessage,
    MessageWindowChatMemory,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
    tool,
)
from agentloop.testing import FunctionChatModel


def agent_on(store: Any, tool_seconds: float = 0.01) -> Agent:
    """An agent whose model calls `note` once per user message, then answers; memory in `store`."""

    @tool
    async def note(text: str) -> str:
        """Notes a text."""
        if tool_seconds > 1:  # a worker about to be killed says where it is
            print(f"in tool {text}", flush=True)
        await anyio.sleep(tool_seconds)
        return f"noted {text}"

    def answer(messages: list[ChatMessage], tools: Any) -> AiMessage:
        last = messages[-1]
        if isinstance(last, UserMessage):
            return AiMessage(
                tool_execution_requests=[ToolExecutionRequest(f"call-{last.text}", "note", _args(last))]
            )
        assert isinstance(last, ToolExecutionResultMessage), last
        return AiMessage(f"answer to {last.id.removeprefix('call-')}")  # type: ignore[union-attr]

    return Agent(
        FunctionChatModel(answer), tools=[note], memory=MessageWindowChatMemory.provider(10_000, store=store)
    )


def _args(message: UserMessage) -> str:
    return msgspec.json.encode({"text": message.text}).decode()


def exchanges(messages: list[ChatMessage]) -> list[str]:
    """The user texts of the exchanges in `messages`, in order; fails unless each is whole and contiguous."""
    found: list[str] = []
    i = 0
    while i < len(messages):
        user, call, result, final = messages[i : i + 4]
        assert isinstance(user, UserMessage), (i, user)
        assert isinstance(call, AiMessage) and len(call.tool_execution_requests) == 1, (i, call)
        request = call.tool_execution_requests[0]
        assert request.id == f"call-{user.text}", (user, call)
        assert isinstance(result, ToolExecutionResultMessage), (i, result)
        assert result.id == request.id and result.text == f"noted {user.text}", (call, result)
        assert final == AiMessage(f"answer to {user.text}"), (user, final)
        found.append(user.text)
        i += 4
    assert len(found) == len(set(found)), "an exchange was stored twice"
    return found


def open_store(target: str) -> Any:
    kind, where = target.split(" ", 1)
    if kind == "sqlite":
        from agentloop.stores import SQLiteChatMemoryStore

        return SQLiteChatMemoryStore(where, lease_ttl=2.0)
    from agentloop.stores import RedisChatMemoryStore

    return RedisChatMemoryStore(where, lease_ttl=2.0)


async def _work(target: str, memory_id: str, tag: str, count: int, tool_seconds: float) -> None:
    store = open_store(target)
    agent = agent_on(store, tool_seconds)

    async def one(i: int) -> None:
        result = await agent.chat(f"{tag}-{i}", memory_id=memory_id)
        print(f"done {tag}-{i} {result.content}", flush=True)

    try:
        async with anyio.create_task_group() as task_group:
            for i in range(count):
                task_group.start_soon(one, i)
    finally:
        await store.aclose()


if __name__ == "__main__":
    target, memory_id, tag, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    seconds, backend = float(sys.argv[5]), sys.argv[6]
    print("started", flush=True)
    anyio.run(_work, target, memory_id, tag, count, seconds, backend=backend)
