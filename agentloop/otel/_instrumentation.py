"""`Instrumentation`: an `Observer` (a middleware, placed outermost on the seam) that turns invocations into
OpenTelemetry spans and metrics.

Spans (GenAI semantic conventions, see `CONVENTIONS_VERSION`): `invoke_agent {name}` (INTERNAL) from
`wrap_invocation`, `chat {model}` (CLIENT; INTERNAL for an in-process model) from `wrap_model_call`,
`execute_tool {tool}` (INTERNAL) from `wrap_tool_call`, each tool span in its call's own task, so parallel
calls are siblings under the invocation. Metrics: `gen_ai.client.operation.duration` and
`gen_ai.client.token.usage` per model call.

A streamed call costs one timestamp more than a plain one: the loop streams from `FirstChunk` (in
`_model_spans`), which notes when the first event arrived and then hands each event straight from the model's
own iterator.
"""

from __future__ import annotations

import os
import time
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import _internal as _metrics_api
from opentelemetry.trace import Span, SpanKind

from agentloop._runtime._observe import Observer
from agentloop._runtime._seam import ModelCall
from agentloop._values._context import watch_tools
from agentloop._values._convert import result_to_text
from agentloop._values._messages import ChatResponse, FinishReason
from agentloop._values._tool_events import ToolOutputDelta, ToolProgress
from agentloop.models import (
    ChatModel,
    WrapperModel,
)
from agentloop.models._base import model_name_of
from agentloop.models._retries import retry_listener

from . import _content
from ._attributes import (
    SUM_USAGE,
    add_usage,
    provider_name,
    set_error,
)
from ._model_spans import MAX_CACHED, FirstChunk, ModelTrace, TracedModel, retry_recorder
from ._safety import Telemetry

if TYPE_CHECKING:
    from agentloop._runtime._seam import (
        InvocationCall,
        NextInvocation,
        NextModelCall,
        NextToolCall,
        ToolCall,
    )
    from agentloop._values._records import ToolExecution
    from agentloop._values._result import Result

__all__ = ["CONVENTIONS_VERSION", "Instrumentation"]

CONVENTIONS_VERSION = "1.44.0"
"""The OpenTelemetry semantic conventions release whose GenAI pages the spans follow (plus the later
`gen_ai.usage.cache_write.input_tokens` name, emitted beside 1.44's `cache_creation` one)."""

_NO_TRACING = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
# The global meter provider before the application sets one (a private class of the API).
_NO_METRICS = (
    getattr(_metrics_api, "_ProxyMeterProvider", metrics.NoOpMeterProvider),
    metrics.NoOpMeterProvider,
)
_SCHEMA_URL = f"https://opentelemetry.io/schemas/{CONVENTIONS_VERSION}"
_CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_CAPTURE_VALUES = frozenset({"true", "1", "yes", "span_only", "span_and_event"})

# Bucket boundaries the conventions advise for the two histograms.
_DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
_TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]


def capture_from_environment() -> bool:
    """Whether `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` asks for content (`true`, or the
    `SPAN_ONLY` / `SPAN_AND_EVENT` values other GenAI instrumentations use)."""
    return os.environ.get(_CAPTURE_ENV, "").strip().lower() in _CAPTURE_VALUES


class Instrumentation(Observer):
    """Traces and measures agents with OpenTelemetry; give it to `Agent(instrument=...)`.

    `tracer_provider` / `meter_provider`: where spans and metrics go (default: the global providers, looked
    up at each use, so a provider set later is honoured). `capture_content`: record messages, tool arguments
    and results on the spans (default: `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`, else off).
    """

    holds_no_scope = True
    """Its `wrap_model_call` keeps no cancel scope around `call_next`: a traced text answer runs without a
    task group, as an untraced one does."""

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        capture_content: bool | None = None,
    ) -> None:
        from agentloop import __version__

        self.capture_content = (
            capture_from_environment() if capture_content is None else bool(capture_content)
        )
        self.tracer = trace.get_tracer("agentloop", __version__, tracer_provider, schema_url=_SCHEMA_URL)
        meter = metrics.get_meter("agentloop", __version__, meter_provider, schema_url=_SCHEMA_URL)
        self._duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self._tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        # Per model: what its `chat` spans share (None for a wrapper model, whose inner models are traced).
        self._traces: dict[int, tuple[ChatModel, ModelTrace | None]] = {}
        self._models: dict[int, tuple[ChatModel, ChatModel]] = {}  # model -> its traced wrapper (`wrap`)
        # Per (model, agent name): the `invoke_agent` span's name and its attributes that never change.
        self._agents: dict[tuple[int, str | None], tuple[ChatModel, str, dict[str, Any]]] = {}
        self._tool_names: dict[str, str] = {}  # tool name -> its span's name
        # Providers given here are live; the global ones are no-ops until the application sets them.
        self._tracer_provider, self._meter_provider = tracer_provider, meter_provider
        self._fixed = _fixed_enabled(tracer_provider, meter_provider)
        self._telemetry = Telemetry()  # the application's processors and readers cannot fail an invocation

    def __repr__(self) -> str:
        return f"Instrumentation(capture_content={self.capture_content})"

    @property
    def enabled(self) -> bool:
        """False while both providers are the API's no-ops (no SDK configured): then the agent leaves it out
        of the invocation, which runs as if uninstrumented."""
        if self._fixed is not None:
            return self._fixed
        tracing = self._tracer_provider or trace.get_tracer_provider()
        measuring = self._meter_provider or metrics.get_meter_provider()
        return not (isinstance(tracing, _NO_TRACING) and isinstance(measuring, _NO_METRICS))

    # -- the seam -------------------------------------------------------------------------------------------

    async def wrap_invocation(self, call: InvocationCall, call_next: NextInvocation) -> Result[Any]:
        """Runs one invocation inside its `invoke_agent` span (the current span: every other span of the
        invocation, and what its tools open, nests under it)."""
        agent = call.context.agent
        name, attributes = self._agent_attributes(agent.model, agent.name)
        attributes["agentloop.invocation.id"] = call.context.invocation_id
        if call.context.memory_id is not None:
            attributes["gen_ai.conversation.id"] = str(call.context.memory_id)
        span = self._telemetry.start_span(self.tracer, name, SpanKind.INTERNAL, attributes)
        capture = self.capture_content and span.is_recording()
        state = _current.set(_Invocation(span, call.streaming, capture))
        current = otel_context.attach(trace.set_span_in_context(span))
        try:
            if capture:
                span.set_attribute("gen_ai.input.messages", _content.input_messages([call.message]))
            try:
                result = await call_next(call)
            except Exception as exc:  # the invocation's timeout too: InvocationTimeoutError
                set_error(span, exc, self.capture_content)
                raise
            except BaseException:  # cancelled from outside, or a stream consumer that stopped: not an error
                span.set_attribute("agentloop.cancelled", True)
                raise
            if span.is_recording():
                self._record_result(span, result)
            return result
        finally:
            otel_context.detach(current)
            _current.reset(state)
            self._telemetry.end(span)

    async def wrap_model_call(self, call: ModelCall, call_next: NextModelCall) -> ChatResponse:
        """Runs one model call inside its `chat` span, and takes the call's metric samples. A wrapper model
        (a `WrapperModel`, such as a fallback chain) gets no span of its own: each of its inner
        models' calls gets one."""
        invocation = _current.get()
        model = call.model
        if invocation is None or model is None:  # not inside a traced invocation
            return await call_next(call)
        model_trace = self._trace_of(model)
        if model_trace is None:
            return await call_next(call.replace(model=self.wrap(model)))
        streaming = invocation.streaming
        span = model_trace.start(call.request, streaming)
        if invocation.instructions_pending:  # the invocation's system message, as its first request has it
            invocation.instructions_pending = False
            instructions = _content.system_instructions(call.request.messages)
            if instructions:
                invocation.span.set_attribute("gen_ai.system_instructions", instructions)
        context = trace.set_span_in_context(span)
        response: ChatResponse | None = None
        error: BaseException | None = None
        first: FirstChunk | None = None
        started = time.perf_counter()
        if streaming:
            # Not made current: it would leak into the tool calls that start while the model streams. Retries
            # come before the first event; the recorder ignores what is told after it (a tool's sub-agent).
            first = FirstChunk(model, started)
            retries = retry_listener.set(retry_recorder(span, first))
            current = None
            call = ModelCall(call.request, call.round, call.context, first)  # `replace` costs twice as much
        else:  # the current span during the call: HTTP client spans nest under it
            retries = retry_listener.set(retry_recorder(span, None))
            current = otel_context.attach(context)
        try:
            response = await call_next(call)
            return response
        except BaseException as exc:
            error = exc
            raise
        finally:
            if current is not None:
                otel_context.detach(current)
            retry_listener.reset(retries)
            first_chunk = first.first if first is not None else None
            model_trace.end(span, context, response, error, started, first_chunk)

    async def wrap_tool_call(self, call: ToolCall, call_next: NextToolCall) -> ToolExecution:
        """Runs one tool call inside its `execute_tool` span (current in the call's task, so spans the tool
        opens, a sub-agent's included, nest under it)."""
        request = call.request
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": request.name,
            "gen_ai.tool.type": "function",
            "agentloop.tool.index": call.index,
            "agentloop.tool.round": call.round,
        }
        if request.id:
            attributes["gen_ai.tool.call.id"] = request.id
        name = self._tool_names.get(request.name)
        if name is None:
            name = f"execute_tool {request.name}"
            if len(self._tool_names) >= MAX_CACHED:
                self._tool_names.clear()
            self._tool_names[request.name] = name
        span = self._telemetry.start_span(self.tracer, name, SpanKind.INTERNAL, attributes)
        current = otel_context.attach(trace.set_span_in_context(span))
        try:
            capture = self.capture_content and span.is_recording()
            if capture:
                span.set_attribute("gen_ai.tool.call.arguments", request.arguments)
            try:
                if span.is_recording():
                    with watch_tools(_SpanEvents(span, capture)):  # progress and streamed values: span events
                        execution = await call_next(call)
                else:
                    execution = await call_next(call)
            except Exception as exc:
                set_error(span, exc, capture)
                raise
            if execution.error is not None:
                set_error(span, execution.error, capture)
            if capture:
                span.set_attribute("gen_ai.tool.call.result", execution.result)
            return execution
        finally:
            otel_context.detach(current)
            self._telemetry.end(span)

    # -- models ---------------------------------------------------------------------------------------------

    def wrap(self, model: ChatModel) -> ChatModel:
        """`model` with each call traced (a `chat` span per call, whoever makes it). A `WrapperModel` (a
        fallback chain) wraps its inner models instead (`__agentloop_instrument__(wrap)`), so each real call
        shows."""
        found = self._models.get(id(model))
        if found is not None and found[0] is model:
            return found[1]
        wrapped: ChatModel
        if isinstance(model, WrapperModel):
            wrapped = model.__agentloop_instrument__(self.wrap)
        else:
            model_trace = self._trace_of(model)
            assert model_trace is not None
            wrapped = TracedModel(model, model_trace)
        if len(self._models) >= MAX_CACHED:
            self._models.clear()
        self._models[id(model)] = (model, wrapped)
        return wrapped

    def _trace_of(self, model: ChatModel) -> ModelTrace | None:
        """What every `chat` span of `model` shares, worked out once (None: a wrapper model)."""
        found = self._traces.get(id(model))
        if found is not None and found[0] is model:
            return found[1]
        model_trace = None if isinstance(model, WrapperModel) else ModelTrace(model, self)
        if len(self._traces) >= MAX_CACHED:
            self._traces.clear()
        self._traces[id(model)] = (model, model_trace)
        return model_trace

    def _agent_attributes(self, model: ChatModel, agent_name: str | None) -> tuple[str, dict[str, Any]]:
        """The `invoke_agent` span's name and a fresh copy of its attributes known before the invocation
        (worked out once per model and agent name)."""
        key = (id(model), agent_name)
        found = self._agents.get(key)
        if found is None or found[0] is not model:
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.provider.name": provider_name(model),
            }
            request_model = model_name_of(model)
            if request_model:
                attributes["gen_ai.request.model"] = request_model
            if agent_name:
                attributes["gen_ai.agent.name"] = agent_name
            name = f"invoke_agent {agent_name}" if agent_name else "invoke_agent"
            if len(self._agents) >= MAX_CACHED:
                self._agents.clear()
            found = self._agents[key] = (model, name, attributes)
        return found[1], dict(found[2])

    def _record_result(self, span: Span, result: Result[Any]) -> None:
        final = result.final_response
        reason = result.finish_reason
        attributes: dict[str, Any] = {
            "gen_ai.response.finish_reasons": (_content.finish_reason(reason),),
            "agentloop.tool_calls": len(result.tool_executions),
        }
        if reason is not None:
            attributes["agentloop.finish_reason"] = reason.value
        if reason is FinishReason.CANCELLED:  # stopped by run control: as a run cancelled from outside is
            attributes["agentloop.cancelled"] = True
            if result.cancel_reason is not None:  # the operator's words, not the user's content
                attributes["agentloop.cancel_reason"] = result.cancel_reason
        if result.token_usage is not None:  # the chat spans' sum, under names that do not count it twice
            add_usage(attributes, result.token_usage, SUM_USAGE)
        if self.capture_content and final is not None:
            attributes["gen_ai.output.messages"] = _content.output_messages(final)
        span.set_attributes(attributes)


class _Invocation:
    """What the model calls of one traced invocation need of it (found through `_current`)."""

    __slots__ = ("instructions_pending", "span", "streaming")

    def __init__(self, span: Span, streaming: bool, capture: bool) -> None:
        self.span = span
        self.streaming = streaming
        self.instructions_pending = capture  # `gen_ai.system_instructions`, from the first model request


_current: ContextVar[_Invocation | None] = ContextVar("agentloop_otel_invocation", default=None)
"""The traced invocation the current task works for (tool tasks inherit it; a traced sub-agent sets its
own)."""


def _fixed_enabled(tracer_provider: Any, meter_provider: Any) -> bool | None:
    """Whether providers given to `Instrumentation` record (None: a global one is used, looked up at each
    invocation since the application may set it later)."""
    if tracer_provider is not None and not isinstance(tracer_provider, _NO_TRACING):
        return True
    if meter_provider is not None and not isinstance(meter_provider, _NO_METRICS):
        return True
    if tracer_provider is not None and meter_provider is not None:
        return False
    return None


class _SpanEvents:
    """What a running tool reports, as events on its `execute_tool` span: `agentloop.tool.progress` (its
    progress and total; the message only with capture_content) and `agentloop.tool.output_delta` (a value a
    streaming tool yielded: its text only with capture_content)."""

    __slots__ = ("_capture", "_span")

    def __init__(self, span: Span, capture: bool) -> None:
        self._span, self._capture = span, capture

    async def __call__(self, event: ToolProgress | ToolOutputDelta) -> None:
        attributes: dict[str, Any] = {}
        if isinstance(event, ToolProgress):
            attributes["agentloop.tool.progress"] = float(event.progress)
            if event.total is not None:
                attributes["agentloop.tool.progress.total"] = float(event.total)
            if self._capture and event.message is not None:
                attributes["agentloop.tool.progress.message"] = event.message
            self._span.add_event("agentloop.tool.progress", attributes)
        else:
            if self._capture:
                attributes["agentloop.tool.output_delta"] = result_to_text(event.value)
            self._span.add_event("agentloop.tool.output_delta", attributes)
