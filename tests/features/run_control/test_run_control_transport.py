"""Run-control backends deliver commands to running invocations: in this process (LocalRunControl) and
across processes (SQLiteRunControl, RedisRunControl against a real redis-server), on asyncio and trio."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import RunControlError, UserMessage
from agentloop.control import LocalRunControl, RunCommand, RunControl, SQLiteRunControl
from tests.store_servers import redis_server

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(params=["local", "sqlite", "redis"])
def control(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "local":
        yield LocalRunControl()
    elif request.param == "sqlite":
        control = SQLiteRunControl(tmp_path / "control.db", poll_interval=0.01)
        yield control
        control.close()
    else:
        from agentloop.control import RedisRunControl

        url = request.getfixturevalue("redis_url")
        control = RedisRunControl(url, poll_interval=0.01, prefix=f"t{id(request)}:")
        yield control
        control.close()


async def test_every_backend_is_a_run_control(control: Any) -> None:
    assert isinstance(control, RunControl)


async def test_nothing_running_receives_nothing(control: Any) -> None:
    assert await control.send(RunCommand.cancel(), invocation_id="nobody") is False
    assert await control.send(RunCommand.cancel(), memory_id="no-memory") is False


async def test_a_command_reaches_the_running_invocation_by_id_and_by_memory_id(control: Any) -> None:
    async with control.running("inv-1", "alice") as inbox:
        assert await control.send(RunCommand.steer("also check Lima"), invocation_id="inv-1") is True
        assert (
            await control.send(RunCommand.cancel(after_round=True, reason="stop"), memory_id="alice") is True
        )
        first = await inbox.receive()
        second = await inbox.receive()
    assert first == RunCommand("steer", message=UserMessage("also check Lima"))
    assert second == RunCommand("cancel", after_round=True, reason="stop")
    # Once the invocation has ended, nothing is running under its ids any more.
    assert await control.send(RunCommand.cancel(), invocation_id="inv-1") is False
    assert await control.send(RunCommand.cancel(), memory_id="alice") is False


async def test_a_memory_id_reaches_every_invocation_running_on_it_and_no_other(control: Any) -> None:
    async with (
        control.running("a1", "alice") as a1,
        control.running("a2", "alice") as a2,
        control.running("b1", "bob") as b1,
    ):
        assert await control.send(RunCommand.cancel(reason="all of alice"), memory_id="alice") is True
        assert (await a1.receive()).reason == "all of alice"
        assert (await a2.receive()).reason == "all of alice"
        assert await control.send(RunCommand.cancel(reason="bob"), memory_id="bob") is True
        assert (await b1.receive()).reason == "bob"  # bob's first command: alice's never reached b1


async def test_busy_says_whether_anything_runs_on_a_memory_id(control: Any) -> None:
    assert await control.busy("carol") is False
    async with control.running("c1", "carol"):
        assert await control.busy("carol") is True
        assert await control.busy("dave") is False
        async with control.running("c2", "carol"):
            assert await control.busy("carol") is True
        assert await control.busy("carol") is True  # c1 still runs
    assert await control.busy("carol") is False


async def test_commands_arrive_in_the_order_they_were_sent(control: Any) -> None:
    async with control.running("inv-order", None) as inbox:
        for n in range(20):
            assert await control.send(RunCommand.steer(f"message {n}"), invocation_id="inv-order")
        received = [await inbox.receive() for _ in range(20)]
    assert [c.message.text for c in received if c.message is not None] == [f"message {n}" for n in range(20)]


async def test_one_invocation_id_cannot_be_registered_twice_at_once(control: Any) -> None:
    async with control.running("twice", None):
        with pytest.raises(ValueError, match="already registered"):
            async with control.running("twice", None):
                pass
    async with control.running("twice", None):  # free again once the first has ended
        pass


async def test_a_cancelled_wait_leaves_the_registration_clean(control: Any) -> None:
    async with control.running("waiting", "carol") as inbox:
        with anyio.move_on_after(0.05):
            await inbox.receive()
        assert await control.send(RunCommand.cancel(reason="later"), invocation_id="waiting")
        assert (await inbox.receive()).reason == "later"
    assert await control.send(RunCommand.cancel(), memory_id="carol") is False


def test_a_command_needs_exactly_one_target() -> None:
    async def send_both() -> None:
        await LocalRunControl().send(RunCommand.cancel(), invocation_id="x", memory_id="y")

    with pytest.raises(TypeError, match="exactly one of invocation_id= or memory_id="):
        anyio.run(send_both)


def test_bad_commands_are_refused_with_what_to_do() -> None:
    with pytest.raises(ValueError, match="needs message=UserMessage"):
        RunCommand("steer")
    with pytest.raises(ValueError, match="'cancel' or 'steer'"):
        RunCommand("pause")  # type: ignore[arg-type]


async def test_a_lapsed_registration_of_a_crashed_process_receives_nothing(tmp_path: Path) -> None:
    # A process that stops reading its inbox (it crashed) lets its registration lapse: senders are told
    # that nothing runs instead of queueing commands nobody will read.
    control = SQLiteRunControl(tmp_path / "c.db", lease_ttl=0.2, poll_interval=0.01)
    async with control.running("crashed", "dave"):
        assert await control.send(RunCommand.cancel(), memory_id="dave")
        await anyio.sleep(0.3)  # the lease's length itself, not a race: nothing renews it meanwhile
        assert await control.send(RunCommand.cancel(), memory_id="dave") is False
        assert await control.busy("dave") is False
    control.close()


async def test_unreadable_data_in_the_inbox_is_a_clear_error(tmp_path: Path) -> None:
    import sqlite3

    control = SQLiteRunControl(tmp_path / "c.db", poll_interval=0.01)
    async with control.running("damaged", None) as inbox:
        with sqlite3.connect(tmp_path / "c.db") as db:
            db.execute(
                "INSERT INTO agentloop_run_commands (invocation_id, body) VALUES ('damaged', 'not json')"
            )
        with pytest.raises(RunControlError, match="could not be read"):
            await inbox.receive()
    control.close()


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_command_reaches_an_invocation_running_in_another_process(
    kind: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = str(tmp_path / "shared.db") if kind == "sqlite" else request.getfixturevalue("redis_url")
    worker = Path(__file__).parents[2] / "run_control_worker.py"
    process = subprocess.Popen(
        [sys.executable, str(worker), kind, where, "inv-remote", "erin", backend],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[3],
    )
    try:
        assert process.stdout is not None
        assert json.loads(process.stdout.readline()) == {"ready": "inv-remote"}

        async def command() -> list[bool]:
            from agentloop.control import RedisRunControl

            control: Any = SQLiteRunControl(where) if kind == "sqlite" else RedisRunControl(where)
            assert await control.busy("erin") and not await control.busy("frank")  # seen from here
            steered = await control.send(RunCommand.steer("from elsewhere"), memory_id="erin")
            cancelled = await control.send(
                RunCommand.cancel(reason="pressed Stop"), invocation_id="inv-remote"
            )
            control.close()
            return [steered, cancelled]

        assert anyio.run(command, backend=backend) == [True, True]
        lines = [json.loads(process.stdout.readline()) for _ in range(2)]
        assert lines == [
            {"kind": "steer", "reason": None, "message": "from elsewhere"},
            {"kind": "cancel", "reason": "pressed Stop", "message": None},
        ]
        assert process.wait(20) == 0
    finally:
        process.kill()
        process.wait()
