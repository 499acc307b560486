"""One model call of the loop: through the seam's `wrap_model_call` chain, streamed when someone listens."""

from __future__ import annotations

from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from .._values._errors import BadResponseError, IllegalConfigurationError
from .._values._events import ModelProgress, PartialResponse, PartialThinking, PartialToolCall
from .._values._messages import ChatRequest, ChatResponse
from ..models import (
    ChatModel,
    GenerationProgress,
    ResponseComplete,
    TextDelta,
    ThinkingDelta,
    ToolCallComplete,
    ToolCallDelta,
)
from ._calls import Calls
from ._hooks import OutputHook
from ._seam import ModelCall

if TYPE_CHECKING:
    from ._loop import Invocation, Listener

__all__ = ["model_call"]


async def model_call(
    inv: Invocation,
    request: ChatRequest,
    round: int,
    emit: Listener | None,
    typed: Listener | None,
    calls: Calls,
) -> ChatResponse:
    """One model call, through the middleware's `wrap_model_call` hooks when there are any. A response a
    middleware gave without calling the model (a cache, a guard) reaches a streaming consumer as one text
    delta."""
    chain = inv.seam.model
    if chain is None:
        if emit is None:
            return await inv.model.chat(request)
        return await _stream_model(inv.model, request, round, emit, typed, calls, inv.output)
    streamed = False

    async def call_model(call: ModelCall) -> ChatResponse:
        nonlocal streamed
        model = inv.model if call.model is None else call.model
        if emit is None:
            return await model.chat(call.request)
        streamed = True
        return await _stream_model(model, call.request, round, emit, typed, calls, inv.output)

    assert inv.call_context is not None
    response: object = await chain(ModelCall(request, round, inv.call_context, inv.model), call_model)
    if not isinstance(response, ChatResponse):
        names = ", ".join(type(m).__qualname__ for m in inv.seam.middleware)
        raise IllegalConfigurationError(
            f"A wrap_model_call middleware ({names}) returned {response!r}; return the ChatResponse that "
            "`await call_next(call)` gave (or one you built, e.g. ChatResponse(AiMessage('...')))"
        )
    text = response.ai_message.text
    if emit is not None and not streamed and text:
        await emit(PartialResponse(text, round))
    return response


async def _stream_model(
    model: ChatModel,
    request: ChatRequest,
    round: int,
    emit: Listener,
    typed: Listener | None,
    calls: Calls,
    output: OutputHook | None,
) -> ChatResponse:
    """Streams one model call, forwarding its pieces (text to `emit`, the others to `typed` if anyone wants
    them) and starting each tool call as soon as it is whole. Structured output watches the stream for its
    partial values."""
    response: ChatResponse | None = None
    text_nowait = emit.text_nowait
    async with aclosing(model.stream(request)) as source:  # type: ignore[type-var]
        events = source if output is None else output.watch(source, round, typed)
        async for event in events:
            kind = type(event)
            if kind is TextDelta:
                text: str = event.text  # type: ignore[union-attr]
                if not text_nowait(text, round):
                    await emit(PartialResponse(text, round))
            elif kind is ToolCallDelta:
                if typed is not None:
                    e: Any = event
                    await typed(PartialToolCall(e.index, e.id, e.name, e.arguments, round))
            elif kind is ToolCallComplete:
                calls.start_early(event.index, event.request)  # type: ignore[union-attr]
            elif kind is ThinkingDelta:
                if typed is not None:
                    await typed(PartialThinking(event.text, round))  # type: ignore[union-attr]
            elif kind is GenerationProgress and typed is not None:
                await typed(ModelProgress.of(event, round))  # type: ignore[arg-type]
            elif kind is ResponseComplete:
                response = event.response  # type: ignore[union-attr]
    if response is None:
        raise BadResponseError("The model's stream ended without a final response")
    return response
