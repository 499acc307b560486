"""What tracing costs: agentloop's CPU per session with instrumentation off, on with the OpenTelemetry SDK
recording every span and metric (spans to a span processor whose exporter drops them, metrics aggregated
for a reader), on with a sampler, and on with the API alone (no SDK: the no-op tracer).

    PYTHONPATH=. python benchmarks/otel_overhead.py [--rounds 5] [--breakdown] [--unit] [--profile]

Same transport-free sessions as `replay.py` (3 parallel tools, then T text tokens): differences of a few
microseconds show. The variants run in turn (A B C A B C ...) so the machine's load hits each alike; each
figure is the median of the rounds. `--breakdown` splits the SDK variant's extra CPU: agentloop's own code
(the SDK replaced by stubs that do nothing), the SDK's spans, its span processor, its metrics. `--unit`
times the SDK alone: a span like agentloop's and a histogram sample. `--profile` profiles the SDK variant.
`cpu_ab.py --only agentloop,agentloop_otel,agentloop_otel_api` measures the same over real sockets.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind
from replay import _TOOL, _cpu_per_session, _Response, replies

from agentloop import Agent
from agentloop.models import OpenAIChatModel, _http
from agentloop.otel import Instrumentation


class _Drop(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _sdk(
    processor: Callable[[SpanExporter], SpanProcessor] | None = BatchSpanProcessor,
    sampler: Any = None,
    metrics: bool = True,
) -> Callable[[], Instrumentation]:
    def make() -> Instrumentation:
        tracer_provider = TracerProvider(sampler=sampler)
        if processor is not None:
            tracer_provider.add_span_processor(processor(_Drop()))
        if metrics:
            return Instrumentation(tracer_provider, MeterProvider(metric_readers=[InMemoryMetricReader()]))
        return Instrumentation(tracer_provider, NoOpMeterProvider())

    return make


class _StubSpan:
    """A recording span that keeps nothing: what is left of the SDK variant is agentloop's own work."""

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: Any) -> None:
        pass

    def set_status(self, *args: Any, **kwargs: Any) -> None:
        pass

    def add_event(self, *args: Any, **kwargs: Any) -> None:
        pass

    def is_recording(self) -> bool:
        return True

    def end(self, end_time: int | None = None) -> None:
        pass

    def get_span_context(self) -> trace.SpanContext:
        return trace.INVALID_SPAN_CONTEXT


class _StubTracer:
    span = _StubSpan()

    def start_span(self, name: str, *args: Any, **kwargs: Any) -> _StubSpan:
        return self.span


class _StubHistogram:
    def record(self, amount: float, attributes: Any = None, context: Any = None) -> None:
        pass


def _stubbed(tracer: bool, meter: bool, processor: Any = BatchSpanProcessor) -> Callable[[], Instrumentation]:
    """The SDK variant with its tracer and/or its histograms replaced by stubs."""

    def make() -> Instrumentation:
        instrumentation = _sdk(processor)()
        if tracer:
            instrumentation.tracer = _StubTracer()  # type: ignore[assignment]
        if meter:
            instrumentation._duration = instrumentation._tokens = _StubHistogram()  # type: ignore[assignment]
        return instrumentation

    return make


VARIANTS: dict[str, Callable[[], Any]] = {
    "off": lambda: None,
    "on, SDK, BatchSpanProcessor + dropping exporter, metrics": _sdk(BatchSpanProcessor),
    "on, SDK, SimpleSpanProcessor + dropping exporter, metrics": _sdk(SimpleSpanProcessor),
    "on, SDK as above (Batch), 10% of traces sampled": _sdk(
        BatchSpanProcessor, ParentBased(TraceIdRatioBased(0.1))
    ),
    "on, SDK spans (Batch), metrics off (`NoOpMeterProvider()`)": _sdk(BatchSpanProcessor, metrics=False),
    "on, API only (no SDK configured)": lambda: True,
}

BREAKDOWN: dict[str, Callable[[], Any]] = {
    "off": lambda: None,
    "agentloop's own code (SDK stubbed out)": _stubbed(tracer=True, meter=True),
    "+ SDK spans, no span processor": _stubbed(tracer=False, meter=True, processor=None),
    "+ SDK spans, BatchSpanProcessor": _stubbed(tracer=False, meter=True),
    "+ SDK metrics only (spans stubbed)": _stubbed(tracer=True, meter=False),
    "SDK spans (Batch) + metrics": _sdk(BatchSpanProcessor),
}


def _session_maker(instrument: Callable[[], Any]) -> Callable[[int], Callable[[], Awaitable[None]]]:
    def make(tokens: int) -> Callable[[], Awaitable[None]]:
        first, second = replies(tokens)

        async def send(self: Any, request: Any) -> _Response:
            shard = self._acquire()
            shard.in_flight += 1
            response = _Response(second if b'"role":"tool"' in request.content else first)
            response.extensions["agentloop.shard"] = shard
            return response

        _http.ProviderClient._send = send  # type: ignore[method-assign,assignment]
        model = OpenAIChatModel(model="gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key="replay")
        agent = Agent(model, tools=[_TOOL], instrument=instrument() or False, pricing=False)

        async def session() -> None:
            stream = agent.stream("q")
            count = 0
            async for _ in stream:
                count += 1
            assert count == tokens and len(stream.result.tool_executions) == 3

        return session

    return make


def _compare(variants: dict[str, Callable[[], Any]], rounds: int) -> None:
    runs: dict[tuple[str, int], list[float]] = {}
    load = [os.getloadavg()[0]]
    for _ in range(rounds):  # in turn: the other core's noise hits every variant alike
        for name, instrument in variants.items():
            for tokens, n in ((1, 1500), (200, 600)):
                cpu = asyncio.run(_cpu_per_session(_session_maker(instrument), tokens, n))
                runs.setdefault((name, tokens), []).append(cpu)
        load.append(os.getloadavg()[0])
    median = {key: statistics.median(values) for key, values in runs.items()}
    print(f"{rounds} rounds, medians; load average (1 min) {min(load):.1f}-{max(load):.1f}")
    print("| instrumentation | µs/session T=1 | + µs | × off | µs/session T=200 | + µs | × off |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    off_one, off_whole = median["off", 1], median["off", 200]
    for name in variants:
        one, whole = median[name, 1], median[name, 200]
        print(
            f"| {name} | {one:.0f} | {one - off_one:+.0f} | {one / off_one:.3f}× "
            f"| {whole:.0f} | {whole - off_whole:+.0f} | {whole / off_whole:.3f}× |"
        )


def _per_call(work: Callable[[], object], n: int = 20000) -> float:
    """Median µs per call of `work`, over 5 runs."""
    for _ in range(500):
        work()
    times = []
    for _ in range(5):
        start = time.process_time()
        for _ in range(n):
            work()
        times.append((time.process_time() - start) / n * 1e6)
    return statistics.median(times)


def _unit() -> None:
    """The SDK's own cost per span and per histogram sample, outside any session."""
    start = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.request.stream": True,
        "server.address": "127.0.0.1",
        "server.port": 8080,
    }
    end = {
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.response.model": "gpt-4o-mini",
        "gen_ai.response.id": "chatcmpl-1",
        "gen_ai.usage.input_tokens": 100,
        "gen_ai.usage.output_tokens": 200,
        "gen_ai.response.time_to_first_chunk": 0.01,
    }
    print("| SDK work (opentelemetry-sdk, outside a session) | µs |")
    print("|---|---:|")
    for label, processor in (
        ("no span processor", None),
        ("SimpleSpanProcessor", SimpleSpanProcessor),
        ("BatchSpanProcessor", BatchSpanProcessor),
    ):
        provider = TracerProvider()
        if processor is not None:
            provider.add_span_processor(processor(_Drop()))
        tracer = provider.get_tracer("bench")
        parent = trace.set_span_in_context(tracer.start_span("parent"))

        def span(tracer: Any = tracer, parent: Any = parent) -> None:
            started = tracer.start_span("chat gpt-4o-mini", parent, SpanKind.CLIENT, start)
            started.set_attributes(end)
            started.end()

        print(f"| a `chat` span, 6 attributes at start + 6 at end, {label} | {_per_call(span):.1f} |")
        provider.shutdown()
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    histogram = meter_provider.get_meter("bench").create_histogram("gen_ai.client.token.usage")
    sample = {**start, "gen_ai.response.model": "gpt-4o-mini", "gen_ai.token.type": "input"}
    print(f"| a histogram sample, 8 attributes | {_per_call(lambda: histogram.record(100, sample)):.1f} |")
    tracer = TracerProvider().get_tracer("bench")
    token = otel_context.attach(trace.set_span_in_context(tracer.start_span("current")))
    try:  # the default exemplar filter keeps samples taken while a sampled span is current
        print(
            "| a histogram sample, 8 attributes, a sampled span current (exemplar) | "
            f"{_per_call(lambda: histogram.record(100, sample)):.1f} |"
        )
    finally:
        otel_context.detach(token)
    meter_provider.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--breakdown", action="store_true", help="where the SDK variant's extra CPU goes")
    parser.add_argument("--unit", action="store_true", help="the SDK's cost per span and per sample")
    parser.add_argument("--profile", action="store_true", help="cProfile the SDK variant at T=1")
    args = parser.parse_args()
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        asyncio.run(_cpu_per_session(_session_maker(_sdk()), 1, 3000))
        profiler.disable()
        pstats.Stats(profiler).strip_dirs().sort_stats("tottime").print_stats(30)
    elif args.unit:
        _unit()
    else:
        _compare(BREAKDOWN if args.breakdown else VARIANTS, args.rounds)


if __name__ == "__main__":
    main()
