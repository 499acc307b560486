"""`DroppedSpans`: the span exporter of the traced contenders. It sends nothing anywhere, so what is measured
is the instrumentation's and the SDK's own work, and counts what reached it (a check that spans were made).
Its own module: imports only the OpenTelemetry SDK, so the hand-written contender can share it."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


class DroppedSpans(SpanExporter):
    """Drops every span it is given, counting them in `spans`."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS
