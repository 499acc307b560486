"""OpenTelemetry traces and metrics after the GenAI semantic conventions (extra `agentloop-runtime[otel]`).

`agentloop.instrument()` traces every agent; `Agent(instrument=True)` or
`Agent(instrument=Instrumentation(...))` one. Only `opentelemetry-api` is needed: the application brings the
SDK and its exporters. Message content is recorded only when asked (`capture_content=True`, or
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

try:
    import opentelemetry.trace  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is installed in the test environment
    raise ImportError(
        "agentloop.otel needs the OpenTelemetry API: pip install 'agentloop-runtime[otel]'", name=exc.name
    ) from exc

from agentloop._runtime._observe import instrument, uninstrument

from ._instrumentation import CONVENTIONS_VERSION, Instrumentation, capture_from_environment

__all__ = ["CONVENTIONS_VERSION", "Instrumentation", "capture_from_environment", "instrument", "uninstrument"]

if not TYPE_CHECKING:  # at run time only: to mypy, this module's names stay exactly the ones above

    def __getattr__(name: str) -> object:
        """A name this module does not have: the error says which public module has it."""
        from .._hints import missing_name

        raise missing_name(__name__, name)
