"""Durable execution on DBOS: an agent run is killed in the middle of a tool round and finishes on restart.

    pip install -e ".[dbos]" && python examples/durable_dbos.py

Runs offline: the model is agentloop's fake OpenAI server on 127.0.0.1, DBOS keeps its state in a SQLite
file and the conversation lives in a SQLite memory store. The script starts a worker process that runs the
agent; while the slowest tool is still running, it kills the worker with SIGKILL (as an OOM killer or a
redeploy would). A second worker launches DBOS, which recovers the run: the model's first answer and the two
finished tool calls come from DBOS's records, only the unfinished call runs again, and the answer is stored
once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from agentloop import Agent, AiMessage, MessageWindowChatMemory, ToolExecutionRequest, tool
from agentloop.stores import SQLiteChatMemoryStore
from agentloop.testing import FakeOpenAIServer

WORKFLOW_ID = "order-42"


def build_agent(base_url: str, folder: Path, crash: bool) -> Agent:
    """The agent every worker builds the same way (DBOS finds the run's workflow by the agent's name)."""
    log = folder / "side-effects.txt"

    def side_effect(line: str) -> None:
        with log.open("a") as file:
            file.write(line + "\n")

    @tool
    async def charge_card(order: str, amount: float) -> str:
        """Charges the customer's card for an order."""
        side_effect(f"charged {amount} for order {order}")
        return f"charged {amount}"

    @tool
    async def reserve_stock(order: str) -> str:
        """Reserves the order's items in the warehouse."""
        side_effect(f"reserved stock for order {order}")
        return "reserved"

    @tool
    async def book_courier(order: str) -> str:
        """Books a courier for the order (slow)."""
        side_effect(f"courier booking started for order {order}")
        if crash:  # the first worker dies here, once DBOS has checkpointed the two finished calls
            from dbos import DBOS

            # DBOS's records live in its database: no event to wait on, so poll them.
            while len(await DBOS.list_workflow_steps_async(WORKFLOW_ID)) < 4:  # noqa: ASYNC110
                await anyio.sleep(0.02)  # (4 steps: the memory read, the model, two tools)
            side_effect("(worker 1 is about to be killed)")
            await anyio.sleep_forever()
        side_effect(f"courier booked for order {order}")
        return "courier booked for 14:00"

    from agentloop.models import OpenAIChatModel

    model = OpenAIChatModel("gpt-4o-mini", base_url=base_url, api_key="offline", max_retries=0)
    store = SQLiteChatMemoryStore(folder / "memory.sqlite", lease_ttl=3.0)
    return Agent(
        model,
        name="fulfilment",
        tools=[charge_card, reserve_stock, book_courier],
        memory=MessageWindowChatMemory.provider(50, store=store),
    )


async def worker(base_url: str, folder: Path, crash: bool) -> None:
    from dbos import DBOS

    from agentloop.dbos import DBOSAgent

    database = f"sqlite:///{folder / 'dbos.sqlite'}"
    DBOS(config={"name": "durable-example", "system_database_url": database, "log_level": "WARNING"})
    durable = DBOSAgent(build_agent(base_url, folder, crash))
    DBOS.launch()  # recovers this executor's unfinished runs
    try:
        if crash:
            await durable.chat("Fulfil order 42 (59.90)", memory_id="shop", workflow_id=WORKFLOW_ID)
        else:
            result = await durable.result(WORKFLOW_ID)
            print(f"[worker 2] the recovered run answered: {result.content!r}")
            for execution in result.tool_executions:
                print(f"[worker 2]   {execution.request.name}: {execution.result}")
    finally:
        DBOS.destroy()


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="agentloop-dbos-"))
    round_one = AiMessage(
        tool_execution_requests=[
            ToolExecutionRequest("c1", "charge_card", '{"order": "42", "amount": 59.9}'),
            ToolExecutionRequest("c2", "reserve_stock", '{"order": "42"}'),
            ToolExecutionRequest("c3", "book_courier", '{"order": "42"}'),
        ]
    )
    log = folder / "side-effects.txt"
    with FakeOpenAIServer(
        [round_one, "Order 42 is paid, reserved and the courier comes at 14:00."]
    ) as server:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        command = [sys.executable, __file__, "--worker", server.base_url, str(folder)]
        print("[main] worker 1 starts the run")
        first = subprocess.Popen([*command, "--crash"], env=env)
        while "about to be killed" not in (log.read_text() if log.exists() else ""):
            if first.poll() is not None:
                raise SystemExit("worker 1 exited early")
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait()
        print("[main] worker 1 killed with SIGKILL while booking the courier")
        print("[main] worker 2 starts; DBOS recovers the run")
        if subprocess.call(command, env=env):
            raise SystemExit("worker 2 failed")
        print(f"[main] model requests served: {len(server.requests)} (the first answer was not asked again)")
    print("[main] side effects, in order:")
    for line in log.read_text().splitlines():
        print(f"         {line}")
    effects = log.read_text()
    assert effects.count("charged") == 1, "the card was charged twice"
    assert effects.count("reserved stock") == 1
    assert effects.count("courier booked") == 1


if __name__ == "__main__":
    if "--worker" in sys.argv:
        _, _, url, path, *rest = sys.argv
        anyio.run(worker, url, Path(path), "--crash" in rest, backend="asyncio")
    else:
        main()
