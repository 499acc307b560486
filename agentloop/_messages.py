"""The vocabulary every layer shares: chat messages, requests, responses, usage.

All of them are frozen msgspec Structs: cheap to build, hashable where their fields are, readable reprs, and
tagged so a list of messages encodes to JSON and decodes back (what persistent memory stores need).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal, Union

import msgspec
from msgspec.structs import force_setattr

from ._spec import ToolSpecification

__all__ = [
    "AiMessage",
    "ChatMessage",
    "ChatRequest",
    "ChatResponse",
    "FinishReason",
    "SystemMessage",
    "TokenUsage",
    "ToolChoice",
    "ToolExecutionRequest",
    "ToolExecutionResultMessage",
    "UserMessage",
    "decode_messages",
    "encode_messages",
    "is_whole_object",
]


class ToolExecutionRequest(msgspec.Struct, frozen=True):
    """One tool call asked for by the model. `arguments` is JSON text, exactly as the model sent it."""

    id: str | None
    name: str
    arguments: str = "{}"


def is_whole_object(arguments: str) -> bool:
    """True when `arguments` is a complete JSON object: nothing but white space can follow it, so a tool call
    whose arguments are whole cannot still be streaming (a cut or unfinished one is not whole)."""
    try:
        return isinstance(msgspec.json.decode(arguments), dict)
    except (msgspec.DecodeError, RecursionError):  # RecursionError: nested too deep to decode
        return False


class SystemMessage(msgspec.Struct, frozen=True, tag="system"):
    """Instructions for the model, sent before the conversation."""

    text: str


class UserMessage(msgspec.Struct, frozen=True, tag="user"):
    """What the user said."""

    text: str


class AiMessage(msgspec.Struct, frozen=True, tag="ai", omit_defaults=True):
    """What the model answered: text, tool calls, or both (and its reasoning, where the provider sends it)."""

    text: str | None = None
    tool_execution_requests: Sequence[ToolExecutionRequest] = ()
    thinking: str | None = None

    def __post_init__(self) -> None:
        if type(self.tool_execution_requests) is not tuple:
            force_setattr(self, "tool_execution_requests", tuple(self.tool_execution_requests))

    def has_tool_execution_requests(self) -> bool:
        """True when the model asked for at least one tool call."""
        return bool(self.tool_execution_requests)


class ToolExecutionResultMessage(msgspec.Struct, frozen=True, tag="tool_result", omit_defaults=True):
    """The result of one tool call, sent back to the model. `id` matches the request's id."""

    id: str | None
    tool_name: str
    text: str
    is_error: bool = False

    @classmethod
    def from_request(
        cls, request: ToolExecutionRequest, text: str, *, is_error: bool = False
    ) -> ToolExecutionResultMessage:
        """The result message answering `request`."""
        return cls(request.id, request.name, text, is_error)


ChatMessage = Union[SystemMessage, UserMessage, AiMessage, ToolExecutionResultMessage]
"""Any message of a conversation."""

_messages_decoder = msgspec.json.Decoder(list[ChatMessage])
_encoder = msgspec.json.Encoder()


def encode_messages(messages: Sequence[ChatMessage]) -> bytes:
    """Messages as JSON bytes (each tagged with its kind); `decode_messages` reads them back."""
    return _encoder.encode(list(messages))


def decode_messages(data: bytes | str) -> list[ChatMessage]:
    """Reads messages written by `encode_messages`."""
    return _messages_decoder.decode(data)


class TokenUsage(msgspec.Struct, frozen=True):
    """Tokens one model call (or, summed with `+`, a whole invocation) consumed.

    `input_tokens` counts every prompt token, cached ones included; `output_tokens` every generated token,
    reasoning included. The details are None when the provider did not report them:
    `cache_read_tokens` (prompt tokens served from the provider's cache), `cache_write_tokens` (prompt tokens
    written to it, Anthropic's cache creation) and `reasoning_tokens` (output tokens spent thinking).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.total_tokens is None:
            force_setattr(self, "total_tokens", self.input_tokens + self.output_tokens)

    def __add__(self, other: TokenUsage | None) -> TokenUsage:
        if other is None:
            return self
        if not isinstance(other, TokenUsage):
            return NotImplemented
        return TokenUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            (self.total_tokens or 0) + (other.total_tokens or 0),
            _plus(self.cache_read_tokens, other.cache_read_tokens),
            _plus(self.cache_write_tokens, other.cache_write_tokens),
            _plus(self.reasoning_tokens, other.reasoning_tokens),
        )

    def __radd__(self, other: TokenUsage | int | None) -> TokenUsage:
        # `sum(usages)` starts from 0; `None + usage` shows up when a provider sent no usage.
        if other is None or other == 0:
            return self
        return NotImplemented


def _plus(a: int | None, b: int | None) -> int | None:
    """A detail summed over calls: None only when no call reported it."""
    if a is None:
        return b
    return a if b is None else a + b


class FinishReason(str, enum.Enum):
    """Why the model stopped. `TOOL_EXECUTION` also marks an invocation that ended by immediate return;
    `APPROVAL_REQUIRED` one that paused until a person decides on some of its tool calls."""

    STOP = "stop"
    LENGTH = "length"
    TOOL_EXECUTION = "tool_execution"
    CONTENT_FILTER = "content_filter"
    OTHER = "other"
    APPROVAL_REQUIRED = "approval_required"


class ToolChoice(msgspec.Struct, frozen=True):
    """Whether the model may, must, or must not call tools, or must call one named tool.

    Use the constants `ToolChoice.AUTO`, `ToolChoice.REQUIRED`, `ToolChoice.NONE`, or
    `ToolChoice.tool("name")`.
    """

    mode: Literal["auto", "required", "none", "tool"] = "auto"
    tool_name: str | None = None

    AUTO: ClassVar[ToolChoice]
    REQUIRED: ClassVar[ToolChoice]
    NONE: ClassVar[ToolChoice]

    def __post_init__(self) -> None:
        if (self.mode == "tool") != (self.tool_name is not None):
            raise ValueError(
                "ToolChoice: give tool_name exactly when mode is 'tool' (use ToolChoice.tool(name))"
            )

    @classmethod
    def tool(cls, name: str) -> ToolChoice:
        """The model must call the tool called `name`."""
        return cls("tool", name)


ToolChoice.AUTO = ToolChoice("auto")
ToolChoice.REQUIRED = ToolChoice("required")
ToolChoice.NONE = ToolChoice("none")


class ChatRequest(msgspec.Struct, frozen=True):
    """Everything one model call needs: the conversation, the tools on offer, and per-call parameters.

    `parameters` holds provider parameters (temperature, max_tokens, top_p, stop, seed, ...) that override the
    model's defaults for this call only.
    """

    messages: Sequence[ChatMessage]
    tool_specifications: Sequence[ToolSpecification] = ()
    tool_choice: ToolChoice | None = None
    parameters: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if type(self.messages) is not tuple:
            force_setattr(self, "messages", tuple(self.messages))
        if type(self.tool_specifications) is not tuple:
            force_setattr(self, "tool_specifications", tuple(self.tool_specifications))


class ChatResponse(msgspec.Struct, frozen=True):
    """One complete answer of the model, with what it cost and why it stopped."""

    ai_message: AiMessage
    token_usage: TokenUsage | None = None
    finish_reason: FinishReason | None = None
    model: str | None = None
    id: str | None = None

    @property
    def text(self) -> str | None:
        """Shortcut for `ai_message.text`."""
        return self.ai_message.text
