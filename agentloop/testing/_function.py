"""`FunctionChatModel`: a chat model whose answers come from a Python function you write."""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Union

from agentloop._values._messages import ChatMessage, ChatRequest, ChatResponse, TokenUsage
from agentloop._values._spec import ToolSpecification
from agentloop.models._base import ModelEvent

from ._scripted import Answer, CallIds, Replay, Tokenizer, check_delay, make_tokenizer, resolve, to_response

__all__ = ["AnswerFunction", "FunctionChatModel"]

AnswerFunction = Callable[..., Union[Answer, Awaitable[Answer]]]
"""`(messages, tools) -> answer` or `(messages, tools, request) -> answer`, sync or async."""


def _wants_request(fn: Callable[..., Any]) -> bool:
    """Whether `fn` takes a third positional argument (the `ChatRequest`); checks it takes two at least."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # some builtins and C callables have no signature: call them with two
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return True
    if len(positional) < 2:
        raise TypeError(
            f"FunctionChatModel: {getattr(fn, '__qualname__', fn)!r} must accept (messages, tools) "
            "or (messages, tools, request)"
        )
    return len(positional) >= 3


class FunctionChatModel:
    """A chat model that answers with `fn(messages, tools)`: your code decides what the model says.

    `fn` gets the conversation (`list[ChatMessage]`) and the tools on offer (`list[ToolSpecification]`), and
    the whole `ChatRequest` as a third argument if it accepts one. It may be sync or async and returns an
    `AiMessage`, a `str` or a `ChatResponse`, completed and streamed exactly as `ScriptedChatModel` does.
    Every request is kept in `.requests`.

    Options: `delay` seconds pass before each streamed event, and once in `chat()` (a slow model: to test
    timeouts, cancellation and progress); `stream()` cuts text into word-sized pieces, or `chunk_size`
    characters, or what `tokenizer(text)` returns (give one of the two); `token_usage` is reported instead
    of an estimate from the words sent and answered; `model_name` defaults to `function:<fn's name>`.
    """

    supports_response_format = True
    """It takes `ChatRequest.response_format` (structured output in native mode): the answer is the JSON."""

    def __init__(
        self,
        fn: AnswerFunction,
        *,
        token_usage: TokenUsage | None = None,
        delay: float = 0.0,
        chunk_size: int | None = None,
        tokenizer: Tokenizer | None = None,
        model_name: str | None = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"FunctionChatModel needs a function, got {type(fn).__name__}")
        self.fn = fn
        self.requests: list[ChatRequest] = []
        self.model_name = (
            model_name if model_name is not None else f"function:{getattr(fn, '__name__', 'fn')}"
        )
        self._pass_request = _wants_request(fn)
        self._token_usage = token_usage
        self._replay = Replay(
            make_tokenizer(chunk_size, tokenizer, "FunctionChatModel"),
            check_delay(delay, "FunctionChatModel"),
        )
        self._ids = CallIds()

    async def _respond(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        messages: list[ChatMessage] = list(request.messages)
        tools: list[ToolSpecification] = list(request.tool_specifications)
        answer = self.fn(messages, tools, request) if self._pass_request else self.fn(messages, tools)
        return to_response(
            await resolve(answer),
            request,
            ids=self._ids,
            token_usage=self._token_usage,
            model_name=self.model_name,
            what=f"the answer of FunctionChatModel's function {getattr(self.fn, '__qualname__', self.fn)!r}",
        )

    async def chat(self, request: ChatRequest) -> ChatResponse:
        """The function's answer to `request`."""
        response = await self._respond(request)
        await self._replay.pause()
        return response

    async def stream(self, request: ChatRequest) -> AsyncGenerator[ModelEvent, None]:
        """The function's answer to `request`, as stream events."""
        response = await self._respond(request)
        for event in self._replay.events(response):
            await self._replay.pause()
            yield event

    def __repr__(self) -> str:
        return (
            f"FunctionChatModel({getattr(self.fn, '__qualname__', self.fn)!s}, requests={len(self.requests)})"
        )
