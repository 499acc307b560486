"""Model-call spans and metrics: `ModelTrace` (a model's `chat` span and its duration and token samples),
`TracedModel` (a model wrapped for a traced call), `FirstChunk` (the time of a stream's first event)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from agentloop._values._messages import ChatRequest, ChatResponse
from agentloop.models import (
    ChatModel,
    ClosableModel,
    ModelEvent,
    ModelWithDefaults,
    RemoteModel,
    ResponseComplete,
)
from agentloop.models._base import model_name_of, provider_of, supports_response_format, supports_tool_search
from agentloop.models._retries import retry_listener

from . import _content
from ._attributes import (
    error_type,
    parameter_attributes,
    provider_name,
    response_attributes,
    server_attributes,
    set_error,
)

if TYPE_CHECKING:
    from ._instrumentation import Instrumentation

MAX_CACHED = 256


# The attribute sets of a call's three metric samples: its duration, its input and its output tokens.
_Samples = tuple[dict[str, Any], dict[str, Any], dict[str, Any]]


class FirstChunk:
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

    def stream(self, request: ChatRequest) -> FirstChunk:
        self._open(self.inner.stream(request))
        return self

    def stream_text_to(self, request: ChatRequest, sink: Callable[[str], bool]) -> FirstChunk:
        """`stream()` with the model's own short way for answer text (when it has one): a piece of text
        pushed to `sink` before any event counts as the first chunk."""
        push = getattr(self.inner, "stream_text_to", None)
        if push is None:
            return self.stream(request)
        if self.first is not None:
            self._open(push(request, sink))
            return self
        started = self.started

        def first_text(text: str) -> bool:
            if self.first is None:
                self.first = time.perf_counter() - started
            return sink(text)

        self._open(push(request, first_text))
        return self

    def _open(self, events: Any) -> None:
        self._events = events
        self._next = self._first_event if self.first is None else events.__anext__

    def __aiter__(self) -> FirstChunk:
        return self

    async def _first_event(self) -> ModelEvent:
        # `_next` held this bound method, a cycle through `self`: replaced whatever happens, so the object
        # is freed by reference counting rather than by the cyclic garbage collector.
        self._next = self._events.__anext__
        event: ModelEvent = await self._events.__anext__()
        if self.first is None:  # else text pushed to the sink came first
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
FirstChunk.__anext__ = property(vars(FirstChunk)["_next"].__get__)  # type: ignore[attr-defined]


class ModelTrace:
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
            attributes.update(server_attributes(base_url))
        self.metric_attributes: Mapping[str, Any] = attributes
        defaults = model.defaults if isinstance(model, ModelWithDefaults) else None
        self.defaults: Mapping[str, Any] = defaults if isinstance(defaults, Mapping) else {}
        # A call without parameters of its own starts its span with these (streamed, not streamed).
        self._start_attributes = {
            stream: parameter_attributes({**attributes, "gen_ai.request.stream": stream}, self.defaults)
            for stream in (True, False)
        }
        # Per response model: the attribute sets of the duration and the input and output token samples.
        self._samples: dict[str | None, _Samples] = {}

    def start(self, request: ChatRequest, stream: bool) -> Span:
        if request.parameters:
            attributes = {**self.metric_attributes, "gen_ai.request.stream": stream}
            parameter_attributes(attributes, {**self.defaults, **request.parameters})
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
            if len(self._samples) >= MAX_CACHED:
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
                attributes = response_attributes(response, instrumentation.capture_content)
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
                set_error(span, error, instrumentation.capture_content)
                failed = {**self.metric_attributes, "error.type": error_type(error)}
                instrumentation._telemetry.record(instrumentation._duration.record, duration, failed, context)
        instrumentation._telemetry.end(span)


class TracedModel:
    """A model whose every call is a `chat` span (and a sample of the two metrics): what `wrap` gives, used
    for the inner models of a wrapper model, whose calls the seam does not see one by one.

    It reads as the model it traces (`model`, `provider`, `supports_response_format`) and closes it
    (`aclose`); the model itself is `inner`."""

    def __init__(self, model: ChatModel, model_trace: ModelTrace) -> None:
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
        retries = retry_listener.set(retry_recorder(span, None))
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
        retries: Any = retry_listener.set(retry_recorder(span, None))
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


def retry_recorder(span: Span, first: FirstChunk | None) -> Any:
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
                "error.type": error_type(error),
            },
        )

    return record
