"""Tracing at its edges: with content capture off, no text of a tool's arguments or results reaches any
exported span (attributes, events, status, links, names), whatever error path the invocation takes; and a
span processor or exporter that raises never fails the agent (logged once, the agent goes on).

Real model calls to the fake OpenAI server over loopback sockets; spans from the SDK's in-memory exporter.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agentloop import (
    Agent,
    AiMessage,
    ModelRetry,
    ToolExecutionRequest,
    tool,
)
from agentloop.models import OpenAIChatModel
from agentloop.otel import Instrumentation
from agentloop.testing import FakeOpenAIServer
from agentloop.testing._fake_server import Reply

from ._support import PLANTED_KEY, Fault

MARK = "MARK-tool-data-4b1d9e"
"""Planted in every tool argument and result of these tests: it must never reach a span."""


@dataclass(frozen=True)
class Path:
    """One way an invocation ends: the model's script, the agent's options, and the error it must raise
    (None: it answers)."""

    name: str
    script: Callable[[], list[Any]]
    options: Callable[[], dict[str, Any]]
    raises: str | None


def call(name: str, arguments: Any, id: str = "call_1") -> AiMessage:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return AiMessage(None, [ToolExecutionRequest(id, name, text)])


@tool
def lookup(city: str) -> str:
    """Looks a city up."""
    if "raise" in city:
        raise ValueError(f"no data for {city}")
    if "retry" in city:
        raise ModelRetry(f"try another city than {city}")
    return f"data about {city}: {MARK}"


def reraise(error: Exception, request: ToolExecutionRequest) -> str:
    raise error


PATHS = [
    Path("a tool's result", lambda: [call("lookup", {"city": f"Paris {MARK}"}), "Done."], dict, None),
    Path(
        "a tool raising (error result to the model)",
        lambda: [call("lookup", {"city": f"raise {MARK}"}), "Sorry."],
        dict,
        None,
    ),
    Path(
        "ModelRetry from a tool",
        lambda: [call("lookup", {"city": f"retry {MARK}"}), "Sorry."],
        dict,
        None,
    ),
    Path(
        "ToolArgumentsError to the model",
        lambda: [call("lookup", {"city": 5, "note": MARK}), "Sorry."],
        dict,
        None,
    ),
    Path(
        "ToolArgumentsError re-raised by tool_arguments_error_handler",
        lambda: [call("lookup", {"city": 5, "note": MARK})],
        lambda: {"tool_arguments_error_handler": reraise},
        "ToolArgumentsError",
    ),
    Path(
        "invalid JSON arguments re-raised by tool_arguments_error_handler",
        lambda: [call("lookup", '{"city": "' + MARK)],
        lambda: {"tool_arguments_error_handler": reraise},
        "ToolArgumentsError",
    ),
    Path(
        "ToolExecutionError re-raised by tool_execution_error_handler",
        lambda: [call("lookup", {"city": f"raise {MARK}"})],
        lambda: {"tool_execution_error_handler": reraise},
        "ValueError",
    ),
    Path(
        "HallucinatedToolError (unknown tool)",
        lambda: [call("no_such_tool", {"city": MARK})],
        lambda: {"hallucinated_tool_name_strategy": None},  # raise, whatever the default becomes
        "HallucinatedToolError",
    ),
    Path(
        "OutputValidationError (structured output via the output tool)",
        lambda: [call("final_result", {"city": 5, "note": MARK}), call("final_result", {"size": MARK})],
        lambda: {"output_type": _City, "output_retries": 1},
        "OutputValidationError",
    ),
    Path(
        "BadResponseError quoting a response with tool arguments",
        lambda: [Reply(body=b'{"choices": [{"message": {"tool_calls": "' + MARK.encode())],
        dict,
        "BadResponseError",
    ),
]


UNRECORDED = {
    ("HallucinatedToolError (unknown tool)", "chat"),  # no span records an unknown tool's arguments
    ("BadResponseError quoting a response with tool arguments", "stream"),  # not an event stream: unquoted
}


@dataclass
class _City:
    city: str


class Telemetry:
    """An SDK tracer provider whose spans land in memory, plus any extra processors given."""

    def __init__(self, *processors: SpanProcessor) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        for processor in processors:
            self.provider.add_span_processor(processor)
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())


def span_texts(spans: Sequence[ReadableSpan]) -> Iterator[str]:
    """Every text an exporter would send of these spans."""
    for span in spans:
        yield span.name
        yield from (f"{k}={v}" for k, v in (span.attributes or {}).items())
        yield span.status.description or ""
        for event in span.events:
            yield event.name
            yield from (f"{k}={v}" for k, v in (event.attributes or {}).items())
        for link in span.links:
            yield from (f"{k}={v}" for k, v in (link.attributes or {}).items())
        yield span.to_json()


def model(server: FakeOpenAIServer) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key=PLANTED_KEY, max_retries=0)


@pytest.mark.parametrize("mode", ["chat", "stream"])
@pytest.mark.parametrize("path", [pytest.param(p, id=p.name) for p in PATHS])
async def test_without_content_capture_no_tool_data_reaches_any_span(
    path: Path, mode: str, fault: Fault
) -> None:
    fault.declare(
        "tracing",
        "content capture off: a marker in tool arguments and results, every error path (re-raised "
        "ToolArgumentsError / tool error, ModelRetry, HallucinatedToolError, OutputValidationError, "
        "BadResponseError...)",
        "no exported span's name, attribute, event, status or link holds it; with capture on it shows",
        provider="openai",
        mode=mode,
    )
    for capture in (False, True):
        telemetry = Telemetry()
        instrumentation = Instrumentation(telemetry.provider, capture_content=capture)
        error: BaseException | None = None
        with FakeOpenAIServer(path.script()) as server:
            async with model(server) as chat_model:
                agent = Agent(chat_model, tools=[lookup], instrument=instrumentation, **path.options())
                try:
                    if mode == "chat":
                        await agent.chat("Tell me about a city.")
                    else:
                        async with agent.stream("Tell me about a city.") as stream:
                            async for _ in stream:
                                pass
                except Exception as caught:
                    error = caught
        fault.scan(error)
        assert (type(error).__name__ if error else None) == path.raises, error
        spans = telemetry.spans()
        assert any(s.name.startswith("invoke_agent") for s in spans)
        leaked = [text for text in span_texts(spans) if MARK in text]
        if not capture:
            assert leaked == []
            if error is not None:  # the failure still shows, by its type
                [invocation] = [s for s in spans if s.name.startswith("invoke_agent")]
                assert invocation.status.status_code is StatusCode.ERROR
                assert (invocation.attributes or {})["error.type"] == path.raises
                assert path.raises in (invocation.status.description or "")
        elif (path.name, mode) not in UNRECORDED:
            # With capture on the same data shows: the marker is there to be found.
            assert leaked, "the marker never reached the spans even with capture on: the test proves nothing"


class Raising(SpanProcessor):
    """A span processor that raises in `on_start` or `on_end`, counting its calls."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.calls = 0

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self.where == "on_start":
            self.calls += 1
            raise RuntimeError("processor on_start broke")

    def on_end(self, span: ReadableSpan) -> None:
        if self.where == "on_end":
            self.calls += 1
            raise RuntimeError("processor on_end broke")


class RaisingExporter(SpanExporter):
    def __init__(self) -> None:
        self.calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.calls += 1
        raise ConnectionError("collector unreachable")


@pytest.mark.parametrize("where", ["on_start", "on_end", "exporter"])
async def test_a_raising_span_processor_or_exporter_never_fails_the_agent(
    where: str, fault: Fault, caplog: pytest.LogCaptureFixture
) -> None:
    fault.declare(
        "tracing",
        "a span processor (on_start, on_end) or exporter that raises",
        "the agent answers as without tracing; the failure is logged once",
        provider="openai",
    )
    broken: Any = RaisingExporter() if where == "exporter" else Raising(where)
    processor = SimpleSpanProcessor(broken) if where == "exporter" else broken
    telemetry = Telemetry(processor)
    script = [call("lookup", {"city": "Paris"}), "Done.", call("lookup", {"city": "Oslo"}), "Done again."]
    with caplog.at_level(logging.WARNING), FakeOpenAIServer(script) as server:
        async with model(server) as chat_model:
            agent = Agent(chat_model, tools=[lookup], instrument=Instrumentation(telemetry.provider))
            first = await agent.chat("Paris?")
            async with agent.stream("Oslo?") as stream:
                async for _ in stream:
                    pass
    assert first.content == "Done." and stream.result is not None and stream.result.content == "Done again."
    assert broken.calls >= 6  # every span (two invocations, four model calls, two tools) reached it
    ours = [r for r in caplog.records if r.name == "agentloop.otel"]
    if where == "exporter":
        # The SDK's export processors catch an exporter's error themselves (and log it); nothing reaches us.
        assert ours == []
        assert any(
            "collector unreachable" in (r.exc_text or r.getMessage()) or r.exc_info for r in caplog.records
        )
    else:
        assert len(ours) == 1, [r.getMessage() for r in ours]
        assert f"processor {where} broke" in ours[0].getMessage() and "logged once" in ours[0].getMessage()
    if where == "on_start":
        assert telemetry.spans() == []  # a span whose start failed is not recorded; the agent does not care
    fault.scan(*(r.getMessage() for r in caplog.records))
