"""`execute_tool_calls` and the agent's loop run tool calls on one engine: the same calls, run both ways with
the same settings and middleware, give the same records (results, error flags, errors, return behaviours,
ids), the same middleware calls, the same concurrency bound, and abort the same way."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec
import pytest

from agentloop import (
    Agent,
    AiMessage,
    Middleware,
    ReturnBehavior,
    ToolCall,
    ToolExecution,
    ToolExecutionRequest,
    execute_tool_calls,
    tool,
)
from agentloop.testing import ScriptedChatModel

running = 0
peak = 0


@tool
async def echo(text: str) -> str:
    """Says `text` back, after letting the others start."""
    global running, peak
    running += 1
    peak = max(peak, running)
    await anyio.sleep(0.01)
    running -= 1
    return text


@tool(timeout=0.02)
async def slow() -> str:
    """Never finishes in time."""
    await anyio.sleep(5)
    return "never"


@tool
def crash() -> str:
    """Fails."""
    raise ValueError("the database is down")


@tool(return_behavior=ReturnBehavior.IMMEDIATE)
def final(n: int) -> int:
    """Ends the invocation."""
    return n * 2


@tool
def big() -> str:
    """A long result."""
    return "x" * 500


TOOLS = [echo, slow, crash, final, big]


class Recorder(Middleware):
    """Records each call it wraps, answers `skip` itself, and marks every result."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []

    async def wrap_tool_call(
        self, call: ToolCall, call_next: Callable[[ToolCall], Awaitable[ToolExecution]]
    ) -> ToolExecution:
        self.seen.append((call.index, call.request.name, call.request.id, call.tool is not None))
        if call.request.name == "echo" and call.request.arguments == '{"text": "skip"}':
            request = call.request
            swapped = ToolExecutionRequest(request.id, request.name, '{"text": "swapped"}')
            execution = await call_next(call.replace(request=swapped))
        else:
            execution = await call_next(call)
        return msgspec.structs.replace(execution, result=execution.result + " [seen]")


def requests() -> list[ToolExecutionRequest]:
    return [
        ToolExecutionRequest("a", "echo", '{"text": "one"}'),
        ToolExecutionRequest("b", "echo", '{"text": "skip"}'),
        ToolExecutionRequest("c", "slow", "{}"),
        ToolExecutionRequest("d", "crash", "{}"),
        ToolExecutionRequest("e", "echo", '{"text": 3}'),  # bad arguments
        ToolExecutionRequest("f", "get_wether", "{}"),  # no such tool: the model is told
        ToolExecutionRequest("g", "final", '{"n": 2}'),
        ToolExecutionRequest("g", "big", "{}"),  # a repeated id: runs under a fresh one
        ToolExecutionRequest("i", "echo", '{"text": "past the cap"}'),
    ]


def comparable(execution: ToolExecution) -> tuple[Any, ...]:
    error = execution.error
    return (
        execution.index,
        execution.request.name,
        execution.request.arguments,
        execution.result,
        execution.is_error,
        None if error is None else (type(error), str(error)),
        execution.return_behavior,
    )


SETTINGS: dict[str, Any] = {"max_concurrency": 2, "max_result_chars": 100, "max_calls": 8}


async def test_the_same_calls_give_the_same_records_both_ways() -> None:
    on_args = _handler("arguments")

    loop_middleware = Recorder()
    model = ScriptedChatModel([AiMessage(tool_execution_requests=requests()), "done"])
    agent = Agent(
        model,
        tools=TOOLS,
        max_concurrent_tools=SETTINGS["max_concurrency"],
        max_tool_result_chars=SETTINGS["max_result_chars"],
        max_tool_calls_per_response=SETTINGS["max_calls"],
        tool_arguments_error_handler=on_args,
        middleware=[loop_middleware],
        eager_tools=False,
    )
    result = await agent.chat("go")

    direct_middleware = Recorder()
    completed: list[int] = []
    direct = await execute_tool_calls(
        requests(),
        TOOLS,
        hallucinated_tool_name_strategy="tell_model",
        tool_arguments_error_handler=on_args,
        middleware=[direct_middleware],
        on_complete=lambda execution: completed.append(execution.index),
        round=1,
        **SETTINGS,
    )

    assert [comparable(e) for e in direct] == [comparable(e) for e in result.tool_executions]
    assert sorted(completed) == list(range(9))  # every call reported, the one past the cap too
    # The middleware saw the same calls (one skipped past the cap); a repeated id ran under a fresh one.
    direct_seen, loop_seen = (sorted(r.seen, key=_index) for r in (direct_middleware, loop_middleware))
    assert [_masked(s) for s in direct_seen] == [_masked(s) for s in loop_seen]
    assert len(direct_seen) == 8
    assert all(
        seen[2].startswith("call_") and seen[2].endswith("_1_7") for seen in (direct_seen[7], loop_seen[7])
    )
    # What execute_tool_calls returns carries the caller's requests as given, ids included.
    assert [e.request.id for e in direct] == [r.id for r in requests()]
    by_index = {e.index: e for e in direct}
    assert by_index[1].result == "swapped [seen]"
    assert by_index[2].result == "Tool 'slow' timed out after 0.02 s [seen]"
    assert by_index[4].result.startswith("fix: Invalid arguments for tool 'echo'")
    assert by_index[5].result.startswith("There is no tool named 'get_wether'")
    assert by_index[8].is_error and "past" not in by_index[8].result


Seen = tuple[int, str, Any, bool]


def _index(seen: Seen) -> int:
    return seen[0]


def _masked(seen: Seen) -> Seen:
    """The fresh id of a call that had an earlier call's id names the invocation: not comparable."""
    return (*seen[:2], "fresh" if seen[0] == 7 else seen[2], seen[3])


def _handler(kind: str) -> Callable[[Exception, ToolExecutionRequest], str]:
    def handler(error: Exception, request: ToolExecutionRequest) -> str:
        return f"fix: {error}"

    return handler


@pytest.mark.parametrize("way", ["loop", "execute_tool_calls"])
async def test_the_same_concurrency_bound(way: str) -> None:
    global peak
    peak = 0
    calls = [ToolExecutionRequest(str(n), "echo", f'{{"text": "{n}"}}') for n in range(6)]
    if way == "loop":
        model = ScriptedChatModel([AiMessage(tool_execution_requests=calls), "done"])
        await Agent(model, tools=[echo], max_concurrent_tools=2).chat("go")
    else:
        await execute_tool_calls(calls, [echo], max_concurrency=2)
    assert peak == 2


class Abort(Exception):
    pass


@pytest.mark.parametrize("way", ["loop", "execute_tool_calls"])
async def test_a_re_raising_handler_aborts_the_same_way(way: str) -> None:
    cancelled = anyio.Event()
    started = anyio.Event()

    @tool
    async def sibling() -> str:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        return "never"

    async def handler(error: Exception, request: ToolExecutionRequest) -> str:
        await started.wait()
        raise Abort(f"aborting on {request.name}") from error

    calls = [ToolExecutionRequest("s", "sibling", "{}"), ToolExecutionRequest("c", "crash", "{}")]

    async def run() -> None:
        if way == "loop":
            model = ScriptedChatModel([AiMessage(tool_execution_requests=calls)])
            await Agent(model, tools=[sibling, crash], tool_execution_error_handler=handler).chat("go")
        else:
            await execute_tool_calls(calls, [sibling, crash], tool_execution_error_handler=handler)

    with pytest.raises(Abort, match="aborting on crash") as caught, anyio.fail_after(5):
        await run()
    assert isinstance(caught.value.__cause__, ValueError)  # the error itself, never an exception group
    assert cancelled.is_set()
