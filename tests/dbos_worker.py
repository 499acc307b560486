"""A worker process for the DBOS recovery tests: one `DBOSAgent` with three tools and a persistent memory,
on a DBOS system database given on the command line.

    python -m tests.dbos_worker MODE --db URL --memory FILE --base-url URL --effects FILE --workflow-id ID
        [--executor ID] [--crash]

`--memory` is a SQLite file or a Redis URL. MODE `run` starts the invocation `ID` and waits for it;
`recover` only launches DBOS (which recovers this executor's pending runs) and waits for `ID`; `take-over`
resumes `ID` from another executor. Each tool appends a line to the effects file when it starts and when it
finishes; with `--crash`, the tool `slow` never finishes (the test kills the process there). The final
`Result` is written to stdout as JSON.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import anyio
from dbos import DBOS

from agentloop import Agent, MessageWindowChatMemory, tool
from agentloop.dbos import DBOSAgent, encode_result
from agentloop.models import OpenAIChatModel
from agentloop.stores import RedisChatMemoryStore, SQLiteChatMemoryStore


def build(effects: Path, crash: bool, base_url: str, memory: str, workflow_id: str) -> DBOSAgent:
    def note(line: str) -> None:
        with effects.open("a") as file:
            file.write(line + "\n")

    @tool
    async def fast_a(city: str) -> str:
        """Weather of a city."""
        note("fast_a start")
        note("fast_a done")
        return f"{city}: 21 C"

    @tool
    def fast_b(amount: int) -> int:
        """Doubles an amount (a sync tool, in a worker thread)."""
        note("fast_b start")
        note("fast_b done")
        return amount * 2

    @tool
    async def slow(order: str) -> str:
        """Ships an order (slow; the crashing worker never finishes it)."""
        note("slow start")
        if crash:
            # Crash only once DBOS has recorded both fast calls (they finished), so the test kills a run
            # whose round is half done: two calls checkpointed, this one running.
            while True:
                steps = await DBOS.list_workflow_steps_async(workflow_id)
                if {"shop.tool.fast_a", "shop.tool.fast_b"} <= {s["function_name"] for s in steps}:
                    break
                await anyio.sleep(0.02)
            note("slow waiting")
            await anyio.sleep_forever()
        note("slow done")
        return f"order {order} shipped"

    @tool(requires_approval=True)
    async def refund(order: str, amount: float) -> str:
        """Refunds an order (a person approves it first)."""
        note(f"refund {order} {amount}")
        return f"refunded {amount}"

    model = OpenAIChatModel("gpt-4o-mini", base_url=base_url, api_key="test", max_retries=0)
    store: Any = (
        RedisChatMemoryStore(memory, lease_ttl=3.0)
        if memory.startswith("redis://")
        else SQLiteChatMemoryStore(memory, lease_ttl=3.0)
    )
    agent = Agent(
        model,
        name="shop",
        tools=[fast_a, fast_b, slow, refund],
        memory=MessageWindowChatMemory.provider(100, store=store),
    )
    return DBOSAgent(agent)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["run", "recover", "take-over"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--memory", required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--effects", type=Path, required=True)
    parser.add_argument("--workflow-id", required=True)
    parser.add_argument("--executor", default="local")
    parser.add_argument("--crash", action="store_true")
    args = parser.parse_args()

    DBOS(
        config={
            "name": "agentloop-tests",
            "system_database_url": args.db,
            "executor_id": args.executor,
            "log_level": "WARNING",
            "notification_listener_polling_interval_sec": 0.05,
        }
    )
    shop = build(args.effects, args.crash, args.base_url, args.memory, args.workflow_id)
    DBOS.launch()
    try:
        if args.mode == "run":
            result = await shop.chat(
                "Ship order 7 and tell me the weather", memory_id="alice", workflow_id=args.workflow_id
            )
        elif args.mode == "recover":
            result = await shop.result(args.workflow_id)
        else:
            result = await shop.take_over(args.workflow_id)
        sys.stdout.write(encode_result(result).decode() + "\n")
        sys.stdout.flush()
    finally:
        DBOS.destroy()


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
