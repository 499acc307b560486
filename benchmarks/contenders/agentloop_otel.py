"""agentloop traced: the `agentloop` contender with OpenTelemetry on, the SDK recording every span and metric.

Spans go through the SDK's `BatchSpanProcessor` (the production setting) to an exporter that drops them;
metrics are aggregated by the SDK for a reader that is never collected. What is left is instrumentation's own
cost: spans, attributes, histogram samples. For `benchmarks/cpu_ab.py` only (not in `run.py`'s table).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from agentloop import Agent
from agentloop.models import OpenAIChatModel
from agentloop.otel import Instrumentation
from contenders.agentloop import PACKAGES, _tools, tool
from contenders.agentloop import Contender as _Plain
from contenders.dropped_spans import DroppedSpans

LABEL = "agentloop (OpenTelemetry SDK on)"
__all__ = ["LABEL", "PACKAGES", "Contender"]


class Contender(_Plain):
    def __init__(self, base_url: str, get_value: Callable[[str], Awaitable[str]]) -> None:
        if get_value not in _tools:
            _tools[get_value] = tool(get_value)
        self._tracer_provider = TracerProvider()
        self._tracer_provider.add_span_processor(BatchSpanProcessor(DroppedSpans()))
        self._meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        instrumentation = Instrumentation(self._tracer_provider, self._meter_provider)
        self._model = OpenAIChatModel(model="gpt-4o-mini", base_url=base_url, api_key="bench")
        self._agent = Agent(self._model, tools=[_tools[get_value]], instrument=instrumentation)

    async def aclose(self) -> None:
        await super().aclose()
        self._tracer_provider.shutdown()
        self._meter_provider.shutdown()
