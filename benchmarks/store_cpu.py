"""CPU per session of the SQLite store alone: the three steps an invocation with one tool round makes.

    python benchmarks/store_cpu.py [--sessions 2000] [--in-flight 1,50] [--backend asyncio|trio] [--agent]

Each session, on its own memory id, does what `Agent` does over `MessageWindowChatMemory.provider(store=)`:
takes the lease with the window read, appends the tool round (question, the AI message with 3 calls, their
3 results) under the lease, and appends the ~1.2 kB answer as it gives the lease back. No model, no HTTP:
the store's own cost (its SQL, the lease's bookkeeping, the group commit), one process, CPU from
getrusage. With `--agent`, whole invocations instead (`Agent.chat` on a scripted model calling the 3
tools, then answering), with memory over SQLite and without memory: what memory costs an invocation,
store and memory machinery together, without HTTP. It measures the agentloop that Python imports: to
compare two versions, run it once with each first on PYTHONPATH
(`PYTHONPATH=$PWD python benchmarks/store_cpu.py`), alternated.
"""

from __future__ import annotations

import argparse
import functools
import resource
import shutil
import tempfile
from pathlib import Path
from typing import Any

import anyio

from agentloop import (
    Agent,
    AiMessage,
    MessageWindowChatMemory,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
    tool,
)
from agentloop.stores import SQLiteChatMemoryStore
from agentloop.testing import ScriptedChatModel

CALLS = [ToolExecutionRequest(f"call_{k}", "get_value", f'{{"key": "k{k}"}}') for k in range(3)]
ROUND = [
    UserMessage("What are the three values?"),
    AiMessage(tool_execution_requests=CALLS),
    *(ToolExecutionResultMessage(call.id, call.name, f"value-k{k}") for k, call in enumerate(CALLS)),
]
ANSWER = [AiMessage(" ".join(f"token{i}" for i in range(200)))]


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def session(store: SQLiteChatMemoryStore, memory_id: str) -> None:
    async with store.lease(memory_id, read=True, max_messages=50) as lease:
        assert lease.loaded is not None
        version = await store.append(
            memory_id, ROUND, expected_version=lease.loaded.version, lease=lease.token
        )
        await lease.append_and_release(ANSWER, expected_version=version)


async def measure(path: Path, sessions: int, in_flight: int) -> float:
    store = SQLiteChatMemoryStore(path)
    try:
        for index in range(50):  # warm-up: the file, the schema, the statement cache
            await session(store, f"warm-{in_flight}-{index}")
        names = iter(f"s-{in_flight}-{index}" for index in range(sessions))

        async def worker() -> None:
            for name in names:
                await session(store, name)

        start = cpu_seconds()
        async with anyio.create_task_group() as group:
            for _ in range(in_flight):
                group.start_soon(worker)
        cpu = cpu_seconds() - start
        checked: Any = await store.load(f"s-{in_flight}-{sessions - 1}")
        assert checked.messages == [*ROUND, *ANSWER], "the last session's memory is not what it wrote"
    finally:
        await store.aclose()
    return cpu / sessions * 1000


def _scripted(request: Any) -> AiMessage:
    """The tool calls first, the answer once the results are in (whatever order concurrent sessions ask)."""
    return ANSWER[0] if isinstance(request.messages[-1], ToolExecutionResultMessage) else ROUND[1]


@tool
async def get_value(key: str) -> str:
    """The value of `key`."""
    return f"value-{key}"


async def measure_agent(path: Path | None, sessions: int, in_flight: int) -> float:
    """CPU per `Agent.chat` (one tool round of 3 calls, then the answer), with memory over SQLite at `path`
    (each session its own memory id) or without memory."""
    store = None if path is None else SQLiteChatMemoryStore(path)
    script: list[Any] = [_scripted] * 2 * (sessions + 50)
    memory = None if store is None else MessageWindowChatMemory.provider(50, store=store)
    agent = Agent(ScriptedChatModel(script), tools=[get_value], memory=memory)
    try:
        for index in range(50):
            await agent.chat(ROUND[0].text, memory_id=f"warm-{index}")
        names = iter(f"s-{index}" for index in range(sessions))

        async def worker() -> None:
            for name in names:
                await agent.chat(ROUND[0].text, memory_id=name)

        start = cpu_seconds()
        async with anyio.create_task_group() as group:
            for _ in range(in_flight):
                group.start_soon(worker)
        cpu = cpu_seconds() - start
        if store is not None:
            assert len(await store.get_messages(f"s-{sessions - 1}")) == 6, "the last session's memory"
    finally:
        if store is not None:
            await store.aclose()
    return cpu / sessions * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--in-flight", default="1,50")
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    parser.add_argument("--agent", action="store_true", help="whole invocations, with memory and without")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="agentloop-store-cpu-"))
    try:
        for in_flight in (int(n) for n in args.in_flight.split(",")):
            path = directory / f"memory-{in_flight}.db"
            if args.agent:
                run = functools.partial(anyio.run, measure_agent, backend=args.backend)
                without, with_memory = (
                    run(None, args.sessions, in_flight),
                    run(path, args.sessions, in_flight),
                )
                extra = with_memory - without
                print(
                    f"{in_flight} in flight: Agent.chat {without:.3f} ms CPU without memory, "
                    f"{with_memory:.3f} with memory in SQLite: +{extra:.3f} ms ({args.backend})"
                )
                continue
            ms = anyio.run(measure, path, args.sessions, in_flight, backend=args.backend)
            print(f"{in_flight} in flight: {ms:.3f} ms CPU/session ({args.backend})")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
