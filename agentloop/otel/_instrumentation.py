"""`Instrumentation`: an `Observer` (a middleware, placed outermost on the seam) that turns invocations into
OpenTelemetry spans and metrics.

Spans (GenAI semantic conventions, see `CONVENTIONS_VERSION`): `invoke_agent {name}` (INTERNAL) from
`wrap_invocation`, `chat {model}` (CLIENT; INTERNAL for an in-process model) from `wrap_model_call`,
`execute_tool {tool}` (INTERNAL) from `wrap_tool_call`, each tool span in its call's own task, so parallel
calls are siblings under the invocation. Metrics: `gen_ai.client.operation.duration` and
`gen_ai.client.token.usage` per model call.

A streamed call costs one timestamp more than a plain one: the loop streams from `_FirstChunk`, which notes
when the first event arrived and then hands each event straight from the model's own iterator.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import _internal as _metrics_api
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from agentloop._runtime._observe import Observer
from agentloop._runtime._seam import ModelCall
from agentloop._values._context import watch_tools
from agentloop._values._convert import result_to_text
from agentloop._values._messages import ChatRequest, ChatResponse, TokenUsage
from agentloop._values._tool_events import ToolOutputDelta, ToolProgress
from agentloop.models import (
    ChatModel,
    ClosableModel,
    ModelEvent,
    ModelWithDefaults,
    RemoteModel,
    ResponseComplete,
    WrapperModel,
)
from agentloop.models._base import (
    model_name_of,
    provider_of,
    supports_response_format,
    supports_tool_search,
)
from agentloop.models._retries import retry_listener

from . import _content
from ._safety import Telemetry, describe

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
_MAX_CACHED = 256

# Bucket boundaries the conventions advise for the two histograms.
_DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
_TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]

# The attribute sets of a call's three metric samples: its duration, its input and its output tokens.
_Samples = tuple[dict[str, Any], dict[str, Any], dict[str, Any]]

# Request parameters recorded as `gen_ai.request.*` (the provider's name on the left).
_PARAMETERS = {
    "temperature": "gen_ai.request.temperature",
    "max_tokens": "gen_ai.request.max_tokens",
    "max_completion_tokens": "gen_ai.request.max_tokens",
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
    "seed": "gen_ai.request.seed",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "presence_penalty": "gen_ai.request.presence_penalty",
    "stop": "gen_ai.request.stop_sequences",
    "stop_sequences": "gen_ai.request.stop_sequences",
}


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
        self._traces: dict[int, tuple[ChatModel, _ModelTrace | None]] = {}
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
                _set_error(span, exc, self.capture_content)
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
        first: _FirstChunk | None = None
        started = time.perf_counter()
        if streaming:
            # Not made current: it would leak into the tool calls that start while the model streams. Retries
            # come before the first event; the recorder ignores what is told after it (a tool's sub-agent).
            first = _FirstChunk(model, started)
            retries = retry_listener.set(_retry_recorder(span, first))
            current = None
            call = ModelCall(call.request, call.round, call.context, first)  # `replace` costs twice as much
        else:  # the current span during the call: HTTP client spans nest under it
            retries = retry_listener.set(_retry_recorder(span, None))
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
            if len(self._tool_names) >= _MAX_CACHED:
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
                _set_error(span, exc, capture)
                raise
            if execution.error is not None:
                _set_error(span, execution.error, capture)
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
            wrapped = _TracedModel(model, model_trace)
        if len(self._models) >= _MAX_CACHED:
            self._models.clear()
        self._models[id(model)] = (model, wrapped)
        return wrapped

    def _trace_of(self, model: ChatModel) -> _ModelTrace | None:
        """What every `chat` span of `model` shares, worked out once (None: a wrapper model)."""
        found = self._traces.get(id(model))
        if found is not None and found[0] is model:
            return found[1]
        model_trace = None if isinstance(model, WrapperModel) else _ModelTrace(model, self)
        if len(self._traces) >= _MAX_CACHED:
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
            if len(self._agents) >= _MAX_CACHED:
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
        if result.token_usage is not None:  # the chat spans' sum, under names that do not count it twice
            _add_usage(attributes, result.token_usage, _SUM_USAGE)
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


class _FirstChunk:
    """A streamed model call as tracing hands it to the loop: `model`, with the time its first event arrived
    noted. That costs one timestamp: after the first event, `__anext__` returns the model stream's own
    `__anext__()` awaitable, with no generator of its own in between. `chat` goes to `inner`, and a
    middleware inside tracing reads the model's `model`, `provider` and `supports_response_format` here as
    on `inner` (the model itself, for anything else)."""

    __slots__ = ("_events", "_next", "first", "inner", "started")

    def __init__(self, model: ChatModel, started: float) -> None:
        self.inner = model
        self.started = started
        self.first: float | None = None  # seconds from the call's start to its first event
        self._events: Any = None
        self._next: Callable[[], Awaitable[ModelEvent]] | None = None  # set by `stream`

    @property
    def model(self) -> str | None:
        """The model's name (`model`, or `model_name` for the in-process ones)."""
        return model_name_of(self.inner)

    @property
    def provider(self) -> str | None:
        """The model's provider name ("openai", ...), when it has one."""
        return provider_of(self.inner)

    @property
    def supports_response_format(self) -> bool:
        """As the model's (a `StructuredOutputModel`)."""
        return supports_response_format(self.inner)

    @property
    def supports_tool_search(self) -> bool:
        """As the model's: its provider's own tool search."""
        return supports_tool_search(self.inner)

    async def chat(self, request: ChatRequest) -> ChatResponse:
        return await self.inner.chat(request)

    def stream(self, request: ChatRequest) -> _FirstChunk:
        self._events = self.inner.stream(request)
        self._next = self._first_event if self.first is None else self._events.__anext__
        return self

    def __aiter__(self) -> _FirstChunk:
        return self

    async def _first_event(self) -> ModelEvent:
        # `_next` held this bound method, a cycle through `self`: replaced whatever happens, so the object
        # is freed by reference counting rather than by the cyclic garbage collector.
        self._next = self._events.__anext__
        event: ModelEvent = await self._events.__anext__()
        self.first = time.perf_counter() - self.started
        return event

    async def aclose(self) -> None:
        events = self._events
        if events is not None:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()

    def __repr__(self) -> str:
        return f"timed({self.inner!r})"


# `__anext__` is looked up on the type and called without arguments when it is no method. This property reads
# the `_next` slot through its member descriptor (C code throughout) and gives the bound
# method there, so an event after the first runs no Python code of ours.
_FirstChunk.__anext__ = property(vars(_FirstChunk)["_next"].__get__)  # type: ignore[attr-defined]


class _ModelTrace:
    """What every `chat` span and metric sample of one model shares, worked out once per model."""

    def __init__(self, model: ChatModel, instrumentation: Instrumentation) -> None:
        self._instrumentation = instrumentation
        self.model = model_name_of(model)
        self.provider = provider_name(model)
        self.span_name = f"chat {self.model}" if self.model else "chat"
        base_url = model.base_url if isinstance(model, RemoteModel) else None
        self.kind = SpanKind.CLIENT if isinstance(base_url, str) else SpanKind.INTERNAL
        attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": self.provider}
        if self.model:
            attributes["gen_ai.request.model"] = self.model
        if isinstance(base_url, str):
            attributes.update(_server(base_url))
        self.metric_attributes: Mapping[str, Any] = attributes
        defaults = model.defaults if isinstance(model, ModelWithDefaults) else None
        self.defaults: Mapping[str, Any] = defaults if isinstance(defaults, Mapping) else {}
        # A call without parameters of its own starts its span with these (streamed, not streamed).
        self._start_attributes = {
            stream: _parameter_attributes({**attributes, "gen_ai.request.stream": stream}, self.defaults)
            for stream in (True, False)
        }
        # Per response model: the attribute sets of the duration and the input and output token samples.
        self._samples: dict[str | None, _Samples] = {}

    def start(self, request: ChatRequest, stream: bool) -> Span:
        if request.parameters:
            attributes = {**self.metric_attributes, "gen_ai.request.stream": stream}
            _parameter_attributes(attributes, {**self.defaults, **request.parameters})
        else:
            attributes = self._start_attributes[stream]  # the SDK copies what it is given
        instrumentation = self._instrumentation
        span = instrumentation._telemetry.start_span(
            instrumentation.tracer, self.span_name, self.kind, attributes
        )
        if instrumentation.capture_content and span.is_recording():
            span.set_attribute("gen_ai.input.messages", _content.input_messages(request.messages))
            instructions = _content.system_instructions(request.messages)
            if instructions:
                span.set_attribute("gen_ai.system_instructions", instructions)
            if request.tool_specifications:
                span.set_attribute(
                    "gen_ai.tool.definitions", _content.tool_definitions(request.tool_specifications)
                )
        return span

    def _samples_for(self, response_model: str | None) -> _Samples:
        """The metric attribute sets of a successful call, built once per response model."""
        found = self._samples.get(response_model)
        if found is None:
            duration = dict(self.metric_attributes)
            if response_model:
                duration["gen_ai.response.model"] = response_model
            found = (
                duration,
                {**duration, "gen_ai.token.type": "input"},
                {**duration, "gen_ai.token.type": "output"},
            )
            if len(self._samples) >= _MAX_CACHED:
                self._samples.clear()
            self._samples[response_model] = found
        return found

    def end(
        self,
        span: Span,
        context: otel_context.Context,
        response: ChatResponse | None,
        error: BaseException | None,
        started: float,
        first_chunk: float | None = None,
    ) -> None:
        """Ends a `chat` span: its response's attributes (or its error), and the call's metrics, taken in
        `context` (the span's own: the samples' exemplars point at this call's span)."""
        duration = time.perf_counter() - started
        instrumentation = self._instrumentation
        if response is not None:
            if span.is_recording():
                attributes = _response_attributes(response, instrumentation.capture_content)
                if first_chunk is not None:
                    attributes["gen_ai.response.time_to_first_chunk"] = first_chunk
                span.set_attributes(attributes)
            timing, input_tokens, output_tokens = self._samples_for(response.model or None)
            record = instrumentation._telemetry.record
            record(instrumentation._duration.record, duration, timing, context)
            usage = response.token_usage
            if usage is not None:
                record(instrumentation._tokens.record, usage.input_tokens, input_tokens, context)
                record(instrumentation._tokens.record, usage.output_tokens, output_tokens, context)
        else:
            if first_chunk is not None:
                span.set_attribute("gen_ai.response.time_to_first_chunk", first_chunk)
            if isinstance(error, Exception):
                _set_error(span, error, instrumentation.capture_content)
                failed = {**self.metric_attributes, "error.type": _error_type(error)}
                instrumentation._telemetry.record(instrumentation._duration.record, duration, failed, context)
        instrumentation._telemetry.end(span)


class _TracedModel:
    """A model whose every call is a `chat` span (and a sample of the two metrics): what `wrap` gives, used
    for the inner models of a wrapper model, whose calls the seam does not see one by one.

    It reads as the model it traces (`model`, `provider`, `supports_response_format`) and closes it
    (`aclose`); the model itself is `inner`."""

    def __init__(self, model: ChatModel, model_trace: _ModelTrace) -> None:
        self.inner = model
        self._trace = model_trace
        self.model = model_trace.model
        self.provider = model_trace.provider

    @property
    def supports_response_format(self) -> bool:
        """As the traced model's: a traced model keeps the `native` output mode."""
        return supports_response_format(self.inner)

    @property
    def supports_tool_search(self) -> bool:
        """As the traced model's: a traced model keeps its provider's own tool search."""
        return supports_tool_search(self.inner)

    async def aclose(self) -> None:
        """Closes the traced model, when it is a `ClosableModel`."""
        if isinstance(self.inner, ClosableModel):
            await self.inner.aclose()

    def __repr__(self) -> str:
        return f"traced({self.inner!r})"

    async def chat(self, request: ChatRequest) -> ChatResponse:
        span = self._trace.start(request, False)
        context = trace.set_span_in_context(span)
        started = time.perf_counter()
        retries = retry_listener.set(_retry_recorder(span, None))
        current = otel_context.attach(context)  # HTTP client spans nest under it
        response: ChatResponse | None = None
        error: BaseException | None = None
        try:
            response = await self.inner.chat(request)
            return response
        except BaseException as exc:
            error = exc
            raise
        finally:
            otel_context.detach(current)
            retry_listener.reset(retries)
            self._trace.end(span, context, response, error, started)

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        span = self._trace.start(request, True)
        started = time.perf_counter()
        first_chunk: float | None = None
        # Retries happen before the first event: the listener is set only until then, and never across a
        # yield (a generator's context is its consumer's).
        retries: Any = retry_listener.set(_retry_recorder(span, None))
        response: ChatResponse | None = None
        error: BaseException | None = None
        events: Any = self.inner.stream(request)
        try:
            async for event in events:  # the first event only: then the loop below, one test per event
                first_chunk = time.perf_counter() - started
                retry_listener.reset(retries)
                retries = None
                if type(event) is ResponseComplete:
                    response = event.response
                yield event
                break
            async for event in events:  # an async generator goes on where the loop above stopped
                if type(event) is ResponseComplete:
                    response = event.response
                yield event
        except BaseException as exc:
            error = exc
            raise
        finally:
            if retries is not None:
                retry_listener.reset(retries)
            try:
                aclose = getattr(events, "aclose", None)
                if aclose is not None:
                    await aclose()
            finally:
                self._trace.end(span, trace.set_span_in_context(span), response, error, started, first_chunk)


# -- attribute helpers -----------------------------------------------------------------------------------


def provider_name(model: Any) -> str:
    """`gen_ai.provider.name`: the model's `provider` ("openai", "anthropic", ...), else its class's name."""
    return provider_of(model) or type(model).__name__


def _server(base_url: str) -> dict[str, Any]:
    """`server.address` / `server.port` of a base URL (host and port only: never its user info or query)."""
    parts = urlsplit(base_url)
    found: dict[str, Any] = {}
    if parts.hostname:
        found["server.address"] = parts.hostname
        try:
            port = parts.port
        except ValueError:
            port = None
        found["server.port"] = port or (443 if parts.scheme == "https" else 80)
    return found


def _usage_names(prefix: str) -> tuple[str, ...]:
    return tuple(
        prefix + name
        for name in (
            "input_tokens",
            "output_tokens",
            "cache_read.input_tokens",
            "cache_write.input_tokens",
            "reasoning.output_tokens",
        )
    )


_CALL_USAGE = _usage_names("gen_ai.usage.")  # a `chat` span's own usage
_SUM_USAGE = _usage_names("agentloop.usage.")  # the invocation's sum, on `invoke_agent`


def _add_usage(attributes: dict[str, Any], usage: TokenUsage, names: tuple[str, ...]) -> None:
    attributes[names[0]] = usage.input_tokens
    attributes[names[1]] = usage.output_tokens
    if usage.cache_read_tokens is not None:
        attributes[names[2]] = usage.cache_read_tokens
    if usage.cache_write_tokens is not None:
        attributes[names[3]] = usage.cache_write_tokens
        if names is _CALL_USAGE:  # 1.44's name for the same count
            attributes["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
    if usage.reasoning_tokens is not None:
        attributes[names[4]] = usage.reasoning_tokens


def _parameter_attributes(attributes: dict[str, Any], parameters: Mapping[str, Any]) -> dict[str, Any]:
    """Adds the request parameters the conventions name (`gen_ai.request.*`) to `attributes`."""
    for key, value in parameters.items():
        name = _PARAMETERS.get(key)
        if name is not None and value is not None:
            attributes[name] = [value] if isinstance(value, str) and key.startswith("stop") else value
    return attributes


def _response_attributes(response: ChatResponse, capture: bool) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.response.finish_reasons": (_content.finish_reason(response.finish_reason),)
    }
    if response.model:
        attributes["gen_ai.response.model"] = response.model
    if response.id:
        attributes["gen_ai.response.id"] = response.id
    if response.token_usage is not None:
        _add_usage(attributes, response.token_usage, _CALL_USAGE)
    if capture:
        attributes["gen_ai.output.messages"] = _content.output_messages(response)
    return attributes


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


def _error_type(error: BaseException) -> str:
    return type(error).__qualname__


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


def _set_error(span: Span, error: BaseException, capture_content: bool) -> None:
    """Marks `span` failed. The description is the error's message only when it cannot quote a tool's
    arguments or results (or content is captured): see `_safety.describe`."""
    span.set_status(Status(StatusCode.ERROR, describe(error, capture_content)))
    span.set_attribute("error.type", _error_type(error))


def _retry_recorder(span: Span, first: _FirstChunk | None) -> Any:
    """Records each retry of a model call as an event on its span (for a streamed call only until its first
    event: what is told after that comes from a tool started meanwhile, e.g. a sub-agent's model call)."""

    def record(attempt: int, delay: float, error: BaseException) -> None:
        if first is not None and first.first is not None:
            return
        span.add_event(
            "agentloop.retry",
            {
                "agentloop.retry.attempt": attempt,
                "agentloop.retry.delay": delay,
                "error.type": _error_type(error),
            },
        )

    return record
