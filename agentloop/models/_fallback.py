"""`FallbackChatModel`: a chat model that tries the next model when one fails, while nothing was delivered.

The rule is the providers' own rule for retries: a call may move to another model only until the first event
of its answer (a token, a piece of a tool call) reached the consumer. After that, switching would repeat or
contradict what the consumer already has, so a failure is raised as it is.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import AsyncIterator, Callable, Iterator

import msgspec

from agentloop._values._errors import (
    IllegalConfigurationError,
    ModelConnectionError,
    ModelTimeoutError,
    RateLimitError,
    ServerError,
)
from agentloop._values._messages import ChatRequest, ChatResponse

from ._base import (
    ChatModel,
    ClosableModel,
    ModelEvent,
    ResponseComplete,
    model_name_of,
    supports_response_format,
)

__all__ = ["DEFAULT_FALLBACK_ON", "FallbackChatModel"]

logger = logging.getLogger("agentloop.models")

DEFAULT_FALLBACK_ON: tuple[type[BaseException], ...] = (
    RateLimitError,
    ServerError,
    ModelTimeoutError,
    ModelConnectionError,
)
"""Failures that move a call to the next model: the provider's, not the request's (a 400 or a 401 would fail
on every model alike, so they are raised at once)."""


class FallbackChatModel:
    """Tries `primary`, then each of `fallbacks` in order, on the failures listed in `on`.

    Each model keeps its own name and settings; `ChatResponse.model` says which one answered (the name its
    provider reported, else the model's own). A model is left for the next only before the first event of its
    answer reached the consumer, whether `chat()` or `stream()` is used. With `sticky=True` a call starts with
    the model that answered last, and moves on in the given order from there. When every model failed, the
    last failure is raised (the earlier ones are logged as warnings on `agentloop.models`).
    """

    def __init__(
        self,
        primary: ChatModel,
        *fallbacks: ChatModel,
        on: type[BaseException] | tuple[type[BaseException], ...] = DEFAULT_FALLBACK_ON,
        sticky: bool = False,
    ) -> None:
        models = (primary, *fallbacks)
        for n, model in enumerate(models):
            if not isinstance(model, ChatModel):
                raise IllegalConfigurationError(
                    f"FallbackChatModel: model {n} ({type(model).__name__}) is not a ChatModel "
                    "(it needs chat(request) and stream(request))"
                )
        if not fallbacks:
            raise IllegalConfigurationError(
                "FallbackChatModel needs at least one fallback: FallbackChatModel(primary, fallback, ...)"
            )
        failures = on if isinstance(on, tuple) else (on,)
        if not failures or not all(isinstance(c, type) and issubclass(c, BaseException) for c in failures):
            raise IllegalConfigurationError(
                "FallbackChatModel: on= takes exception classes (e.g. (RateLimitError, ServerError)), "
                f"got {on!r}"
            )
        self.models: tuple[ChatModel, ...] = models
        self.on: tuple[type[BaseException], ...] = failures
        self.sticky = sticky
        self._answered = [0]  # the model that answered last (a sticky call starts there); shared by views

    @property
    def supports_response_format(self) -> bool:
        """True when every model of the chain honours `response_format` (a `StructuredOutputModel`): the
        `native` output mode then works whichever model answers."""
        return all(supports_response_format(m) for m in self.models)

    @property
    def model(self) -> str:
        """The name of the model a call starts with."""
        return _name(self.models[self._answered[0] if self.sticky else 0])

    def __repr__(self) -> str:
        names = ", ".join(repr(_name(m)) for m in self.models)
        return f"FallbackChatModel({names}, sticky={self.sticky})"

    def _order(self) -> Iterator[tuple[int, ChatModel]]:
        first = self._answered[0] if self.sticky else 0
        yield first, self.models[first]
        for index, model in enumerate(self.models):
            if index != first:
                yield index, model

    @staticmethod
    def _failed(model: ChatModel, error: BaseException) -> None:
        logger.warning("%s failed (%s: %s); trying the next model", _name(model), type(error).__name__, error)

    async def chat(self, request: ChatRequest) -> ChatResponse:
        """The first answer of the models in turn (see the class docstring)."""
        order = list(self._order())
        for position, (index, model) in enumerate(order):
            try:
                response = await model.chat(request)
            except self.on as error:
                if position == len(order) - 1:
                    raise
                self._failed(model, error)
                continue
            self._answered[0] = index
            return _answered_by(response, model)
        raise AssertionError("unreachable: the last model's failure is raised")  # pragma: no cover

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        """The events of the first model that delivers one (see the class docstring)."""
        order = list(self._order())
        for position, (index, model) in enumerate(order):
            events = model.stream(request)
            delivered = False
            try:
                async for event in events:
                    if isinstance(event, ResponseComplete):
                        event = ResponseComplete(_answered_by(event.response, model))
                        self._answered[0] = index
                    delivered = True
                    yield event
                return
            except self.on as error:
                if delivered or position == len(order) - 1:
                    raise
                self._failed(model, error)
            finally:
                close = getattr(events, "aclose", None)
                if close is not None:
                    await close()

    def __agentloop_instrument__(self, wrap: Callable[[ChatModel], ChatModel]) -> FallbackChatModel:
        """The same chain with each model passed through `wrap` (tracing gives every real call its own
        span), sharing this one's sticky state: a fallback chain is a `WrapperModel`."""
        view = copy.copy(self)
        view.models = tuple(wrap(model) for model in self.models)
        return view

    async def aclose(self) -> None:
        """Closes every model that can be closed (each `ClosableModel`)."""
        for model in self.models:
            if isinstance(model, ClosableModel):
                await model.aclose()

    async def __aenter__(self) -> FallbackChatModel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _name(model: object) -> str:
    """A model's name (`model_name_of`), else its class's name."""
    return model_name_of(model) or type(model).__name__


def _answered_by(response: ChatResponse, model: ChatModel) -> ChatResponse:
    """`response`, its `model` set to `model`'s name when the provider reported none."""
    if response.model:
        return response
    return msgspec.structs.replace(response, model=_name(model))
