"""Sync code in worker threads behaves the same on asyncio and trio: the shared limiter's slots are held only
while a caller waits, a hung tool's abandoned threads are bounded per tool and do not starve other tools, and
a sync callable that returns an awaitable is awaited wherever a user callable is invoked. Also: one tool-name
check for every way a tool is made, and the tool modules import in one direction."""

from __future__ import annotations

import ast
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import agentloop._tools._threads as threads_module
from agentloop import (
    Agent,
    AiMessage,
    IllegalConfigurationError,
    ToolExecutionRequest,
    ToolProviderResult,
    ToolSpecification,
    execute_tool_calls,
    tool,
)
from agentloop._tools._threads import (
    ABANDONED_THREADS_PER_TOOL,
    THREADS_PER_TOOL,
    TOOL_THREADS,
    abandoned_threads,
    busy_threads,
    run_sync_in_worker,
)
from agentloop._tools._tool import Tool
from agentloop.testing import ScriptedChatModel

# -- hung sync tools ----------------------------------------------------------------------------------------


class Gate:
    """A sync function that blocks until released, counting the threads inside it."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.inside = 0
        self.entered = 0

    def __call__(self) -> str:
        with self.lock:
            self.inside += 1
            self.entered += 1
        try:
            self.release.wait(30)
            return "released"
        finally:
            with self.lock:
                self.inside -= 1


@pytest.fixture
def gate() -> Iterator[Gate]:
    gate = Gate()
    try:
        yield gate
    finally:
        gate.release.set()  # never leave a thread behind, whatever the test did
        deadline = time.monotonic() + 10
        while abandoned_threads() and time.monotonic() < deadline:
            time.sleep(0.001)  # the released threads are on their way out
        assert not abandoned_threads()


async def _until_no_abandoned_threads() -> None:
    with anyio.fail_after(10):
        while abandoned_threads():
            await anyio.sleep(0.005)


def _calls(name: str, n: int) -> list[ToolExecutionRequest]:
    return [ToolExecutionRequest(f"c{i}", name, "{}") for i in range(n)]


async def test_a_hung_sync_tool_keeps_a_bounded_number_of_threads_and_others_still_run(
    gate: Gate, caplog: pytest.LogCaptureFixture
) -> None:
    def blocks(request: Any, context: Any) -> str:
        return gate()

    hang = Tool(ToolSpecification("hang"), blocks, timeout=0.05)

    @tool
    def healthy() -> str:
        return "fine"

    baseline = threading.active_count()
    results = []
    for _ in range(ABANDONED_THREADS_PER_TOOL + 3):  # one call at a time, each times out
        [execution] = await execute_tool_calls(_calls("hang", 1), [hang, healthy])
        results.append(execution)
    assert all(e.has_failed for e in results)
    assert all(e.result == "Tool 'hang' timed out after 0.05 s" for e in results[:ABANDONED_THREADS_PER_TOOL])
    # Only the first calls started a thread; the later ones waited for one to end, up to their timeout, and
    # then failed saying why (the model sees it).
    starved = (
        "Tool 'hang' could not start: 4 earlier calls of it are still running after they timed out or were "
        "cancelled (a sync function cannot be interrupted); if it is hung, give its blocking calls a timeout "
        "or make it async"
    )
    assert [e.result for e in results[ABANDONED_THREADS_PER_TOOL:]] == [
        f"{starved}; it waited its whole timeout of 0.05 s"
    ] * 3
    assert gate.inside == gate.entered == ABANDONED_THREADS_PER_TOOL
    waits = [r.getMessage() for r in caplog.records if "could not start" in r.getMessage()]
    assert waits == [f"{starved}; it waits for one of them to end"] * 3
    assert abandoned_threads() == ABANDONED_THREADS_PER_TOOL
    assert threading.active_count() - baseline <= ABANDONED_THREADS_PER_TOOL + 1
    # The hung threads keep their slots until they end; another sync tool still runs.
    assert busy_threads() == ABANDONED_THREADS_PER_TOOL
    [other] = await execute_tool_calls(_calls("healthy", 1), [hang, healthy])
    assert not other.has_failed and other.result == "fine"
    # A call waiting for room starts as soon as a thread ends.
    hang_longer = Tool(ToolSpecification("hang"), blocks, timeout=5)  # the same code: the same count
    async with anyio.create_task_group() as group:
        waiting: list[Any] = []

        async def call() -> None:
            waiting.extend(await execute_tool_calls(_calls("hang", 1), [hang_longer]))

        group.start_soon(call)
        await anyio.sleep(0.05)
        assert not waiting and gate.entered == ABANDONED_THREADS_PER_TOOL  # still waiting, no new thread
        gate.release.set()
    assert waiting[0].result == "released" and not waiting[0].has_failed
    # Once the threads end, the tool may run again.
    await _until_no_abandoned_threads()
    [again] = await execute_tool_calls(_calls("hang", 1), [hang, healthy])
    assert again.result == "released" and not again.has_failed


async def test_many_concurrent_calls_of_one_hung_tool_hold_a_bounded_share_of_the_threads(gate: Gate) -> None:
    """45 calls at once of one sync tool that hangs, all timed out: they hold at most THREADS_PER_TOOL of the
    TOOL_THREADS, so another sync tool runs at once (before, they held all 40 and it waited its timeout)."""

    def blocks(request: Any, context: Any) -> str:
        return gate()

    hang = Tool(ToolSpecification("hang"), blocks, timeout=0.05)

    @tool(timeout=5)
    def healthy() -> str:
        return "fine"

    results = await execute_tool_calls(_calls("hang", 45), [hang])
    assert all(e.has_failed for e in results)
    assert busy_threads() == THREADS_PER_TOOL < TOOL_THREADS
    # A thread handed a call may not have reached the tool yet when the call timed out (a loaded machine):
    # wait until every one of them is inside, then check that no more ever came.
    with anyio.fail_after(10):
        while gate.entered < THREADS_PER_TOOL:
            await anyio.sleep(0.005)
    assert gate.inside == gate.entered == THREADS_PER_TOOL
    [execution] = await execute_tool_calls(_calls("healthy", 1), [healthy])
    assert execution.result == "fine"
    gate.release.set()
    await _until_no_abandoned_threads()
    assert busy_threads() == 0


async def test_a_cancelled_sync_call_stops_waiting_at_once_and_its_thread_keeps_its_slot(gate: Gate) -> None:
    with anyio.move_on_after(0.05) as scope:
        await run_sync_in_worker(gate)
    assert scope.cancelled_caught
    # The caller left; the thread it started still runs, so it still counts against TOOL_THREADS.
    assert gate.inside == 1 and abandoned_threads(gate) == 1 and busy_threads() == 1
    gate.release.set()
    await _until_no_abandoned_threads()
    assert gate.inside == 0 and busy_threads() == 0


@pytest.mark.parametrize("threads", [TOOL_THREADS, 5])
async def test_no_more_than_tool_threads_threads_ever_run_sync_code(
    threads: int, gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound counts every thread running sync code, the abandoned ones too: never one more."""
    monkeypatch.setattr(threads_module, "TOOL_THREADS", threads)
    monkeypatch.setattr(threads_module, "ABANDONED_THREADS_PER_TOOL", 1000)  # one tool may take every slot
    monkeypatch.setattr(threads_module, "THREADS_PER_TOOL", 1000)
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, gate.inside, busy_threads())
            await anyio.sleep(0.001)

    async with anyio.create_task_group() as group:
        group.start_soon(watch)
        # Callers that give up after 50 ms, in three waves: each wave's threads stay hung, abandoned.
        for _ in range(3):
            async with anyio.create_task_group() as wave:
                for _ in range(threads + 5):
                    wave.start_soon(_give_up_after, 0.05, gate)
        assert gate.inside == gate.entered == threads == busy_threads() == abandoned_threads()

        # Every slot is held by a hung abandoned thread: a new sync tool fails within its own timeout, saying
        # why, instead of waiting past it.
        @tool(timeout=0.2)
        def healthy() -> str:
            return "fine"

        started = anyio.current_time()
        [execution] = await execute_tool_calls(_calls("healthy", 1), [healthy])
        assert anyio.current_time() - started < 1.0
        assert execution.has_failed and execution.result == (
            f"Tool 'healthy' could not start: all {threads} worker threads are busy, {threads} of them with "
            "calls still running after they timed out or were cancelled (a sync function cannot be "
            "interrupted); if it is hung, give its blocking calls a timeout or make it async; it waited its "
            "whole timeout of 0.2 s"
        )
        # Once they end, the slots are free again (and live callers beyond the bound simply queue).
        gate.release.set()
        await _until_no_abandoned_threads()
        results = []

        async def live() -> None:
            results.append(await run_sync_in_worker(gate))

        async with anyio.create_task_group() as crowd:
            for _ in range(threads + 7):
                crowd.start_soon(live)
        assert results == ["released"] * (threads + 7) and busy_threads() == 0
        group.cancel_scope.cancel()
    assert peak == threads  # exactly the bound, never beyond


async def test_a_wait_cancelled_from_outside_does_not_explain_a_later_timeout(
    gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(threads_module, "TOOL_THREADS", 1)
    await _give_up_after(0.02, gate)  # its thread hangs, holding the only slot
    await _give_up_after(0.02, gate)  # this one waits for a slot until it is cancelled from outside

    @tool(timeout=0.02)
    async def slow() -> str:
        await anyio.sleep(10)
        return "never"

    [execution] = await execute_tool_calls(_calls("slow", 1), [slow])
    assert execution.result == "Tool 'slow' timed out after 0.02 s"


async def _give_up_after(seconds: float, func: Any) -> None:
    with anyio.move_on_after(seconds):
        await run_sync_in_worker(func)


async def test_calls_cancelled_at_any_moment_leave_no_abandoned_count_behind() -> None:
    """Cancelled before its thread started (asyncio's worker then skips it), while running, or just after:
    every call's count ends at zero, so a quick tool is never refused as hung."""
    ran = []

    def quick(n: int) -> int:
        ran.append(n)
        return n

    for delay in (0, 0, 0.0005, 0.001, 0.002):
        async with anyio.create_task_group() as group:
            for n in range(20):
                group.start_soon(run_sync_in_worker, quick, n)
            await anyio.sleep(delay)
            group.cancel_scope.cancel()
    await _until_no_abandoned_threads()
    assert await run_sync_in_worker(quick, 99) == 99  # not refused


async def test_a_hung_tool_provider_does_not_starve_tools(gate: Gate) -> None:
    def provider(request: Any) -> ToolProviderResult:
        gate()
        return ToolProviderResult([])

    @tool
    def ping() -> str:
        return "pong"

    model = ScriptedChatModel([])
    agent = Agent(model, tool_provider=provider)
    for _ in range(2):
        with anyio.move_on_after(0.05):
            await agent.chat("hi")
    assert abandoned_threads(provider) == 2
    [execution] = await execute_tool_calls(_calls("ping", 1), [ping])
    assert execution.result == "pong"


# -- sync callables returning awaitables ------------------------------------------------------------------


async def _async_text(value: str) -> str:
    await anyio.sleep(0)
    return value


async def test_sync_callables_returning_awaitables_are_awaited_everywhere() -> None:
    spec = ToolSpecification("programmatic")

    @tool(result_converter=lambda result: _async_text(f"converted {result}"))
    def converted() -> str:
        return "x"

    @tool
    def hands_back_a_coroutine(city: str) -> Any:
        return _async_text(f"sunny in {city}")

    @tool
    def fails() -> str:
        raise ValueError("broken")

    async def fetch(request: Any) -> ToolProviderResult:
        await anyio.sleep(0)
        return ToolProviderResult([(spec, lambda req, ctx: _async_text("executor ok"))])

    calls = AiMessage(
        tool_execution_requests=[
            ToolExecutionRequest("1", "programmatic", "{}"),
            ToolExecutionRequest("2", "hands_back_a_coroutine", '{"city": "Paris"}'),
            ToolExecutionRequest("3", "converted", "{}"),
            ToolExecutionRequest("4", "fails", "{}"),
            ToolExecutionRequest("5", "unknown", "{}"),
        ]
    )
    model = ScriptedChatModel([calls, "done"])
    seen: list[str] = []
    agent = Agent(
        model,
        tools=[hands_back_a_coroutine, converted, fails],
        tool_provider=lambda request: fetch(request),
        system_message=lambda memory_id: _async_text("be brief"),
        tool_execution_error_handler=lambda exc, request: _async_text(f"handled: {exc}"),
        hallucinated_tool_name_strategy=lambda request: _async_text(f"no tool {request.name}"),
    )

    async def note(event: Any) -> None:
        seen.append(type(event).__name__)

    result = await agent.stream("go").on_tool_executed(lambda event: note(event)).start()
    assert [e.result for e in result.tool_executions] == [
        "executor ok",
        "sunny in Paris",
        "converted x",
        "handled: broken",
        "no tool unknown",
    ]
    assert seen == ["ToolExecution"] * 5  # on_tool_executed gets each execution record
    assert model.requests[0].messages[0].text == "be brief"  # type: ignore[attr-defined]


# -- tool names -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["get weather", "x" * 65, "naïve", "a.b", "new\nline"])
def test_every_way_of_making_a_tool_checks_its_name(name: str) -> None:
    def executor(request: Any, context: Any) -> str:
        return "ok"

    def run() -> None: ...

    class Named:
        def __agentloop_tools__(self) -> list[Tool]:
            return [Tool(ToolSpecification(name), executor)]

    makers = {
        "Tool(specification, executor)": lambda: Tool(ToolSpecification(name), executor),
        "@tool(name=...)": lambda: tool(name=name)(run),
        "a tool provider's result": lambda: ToolProviderResult([(ToolSpecification(name), executor)]),
        "a (specification, executor) pair": lambda: Agent(
            ScriptedChatModel([]), tools=[(ToolSpecification(name), executor)]
        ),
        "__agentloop_tools__": lambda: Agent(ScriptedChatModel([]), tools=[Named()]),
        "Agent.as_tool": lambda: Agent(ScriptedChatModel([])).as_tool(name=name),
    }
    for way, make in makers.items():
        with pytest.raises(IllegalConfigurationError, match="is not usable: models accept 1-64") as info:
            make()
        assert repr(name) in str(info.value), way


def test_tool_modules_import_in_one_direction() -> None:
    """No import cycle between agentloop's modules at run time (re-exporting package __init__ files and
    imports for type checkers only aside)."""
    root = Path(__import__("agentloop").__file__).parent
    graph: dict[str, set[str]] = {}
    packages = set()
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_package else parts)
        if is_package:
            packages.add(module)
        package = module if is_package else module.rpartition(".")[0]
        deps = graph.setdefault(module, set())
        tree = ast.parse(path.read_text())
        typing_only = {
            id(inner)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for inner in ast.walk(block)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                deps.add(".".join(base + ([node.module] if node.module else [])))
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("agentloop"):
                deps.add(node.module or "")
    edges = {m: {d for d in deps if d in graph and d not in packages} for m, deps in graph.items()}
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(edges[module]):
            if state.get(dep) == 1:
                cycle = [*path[path.index(dep) :], dep] if dep in path else [module, dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep, [*path, dep])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
