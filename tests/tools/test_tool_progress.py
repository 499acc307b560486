"""Watching tools while they run: `ctx.report_progress` becomes a `ToolProgress` event, a streaming tool
(an `async def` generator) sends each value it yields as a `ToolOutputDelta` and its last one is its result.
Both reach the stream's events and callbacks, tracing (span events) and MCP clients (progress notifications);
`chat()` gives the same result with the reports going nowhere. Both anyio backends."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from mcp.client import Client

from agentloop import (
    Agent,
    AiMessage,
    BeforeToolExecution,
    IllegalConfigurationError,
    Tool,
    ToolContext,
    ToolExecuted,
    ToolExecutionRequest,
    ToolOutputDelta,
    ToolProgress,
    ToolRetrying,
    ToolSpecification,
    tool,
)
from agentloop.mcp import server_from
from agentloop.middleware import ToolRetry
from agentloop.testing import ScriptedChatModel
from tests.otel_helpers import Telemetry

pytestmark = pytest.mark.anyio


@tool
async def download(files: int, ctx: ToolContext) -> str:
    """Downloads some files, saying how far it got."""
    for done in range(1, files + 1):
        await ctx.report_progress(done, files, f"file {done} of {files}")
    return f"{files} files"


@tool
def convert(pages: int, ctx: ToolContext) -> str:
    """A sync tool (it runs in a worker thread) that reports its progress through the event loop."""
    for done in range(1, pages + 1):
        anyio.from_thread.run(ctx.report_progress, done, pages)
    return f"{pages} pages"


@tool
async def lines(count: int) -> Any:
    """Streams its lines as it writes them; the last value is the whole text."""
    text = ""
    for n in range(count):
        text += f"line {n}\n"
        yield text


def calls(*requests: tuple[str, str, dict[str, Any]]) -> AiMessage:
    return AiMessage(
        tool_execution_requests=[
            ToolExecutionRequest(i, name, json.dumps(args)) for i, name, args in requests
        ]
    )


THREE = calls(("d", "download", {"files": 3}), ("c", "convert", {"pages": 2}), ("l", "lines", {"count": 3}))


async def test_progress_and_streamed_values_arrive_between_a_calls_start_and_its_end() -> None:
    agent = Agent(ScriptedChatModel([THREE, "done"]), tools=[download, convert, lines])
    events = [e async for e in agent.stream("go").events()]
    progress = [e for e in events if isinstance(e, ToolProgress)]
    assert [
        (e.call_id, e.tool_name, e.progress, e.total, e.message) for e in progress if e.call_id == "d"
    ] == [
        ("d", "download", 1, 3, "file 1 of 3"),
        ("d", "download", 2, 3, "file 2 of 3"),
        ("d", "download", 3, 3, "file 3 of 3"),
    ]
    assert [(e.progress, e.total) for e in progress if e.call_id == "c"] == [(1, 2), (2, 2)]
    deltas = [e for e in events if isinstance(e, ToolOutputDelta)]
    assert [(e.call_id, e.tool_name, e.value) for e in deltas] == [
        ("l", "lines", "line 0\n"),
        ("l", "lines", "line 0\nline 1\n"),
        ("l", "lines", "line 0\nline 1\nline 2\n"),
    ]
    for call_id in "dcl":
        kinds = [
            type(e)
            for e in events
            if (isinstance(e, BeforeToolExecution) and e.request.id == call_id)
            or (isinstance(e, ToolExecuted) and e.execution.request.id == call_id)
            or (isinstance(e, (ToolProgress, ToolOutputDelta)) and e.call_id == call_id)
        ]
        assert kinds[0] is BeforeToolExecution and kinds[-1] is ToolExecuted and len(kinds) > 2, call_id
    [streamed] = [
        e.execution for e in events if isinstance(e, ToolExecuted) and e.execution.request.id == "l"
    ]
    assert streamed.result == "line 0\nline 1\nline 2\n" == deltas[-1].value  # the last value is the result


async def test_callbacks_get_them_and_chat_gives_the_same_result_without_them() -> None:
    agent = Agent(ScriptedChatModel([THREE, "done"]), tools=[download, convert, lines])
    progress: list[ToolProgress] = []
    deltas: list[ToolOutputDelta] = []
    stream = agent.stream("go").on_tool_progress(progress.append).on_tool_output_delta(deltas.append)
    streamed = await stream.start()
    assert streamed is not None and len(progress) == 5 and len(deltas) == 3
    agent = Agent(ScriptedChatModel([THREE, "done"]), tools=[download, convert, lines])
    chatted = await agent.chat("go")
    assert [e.result for e in chatted.tool_executions] == [e.result for e in streamed.tool_executions]
    assert [e.result for e in chatted.tool_executions] == ["3 files", "2 pages", "line 0\nline 1\nline 2\n"]


async def test_plain_text_iteration_builds_no_tool_events() -> None:
    """Reading only the text: nothing watches the tools, so a report costs a lookup and goes nowhere."""
    agent = Agent(ScriptedChatModel([THREE, "done"]), tools=[download, convert, lines])
    assert "".join([piece async for piece in agent.stream("go")]) == "done"


async def test_a_streaming_tool_that_fails_midway_delivers_what_it_yielded_and_an_error_result() -> None:
    closed: list[str] = []

    @tool
    async def flaky(n: int) -> Any:
        """Yields, then fails."""
        try:
            yield "first"
            raise ValueError("the disk is full")
        finally:
            closed.append("flaky")

    agent = Agent(ScriptedChatModel([calls(("f", "flaky", {"n": 1})), "sorry"]), tools=[flaky])
    events = [e async for e in agent.stream("go").events()]
    assert [e.value for e in events if isinstance(e, ToolOutputDelta)] == ["first"]
    [executed] = [e.execution for e in events if isinstance(e, ToolExecuted)]
    assert executed.error is not None and "the disk is full" in executed.result and closed == ["flaky"]


async def test_a_streaming_tool_that_yields_nothing_tells_the_model_why() -> None:
    @tool
    async def silent(n: int) -> Any:
        """Yields nothing."""
        if n > 100:
            yield "never"

    result = await Agent(ScriptedChatModel([calls(("s", "silent", {"n": 1})), "ok"]), tools=[silent]).chat(
        "go"
    )
    [execution] = result.tool_executions
    assert execution.error is not None and "yielded nothing" in execution.result


async def test_a_streaming_tool_retried_by_tool_retry_streams_again_and_ends_with_its_last_value() -> None:
    attempts: list[int] = []

    @tool
    async def once_broken(n: int) -> Any:
        """Fails on its first attempt after one value."""
        attempts.append(n)
        yield f"attempt {len(attempts)}"
        if len(attempts) == 1:
            raise ConnectionError("reset")
        yield "whole"

    agent = Agent(ScriptedChatModel([calls(("o", "once_broken", {"n": 1})), "ok"]), tools=[once_broken])
    events = [e async for e in agent.stream("go", middleware=[ToolRetry(wait=0)]).events()]
    assert [e.value for e in events if isinstance(e, ToolOutputDelta)] == ["attempt 1", "attempt 2", "whole"]
    assert len([e for e in events if isinstance(e, ToolRetrying)]) == 1
    [executed] = [e.execution for e in events if isinstance(e, ToolExecuted)]
    assert executed.error is None and executed.result == "whole"


async def test_closing_the_stream_while_a_streaming_tool_runs_closes_the_generator() -> None:
    closed = anyio.Event()
    started = anyio.Event()

    @tool
    async def endless(n: int) -> Any:
        """Yields until it is stopped."""
        try:
            while True:
                yield n
                started.set()
                await anyio.sleep_forever()
        finally:
            closed.set()

    agent = Agent(ScriptedChatModel([calls(("e", "endless", {"n": 7})), "never"]), tools=[endless])
    stream = agent.stream("go")
    async for event in stream.events():
        if isinstance(event, ToolOutputDelta):
            break
    await stream.aclose()
    with anyio.fail_after(5):
        await closed.wait()
    assert started.is_set()


async def test_a_programmatic_tool_may_stream_too() -> None:
    async def executor(request: ToolExecutionRequest, ctx: ToolContext) -> Any:
        await ctx.report_progress(0.5)
        yield "half"
        yield "all"

    spec = ToolSpecification("spelled", "Spells", {"type": "object", "properties": {}})
    agent = Agent(ScriptedChatModel([calls(("p", "spelled", {})), "ok"]), tools=[Tool(spec, executor)])
    events = [e async for e in agent.stream("go").events()]
    assert [e.value for e in events if isinstance(e, ToolOutputDelta)] == ["half", "all"]
    assert [e.progress for e in events if isinstance(e, ToolProgress)] == [0.5]
    [executed] = [e.execution for e in events if isinstance(e, ToolExecuted)]
    assert executed.result == "all"


def test_a_sync_generator_is_refused_with_the_way_to_stream() -> None:
    def numbers(n: int) -> Any:
        """Counts."""
        yield from range(n)

    with pytest.raises(IllegalConfigurationError, match="async def` generator"):
        tool(numbers)


async def test_bad_progress_values_fail_the_call_with_what_to_pass() -> None:
    @tool
    async def sloppy(ctx: ToolContext) -> str:
        """Reports progress wrongly."""
        await ctx.report_progress("half")  # type: ignore[arg-type]
        return "unreachable"

    events = [
        e
        async for e in Agent(ScriptedChatModel([calls(("s", "sloppy", {})), "ok"]), tools=[sloppy])
        .stream("go")
        .events()
    ]
    [executed] = [e.execution for e in events if isinstance(e, ToolExecuted)]
    assert executed.error is not None and "takes a number" in executed.result


async def test_tracing_records_progress_and_values_as_span_events() -> None:
    for capture in (False, True):
        telemetry = Telemetry()
        agent = Agent(
            ScriptedChatModel([THREE, "done"]),
            tools=[download, convert, lines],
            instrument=telemetry.instrumentation(capture_content=capture),
        )
        await agent.chat("go")  # tracing watches the tools even when nobody streams
        spans = {s.attributes["gen_ai.tool.call.id"]: s for s in telemetry.named("execute_tool")}  # type: ignore[index]
        download_events = [e for e in spans["d"].events if e.name == "agentloop.tool.progress"]
        assert [e.attributes["agentloop.tool.progress"] for e in download_events] == [1, 2, 3]  # type: ignore[index]
        assert all(e.attributes["agentloop.tool.progress.total"] == 3 for e in download_events)  # type: ignore[index]
        messages = [e.attributes.get("agentloop.tool.progress.message") for e in download_events]  # type: ignore[union-attr]
        assert messages == (["file 1 of 3", "file 2 of 3", "file 3 of 3"] if capture else [None] * 3)
        line_events = [e for e in spans["l"].events if e.name == "agentloop.tool.output_delta"]
        assert len(line_events) == 3
        values = [e.attributes.get("agentloop.tool.output_delta") for e in line_events]  # type: ignore[union-attr]
        assert values == (
            ["line 0\n", "line 0\nline 1\n", "line 0\nline 1\nline 2\n"] if capture else [None] * 3
        )
        telemetry.tracer_provider.shutdown()
        telemetry.meter_provider.shutdown()


async def test_over_mcp_a_streaming_tool_sends_a_progress_notification_per_value() -> None:
    received: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        received.append((progress, total, message))

    async with Client(server_from([lines, download]), mode="legacy") as client:
        result = await client.call_tool("lines", {"count": 3}, progress_callback=on_progress)
        assert result.content[0].text == "line 0\nline 1\nline 2\n"  # type: ignore[union-attr]
        assert received == [
            (1, None, "line 0\n"),
            (2, None, "line 0\nline 1\n"),
            (3, None, "line 0\nline 1\nline 2\n"),
        ]
        received.clear()
        await client.call_tool("download", {"files": 2}, progress_callback=on_progress)
        assert received == [(1, 2, "file 1 of 2"), (2, 2, "file 2 of 2")]
