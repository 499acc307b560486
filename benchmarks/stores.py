"""What a persistent memory store costs: the SQLite and Redis stores against the in-memory one.

    python benchmarks/stores.py [--sessions 50] [--invocations 2000] [--backend asyncio|trio]

Starts its own redis-server on 127.0.0.1 (skipped with a note when it is not installed) and a SQLite file in
a temp directory. Measures, per store:

1. append: one committed round (a 4-message tool round, with its expected version) written on its own,
   one after another: p50 / p99 of the round trip;
2. session: a whole invocation with memory on (`Agent.chat`, an offline model calling one tool, then
   answering: two committed rounds; for SQLite and Redis three steps in the store: the lease taken with the
   window read, the tool round, the answer with the lease given back), one at a time, and with
   `--sessions` in flight on distinct memory ids: p50 / p99 of the invocation, the cost per committed
   round over the in-memory store, and the process's CPU time per session (with 50 in flight on 2 cores
   the latency is mostly queueing: about 50 x the CPU per session).

Then, for the record of why the Redis store uses `redis.asyncio` on asyncio: the same append script through
`redis.asyncio` (asyncio only) against the sync client in a worker thread (what trio gets).
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentloop import (
    Agent,
    AiMessage,
    ChatMessage,
    InMemoryChatMemoryStore,
    MessageWindowChatMemory,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
    tool,
)
from agentloop.testing import FunctionChatModel

ROUND: list[ChatMessage] = [
    UserMessage("What is the weather in Oslo and in Rome?"),
    AiMessage(
        None,
        [
            ToolExecutionRequest("call_1", "weather", '{"city": "Oslo"}'),
            ToolExecutionRequest("call_2", "weather", '{"city": "Rome"}'),
        ],
    ),
    ToolExecutionResultMessage("call_1", "weather", '{"city": "Oslo", "celsius": -3, "sky": "snow"}'),
    ToolExecutionResultMessage("call_2", "weather", '{"city": "Rome", "celsius": 14, "sky": "clear"}'),
]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.3f} / {percentile(values, 0.99) * 1000:.3f}"


@tool
async def weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: 14 C"


def answer(messages: list[ChatMessage], tools: Any) -> AiMessage:
    last = messages[-1]
    if isinstance(last, UserMessage):
        return AiMessage(tool_execution_requests=[ToolExecutionRequest("c1", "weather", '{"city": "Oslo"}')])
    return AiMessage("It is 14 C in Oslo.")


async def appends(store: Any, count: int) -> list[float]:
    times: list[float] = []
    version = (await store.load("bench-append")).version
    for _ in range(count):
        started = time.perf_counter()
        version = await store.append("bench-append", ROUND, expected_version=version)
        times.append(time.perf_counter() - started)
    return times


async def sessions(store: Any, count: int, in_flight: int, tag: str) -> list[float]:
    agent = Agent(
        FunctionChatModel(answer), tools=[weather], memory=MessageWindowChatMemory.provider(20, store=store)
    )
    times: list[float] = []
    next_index = 0

    async def runner(slot: int) -> None:
        nonlocal next_index
        while next_index < count:
            next_index += 1
            started = time.perf_counter()
            await agent.chat("Weather in Oslo?", memory_id=f"{tag}-{slot}")
            times.append(time.perf_counter() - started)

    async with anyio.create_task_group() as task_group:
        for slot in range(in_flight):
            task_group.start_soon(runner, slot)
    return times


def start_redis() -> tuple[subprocess.Popen[bytes] | None, str]:
    binary = shutil.which("redis-server")
    try:
        import redis  # noqa: F401
    except ImportError:
        binary = None
    if binary is None:
        return None, ""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            break
        except OSError:
            time.sleep(0.02)
    return process, f"redis://127.0.0.1:{port}/0"


async def redis_clients(url: str, count: int) -> tuple[list[float], list[float]]:
    """The append script through redis.asyncio and through the sync client in a worker thread."""
    import redis
    import redis.asyncio

    from agentloop.stores._redis import _APPEND

    sync = redis.Redis.from_url(url)
    client = redis.asyncio.Redis.from_url(url)
    sync_script = sync.register_script(_APPEND)
    async_script = client.register_script(_APPEND)
    keys = ["cmp:{x}:log", "cmp:{x}:meta", "cmp:{x}:lease"]
    args = ["", "", 0, b"", b"1 1 1 []", ""]
    threaded: list[float] = []
    native: list[float] = []
    for _ in range(count):
        started = time.perf_counter()
        await anyio.to_thread.run_sync(lambda: sync_script(keys=keys, args=args))
        threaded.append(time.perf_counter() - started)
        started = time.perf_counter()
        await async_script(keys=keys, args=args)
        native.append(time.perf_counter() - started)
    sync.close()
    await client.aclose()
    return native, threaded


async def main(args: argparse.Namespace) -> None:
    from agentloop.stores import RedisChatMemoryStore, SQLiteChatMemoryStore

    redis_process, url = start_redis()
    directory = tempfile.mkdtemp()
    try:
        stores: dict[str, Any] = {
            "in-memory": InMemoryChatMemoryStore(),
            "SQLite (WAL, temp file)": SQLiteChatMemoryStore(Path(directory) / "chat.db"),
        }
        if redis_process is not None:
            stores["Redis (loopback)"] = RedisChatMemoryStore(url)
        else:
            print("redis-server or the redis client is missing: Redis not measured", file=sys.stderr)
        print(
            f"backend {args.backend}; {args.invocations} appends, sessions a row; {args.sessions} in flight"
        )
        print(
            "| store | append p50 / p99 ms | session p50 / p99 ms (one at a time) | + per round p50 ms |",
            end="",
        )
        print(f" session p50 / p99 ms ({args.sessions} in flight) | + per round p50 ms |", end="")
        print(" CPU ms a session (+ a round) |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        base_one = base_many = base_cpu = 0.0
        for name, store in stores.items():
            append_times = await appends(store, args.invocations)
            await sessions(store, 100, 1, "warm")
            one = await sessions(store, args.invocations, 1, "one")
            cpu = time.process_time()
            many = await sessions(store, args.invocations, args.sessions, "many")
            cpu = (time.process_time() - cpu) / args.invocations * 1000
            if name == "in-memory":
                base_one, base_many, base_cpu = statistics.median(one), statistics.median(many), cpu
            extra_one = (statistics.median(one) - base_one) / 2 * 1000  # two committed rounds a session
            extra_many = (statistics.median(many) - base_many) / 2 * 1000
            print(
                f"| {name} | {ms(append_times)} | {ms(one)} | {extra_one:+.3f} | {ms(many)} "
                f"| {extra_many:+.3f} | {cpu:.3f} ({(cpu - base_cpu) / 2:+.3f}) |"
            )
        for store in stores.values():
            close = getattr(store, "aclose", None)
            if close is not None:
                await close()
        if redis_process is not None and args.backend == "asyncio":
            native, threaded = await redis_clients(url, args.invocations)
            print(
                f"\nRedis append script, {args.invocations} calls: redis.asyncio p50 / p99 {ms(native)} ms; "
                f"sync client in a worker thread {ms(threaded)} ms"
            )
    finally:
        if redis_process is not None:
            redis_process.terminate()
            redis_process.wait(10)
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--invocations", type=int, default=2000)
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    arguments = parser.parse_args()
    anyio.run(main, arguments, backend=arguments.backend)
