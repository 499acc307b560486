"""What tracing must never do to an agent: fail it, or leak a tool's data.

* A span processor's `on_start` / `on_end` runs inside `start_span()` / `end()`, and a metric view or reader
  inside `record()`: telemetry code of the application's, which may raise. `Telemetry` runs those calls so
  that a failure is logged once per instrumentation and place, and the invocation goes on (the span is then
  a non-recording one, or simply ended).
* An error's message may quote a tool's arguments or results (a `ToolArgumentsError`, a tool's own
  exception, `ModelRetry`, an output that failed validation, an unreadable response quoted back). Without
  content capture a span's status names only the error's type, except for the errors whose messages are
  built from nothing but the runtime's and the provider's own words (`describe`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from agentloop._values._errors import (
    ChatMemoryStoreError,
    InvocationTimeoutError,
    ModelConnectionError,
    ModelHTTPError,
    ModelTimeoutError,
    ToolRoundsExceededError,
)

__all__ = ["Telemetry", "describe"]

logger = logging.getLogger("agentloop.otel")

_CONTENT_FREE = (
    ModelHTTPError,  # the provider's message about the request (secrets masked)
    ModelTimeoutError,
    ModelConnectionError,
    InvocationTimeoutError,
    ToolRoundsExceededError,
    ChatMemoryStoreError,
)
"""Errors whose messages never quote a tool's arguments or results nor a model's output."""


def describe(error: BaseException, capture_content: bool) -> str:
    """A span status description for `error` that holds content only when `capture_content` is on."""
    if capture_content or isinstance(error, _CONTENT_FREE):
        return str(error)
    return f"{type(error).__name__} (its message is recorded only with content capture on)"


class Telemetry:
    """Runs the OpenTelemetry calls that reach application code, so they cannot fail an invocation."""

    def __init__(self) -> None:
        self._reported: set[str] = set()

    def failed(self, where: str, error: Exception) -> None:
        """Logs a telemetry failure the first time it happens at `where`; later ones are dropped."""
        if where in self._reported:
            return
        self._reported.add(where)
        logger.warning(
            "OpenTelemetry %s raised %s: %s; the agent goes on without it (logged once; check the span "
            "processors, exporters and metric readers configured in the application)",
            where,
            type(error).__name__,
            error,
            exc_info=error,
        )

    def start_span(
        self, tracer: trace.Tracer, name: str, kind: SpanKind, attributes: Mapping[str, Any]
    ) -> Span:
        """`tracer.start_span(...)`, or a non-recording span when a processor's `on_start` raises."""
        try:
            return tracer.start_span(name, kind=kind, attributes=attributes)
        except Exception as error:
            self.failed("span start (a span processor's on_start)", error)
            return trace.INVALID_SPAN

    def end(self, span: Span) -> None:
        """`span.end()`; a processor's `on_end` (or a synchronous exporter) that raises is logged once."""
        try:
            span.end()
        except Exception as error:
            self.failed("span end (a span processor's on_end or its exporter)", error)

    def record(self, record: Callable[..., None], *args: Any) -> None:
        """A metric sample; a failing view, exemplar filter or reader is logged once."""
        try:
            record(*args)
        except Exception as error:
            self.failed("metric recording", error)
