"""One worker process of the keyed-limits load test (tests/features/limits/test_limits_load.py): runs its
share of the
invocations through `ConcurrencyLimit(backend=RedisLimiter(url))` and gauges, in Redis, how many of each key
run at once across every worker.

Usage: python -m tests.limits_worker <redis url> <prefix> <worker index> <count> <asyncio|trio>
Prints one JSON line: {"done": {key: invocations done}, "longest_wait": {key: seconds}}.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from typing import Any

import anyio
import redis

from agentloop import Agent, ChatMessage
from agentloop.middleware import ConcurrencyLimit, RedisLimiter
from agentloop.testing import FunctionChatModel

LIMIT = 3
KEYS = ["heavy"] * 14 + ["medium"] * 5 + ["light"]
"""How often each key comes up: a heavy tenant, a medium one, and a light one that must not starve."""

# The gauge: in, note the most seen, out; one atomic script per step, counted across every worker.
_ENTER = """
local now = redis.call('INCR', KEYS[1])
if now > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], now) end
return now
"""


async def main(url: str, prefix: str, worker: int, count: int) -> None:
    client = redis.Redis.from_url(url)
    enter = client.register_script(_ENTER)

    waits: dict[str, float] = {}

    async def answer(messages: list[ChatMessage], tools: Any) -> str:
        key, asked = str(messages[-1].text).split(" ")
        waits[key] = max(waits.get(key, 0.0), time.monotonic() - float(asked))
        await anyio.to_thread.run_sync(lambda: enter(keys=[f"{prefix}:now:{key}", f"{prefix}:most:{key}"]))
        try:
            await anyio.sleep(0.002)  # the model at work
        finally:
            await anyio.to_thread.run_sync(client.decr, f"{prefix}:now:{key}")
        return "ok"

    limiter = RedisLimiter(url, prefix=prefix, poll=0.05)
    limit = ConcurrencyLimit(LIMIT, key=lambda call: str(call.context.context["tenant"]), backend=limiter)
    agent = Agent(FunctionChatModel(answer), middleware=[limit])
    done: Counter[str] = Counter()
    jobs = [KEYS[(worker * 7 + n) % len(KEYS)] for n in range(count)]
    lanes = anyio.Semaphore(24)  # callers of this worker at once (a web server's open requests)

    async def one(key: str) -> None:
        async with lanes:
            result = await agent.chat(f"{key} {time.monotonic()}", context={"tenant": key})
            assert result.content == "ok"
            done[key] += 1

    async with anyio.create_task_group() as group:
        for key in jobs:
            group.start_soon(one, key)
    await limiter.aclose()
    client.close()
    print(json.dumps({"done": dict(done), "longest_wait": waits}), flush=True)


if __name__ == "__main__":
    url, prefix, worker, count, backend = sys.argv[1:6]
    anyio.run(main, url, prefix, int(worker), int(count), backend=backend)
