"""Tracing an agent with OpenTelemetry: the span tree of one invocation with three parallel tool calls.

python examples/tracing.py

Runs offline against the fake OpenAI server on 127.0.0.1. Needs `agentloop-runtime[otel]` plus the
OpenTelemetry SDK (`pip install opentelemetry-sdk`), which an application brings with its exporter of
choice (OTLP, console...).
"""

from __future__ import annotations

import anyio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentloop
from agentloop import Agent, AiMessage, ChatResponse, TokenUsage, ToolExecutionRequest, tool
from agentloop.models import OpenAIChatModel
from agentloop.testing import FakeOpenAIServer

SHOWN = (
    "gen_ai.request.model",
    "gen_ai.response.finish_reasons",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.tool.call.id",
    "agentloop.usage.input_tokens",
    "agentloop.usage.output_tokens",
    "error.type",
)


@tool("Returns the weather for a city")
async def weather(city: str) -> str:
    await anyio.sleep(0.05)  # the three calls run at the same time: their spans overlap
    return f"Sunny in {city}"


def print_tree(spans: list[ReadableSpan]) -> None:
    """Each span under its parent, with its start offset, duration and main attributes."""
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in spans:
        children.setdefault(span.parent.span_id if span.parent else None, []).append(span)
    origin = min(span.start_time or 0 for span in spans)

    def show(span: ReadableSpan, depth: int) -> None:
        start = ((span.start_time or 0) - origin) / 1e6
        took = ((span.end_time or 0) - (span.start_time or 0)) / 1e6
        attributes = span.attributes or {}
        shown = [key for key in SHOWN if key in attributes]
        details = ", ".join(f"{key.split('.', 1)[1]}={attributes[key]!s}" for key in shown)
        print(f"{'  ' * depth}{span.name} [{span.kind.name}] +{start:.1f} ms, {took:.1f} ms  {details}")
        for child in sorted(children.get(span.context.span_id, []), key=lambda s: s.start_time or 0):
            show(child, depth + 1)

    for root in children.get(None, []):
        show(root, 0)


async def main() -> None:
    exporter = InMemorySpanExporter()  # an application would use an OTLP exporter here
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agentloop.instrument(tracer_provider=provider)  # every agent; content is not recorded unless asked

    calls = [
        ToolExecutionRequest(f"call_{n}", "weather", f'{{"city": "{c}"}}')
        for n, c in enumerate(["Paris", "Oslo", "Lima"])
    ]
    script = [
        ChatResponse(AiMessage(tool_execution_requests=calls), TokenUsage(310, 42, cache_read_tokens=256)),
        ChatResponse(AiMessage("Sunny in all three."), TokenUsage(402, 9, cache_read_tokens=256)),
    ]
    try:
        with FakeOpenAIServer(script) as server:
            async with OpenAIChatModel(
                "gpt-4o-mini", base_url=server.base_url, api_key="sk-example"
            ) as model:

                def pricing(usage: TokenUsage, model: str | None, provider: str | None) -> float:
                    # Your own prices (USD per token), or agentloop-runtime[prices] and no `pricing`.
                    cached = usage.cache_read_tokens or 0
                    return (
                        (usage.input_tokens - cached) * 0.15e-6
                        + cached * 0.075e-6
                        + usage.output_tokens * 0.6e-6
                    )

                agent = Agent(model, tools=[weather], name="forecaster", pricing=pricing)
                result = await agent.chat("Weather in Paris, Oslo and Lima?", memory_id="conversation-1")
    finally:
        agentloop.uninstrument()

    spans = list(exporter.get_finished_spans())
    print_tree(spans)
    print(f"\n{result.content!r}: {result.token_usage}, cost ${result.cost:.6f}")
    assert result.content == "Sunny in all three."
    assert sorted(s.name for s in spans) == [
        "chat gpt-4o-mini",
        "chat gpt-4o-mini",
        "execute_tool weather",
        "execute_tool weather",
        "execute_tool weather",
        "invoke_agent forecaster",
    ]
    tools = [s for s in spans if s.name.startswith("execute_tool")]
    assert max(s.start_time or 0 for s in tools) < min(s.end_time or 0 for s in tools)  # they overlapped


if __name__ == "__main__":
    anyio.run(main)
