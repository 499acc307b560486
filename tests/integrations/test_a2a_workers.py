"""A2A with two workers: one in another process, one in this test's, sharing only SQLite files (the task
store, the agent's memory and its run control). `tasks/cancel` sent to this worker cancels the invocation
the other process runs; `tasks/get` on either sees the task; the conversation goes on from either.
The clients are a2a-sdk's own, on asyncio and trio; the servers run on uvicorn (asyncio)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from a2a.types import CancelTaskRequest, GetTaskRequest, TaskState

from agentloop.a2a import a2a_app
from tests.a2a_shared import SQLiteTaskStore, worker_agent
from tests.integrations.test_a2a import sdk_client, user
from tests.ui_clients import serving

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[tuple[str, str, subprocess.Popen[str]]]:
    """(the other process's URL, this process's URL, the other process)."""
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__).parents[1] / "a2a_worker.py"), str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    try:
        assert process.stdout is not None
        remote = json.loads(process.stdout.readline())["url"]
        app = a2a_app(
            worker_agent(tmp_path),
            name="Echo",
            description="Echoes.",
            task_store=SQLiteTaskStore(tmp_path / "tasks.db"),
        )
        with serving(app) as local:
            yield remote, local, process
    finally:
        process.kill()
        process.wait()


async def test_tasks_cancel_on_one_worker_cancels_the_run_on_the_other(
    workers: tuple[str, str, subprocess.Popen[str]],
) -> None:
    remote, local, process = workers
    assert process.stdout is not None
    async with httpx.AsyncClient(timeout=30) as http:
        there = await sdk_client(remote, http, streaming=True)
        here = await sdk_client(local, http, streaming=False)
        task_id = context_id = ""
        async with anyio.create_task_group() as group:

            async def run() -> None:
                nonlocal task_id, context_id
                async for event in there.send_message(user("hang")):
                    if event.HasField("task"):
                        task_id, context_id = event.task.id, event.task.context_id

            group.start_soon(run)
            line = await anyio.to_thread.run_sync(process.stdout.readline)
            assert json.loads(line) == {"model": "started"}
            while not task_id:
                await anyio.sleep(0.01)
            cancelled = await here.cancel_task(CancelTaskRequest(id=task_id))  # sent to the other worker
            assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
            line = await anyio.to_thread.run_sync(process.stdout.readline)
            assert json.loads(line) == {"model": "cancelled"}  # the other process's model call was stopped
        for client in (there, here):
            task = await client.get_task(GetTaskRequest(id=task_id))
            assert task.status.state == TaskState.TASK_STATE_CANCELED
        # Nothing of the cancelled round was stored: the conversation goes on, from this worker, fresh.
        later = [e async for e in here.send_message(user("after", context_id))]
        text = "".join(p.text for e in later if e.HasField("task") for a in e.task.artifacts for p in a.parts)
        assert text == "you said after (message 1 of this conversation)"
