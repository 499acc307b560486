"""A worker process running one agent invocation under a shared run control
(tests/features/run_control/test_run_control.py).

    python run_control_agent_worker.py KIND WHERE MEMORY_ID BACKEND

The agent calls `wait_for_release`, which prints {"running": true} and blocks until a line arrives on
stdin; the parent steers or cancels it meanwhile. At the end the worker prints the Result (finish reason,
cancel reason, content) and the messages of every model request, one JSON line.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import anyio.to_thread

from agentloop import Agent, AiMessage, ToolExecutionRequest, tool
from agentloop.control import RedisRunControl, SQLiteRunControl
from agentloop.testing import ScriptedChatModel


@tool
async def wait_for_release() -> str:
    """Blocks until the parent process says so."""
    print(json.dumps({"running": True}), flush=True)
    await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
    return "released"


async def main(kind: str, where: str, memory_id: str) -> None:
    control: Any = SQLiteRunControl(where, poll_interval=0.01) if kind == "sqlite" else RedisRunControl(where)
    call = ToolExecutionRequest("w1", "wait_for_release", "{}")
    model = ScriptedChatModel([AiMessage(tool_execution_requests=[call]), "first answer", "second answer"])
    agent = Agent(model, tools=[wait_for_release], control=control)
    result = await agent.chat("Start the job", memory_id=memory_id)
    requests = [
        [type(m).__name__ + ":" + str(getattr(m, "text", "")) for m in r.messages] for r in model.requests
    ]
    outcome = {
        "finish": result.finish_reason.value if result.finish_reason else None,
        "reason": result.cancel_reason,
        "content": result.content,
        "requests": requests,
    }
    print(json.dumps(outcome), flush=True)
    control.close()


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:4], backend=sys.argv[4])
