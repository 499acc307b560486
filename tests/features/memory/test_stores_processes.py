"""Several OS processes on one SQLite file or one Redis: invocations on one memory id run one after another,
every completed exchange is stored whole, and a worker killed mid tool round leaves nothing behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from agentloop import MessageWindowChatMemory
from tests.store_servers import redis_url  # noqa: F401 (fixture)
from tests.store_workload import exchanges, open_store

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(params=["sqlite", "redis"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite {tmp_path / 'chat.db'}"
    else:
        yield f"redis {request.getfixturevalue('redis_url')}"


def worker(
    target: str, memory_id: str, tag: str, count: int, seconds: float, backend: str
) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.store_workload",
            target,
            memory_id,
            tag,
            str(count),
            str(seconds),
            backend,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str], timeout: float = 60) -> list[str]:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err
    return [line.split()[1] for line in out.splitlines() if line.startswith("done ")]


def stored(target: str, memory_id: str) -> list[str]:
    async def read() -> list[str]:
        store = open_store(target)
        try:
            return exchanges(await MessageWindowChatMemory(100_000, id=memory_id, store=store).messages())
        finally:
            await store.aclose()

    return anyio.run(read)


def test_two_processes_racing_on_one_memory_id_lose_nothing(target: str) -> None:
    memory_id = f"race-{time.monotonic_ns()}"
    first = worker(target, memory_id, "A", 15, 0.01, "asyncio")
    second = worker(target, memory_id, "B", 15, 0.01, "trio")
    done = finish(first) + finish(second)
    assert len(done) == 30
    kept = stored(target, memory_id)
    assert sorted(kept) == sorted(done)  # every completed exchange, once, whole and contiguous


def test_a_worker_killed_mid_tool_round_leaves_nothing_and_the_id_is_usable_again(target: str) -> None:
    memory_id = f"crash-{time.monotonic_ns()}"
    before = finish(worker(target, memory_id, "B1", 3, 0.01, "asyncio"))
    doomed = worker(target, memory_id, "A", 1, 60.0, "trio")
    assert doomed.stdout is not None
    lines = iter(doomed.stdout.readline, "")
    assert next(lines).strip() == "started"
    assert next(lines).startswith("in tool A-0")  # the model asked, the tool is running: mid round
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(10)
    doomed.stdout.close()
    assert doomed.stderr is not None
    doomed.stderr.close()
    started = time.monotonic()
    after = finish(worker(target, memory_id, "B2", 3, 0.01, "asyncio"))
    waited = time.monotonic() - started
    # The dead worker's lease (2 s in these tests) expired; nothing else held the id up.
    assert waited < 2.0 + 5.0, waited
    kept = stored(target, memory_id)
    assert kept == [*before, *after] or sorted(kept) == sorted(before + after)
    assert not any(text.startswith("A-") for text in kept)
