"""`count_tokens`: how many input tokens a request takes, exact where the model can say, else estimated.

A `TokenCountingModel` answers itself (OpenAI-family models with tiktoken, Anthropic, Gemini and Bedrock
through their count endpoints, the local model with its own tokenizer); any other model gets
`estimate_tokens`, marked `exact=False`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import anyio.to_thread
import msgspec

from .._values._content import TextContent
from .._values._errors import IllegalConfigurationError
from .._values._messages import (
    AiMessage,
    ChatMessage,
    ChatRequest,
    SystemMessage,
    ToolExecutionResultMessage,
    UserMessage,
)
from ._base import TokenCount, TokenCountingModel, WrapperModel

__all__ = ["count_tokens", "estimate_tokens", "openai_count", "request_of"]

_CHARS_PER_TOKEN = 4
_PER_MESSAGE = 4  # role markers and separators around each message
_PER_MEDIA = 800  # a picture or a document page, roughly, at the providers' default detail
_MESSAGE_TYPES = (SystemMessage, UserMessage, AiMessage, ToolExecutionResultMessage)


async def count_tokens(model: Any, messages_or_request: ChatRequest | Sequence[ChatMessage]) -> TokenCount:
    """The input tokens `messages_or_request` (a `ChatRequest`, or its messages) would take on `model` (a
    `ChatModel` or a model string such as "openai:gpt-4o"): `exact=True` when the provider's tokenizer or
    count endpoint said so, else an estimate with `exact=False`.

    `await agentloop.count_tokens(model, [UserMessage("Hello")])` -> `TokenCount(tokens=8, exact=True)`
    """
    request = request_of(messages_or_request)
    if isinstance(model, str):
        from ._infer import infer_model

        model = infer_model(model)
    counter = _counter_of(model)
    if counter is None:
        return estimate_tokens(request)
    return await counter.count_tokens(request)


def _counter_of(model: Any) -> TokenCountingModel | None:
    if isinstance(model, TokenCountingModel):
        return model
    if isinstance(model, WrapperModel):  # a fallback chain counts with the model it tries first
        first: list[Any] = []

        def take(inner: Any) -> Any:
            first.append(inner)
            return inner

        model.__agentloop_instrument__(take)
        return _counter_of(first[0]) if first else None
    return None


def request_of(value: Any) -> ChatRequest:
    """`value` as a `ChatRequest` (a request, or a sequence of messages), or an error saying what it takes."""
    if isinstance(value, ChatRequest):
        return value
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        wrong = [m for m in value if not isinstance(m, _MESSAGE_TYPES)]
        if not wrong:
            return ChatRequest(messages=list(value))
        raise IllegalConfigurationError(
            f"count_tokens: {wrong[0]!r} is not a chat message; pass a ChatRequest or a list of "
            "SystemMessage, UserMessage, AiMessage and ToolExecutionResultMessage"
        )
    raise IllegalConfigurationError(
        f"count_tokens: expected a ChatRequest or a list of chat messages, got {type(value).__name__}"
    )


def estimate_tokens(request: ChatRequest) -> TokenCount:
    """About four characters a token over every text the request carries (messages, tool calls and results,
    tool definitions, the output schema), four more per message, 800 per picture or document: `exact=False`.
    """
    chars = 0
    fixed = 3
    for message in request.messages:
        fixed += _PER_MESSAGE
        if isinstance(message, (SystemMessage, UserMessage, ToolExecutionResultMessage)):
            chars += len(message.text)
        if isinstance(message, (UserMessage, ToolExecutionResultMessage)):
            for part in message.contents:
                if isinstance(part, TextContent):
                    chars += len(part.text)
                else:
                    fixed += _PER_MEDIA
        elif isinstance(message, AiMessage):
            chars += len(message.text or "") + len(message.thinking or "")
            for call in message.tool_execution_requests:
                chars += len(call.name) + len(call.arguments)
                fixed += _PER_MESSAGE
    for spec in request.tool_specifications:
        chars += len(msgspec.json.encode(spec))
    if request.response_format is not None:
        chars += len(msgspec.json.encode(request.response_format.schema))
    return TokenCount(tokens=fixed + math.ceil(chars / _CHARS_PER_TOKEN), exact=False)


def _exactly_countable(request: ChatRequest) -> bool:
    """True when OpenAI's documented chat format covers the request: text messages only (its formatting of
    tool definitions, tool calls and pictures is not published)."""
    if request.tool_specifications or request.response_format is not None:
        return False
    for message in request.messages:
        if isinstance(message, ToolExecutionResultMessage):
            return False
        if isinstance(message, AiMessage) and message.tool_execution_requests:
            return False
        if isinstance(message, UserMessage) and any(not isinstance(c, TextContent) for c in message.contents):
            return False
    return True


async def openai_count(
    model_name: str | None, request: ChatRequest, messages: list[Any], extra: list[Any]
) -> TokenCount:
    """An OpenAI-family request counted with tiktoken (`messages` / `extra`: its wire messages and other
    counted parts), in a worker thread; the estimate when tiktoken (extra `tokens`) or the model's encoding is
    missing. Exact for text-only requests; with tools or pictures, tokenizer-counted but `exact=False`."""
    from ._tiktoken import count_wire, encoding_for

    if not model_name:
        return estimate_tokens(request)
    encoding = await anyio.to_thread.run_sync(encoding_for, model_name)
    if encoding is None:
        return estimate_tokens(request)
    tokens = await anyio.to_thread.run_sync(count_wire, encoding, messages, extra)
    return TokenCount(tokens=tokens, exact=_exactly_countable(request))
