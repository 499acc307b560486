"""One DBOS executor for `benchmarks/scale.py`: durable runs of the benchmark workload on a PostgreSQL system
database, memory in Redis, the model the fake OpenAI server.

    python benchmarks/_scale_dbos.py --db URL --redis URL --base-url URL --executor ID --runs N --in-flight F

Launches DBOS, runs 3 warm-up runs, prints `READY`, waits for a line on stdin, then runs N durable
invocations (F in flight, each its own workflow id and memory id `<executor>-<i>`), checks each result (the
exact text, 3 tool executions) and prints one JSON line: runs, wall seconds, CPU seconds, failures.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
from dbos import DBOS

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _workload import QUESTION, text_tokens, tool_result

from agentloop import Agent, ChatRequest, ChatResponse, MessageWindowChatMemory, tool
from agentloop.dbos import DBOSAgent
from agentloop.models import (
    ModelEvent,
    OpenAIChatModel,
    ResponseComplete,
)
from agentloop.stores import RedisChatMemoryStore


@tool
async def get_value(key: str) -> str:
    """Returns the value stored under a key."""
    return tool_result(key)


class Streamed:
    """The model with `chat` answered from its stream (the fake server streams every answer; a DBOS model
    step asks for the whole response)."""

    def __init__(self, inner: OpenAIChatModel) -> None:
        self.inner = inner

    async def chat(self, request: ChatRequest) -> ChatResponse:
        async for event in self.inner.stream(request):
            if isinstance(event, ResponseComplete):
                return event.response
        raise RuntimeError("the stream ended without a response")

    def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        return self.inner.stream(request)


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--db", "--redis", "--base-url", "--executor"):
        parser.add_argument(name, required=True)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--in-flight", type=int, default=20)
    parser.add_argument("--tokens", type=int, required=True)
    args = parser.parse_args()
    expected = "".join(text_tokens(args.tokens))

    DBOS(
        config={
            "name": "agentloop-scale",
            "system_database_url": args.db,
            "executor_id": args.executor,
            "log_level": "WARNING",
        }
    )
    store = RedisChatMemoryStore(args.redis)
    model = OpenAIChatModel("gpt-4o-mini", base_url=args.base_url, api_key="bench")
    durable = DBOSAgent(
        Agent(
            Streamed(model),
            name="scale",
            tools=[get_value],
            memory=MessageWindowChatMemory.provider(20, store=store),
        )
    )
    DBOS.launch()
    failures: list[str] = []

    async def one(memory_id: str) -> None:
        try:
            result = await durable.chat(QUESTION, memory_id=memory_id, workflow_id=f"wf-{memory_id}")
            if result.content != expected or len(result.tool_executions) != 3:
                failures.append(f"{memory_id}: {len(result.tool_executions)} tools, {result.content!r:.60}")
        except Exception as error:  # counted and reported, never dropped
            failures.append(f"{memory_id}: {type(error).__name__}: {error}"[:300])

    try:
        for index in range(3):
            await one(f"{args.executor}-warm{index}")
        print("READY", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        limit = anyio.Semaphore(args.in_flight)

        async def bounded(memory_id: str) -> None:
            async with limit:
                await one(memory_id)

        started, cpu_started = time.perf_counter(), cpu()
        async with anyio.create_task_group() as group:
            for index in range(args.runs):
                group.start_soon(bounded, f"{args.executor}-{index}")
        wall, used = time.perf_counter() - started, cpu() - cpu_started
        report = {"runs": args.runs, "wall_s": wall, "cpu_s": used, "failures": failures[:5]}
        report["failed"] = len(failures)
        print(json.dumps(report), flush=True)
    finally:
        await model.aclose()
        await store.aclose()
        DBOS.destroy()


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
