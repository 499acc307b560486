"""An agent deployed behind A2A on several uvicorn workers that share one Redis: the conversation (memory by
A2A contextId) and the provider's limits (`ConcurrencyLimit` and `RateLimit` on a `RedisLimiter`) hold
across every worker.

    python examples/serve_workers.py            # starts redis-server, two uvicorn workers, then a client
    REDIS_URL=redis://127.0.0.1:6379/0 python examples/serve_workers.py
    REDIS_URL=... uvicorn serve_workers:app --app-dir examples --workers 4    # how you would deploy it

Needs `pip install 'agentloop-runtime[a2a,redis,web]'` (web: uvicorn, and fastapi for the process helpers
shared with multi_worker.py) and, without REDIS_URL, `redis-server` on PATH.
The model is an offline stand-in (no key needed) that notes, in Redis, how many of its calls run at once
across all workers, so the client can check the shared limit held.
"""

from __future__ import annotations

import os
import uuid
from contextlib import ExitStack
from typing import Any

import anyio

from agentloop import Agent, ChatMessage, MessageWindowChatMemory, UserMessage
from agentloop.middleware import ConcurrencyLimit, RateLimit, RedisLimiter
from agentloop.testing import FunctionChatModel

MODEL_CALLS_AT_ONCE = 2
"""At most this many model calls at once, over every worker (what the provider account allows)."""

# The stand-in model's gauge: calls inside now, and the most ever inside at once (one atomic script each).
_ENTER = """
local now = redis.call('INCR', KEYS[1])
if now > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], now) end
return now
"""


def create_app(redis_url: str) -> Any:
    import redis

    from agentloop.a2a import a2a_app
    from agentloop.stores import RedisChatMemoryStore

    gauge = redis.Redis.from_url(redis_url)
    enter = gauge.register_script(_ENTER)

    async def answer(messages: list[ChatMessage], tools: Any) -> str:
        await anyio.to_thread.run_sync(lambda: enter(keys=["demo:model:now", "demo:model:most"]))
        try:
            await anyio.sleep(0.05)  # the provider at work
        finally:
            await anyio.to_thread.run_sync(gauge.decr, "demo:model:now")
        said = [m.text for m in messages if isinstance(m, UserMessage)]
        return f"Message {len(said)} of this conversation (worker {os.getpid()}): {said[-1]}"

    limiter = RedisLimiter(redis_url)
    agent = Agent(
        FunctionChatModel(answer),
        memory=MessageWindowChatMemory.provider(50, store=RedisChatMemoryStore(redis_url, ttl=24 * 3600)),
        middleware=[
            # every worker's model calls share these: per model, as a provider counts them
            ConcurrencyLimit(MODEL_CALLS_AT_ONCE, on="model", key=lambda call: "stand-in", backend=limiter),
            RateLimit(requests_per_minute=600, key=lambda call: "stand-in", backend=limiter),
        ],
    )
    return a2a_app(agent, name="Demo agent", description="Says which message of the conversation it got.")


if "REDIS_URL" in os.environ:  # `uvicorn serve_workers:app` imports this module in each worker
    app = create_app(os.environ["REDIS_URL"])


async def ask(url: str, text: str, context_id: str | None = None) -> tuple[str, str]:
    """Sends `text` to the A2A agent at `url` with a2a-sdk's client; its answer and the contextId."""
    import httpx
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.types import Message, Part, Role, SendMessageRequest

    async with httpx.AsyncClient(timeout=60) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        client = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
        message = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=text)])
        if context_id:
            message.context_id = context_id
        chunks, context = [], ""
        async for event in client.send_message(SendMessageRequest(message=message)):
            if event.HasField("artifact_update"):
                chunks += [part.text for part in event.artifact_update.artifact.parts]
                context = event.artifact_update.context_id
        return "".join(chunks), context


async def client(workers: list[str], redis_url: str) -> None:
    import redis

    # One conversation, its turns alternating between the workers: the memory is in Redis.
    first, context = await ask(workers[0], "Hello")
    second, _ = await ask(workers[1], "Still there?", context)
    print(f"worker A: {first}\nworker B: {second}")
    assert second.startswith("Message 2 of this conversation")

    # Twelve conversations at once over both workers: never more than 2 model calls at once in all.
    async with anyio.create_task_group() as group:
        for n in range(12):
            group.start_soon(ask, workers[n % 2], f"request {n}")
    most = int(redis.Redis.from_url(redis_url).get("demo:model:most") or 0)
    print(f"12 concurrent conversations on 2 workers: at most {most} model calls ran at once")
    assert most == MODEL_CALLS_AT_ONCE


def main() -> None:
    from multi_worker import redis_and_workers, start_redis

    with ExitStack() as stack:
        url = start_redis(stack)
        workers = redis_and_workers(stack, "serve_workers:app", url=url)
        anyio.run(client, workers, url)


if __name__ == "__main__":
    main()
