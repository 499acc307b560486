"""agentloop's storage format: messages, requests, responses, tool specifications and tool executions as
versioned msgspec JSON, so what one process writes another (or a later release) reads back exactly.

A document is `{"format": 1, "kind": "<kind>", "data": <value>}`. Memory stores keep rows leaner: the format
number beside the row and the bare `data` (a JSON array of messages). Messages are tagged by `type`
(`system`, `user`, `ai`, `tool_result`); fields equal to their default are left out. A later format adds an
upgrade step from the previous one, so rows written today stay readable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

import msgspec

from ._errors import CodecError, RecordedToolError
from ._messages import ChatMessage, ChatRequest, ChatResponse, ToolExecutionRequest
from ._spec import ToolSpecification
from ._text import valid_value

if TYPE_CHECKING:
    from ._records import ToolExecution

__all__ = [
    "FORMAT",
    "KINDS",
    "CodecError",
    "RecordedToolError",
    "decode",
    "decode_messages",
    "encode",
    "encode_messages",
]

FORMAT: Final = 1
"""The format this release writes. Readers accept it and every earlier one."""


class _Error(msgspec.Struct, frozen=True):
    type: str
    message: str


class StoredToolExecution(msgspec.Struct, frozen=True, omit_defaults=True):
    """`ToolExecution` as stored: the error as its class name and message, `result_object` as JSON."""

    request: ToolExecutionRequest
    result: str
    index: int
    round: int
    started_at: datetime
    finished_at: datetime
    duration: float
    return_behavior: str
    is_error: bool = False
    error: _Error | None = None
    result_object: Any = None


def execution_to_stored(execution: ToolExecution) -> StoredToolExecution:
    error = execution.error
    return StoredToolExecution(
        request=execution.request,
        result=execution.result,
        index=execution.index,
        round=execution.round,
        started_at=execution.started_at,
        finished_at=execution.finished_at,
        duration=execution.duration,
        return_behavior=execution.return_behavior.value,
        is_error=execution.is_error,
        error=None if error is None else _Error(_error_type(error), str(error)),
        result_object=_jsonable(execution.result_object),
    )


def execution_from_stored(stored: StoredToolExecution) -> ToolExecution:
    from ._records import ReturnBehavior, ToolExecution

    error = stored.error
    return ToolExecution(
        request=stored.request,
        result=stored.result,
        result_object=stored.result_object,
        error=None
        if error is None
        else RecordedToolError(error.message, error_type=current_type_name(error.type)),
        index=stored.index,
        round=stored.round,
        started_at=stored.started_at,
        finished_at=stored.finished_at,
        duration=stored.duration,
        return_behavior=ReturnBehavior(stored.return_behavior),
        is_error=stored.is_error,
    )


def _error_type(error: BaseException) -> str:
    if isinstance(error, RecordedToolError):
        return error.error_type
    return stored_type_name(type(error))


def stored_type_name(kind: type) -> str:
    """How stored documents name an exception class: builtins by their name, others by `__module__` and
    qualified name, which for agentloop's public classes is their public path (`agentloop.ToolDeniedError`,
    `agentloop.mcp.MCPToolError`: see `agentloop/_public.py`). Documents written before that named some by
    private module path; readers translate those names (`current_type_name`)."""
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


_OLD_TYPE_NAMES = {
    "agentloop.mcp._results.MCPToolError": "agentloop.MCPToolError",
    "agentloop.mcp._toolset.MCPServerError": "agentloop.MCPServerError",
    "agentloop.mcp.MCPToolError": "agentloop.MCPToolError",
    "agentloop.mcp.MCPServerError": "agentloop.MCPServerError",
    "agentloop.middleware._errors.UsageLimitExceeded": "agentloop.UsageLimitExceeded",
    "agentloop.middleware._errors.GuardrailTripped": "agentloop.GuardrailTripped",
}
"""Type names earlier releases stored for classes that now have a public path."""


def current_type_name(name: str) -> str:
    """A stored type name as today's writer spells it: `agentloop._errors.X` (format 1 documents) is
    `agentloop.X`, and the renamed ones in `_OLD_TYPE_NAMES`; any other name is kept as stored."""
    if name.startswith("agentloop._errors."):
        return "agentloop." + name.removeprefix("agentloop._errors.")
    return _OLD_TYPE_NAMES.get(name, name)


def _jsonable(value: Any) -> Any:
    """`value` as JSON data (pydantic's rules, as tool results use); its repr when it has no JSON form."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value, fallback=repr)


class _Kind:
    """One kind of document: its Python type, the stored type, and the conversions between them."""

    __slots__ = ("decoder", "from_stored", "name", "python_type", "to_stored")

    def __init__(
        self,
        name: str,
        python_type: type,
        stored_type: Any,
        to_stored: Callable[[Any], Any] = lambda v: v,
        from_stored: Callable[[Any], Any] = lambda v: v,
    ) -> None:
        self.name = name
        self.python_type = python_type
        self.to_stored = to_stored
        self.from_stored = from_stored
        self.decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(_document(name, stored_type))


def _document(name: str, stored_type: Any) -> type:
    """The typed envelope of one kind, so a current-format document decodes in one pass."""
    return msgspec.defstruct(
        f"_{name}_document",
        [("format", int), ("kind", str), ("data", stored_type)],
        frozen=True,
    )


def _execution_kind() -> _Kind:
    from ._records import ToolExecution

    return _Kind(
        "tool_execution", ToolExecution, StoredToolExecution, execution_to_stored, execution_from_stored
    )


def _executions_kind() -> _Kind:
    return _Kind(
        "tool_executions",
        list,
        list[StoredToolExecution],
        lambda v: [execution_to_stored(e) for e in v],
        lambda v: [execution_from_stored(e) for e in v],
    )


KINDS: Final = (
    "messages",
    "chat_request",
    "chat_response",
    "tool_specification",
    "tool_specifications",
    "tool_execution",
    "tool_executions",
)
"""Every kind of document: a list of messages, one request, response, specification or execution, or a
list of specifications or executions."""

_factories: dict[str, Callable[[], _Kind]] = {
    "messages": lambda: _Kind("messages", list, list[ChatMessage], list),
    "chat_request": lambda: _Kind("chat_request", ChatRequest, ChatRequest),
    "chat_response": lambda: _Kind("chat_response", ChatResponse, ChatResponse),
    "tool_specification": lambda: _Kind("tool_specification", ToolSpecification, ToolSpecification),
    "tool_specifications": lambda: _Kind("tool_specifications", list, list[ToolSpecification], list),
    "tool_execution": _execution_kind,
    "tool_executions": _executions_kind,
}
_kinds: dict[str, _Kind] = {}


def _kind(name: str) -> _Kind:
    found = _kinds.get(name)
    if found is None:
        factory = _factories.get(name)
        if factory is None:
            raise CodecError(f"Unknown document kind {name!r}; known kinds: {', '.join(KINDS)}")
        found = _kinds[name] = factory()
    return found


def _kind_of(value: Any) -> str:
    if isinstance(value, ChatRequest):
        return "chat_request"
    if isinstance(value, ChatResponse):
        return "chat_response"
    if isinstance(value, ToolSpecification):
        return "tool_specification"
    from ._records import ToolExecution

    if isinstance(value, ToolExecution):
        return "tool_execution"
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, ToolSpecification) for v in value) and value:
            return "tool_specifications"
        if all(isinstance(v, ToolExecution) for v in value) and value:
            return "tool_executions"
        return "messages"
    raise CodecError(
        f"Cannot encode a {type(value).__name__}: give a list of messages, a ChatRequest, a ChatResponse, "
        "a ToolSpecification or a ToolExecution (or a list of either of the last two)"
    )


_encoder = msgspec.json.Encoder()


class _Head(msgspec.Struct, frozen=True):
    format: int
    kind: str


_probe = msgspec.json.Decoder(_Head)


def encode(value: Any, kind: str | None = None) -> bytes:
    """`value` as a JSON document of the current format; `decode` reads it back equal to `value`.

    The kind is found from the value (an empty list encodes as `messages`); give `kind` to say it.
    """
    spec = _kind(kind or _kind_of(value))
    try:
        document = {"format": FORMAT, "kind": spec.name, "data": spec.to_stored(value)}
        try:
            return _encoder.encode(document)
        except UnicodeEncodeError:  # lone surrogates (see agentloop._values._text) are stored repaired
            return _encoder.encode(valid_value(msgspec.to_builtins(document)))
    except (TypeError, ValueError) as error:
        raise CodecError(f"Cannot encode this {spec.name} as JSON: {error}") from None


def decode(data: bytes | str, kind: str | None = None) -> Any:
    """Reads a document written by `encode` (this release or an earlier one). With `kind`, a document of
    another kind is an error rather than a surprise."""
    try:
        head = _probe.decode(data)
    except msgspec.DecodeError as error:
        raise CodecError(f"Not an agentloop document: {error}") from None
    if kind is not None and head.kind != kind:
        raise CodecError(f"Expected a {kind!r} document, got {head.kind!r}")
    spec = _kind(head.kind)
    if head.format != FORMAT:
        raw = msgspec.json.decode(data)
        raw["data"] = upgrade(head.kind, raw["data"], head.format)
        data = _encoder.encode(raw)
    try:
        return spec.from_stored(spec.decoder.decode(data).data)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError, TypeError) as error:
        raise CodecError(f"Corrupt {head.kind!r} document (format {head.format}): {error}") from None


_UPGRADES: dict[int, Callable[[str, Any], Any]] = {}
"""`format n -> n + 1` steps, keyed by n: each takes (kind, data as plain JSON) and returns the next form."""


def upgrade(kind: str, data: Any, format: int) -> Any:
    """Brings plain JSON `data` of an older `format` to the current one, step by step."""
    if format > FORMAT:
        raise CodecError(
            f"This data was written in storage format {format}, newer than this release reads "
            f"(format {FORMAT}); upgrade agentloop"
        )
    if format < 1:
        raise CodecError(f"Unknown storage format {format}")
    while format < FORMAT:
        data = _UPGRADES[format](kind, data)
        format += 1
    return data


_messages_decoder: msgspec.json.Decoder[list[ChatMessage]] = msgspec.json.Decoder(list[ChatMessage])


def encode_messages(messages: Sequence[ChatMessage]) -> bytes:
    """The bare `data` of a `messages` document (a JSON array), as memory stores keep it beside `FORMAT`."""
    return _encoder.encode(messages if isinstance(messages, list) else list(messages))


def decode_messages(data: bytes | str, format: int = FORMAT) -> list[ChatMessage]:
    """Reads what `encode_messages` wrote in storage format `format`."""
    try:
        if format == FORMAT:
            return _messages_decoder.decode(data)
        return msgspec.convert(upgrade("messages", msgspec.json.decode(data), format), list[ChatMessage])
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise CodecError(f"Corrupt stored messages (format {format}): {error}") from None
