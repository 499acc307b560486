"""`agentloop.dbos`: invocations as DBOS workflows on a real system database (SQLite in the ordinary run, a
throwaway PostgreSQL cluster for the two-executor test), recovered after `kill -9` with no finished tool
call run again and every round committed once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

if not os.environ.get("CI"):
    pytest.importorskip("dbos", reason="needs the dbos extra: pip install -e '.[dbos]'")

from dbos import DBOS

from agentloop import (
    Agent,
    AiMessage,
    Denied,
    FinishReason,
    IllegalConfigurationError,
    MessageWindowChatMemory,
    Middleware,
    PendingApproval,
    ToolExecutionResultMessage,
    UserMessage,
    tool,
)
from agentloop._values._codec import RecordedToolError
from agentloop.dbos import DBOSAgent, decode_result
from agentloop.stores import RedisChatMemoryStore, SQLiteChatMemoryStore
from agentloop.testing import FakeOpenAIServer, FunctionChatModel, ScriptedChatModel
from tests.runtime_helpers import assert_valid_for_provider, calls
from tests.store_servers import postgres_bin, postgres_server, redis_url  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "Ship order 7 and tell me the weather"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # DBOS's workflows and steps are asyncio code


@pytest.fixture
def dbos_sqlite(tmp_path: Path) -> Iterator[None]:
    DBOS(
        config={
            "name": "agentloop-tests",
            "system_database_url": f"sqlite:///{tmp_path / 'dbos.sqlite'}",
            "log_level": "WARNING",
        }
    )
    yield
    DBOS.destroy(destroy_registry=True)


ran: list[str] = []


@tool
async def weather(city: str) -> str:
    """Weather of a city."""
    ran.append(f"weather:{city}")
    return f"{city}: 21 C"


@tool
def double(n: int) -> int:
    """Doubles n (sync, in a worker thread)."""
    ran.append(f"double:{n}")
    return 2 * n


def script() -> ScriptedChatModel:
    return ScriptedChatModel(
        [calls(("weather", {"city": "Paris"}), ("double", {"n": 21})), "Paris: 21 C; 42."]
    )


async def test_an_invocation_runs_as_a_workflow_of_steps(dbos_sqlite: None) -> None:
    ran.clear()
    model = script()
    memory = MessageWindowChatMemory.provider(50)
    durable = DBOSAgent(Agent(model, name="helper", tools=[weather, double], memory=memory))
    DBOS.launch()
    result = await durable.chat("weather and double", memory_id="u1", workflow_id="wf-1")
    assert result.content == "Paris: 21 C; 42."
    assert [e.result for e in result.tool_executions] == ["Paris: 21 C", "42"]
    assert result.invocation_id == "wf-1"
    assert sorted(ran) == ["double:21", "weather:Paris"]
    steps = [s["function_name"] for s in await DBOS.list_workflow_steps_async("wf-1")]
    assert steps.count("helper.model") == 2
    assert sorted(s for s in steps if ".tool." in s) == ["helper.tool.double", "helper.tool.weather"]
    assert steps.count("helper.memory.read") == 1
    assert steps.count("helper.memory.commit") == 2  # the tool round, then the answer


async def test_the_same_workflow_id_returns_the_first_result_and_runs_nothing_again(
    dbos_sqlite: None,
) -> None:
    ran.clear()
    model = script()
    durable = DBOSAgent(Agent(model, name="idem", tools=[weather, double]))
    DBOS.launch()
    first = await durable.chat("go", workflow_id="same")
    again = await durable.chat("go", workflow_id="same")
    assert again == first
    assert len(model.requests) == 2
    assert sorted(ran) == ["double:21", "weather:Paris"]


async def chat_deciding(
    durable: DBOSAgent, message: str, workflow_id: str, decide: Callable[[PendingApproval], Awaitable[None]]
) -> Any:
    """Runs `durable.chat()` while `decide(pending)` answers the paused round from another task."""
    outcome: list[Any] = []

    async def run() -> None:
        outcome.append(await durable.chat(message, workflow_id=workflow_id))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        pending = await durable.pending(workflow_id)
        assert pending is not None
        await decide(pending)
    return outcome[0]


@tool(requires_approval=True)
async def refund(order: str) -> str:
    """Refunds an order."""
    ran.append(f"refund:{order}")
    return f"refunded {order}"


async def test_an_approval_is_a_durable_wait_answered_by_a_message(dbos_sqlite: None) -> None:
    ran.clear()
    model = ScriptedChatModel(
        [calls(("refund", {"order": "7"}), ("weather", {"city": "Oslo"})), "Refunded; Oslo: 21 C."]
    )
    durable = DBOSAgent(
        Agent(model, name="refunds", tools=[refund, weather], memory=MessageWindowChatMemory(50))
    )
    DBOS.launch()

    async def decide(pending: PendingApproval) -> None:
        assert [(r.tool_name, r.arguments) for r in pending.requests] == [("refund", '{"order": "7"}')]
        assert ran == ["weather:Oslo"]  # the ungated sibling ran; the gated call waits
        await durable.approve("refund-7", {pending.requests[0].call_id: True})

    result = await chat_deciding(durable, "refund order 7", "refund-7", decide)
    assert result.content == "Refunded; Oslo: 21 C."
    assert sorted(ran) == ["refund:7", "weather:Oslo"]
    assert [e.result for e in result.tool_executions] == ["refunded 7", "Oslo: 21 C"]
    assert await durable.pending("refund-7", timeout=0.1) is None


async def test_a_denied_call_gets_its_reason_and_the_run_goes_on(dbos_sqlite: None) -> None:
    ran.clear()
    model = ScriptedChatModel([calls(("refund", {"order": "8"})), "Not refunded."])
    durable = DBOSAgent(Agent(model, name="denials", tools=[refund]))
    DBOS.launch()

    async def decide(pending: PendingApproval) -> None:
        await durable.approve("refund-8", {pending.requests[0].call_id: Denied("over the limit")})

    result = await chat_deciding(durable, "refund order 8", "refund-8", decide)
    assert ran == []
    (execution,) = result.tool_executions
    assert execution.is_error and "over the limit" in execution.result
    assert "over the limit" in str(model.requests[1].messages[-1])


@tool
def broken(n: int) -> int:
    """Always fails."""
    ran.append(f"broken:{n}")
    raise ValueError(f"no value for {n}")


async def test_a_result_with_failed_and_denied_calls_equals_itself_returned_again(dbos_sqlite: None) -> None:
    ran.clear()
    model = ScriptedChatModel([calls(("broken", {"n": 1}), ("refund", {"order": "9"})), "Sorry."])
    durable = DBOSAgent(Agent(model, name="records", tools=[broken, refund]))
    DBOS.launch()

    async def decide(pending: PendingApproval) -> None:
        await durable.approve("records-1", {pending.requests[0].call_id: Denied("not today")})

    first = await chat_deciding(durable, "go", "records-1", decide)
    again = await durable.chat("go", workflow_id="records-1")
    assert again == first and again is not first  # records compare by value (as the docs' own example)
    failed, denied = (e.error for e in again.tool_executions)
    assert failed == RecordedToolError("no value for 1", error_type="ValueError")
    assert failed != RecordedToolError("no value for 2", error_type="ValueError")
    assert denied is not None and "not today" in str(denied)
    assert ran == ["broken:1"] and len(model.requests) == 2  # nothing ran again


async def test_a_replay_pairs_each_call_with_its_own_record_whatever_order_calls_start_in(
    dbos_sqlite: None,
) -> None:
    """Approval checks finish in any order (here an async predicate answers call #0 slowly the first time
    and call #1 slowly on replay): steps are numbered in call order, so each call replays its own record."""
    ran.clear()
    slow = {"index": 0}

    async def needs_approval(request: Any, ctx: Any) -> bool:
        await anyio.sleep(0.2 if request.index == slow["index"] else 0)
        return False

    model = ScriptedChatModel([calls(("weather", {"city": "Rome"}), ("double", {"n": 4})), "done"])
    durable = DBOSAgent(Agent(model, name="order", tools=[weather, double], requires_approval=needs_approval))
    DBOS.launch()
    first = await durable.chat("go", workflow_id="order-1")
    slow["index"] = 1
    handle = await DBOS.fork_workflow_async("order-1", 100)  # replays every recorded step
    replay = decode_result(await handle.get_result())
    assert [(e.request.id, e.result) for e in replay.tool_executions] == [
        (e.request.id, e.result) for e in first.tool_executions
    ]
    assert sorted(ran) == ["double:4", "weather:Rome"]  # each ran once: the replay ran nothing


async def test_a_run_that_waited_for_approval_returns_the_result_of_an_uninterrupted_run(
    dbos_sqlite: None,
) -> None:
    def two_rounds() -> ScriptedChatModel:
        return ScriptedChatModel(
            [calls(("weather", {"city": "Oslo"})), calls(("refund", {"order": "9"})), "Refunded."]
        )

    plain = await Agent(two_rounds(), tools=[weather, refund], approval_handler=lambda r: True).chat("go")
    durable = DBOSAgent(Agent(two_rounds(), name="whole", tools=[weather, refund]))
    DBOS.launch()

    async def decide(pending: PendingApproval) -> None:
        await durable.approve("whole-1", {pending.requests[0].call_id: True})

    result = await chat_deciding(durable, "go", "whole-1", decide)
    assert [(e.request, e.result) for e in result.tool_executions] == [
        (e.request, e.result) for e in plain.tool_executions
    ]
    assert list(result.messages) == list(plain.messages)
    assert result.token_usage == plain.token_usage
    assert len(result.intermediate_responses) == len(plain.intermediate_responses) == 2


async def test_decisions_that_do_not_answer_the_paused_round_are_refused_and_the_run_waits_on(
    dbos_sqlite: None,
) -> None:
    from agentloop import ApprovalError
    from agentloop.dbos import APPROVAL_TOPIC, encode_decisions

    ran.clear()
    model = ScriptedChatModel([calls(("refund", {"order": "5"})), "Refunded 5."])
    durable = DBOSAgent(Agent(model, name="typos", tools=[refund]))
    DBOS.launch()

    async def decide(pending: PendingApproval) -> None:
        with pytest.raises(ApprovalError, match="no call 'C1'"):
            await durable.approve("typos-1", {"C1": True})  # refused at once, nothing sent
        await DBOS.send_async("typos-1", encode_decisions({"C1": True}), APPROVAL_TOPIC)  # sent anyway
        await DBOS.send_async("typos-1", encode_decisions({"x": True}, "another-round"), APPROVAL_TOPIC)
        await durable.approve("typos-1", {pending.requests[0].call_id: True})

    result = await chat_deciding(durable, "go", "typos-1", decide)
    assert result.content == "Refunded 5."
    assert ran == ["refund:5"]


def test_a_dbos_agent_refuses_an_inline_approval_handler() -> None:
    with pytest.raises(IllegalConfigurationError, match="durable wait"):
        DBOSAgent(Agent(script(), name="inline", approval_handler=lambda request: True))


def test_a_dbos_agent_needs_a_name() -> None:
    with pytest.raises(IllegalConfigurationError, match="stable name"):
        DBOSAgent(Agent(script()))


def test_on_trio_a_clear_error_says_dbos_runs_on_asyncio(tmp_path: Path) -> None:
    DBOS(config={"name": "agentloop-tests", "system_database_url": f"sqlite:///{tmp_path / 'x.sqlite'}"})
    try:
        durable = DBOSAgent(Agent(script(), name="on_trio"))

        async def main() -> None:
            with pytest.raises(IllegalConfigurationError, match="asyncio only"):
                await durable.chat("hi")

        anyio.run(main, backend="trio")
    finally:
        DBOS.destroy(destroy_registry=True)


# -- recovery after kill -9 ---------------------------------------------------------------------------------


def worker(
    mode: str, db: str, tmp: Path, base_url: str, *extra: str, memory: str = ""
) -> subprocess.Popen[str]:
    command = [
        sys.executable,
        "-m",
        "tests.dbos_worker",
        mode,
        "--db",
        db,
        "--memory",
        memory or str(tmp / "memory.sqlite"),
        "--base-url",
        base_url,
        "--effects",
        str(tmp / "effects.txt"),
        "--workflow-id",
        "order-7",
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def effects(tmp: Path) -> list[str]:
    path = tmp / "effects.txt"
    return path.read_text().splitlines() if path.exists() else []


def wait_for(condition: Any, what: str, process: subprocess.Popen[str], timeout: float = 60.0) -> None:
    """Polls a file-based condition set by another process (no event to wait on across processes)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            raise AssertionError(
                f"the worker exited ({process.returncode}) before {what}: {process.stderr.read()}"
            )  # type: ignore[union-attr]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def finish(process: subprocess.Popen[str]) -> Any:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return decode_result(out.strip().splitlines()[-1].encode())


def script_server() -> FakeOpenAIServer:
    calls_message = calls(("fast_a", {"city": "Paris"}), ("fast_b", {"amount": 21}), ("slow", {"order": "7"}))
    return FakeOpenAIServer([calls_message, "Order 7 shipped; Paris is 21 C."])


def crash_mid_round(db: str, tmp: Path, server: FakeOpenAIServer, *extra: str, memory: str = "") -> None:
    """Starts the run; once both fast calls are checkpointed and the slow one runs, kill -9."""
    process = worker("run", db, tmp, server.base_url, "--crash", *extra, memory=memory)
    wait_for(lambda: "slow waiting" in effects(tmp), "two calls checkpointed, the slow one running", process)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert "slow done" not in effects(tmp)


def check_recovered(
    result: Any, tmp: Path, server: FakeOpenAIServer, reference: Any, memory: str = ""
) -> None:
    lines = effects(tmp)
    assert lines.count("fast_a done") == 1 and lines.count("fast_b done") == 1  # not run again
    assert lines.count("slow start") == 2 and lines.count("slow done") == 1  # the unfinished call re-ran
    assert len(server.requests) == 2  # the first model call was not made again
    assert result.content == reference.content
    assert [(e.request, e.result, e.is_error) for e in result.tool_executions] == [
        (e.request, e.result, e.is_error) for e in reference.tool_executions
    ]
    assert list(result.messages) == list(reference.messages)

    async def stored() -> list[Any]:
        store: Any = RedisChatMemoryStore(memory) if memory else SQLiteChatMemoryStore(tmp / "memory.sqlite")
        async with store:
            return await MessageWindowChatMemory(100, id="alice", store=store).messages()

    messages = anyio.run(stored)
    assert_valid_for_provider(messages)
    assert [type(m) for m in messages] == [
        UserMessage,
        AiMessage,
        ToolExecutionResultMessage,
        ToolExecutionResultMessage,
        ToolExecutionResultMessage,
        AiMessage,
    ]  # every round committed exactly once
    assert messages == list(reference.messages)


def uninterrupted(db: str, tmp: Path) -> Any:
    with script_server() as server:
        return finish(worker("run", db, tmp, server.base_url))


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_a_run_killed_mid_round_finishes_on_restart_without_rerunning_finished_tools(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    memory = request.getfixturevalue("redis_url") if store == "redis" else ""
    reference = uninterrupted(f"sqlite:///{tmp_path / 'ref.sqlite'}", _fresh(tmp_path / "ref"))
    tmp = _fresh(tmp_path / "crash")
    db = f"sqlite:///{tmp / 'dbos.sqlite'}"
    with script_server() as server:
        crash_mid_round(db, tmp, server, memory=memory)
        result = finish(worker("recover", db, tmp, server.base_url, memory=memory))
        check_recovered(result, tmp, server, reference, memory)


def test_a_paused_run_survives_a_restart_and_resumes_when_the_decision_arrives(tmp_path: Path) -> None:
    from dbos import DBOSClient

    from agentloop.dbos import APPROVAL_TOPIC, PENDING_EVENT, encode_decisions

    tmp = _fresh(tmp_path / "paused")
    db = f"sqlite:///{tmp / 'dbos.sqlite'}"
    answer = "Refunded 5.0; Paris is 21 C."
    script = [calls(("fast_a", {"city": "Paris"}), ("refund", {"order": "7", "amount": 5.0})), answer]
    with FakeOpenAIServer(script) as server:
        process = worker("run", db, tmp, server.base_url)
        client = DBOSClient(system_database_url=db)
        try:
            data = client.get_event("order-7", PENDING_EVENT, timeout_seconds=60)
            assert data, process.stderr
            pending = PendingApproval.from_json(data)
            process.send_signal(signal.SIGKILL)  # the worker dies while the run waits for a person
            process.wait(timeout=30)
            assert effects(tmp) == ["fast_a start", "fast_a done"]
            client.send("order-7", encode_decisions({pending.requests[0].call_id: True}), APPROVAL_TOPIC)
        finally:
            client.destroy()
        result = finish(worker("recover", db, tmp, server.base_url))
    assert result.content == answer
    assert effects(tmp) == ["fast_a start", "fast_a done", "refund 7 5.0"]  # nothing ran twice
    assert len(server.requests) == 2


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    """A throwaway PostgreSQL cluster on 127.0.0.1 (initdb / pg_ctl), for the two-executor test."""
    bindir = postgres_bin()
    if bindir is None:
        if os.environ.get("CI"):
            raise AssertionError("PostgreSQL is not installed (apt-get install postgresql)")
        pytest.skip("needs PostgreSQL's server binaries: apt-get install postgresql")
    with postgres_server(bindir, "agentloop_dbos") as url:
        yield url


def test_another_executor_takes_over_a_crashed_run_on_postgres(tmp_path: Path, postgres: str) -> None:
    reference = uninterrupted(f"sqlite:///{tmp_path / 'ref.sqlite'}", _fresh(tmp_path / "ref"))
    tmp = _fresh(tmp_path / "crash")
    with script_server() as server:
        crash_mid_round(postgres, tmp, server, "--executor", "machine-a")
        result = finish(worker("take-over", postgres, tmp, server.base_url, "--executor", "machine-b"))
        check_recovered(result, tmp, server, reference)


def _fresh(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


class Forecast(BaseModel):
    city: str
    celsius: int


async def test_structured_output_survives_the_workflow_record(dbos_sqlite: None) -> None:
    """The record carries `Result.output` (it was lost: `output` came back None), for the agent's output type
    and for a call's own, and a recorded run read back later gives the output again."""
    answer = calls(("final_result", {"city": "Oslo", "celsius": 3}))
    agent = Agent(ScriptedChatModel([answer, answer]), name="typed", output_type=Forecast)
    plain = Agent(ScriptedChatModel([answer]), name="plain")
    durable, durable_plain = DBOSAgent(agent), DBOSAgent(plain)
    DBOS.launch()
    result = await durable.chat("forecast", workflow_id="typed-1")
    assert result.output == Forecast(city="Oslo", celsius=3)
    again = await durable.result("typed-1")
    assert again.output == Forecast(city="Oslo", celsius=3)
    own = await durable_plain.chat("forecast", output_type=Forecast, workflow_id="typed-2")
    assert own.output == Forecast(city="Oslo", celsius=3)
    assert (await durable_plain.result("typed-2", output_type=Forecast)).output == own.output


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_step_memory_finds_its_store_through_store_backed_memory(tmp_path: Path, backend: str) -> None:
    """The store a durable memory records paused rounds in and reads versions from is its memory's, when
    that memory declares one (`StoreBackedMemory`); a memory without one has none. (No DBOS step runs.)"""
    from agentloop._features.approval._records import StoreBackedMemory
    from agentloop.dbos._agent import _StepMemory

    class Bare:
        """A `ChatMemory` of its own, kept in no store."""

        id = "bob"

        async def messages(self) -> list[Any]:
            return []

        async def add(self, messages: Any) -> None:
            pass

        async def clear(self) -> None:
            pass

    async def main() -> None:
        async with SQLiteChatMemoryStore(tmp_path / f"{backend}.sqlite") as store:
            window = MessageWindowChatMemory(10, id="alice", store=store)
            stepped = _StepMemory(window, "alice")
            assert isinstance(window, StoreBackedMemory) and isinstance(stepped, StoreBackedMemory)
            assert stepped.store is store
            assert isinstance(await stepped._version(), int)
        bare = _StepMemory(Bare(), "bob")  # type: ignore[arg-type]
        assert not isinstance(Bare(), StoreBackedMemory)
        assert bare.store is None and await bare._version() is None

    anyio.run(main, backend=backend)


def held_tool() -> tuple[anyio.Event, anyio.Event, Any]:
    """A `slow` tool that says it started and waits until the test releases it: (started, release, tool)."""
    started, release = anyio.Event(), anyio.Event()

    @tool
    async def slow(n: int) -> int:
        """Waits until the test releases it."""
        started.set()
        await release.wait()
        return n

    return started, release, slow


@pytest.fixture(params=["sqlite", "postgres"])
def dbos_system(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """DBOS on a SQLite system database, and on the real PostgreSQL cluster."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    else:
        url = request.getfixturevalue("postgres")
    DBOS(config={"name": "agentloop-tests", "system_database_url": url, "log_level": "WARNING"})
    yield request.param
    DBOS.destroy(destroy_registry=True)


@pytest.mark.parametrize("step", ["tool", "model"])
async def test_cancel_stops_a_running_workflow_and_the_memory_takes_the_next_run(
    dbos_system: str, step: str
) -> None:
    """Cancelled while a DBOS step runs (a tool call's, or the model call's): the workflow ends CANCELLED,
    nothing of the round is committed, and the next run on the memory id works."""
    import uuid

    from dbos._error import DBOSAwaitedWorkflowCancelledError

    running, after = f"wf-cancel-{uuid.uuid4().hex}", f"wf-after-{uuid.uuid4().hex}"

    started, release = anyio.Event(), anyio.Event()
    cleaned: list[str] = []

    @tool
    async def slow(n: int) -> int:
        """Waits until the test releases it."""
        try:
            started.set()
            await release.wait()
            return n
        finally:
            cleaned.append("tool")

    async def answer(messages: list[Any], tools: Any) -> Any:
        if messages[-1].text == "again":
            return "The next answer."
        if step == "tool":
            return calls(("slow", {"n": 1}))
        try:  # the model step waits
            started.set()
            await release.wait()
            return "Too late."
        finally:
            cleaned.append("model")

    memory = MessageWindowChatMemory.provider(50)
    durable = DBOSAgent(Agent(FunctionChatModel(answer), name="cancellable", tools=[slow], memory=memory))
    DBOS.launch()
    outcome: list[BaseException] = []
    async with anyio.create_task_group() as group:

        async def run() -> None:
            try:
                await durable.chat("start", memory_id="u9", workflow_id=running)
            except DBOSAwaitedWorkflowCancelledError as error:
                outcome.append(error)

        group.start_soon(run)
        await started.wait()
        assert await durable.cancel(running, reason="user pressed stop") is True
    assert len(outcome) == 1
    assert cleaned == [step]  # the step's own cleanup ran
    status = await DBOS.get_workflow_status_async(running)
    assert status is not None and status.status == "CANCELLED"
    assert await durable.cancel(running) is False  # nothing runs any more
    messages = await durable.agent._memory_for("u9").messages()  # type: ignore[union-attr]
    assert messages == []  # the cancelled round was not committed
    release.set()
    later = await durable.chat("again", memory_id="u9", workflow_id=after)
    assert later.content == "The next answer."
    messages = await durable.agent._memory_for("u9").messages()  # type: ignore[union-attr]
    assert_valid_for_provider(messages)
    assert [m.text for m in messages] == ["again", "The next answer."]


class Noted(Middleware):
    """A pass-through middleware (module level: DBOS pickles a workflow's arguments)."""


async def test_middleware_that_is_not_middleware_fails_the_call_before_any_workflow_starts(
    dbos_sqlite: None,
) -> None:
    durable = DBOSAgent(Agent(ScriptedChatModel(["ok"] * 2), name="checked"))
    DBOS.launch()
    for bad in [object(), [Noted(), "trace"], "trace"]:
        with pytest.raises(IllegalConfigurationError, match=r"is not an agentloop\.Middleware"):
            await durable.chat("hi", workflow_id="never", middleware=bad)  # type: ignore[arg-type]
    assert await DBOS.list_workflows_async(workflow_ids=["never"]) == []
    assert (await durable.chat("hi", middleware=Noted())).content == "ok"  # one Middleware alone is fine
    assert (await durable.chat("hi", middleware=[Noted()])).content == "ok"


async def test_a_run_cancelled_after_its_round_keeps_its_cancel_reason(dbos_sqlite: None) -> None:
    """Regression (found by the composition suite): the recorded Result dropped `cancel_reason`, so a run
    that run control stopped after its round came back CANCELLED without saying why."""
    started, release, slow = held_tool()
    model = ScriptedChatModel([calls(("slow", {"n": 1})), "never asked"])
    durable = DBOSAgent(
        Agent(model, name="stoppable", tools=[slow], memory=MessageWindowChatMemory.provider(50))
    )
    DBOS.launch()
    results: list[Any] = []
    async with anyio.create_task_group() as group:

        async def run() -> None:
            results.append(await durable.chat("start", memory_id="u8", workflow_id="wf-after-round"))

        group.start_soon(run)
        await started.wait()
        assert await durable.agent.cancel(invocation_id="wf-after-round", after_round=True, reason="enough")
        release.set()
    [result] = results
    assert (result.finish_reason, result.cancel_reason) == (FinishReason.CANCELLED, "enough")
    assert [e.result for e in result.tool_executions] == ["1"]
    again = await durable.result("wf-after-round")  # read back from DBOS's record
    assert again.cancel_reason == "enough"
