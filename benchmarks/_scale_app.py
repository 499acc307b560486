"""The web example's app (examples/fastapi_sse.py) as `benchmarks/scale.py` serves it: one `Agent` on the
fake OpenAI server, memory in Redis, the workload's `get_value` tool. Configured by the environment (uvicorn
imports it in each worker): `SCALE_MODEL_URL` (the fake server's base URL), `SCALE_REDIS_URL`.

    uvicorn _scale_app:app --app-dir benchmarks --workers 4
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "examples")]

from _workload import tool_result  # noqa: E402
from fastapi_sse import create_app  # noqa: E402

from agentloop import Agent, MessageWindowChatMemory, tool  # noqa: E402
from agentloop.models import OpenAIChatModel  # noqa: E402
from agentloop.stores import RedisChatMemoryStore  # noqa: E402


@tool
async def get_value(key: str) -> str:
    """Returns the value stored under a key."""
    return tool_result(key)


store = RedisChatMemoryStore(os.environ["SCALE_REDIS_URL"], max_connections=64)
agent = Agent(
    OpenAIChatModel(model="gpt-4o-mini", base_url=os.environ["SCALE_MODEL_URL"], api_key="bench"),
    tools=[get_value],
    memory=MessageWindowChatMemory.provider(20, store=store),
)
app = create_app(agent)
