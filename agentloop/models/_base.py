"""The `ChatModel` protocol and the typed events a model stream yields."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol, Union, runtime_checkable

import msgspec

from .._values._messages import ChatRequest, ChatResponse, ToolExecutionRequest
from .._values._progress import GenerationProgress

__all__ = [
    "DEFER_LOADING",
    "ChatModel",
    "ClosableModel",
    "GenerationProgress",
    "LocallyNamedModel",
    "ModelEvent",
    "ModelWithDefaults",
    "NamedModel",
    "ProviderModel",
    "RemoteModel",
    "ResponseComplete",
    "StructuredOutputModel",
    "TextDelta",
    "ThinkingDelta",
    "TokenCount",
    "TokenCountingModel",
    "ToolCallComplete",
    "ToolCallDelta",
    "WrapperModel",
    "model_name_of",
    "provider_of",
    "supports_response_format",
    "supports_tool_search",
]


class TextDelta(msgspec.Struct, frozen=True, gc=False):
    """A piece of the answer's text, in the order generated."""

    text: str


class ThinkingDelta(msgspec.Struct, frozen=True, gc=False):
    """A piece of the model's reasoning, where the provider streams it."""

    text: str


class ToolCallDelta(msgspec.Struct, frozen=True, gc=False):
    """A piece of one tool call. The first piece of a call carries its `id` and `name`; later ones `None`.

    `index` is the call's position in the response (0-based); `arguments` is the next slice of its JSON text.
    """

    index: int
    id: str | None
    name: str | None
    arguments: str


class ToolCallComplete(msgspec.Struct, frozen=True, gc=False):
    """One tool call is whole: emitted as soon as its arguments are complete, before the stream ends."""

    index: int
    request: ToolExecutionRequest


class ResponseComplete(msgspec.Struct, frozen=True, gc=False):
    """The last event of every stream: the full response, with usage and finish reason."""

    response: ChatResponse


ModelEvent = Union[
    TextDelta, ThinkingDelta, ToolCallDelta, ToolCallComplete, GenerationProgress, ResponseComplete
]
"""Anything `ChatModel.stream` yields."""


@runtime_checkable
class ChatModel(Protocol):
    """A chat model: one request in, one response out, whole (`chat`) or as a stream of events (`stream`).

    `stream` yields `TextDelta`, `ThinkingDelta`, `ToolCallDelta` and `ToolCallComplete` events as they arrive
    (and `GenerationProgress` where the model reports it) and ends with exactly one `ResponseComplete`. A
    consumer may stop early; closing the iterator (it is an async generator: `aclose()`) must release the
    underlying connection.
    """

    async def chat(self, request: ChatRequest) -> ChatResponse:
        """Sends `request` and returns the whole response."""
        ...

    def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        """Sends `request` and yields its events as they arrive."""
        ...


class TokenCount(msgspec.Struct, frozen=True, gc=False):
    """How many input tokens a request takes: `exact` when the provider's own tokenizer or count endpoint said
    so, False for an estimate (about four characters a token, rounded up)."""

    tokens: int
    exact: bool


@runtime_checkable
class TokenCountingModel(Protocol):
    """A model that can say how many input tokens a request would take before sending it (its provider's
    count endpoint or tokenizer): `agentloop.count_tokens` uses it, and estimates for any other model."""

    async def count_tokens(self, request: ChatRequest) -> TokenCount:
        """The input tokens `request` would take (its messages, system prompt and tools)."""
        ...


@runtime_checkable
class StructuredOutputModel(Protocol):
    """A model that declares whether it honours `ChatRequest.response_format` (the provider's own structured
    output): agents use the `native` output mode only with a model whose `supports_response_format` is True,
    and fall back to an output tool otherwise."""

    supports_response_format: bool


@runtime_checkable
class TextSinkModel(Protocol):
    """A model that can hand its streamed answer text to a sink instead of yielding a `TextDelta` per piece:
    the runtime's short way for text (no event built or passed on per token) when only the text is wanted
    and no `wrap_stream` hook must see it. Each piece goes to `sink(text)`; when `sink` returns False, the
    piece comes as a `TextDelta` as usual. Every other event comes as in `stream()`, in order.

    Its streams keep each cancel scope and task group of theirs between two yields (PEP 789): the runtime
    opens a round's task group only when a tool call starts, possibly while such a stream waits at a yield."""

    def stream_text_to(self, request: ChatRequest, sink: Callable[[str], bool]) -> AsyncIterator[ModelEvent]:
        """`stream(request)`, with the answer text handed to `sink`."""
        ...


def supports_response_format(model: object) -> bool:
    """True when `model` is a `StructuredOutputModel` that honours `response_format`."""
    return isinstance(model, StructuredOutputModel) and model.supports_response_format is True


DEFER_LOADING = "agentloop.defer_loading"
"""The `ToolSpecification.metadata` key of a tool the provider's own tool search finds (set by
`ToolSearch(native=True)`): a model that `supports_tool_search` sends the tool deferred, with its provider's
tool search tool beside it."""


def supports_tool_search(model: object) -> bool:
    """True when `model` declares `supports_tool_search` (its provider searches deferred tools itself:
    Anthropic's tool search tool, OpenAI Responses' `tool_search`)."""
    return getattr(model, "supports_tool_search", False) is True


@runtime_checkable
class WrapperModel(Protocol):
    """A model that answers through inner models (a `FallbackChatModel`) and says how to trace them.

    `__agentloop_instrument__(wrap)` returns the same model with each inner model passed through `wrap`:
    tracing then gives every real call its own `chat` span, rather than one span for the wrapper."""

    def __agentloop_instrument__(self, wrap: Callable[[ChatModel], ChatModel]) -> ChatModel: ...


@runtime_checkable
class RemoteModel(Protocol):
    """A model served over the network, naming the API root its requests go to (`base_url`, an http(s)
    URL): tracing makes its calls CLIENT spans with `server.address` and `server.port`; a model without one
    is traced as in-process (INTERNAL spans)."""

    @property
    def base_url(self) -> str: ...


@runtime_checkable
class ModelWithDefaults(Protocol):
    """A model holding the request parameters it sends unless a call overrides them (`defaults`, e.g.
    `{"temperature": 0.5}`): tracing records them on each call's span as `gen_ai.request.*`."""

    @property
    def defaults(self) -> Mapping[str, Any]: ...


@runtime_checkable
class ClosableModel(Protocol):
    """A model holding resources (a connection pool, a worker thread) that `aclose()` releases: a model
    that wraps others (a fallback chain, a traced model) closes those that are closable."""

    async def aclose(self) -> None: ...


@runtime_checkable
class NamedModel(Protocol):
    """A model naming the model it runs (`model`, e.g. "gpt-4o-mini"), as the providers' requests do: span
    names, `Result.cost` and a fallback chain's `ChatResponse.model` (when the provider reported none) use
    it."""

    @property
    def model(self) -> str | None: ...


@runtime_checkable
class LocallyNamedModel(Protocol):
    """An in-process model's name (`model_name`, e.g. "qwen2.5-0.5b-instruct" or "test"): how
    `LocalChatModel` and the testing models name themselves, used where a `NamedModel`'s `model` would be."""

    @property
    def model_name(self) -> str | None: ...


@runtime_checkable
class ProviderModel(Protocol):
    """A model naming its provider (`provider`: "openai", "anthropic", or what a compatible server was
    given): traces (`gen_ai.provider.name`) and `Result.cost` (with the model's name) use it."""

    @property
    def provider(self) -> str | None: ...


def model_name_of(model: object) -> str | None:
    """A model's name: a `NamedModel`'s `model`, else a `LocallyNamedModel`'s `model_name` (a non-empty
    string; None when it has neither)."""
    if isinstance(model, NamedModel):
        name = model.model
        if isinstance(name, str) and name:
            return name
    if isinstance(model, LocallyNamedModel):
        name = model.model_name
        if isinstance(name, str) and name:
            return name
    return None


def provider_of(model: object) -> str | None:
    """A `ProviderModel`'s provider name ("openai", "anthropic", ...), when it is a non-empty string."""
    provider = model.provider if isinstance(model, ProviderModel) else None
    return provider if isinstance(provider, str) and provider else None
