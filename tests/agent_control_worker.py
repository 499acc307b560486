"""A process running a real agent (OpenAI client against a fake OpenAI server on 127.0.0.1) whose tool blocks
until the invocation is cancelled from another process through a shared run control
(tests/test_agent_control_processes.py). Prints one JSON line when the tool started and one per result."""

from __future__ import annotations

import json
import sys

import anyio

from agentloop import Agent, AiMessage, MessageWindowChatMemory, ToolContext, ToolExecutionRequest, tool
from agentloop.control import RedisRunControl, SQLiteRunControl
from agentloop.models import OpenAIChatModel
from agentloop.testing import FakeOpenAIServer


@tool
async def wait_here(ctx: ToolContext) -> str:
    """Blocks until the invocation is cancelled."""
    print(json.dumps({"ready": ctx.invocation_id}), flush=True)
    await anyio.sleep_forever()
    return "never"


async def main(kind: str, where: str) -> None:
    control = SQLiteRunControl(where) if kind == "sqlite" else RedisRunControl(where)
    answers = [AiMessage(None, [ToolExecutionRequest("c1", "wait_here", "{}")]), "The next answer."]
    async with FakeOpenAIServer(answers) as server:
        model = OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key="sk-test")
        async with model:
            agent = Agent(
                model,
                tools=[wait_here],
                memory=lambda memory_id: MessageWindowChatMemory(id=memory_id),
                control=control,
            )
            for question in ("Wait, please.", "And now?"):
                result = await agent.chat(question, memory_id="erin")
                finish = result.finish_reason.value if result.finish_reason else None
                report = {"finish": finish, "reason": result.cancel_reason, "content": result.content}
                print(json.dumps(report), flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], backend=sys.argv[3])
