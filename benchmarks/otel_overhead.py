"""What tracing costs: agentloop's own CPU per session with instrumentation off, on with the OpenTelemetry SDK
recording (every span to a `BatchSpanProcessor` whose exporter drops them, metrics aggregated), and on with
the API alone (no SDK: the no-op tracer).

    PYTHONPATH=. python benchmarks/otel_overhead.py [--profile]

Same transport-free sessions as `replay.py` (3 parallel tools, then T text tokens): differences of a few
microseconds show. Prints µs per session at T=1 and T=200 and the ratio to "off"; `--profile` profiles the
SDK variant. `cpu_ab.py --only floor,agentloop,agentloop_otel` measures the same over real sockets.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from replay import _TOOL, _cpu_per_session, _Response, replies

from agentloop import Agent
from agentloop.models import OpenAIChatModel, _http
from agentloop.otel import Instrumentation


class _Drop(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _sdk() -> Instrumentation:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(_Drop()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return Instrumentation(tracer_provider, meter_provider)


VARIANTS: dict[str, Callable[[], Any]] = {
    "off": lambda: None,
    "on, SDK + dropping exporter": _sdk,
    "on, API only (no SDK)": lambda: True,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true", help="cProfile the SDK variant at T=1")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        asyncio.run(_cpu_per_session(_session_maker(_sdk), 1, 3000))
        profiler.disable()
        pstats.Stats(profiler).strip_dirs().sort_stats("tottime").print_stats(30)
        return
    best: dict[tuple[str, int], float] = {}
    for _ in range(args.rounds):  # interleaved, best of each: the other core's noise hits all alike
        for name, instrument in VARIANTS.items():
            for tokens, n in ((1, 2000), (200, 1000)):
                cpu = asyncio.run(_cpu_per_session(_session_maker(instrument), tokens, n))
                best[name, tokens] = min(cpu, best.get((name, tokens), cpu))
    print("| instrumentation | µs/session T=1 | × off | µs/session T=200 | × off |")
    print("|---|---:|---:|---:|---:|")
    for name in VARIANTS:
        one, whole = best[name, 1], best[name, 200]
        ratio_one, ratio_whole = one / best["off", 1], whole / best["off", 200]
        print(f"| {name} | {one:.0f} | {ratio_one:.3f}× | {whole:.0f} | {ratio_whole:.3f}× |")


if __name__ == "__main__":
    main()
