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

from ._content import Content, TextContent, contents_of, text_of
from ._spec import ToolSpecification
from ._text import valid_text, valid_value

__all__ = [
    "AiMessage",
    "ChatMessage",
    "ChatRequest",
    "ChatResponse",
    "FinishReason",
    "ResponseFormat",
    "SystemMessage",
    "TokenUsage",
    "ToolChoice",
    "ToolExecutionRequest",
    "ToolExecutionResultMessage",
    "UserInput",
    "UserMessage",
    "decode_messages",
    "encode_messages",
    "is_whole_object",
]


def _repair(message: msgspec.Struct, field: str) -> None:
    """Replaces lone surrogates in a text field (see `_text`): text for a provider or a store must encode."""
    text = getattr(message, field)
    fixed = valid_text(text)
    if fixed is not text:
        force_setattr(message, field, fixed)


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

    def __post_init__(self) -> None:
        if not self.text.isascii():
            _repair(self, "text")


class UserMessage(msgspec.Struct, frozen=True, tag="user", omit_defaults=True, repr_omit_defaults=True):
    """What the user said: `text`, and the pictures and documents it comes with (`contents`, in order).

    `UserMessage("Hi")` is text only. `UserMessage("What is on this picture?", [ImageContent.from_path(
    "cat.png")])` puts the text first, then the parts; `UserMessage.of(["Compare", a, "with", b])` keeps
    text and parts interleaved. When `contents` holds text parts, `text` is those parts joined by new lines
    (what text-only readers of the history see).
    """

    text: str
    contents: Sequence[Content] = ()

    def __post_init__(self) -> None:
        if self.contents:
            contents = contents_of(self.contents)
            joined = text_of(contents)
            if self.text and self.text != joined:
                if joined:
                    raise ValueError(
                        "UserMessage: text= differs from the text parts of contents=; give the text once, "
                        "as a part of contents"
                    )
                contents = (TextContent(self.text), *contents)
                joined = self.text
            force_setattr(self, "contents", contents)
            force_setattr(self, "text", joined)
        elif type(self.contents) is not tuple:
            force_setattr(self, "contents", ())
        if not self.text.isascii():
            _repair(self, "text")

    @property
    def has_media(self) -> bool:
        """True when the message holds a picture or a document (providers format those; text-only
        models refuse them)."""
        return any(not isinstance(part, TextContent) for part in self.contents)

    @classmethod
    def of(cls, message: UserInput) -> UserMessage:
        """`message` as a UserMessage: a string, a UserMessage, or a list of strings and content parts."""
        if isinstance(message, UserMessage):
            return message
        if isinstance(message, str):
            return cls(message)
        parts = list(message) if isinstance(message, Sequence) else [message]
        return cls("", contents_of(parts))


class AiMessage(msgspec.Struct, frozen=True, tag="ai", omit_defaults=True, repr_omit_defaults=True):
    """What the model answered: text, tool calls, or both (and its reasoning, where the provider sends it).

    `provider_state` holds what a provider needs back on the next call and no other provider understands
    (OpenAI Responses' reasoning items with their encrypted content, Gemini's thought signatures), keyed by
    the provider's name (`"openai-responses"`, `"gemini"`, ...), as plain JSON data. Stores keep it; a
    provider reads only its own key, so a history moves between providers without it.
    """

    text: str | None = None
    tool_execution_requests: Sequence[ToolExecutionRequest] = ()
    thinking: str | None = None
    provider_state: Mapping[str, Any] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        if type(self.tool_execution_requests) is not tuple:
            force_setattr(self, "tool_execution_requests", tuple(self.tool_execution_requests))
        if self.text is not None and not self.text.isascii():
            _repair(self, "text")
        if self.thinking is not None and not self.thinking.isascii():
            _repair(self, "thinking")

    def has_tool_execution_requests(self) -> bool:
        """True when the model asked for at least one tool call."""
        return bool(self.tool_execution_requests)


class ToolExecutionResultMessage(
    msgspec.Struct, frozen=True, tag="tool_result", omit_defaults=True, repr_omit_defaults=True
):
    """The result of one tool call, sent back to the model. `id` matches the request's id.

    `contents` holds the pictures and documents the tool returned (an `ImageContent`, an MCP image result),
    beside `text`. Providers that take them in a tool result send them there; the others send them in a
    user turn right after the tool results, which refer to them by number.
    """

    id: str | None
    tool_name: str
    text: str
    is_error: bool = False
    contents: Sequence[Content] = ()

    def __post_init__(self) -> None:
        if type(self.contents) is not tuple:
            force_setattr(self, "contents", contents_of(self.contents))
        if not self.text.isascii():
            _repair(self, "text")

    @property
    def has_media(self) -> bool:
        """True when the tool returned a picture or a document."""
        return any(not isinstance(part, TextContent) for part in self.contents)

    @classmethod
    def from_request(
        cls,
        request: ToolExecutionRequest,
        text: str,
        *,
        is_error: bool = False,
        contents: Sequence[Content] = (),
    ) -> ToolExecutionResultMessage:
        """The result message answering `request`."""
        return cls(request.id, request.name, text, is_error, contents)


ChatMessage = Union[SystemMessage, UserMessage, AiMessage, ToolExecutionResultMessage]
"""Any message of a conversation."""

UserInput = Union[str, UserMessage, Content, Sequence[Union[str, Content]]]
"""What `Agent.chat` takes as the user's turn: text, a UserMessage, or a list of text and content parts."""

_messages_decoder = msgspec.json.Decoder(list[ChatMessage])
_encoder = msgspec.json.Encoder()


def encode_messages(messages: Sequence[ChatMessage]) -> bytes:
    """Messages as JSON bytes (each tagged with its kind); `decode_messages` reads them back."""
    try:
        return _encoder.encode(list(messages))
    except UnicodeEncodeError:  # in a field messages do not repair themselves (a tool call's arguments...)
        return _encoder.encode(valid_value(msgspec.to_builtins(list(messages))))


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
    `APPROVAL_REQUIRED` one that paused until a person decides on some of its tool calls; `CANCELLED` one
    stopped by `cancel()` (`Result.cancel_reason`); `STEERED` a call
    whose message went to the invocation already running on its memory id in another process
    (`if_busy="steer"`), which answers it there."""

    STOP = "stop"
    LENGTH = "length"
    TOOL_EXECUTION = "tool_execution"
    CONTENT_FILTER = "content_filter"
    OTHER = "other"
    APPROVAL_REQUIRED = "approval_required"
    CANCELLED = "cancelled"
    STEERED = "steered"


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


class ResponseFormat(msgspec.Struct, frozen=True):
    """Asks the model to answer with JSON matching `schema`, through the provider's own structured output
    (OpenAI `response_format`, Anthropic `output_config`, a grammar for the local model).

    `schema` is a plain JSON schema; with `strict` each provider rewrites it to the rules its strict mode
    demands (see `agentloop.models.strict_schema`). `name` and `description` tell the model what it writes.
    """

    schema: Mapping[str, Any]
    name: str = "output"
    description: str | None = None
    strict: bool = True


class ChatRequest(msgspec.Struct, frozen=True):
    """Everything one model call needs: the conversation, the tools on offer, and per-call parameters.

    `parameters` holds provider parameters (temperature, max_tokens, top_p, stop, seed, ...) that override the
    model's defaults for this call only. `response_format` asks for JSON matching a schema (models that
    declare `supports_response_format = True` honour it).
    """

    messages: Sequence[ChatMessage]
    tool_specifications: Sequence[ToolSpecification] = ()
    tool_choice: ToolChoice | None = None
    parameters: Mapping[str, Any] | None = None
    response_format: ResponseFormat | None = None

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
