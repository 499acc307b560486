"""Structured output: `output_type=T` turns the model's answer into a validated `T`.

`output_schema(T)` compiles a type once: its JSON schema as the model sees it (a type that is not a JSON
object travels wrapped as `{"result": ...}`), its validator, and what partial values look like while it
streams. `OutputRun` is one invocation's use of it, in one of three modes:

* `tool`: each output schema is a tool (`final_result`, or `final_result_<Member>` for each model of a
  union); a valid call ends the invocation once every call of its response ran (first valid call wins).
* `native`: the provider's own structured output (`ChatRequest.response_format`); the answer text is JSON.
* `prompted`: the schema goes into the system message and the JSON is read out of the answer text.

An invalid output goes back to the model as a correction naming each failing field, at most
`output_retries` times; then `OutputValidationError`.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import types
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    Literal,
    NoReturn,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

import msgspec
import pydantic
from typing_extensions import TypedDict, is_typeddict

from ._context import ToolContext
from ._errors import IllegalConfigurationError, ModelRetry, OutputValidationError
from ._events import PartialOutput
from ._execution import ToolExecution
from ._messages import (
    AiMessage,
    ChatRequest,
    ResponseFormat,
    SystemMessage,
    ToolChoice,
    ToolExecutionRequest,
    UserMessage,
)
from ._partial_json import PartialJSON
from ._partial_output import PartialTracker, list_item_adapter
from ._schema import _strip_titles
from ._spec import ToolSpecification
from ._tool import ReturnBehavior, Tool
from .models._base import ModelEvent, TextDelta, ToolCallDelta
from .models._strict import has_maps, restore_maps

if TYPE_CHECKING:
    from ._loop import Listener

__all__ = [
    "DEFAULT_OUTPUT_TOOL_NAME",
    "NOT_FOUND",
    "OutputMode",
    "OutputRun",
    "OutputSchema",
    "OutputValidator",
    "RetryOutput",
    "output_schema",
    "structured_output",
]

OutputMode = Literal["tool", "native", "prompted"]
OutputValidator = Callable[[Any, ToolContext], Any]
"""`(value, ctx) -> value` (sync or async): checks or adjusts a valid output; raise `ModelRetry` to retry."""

DEFAULT_OUTPUT_TOOL_NAME = "final_result"
PROCESSED = "Final result processed."
NOT_USED = "Output tool not used: a final result was already processed."
NOT_FOUND: Any = object()
"""`OutputRun.found()` when the round holds no valid output."""

_MODES = ("tool", "native", "prompted")
_UNION_TYPES: tuple[Any, ...] = (Union, types.UnionType)
_MAX_LISTED_ERRORS = 10
_MAX_INPUT_REPR = 80
_MAX_JSON_STARTS = 8
"""How many `{` of a prompted answer may start its JSON (prose may hold a few braces before it)."""
_raw_decode = json.JSONDecoder().raw_decode
_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


class RetryOutput(Exception):
    """The answer was not a valid output and retries remain: `message` asks the model to correct it."""

    def __init__(self, message: UserMessage) -> None:
        super().__init__(message.text)
        self.message = message


class _InvalidOutput(ModelRetry):
    """An output call that did not validate: `message` is the correction, `output`/`errors` for the record."""

    def __init__(self, message: str, *, output: str | None, errors: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.output = output
        self.errors = errors


# -- compiling a type -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Field:
    name: str  # the attribute (the JSON key may be an alias)
    adapter: pydantic.TypeAdapter[Any]


@dataclass(frozen=True, slots=True)
class OutputMember:
    """One output schema: the whole output type, or one model of a union (one output tool each)."""

    type_: Any
    tool_name: str
    description: str | None
    schema: dict[str, Any]
    """JSON schema of the wire object (always an object)."""
    wrapped: bool
    """The value travels as `{"result": value}`."""
    adapter: pydantic.TypeAdapter[Any]
    """Validates the wire object."""
    fields: Mapping[str, _Field] | None
    """Per-key validators, for partial values built field by field (pydantic models, TypedDicts)."""
    build: Callable[[dict[str, Any]], Any] | None
    required: frozenset[str] = frozenset()
    """The wire keys a whole value needs."""
    list_items: Mapping[str, pydantic.TypeAdapter[Any]] = dataclasses.field(default_factory=dict)
    """The item validators of the fields that are plain lists (`list[T]`), validated item by item."""
    result_items: pydantic.TypeAdapter[Any] | None = None
    """A wrapped `list[T]`: the validator of its items."""
    maps: bool = False
    """The schema holds a free-form map, which a strict provider receives as a list of {key, value} entries
    (`strict_schema`): such an answer is turned back into the map before it is validated."""

    def restored(self, raw: Any) -> Any:
        """A decoded answer with its maps as objects (a map that came as entries converted back)."""
        if not self.maps:
            return raw
        try:
            return restore_maps(self.schema, raw)
        except RecursionError:
            return raw  # nested past Python's limit: validation reports it

    def validate_json(self, text: str) -> Any:
        """The value of one wire JSON text; raises `pydantic.ValidationError`."""
        if self.maps:
            try:
                decoded = msgspec.json.decode(text)
            except (msgspec.DecodeError, RecursionError):
                pass  # the validator reports what is wrong with it
            else:
                restored = self.restored(decoded)
                if restored is not decoded:
                    text = msgspec.json.encode(restored).decode()
        try:
            value = self.adapter.validate_json(text)
        except pydantic.ValidationError as error:
            # pydantic's JSON parser stops at 200 levels of nesting, its validator goes deeper (a recursive
            # model 100 levels deep nests 200 JSON containers when each level is a list): decode the JSON
            # with msgspec (1,000 levels) and validate the Python value, with the same rules otherwise.
            if not _nesting_too_deep(error):
                raise
            try:
                data = msgspec.json.decode(text)
            except (msgspec.DecodeError, RecursionError):
                raise error from None
            value = self.adapter.validate_python(data)
        return value["result"] if self.wrapped else value

    def partial(self, raw: Any) -> tuple[Any, Any] | None:
        """The partial value of `raw` (a partial wire object) and the part of `raw` it stands for, or None."""
        if not isinstance(raw, dict):
            return None
        raw = self.restored(raw)
        if self.wrapped and "result" not in raw:
            return None
        if self.fields is None or self.required.issubset(raw):  # else it cannot validate whole: skip that
            try:
                value = self.adapter.validate_python(raw, experimental_allow_partial="trailing-strings")
            except pydantic.ValidationError:
                pass
            else:
                return (value["result"] if self.wrapped else value), raw
        if self.fields is None or self.build is None:
            return None
        kept: dict[str, Any] = {}
        used: dict[str, Any] = {}
        for key, item in raw.items():
            field = self.fields.get(key)
            if field is None:
                continue
            try:
                kept[field.name] = field.adapter.validate_python(
                    item, experimental_allow_partial="trailing-strings"
                )
            except pydantic.ValidationError:
                continue
            used[key] = item
        if not used:
            return None
        return self.build(kept), used


@dataclass(frozen=True, slots=True)
class OutputSchema:
    """A compiled output type: `members` for the tool mode (one per union model), `whole` for the others."""

    type_: Any
    members: tuple[OutputMember, ...]
    whole: OutputMember


_cache: dict[tuple[Any, str], OutputSchema] = {}
_typed_dict: Any = TypedDict  # called with a runtime type, which a type checker cannot follow


def output_schema(output_type: Any, tool_name: str = DEFAULT_OUTPUT_TOOL_NAME) -> OutputSchema:
    """Compiles `output_type` (cached); raises `IllegalConfigurationError` for a type that cannot be one."""
    if isinstance(output_type, (list, tuple)):
        if not output_type:
            raise IllegalConfigurationError("output_type: an empty list names no type")
        output_type = output_type[0] if len(output_type) == 1 else Union[tuple(output_type)]
    key = (output_type, tool_name)
    try:
        found = _cache.get(key)
    except TypeError:  # an unhashable type form: compile it every time
        return _compile(output_type, tool_name)
    if found is None:
        found = _cache[key] = _compile(output_type, tool_name)
    return found


def _compile(output_type: Any, tool_name: str) -> OutputSchema:
    whole = _member(output_type, tool_name)
    options = get_args(output_type) if get_origin(output_type) in _UNION_TYPES else ()
    if options and all(_is_object_type(option) for option in options):
        names = [option.__name__ for option in options]
        if len(set(names)) != len(names):
            raise IllegalConfigurationError(
                f"output_type {output_type!r}: the union's models need distinct class names (each becomes "
                "an output tool named after it)"
            )
        members = tuple(_member(option, f"{tool_name}_{option.__name__}") for option in options)
    else:
        members = (whole,)
    return OutputSchema(output_type, members, whole)


def _is_object_type(t: Any) -> bool:
    return isinstance(t, type) and (
        issubclass(t, pydantic.BaseModel) or dataclasses.is_dataclass(t) or is_typeddict(t)
    )


def _member(output_type: Any, tool_name: str) -> OutputMember:
    try:
        adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(output_type)
        raw = adapter.json_schema()
    except Exception as exc:
        raise IllegalConfigurationError(
            f"output_type {output_type!r} cannot be validated or described as JSON: {exc}"
        ) from exc
    schema: dict[str, Any] = _root_inlined(_strip_titles(raw))
    description = schema.get("description") if _is_object_type(output_type) else None
    wrapped = not (_is_object_type(output_type) and schema.get("type") == "object")
    fields: Mapping[str, _Field] | None = None
    build: Callable[[dict[str, Any]], Any] | None = None
    if wrapped:
        defs = schema.pop("$defs", None)
        schema = {"type": "object", "properties": {"result": schema}, "required": ["result"]}
        if defs:
            schema["$defs"] = defs
        wrapper = _typed_dict("OutputWrapper", {"result": output_type})
        adapter = pydantic.TypeAdapter(wrapper)
    elif isinstance(output_type, type) and issubclass(output_type, pydantic.BaseModel):
        fields = {
            (info.alias or name): _Field(name, pydantic.TypeAdapter(_annotated(info)))
            for name, info in output_type.model_fields.items()
        }
        model: type[pydantic.BaseModel] = output_type
        build = _constructor(model)
    elif is_typeddict(output_type):
        hints = get_type_hints(output_type, include_extras=True)
        fields = {name: _Field(name, pydantic.TypeAdapter(hint)) for name, hint in hints.items()}
        build = dict
    required = frozenset(schema.get("required", ()))
    list_items: dict[str, pydantic.TypeAdapter[Any]] = {}
    if isinstance(output_type, type) and issubclass(output_type, pydantic.BaseModel) and not wrapped:
        for name, info in output_type.model_fields.items():
            items = None if info.metadata else list_item_adapter(info.annotation)
            if items is not None:
                list_items[info.alias or name] = items
    elif is_typeddict(output_type):
        for name, hint in get_type_hints(output_type, include_extras=True).items():
            items = list_item_adapter(hint)
            if items is not None:
                list_items[name] = items
    return OutputMember(
        output_type,
        tool_name,
        description,
        schema,
        wrapped,
        adapter,
        fields,
        build,
        required,
        list_items,
        list_item_adapter(output_type) if wrapped else None,
        has_maps(schema),
    )


def _nesting_too_deep(error: pydantic.ValidationError) -> bool:
    return any(
        e["type"] == "json_invalid" and "recursion limit" in str(e.get("ctx", {}).get("error", e["msg"]))
        for e in error.errors(include_url=False)
    )


def _root_inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """A recursive model's schema is a `$ref` into `$defs` (its own definition): the root is that definition
    (kept in `$defs` for the references inside it), so the model is the object itself, not wrapped."""
    ref = schema.get("$ref")
    defs = schema.get("$defs")
    if not isinstance(ref, str) or not ref.startswith("#/$defs/") or not isinstance(defs, dict):
        return schema
    target = defs.get(ref[len("#/$defs/") :])
    if not isinstance(target, dict):
        return schema
    rest = {key: value for key, value in schema.items() if key not in ("$ref", "$defs")}
    return {**target, **rest, "$defs": defs}


def _annotated(info: Any) -> Any:
    return Annotated[tuple([info.annotation, *info.metadata])] if info.metadata else info.annotation


def _constructor(model: type[pydantic.BaseModel]) -> Callable[[dict[str, Any]], Any]:
    def build(values: dict[str, Any]) -> Any:
        return model.model_construct(**values)

    return build


# -- one invocation -------------------------------------------------------------------------------------


class OutputRun:
    """Structured output in one invocation: what the requests carry, and judging what the model answered."""

    __slots__ = ("_failures", "mode", "retries", "schema", "validator")

    def __init__(
        self, schema: OutputSchema | None, mode: OutputMode, retries: int, validator: OutputValidator | None
    ) -> None:
        self.schema = schema
        self.mode = mode
        self.retries = retries
        self.validator = validator
        self._failures = 0

    # -- what the model is told ---------------------------------------------------------------------

    @property
    def _schema(self) -> OutputSchema:
        assert self.schema is not None
        return self.schema

    def tools(self) -> list[Tool]:
        """The output tools (tool mode), one per member; a valid call's `result_object` is the value."""
        return [self._tool(member) for member in self._schema.members]

    def _tool(self, member: OutputMember) -> Tool:
        description = member.description or "Give the final result."
        if len(self._schema.members) > 1:
            description = f"Give the final result as a {member.type_.__name__}. {description}"
        specification = ToolSpecification(member.tool_name, description, member.schema)

        async def executor(request: ToolExecutionRequest, context: ToolContext) -> Any:
            return await self._judge(member, request.arguments, context, "call the tool again")

        return Tool(
            specification,
            executor,
            return_behavior=ReturnBehavior.IMMEDIATE,
            result_converter=_processed,
            source=f"output tool {member.tool_name!r}",
        )

    def instructions(self) -> str:
        """The prompted mode's addition to the system message."""
        schema = msgspec.json.encode(self._schema.whole.schema).decode()
        return (
            "Answer with a JSON object that matches this JSON schema, and nothing else (no prose, no code "
            f"fence):\n{schema}"
        )

    def request(self, request: ChatRequest) -> ChatRequest:
        """The request as this mode sends it: the tool mode asks for a tool call, native for the schema."""
        if self.mode == "tool":
            return msgspec.structs.replace(request, tool_choice=ToolChoice.REQUIRED)
        if self.mode == "native":
            whole = self._schema.whole
            name = _format_name(whole.type_)
            format = ResponseFormat(whole.schema, name=name, description=whole.description)
            return msgspec.structs.replace(request, response_format=format)
        return request

    def system_message(self, message: SystemMessage | None) -> SystemMessage | None:
        """The system message with the prompted mode's instructions added (unchanged in other modes)."""
        if self.mode != "prompted" or self.schema is None:
            return message
        text = self.instructions()
        return SystemMessage(f"{message.text}\n\n{text}" if message is not None else text)

    # -- judging the answer -------------------------------------------------------------------------

    async def answer(self, message: AiMessage, context: ToolContext) -> Any:
        """The output of an answer without tool calls; raises `RetryOutput` (a correction for the model)
        or, once retries ran out, `OutputValidationError`."""
        if self.schema is None:  # plain text, checked by the output validator
            return await self._check_text(message, context)
        if self.mode == "tool":
            names = " or ".join(repr(m.tool_name) for m in self.schema.members)
            self._failed(
                f"Answer by calling the tool {names} with the final result; plain text is not accepted.",
                message.text,
                [{"loc": (), "msg": "no output tool was called", "type": "missing_output_call"}],
            )
        text = _json_text(message.text or "")
        try:
            return await self._judge(self.schema.whole, text, context, "answer again with the JSON only")
        except _InvalidOutput as invalid:
            self._failed(invalid.message, message.text, invalid.errors)

    async def _check_text(self, message: AiMessage, context: ToolContext) -> Any:
        assert self.validator is not None
        try:
            value = self.validator(message.text, context)
            return (await value) if inspect.isawaitable(value) else value
        except ModelRetry as retry:
            self._failed(retry.message, message.text, [_retry_error(retry)])

    @property
    def attempt(self) -> int:
        """The output attempt under way, from 1: each invalid output sent back for correction adds one."""
        return self._failures + 1

    @property
    def retrying(self) -> bool:
        """True once an output was sent back for correction: from then on the invocation's messages are held
        and stored with the valid output (an `OutputValidationError` stores none of them)."""
        return self._failures > 0

    def _failed(self, correction: str, output: str | None, errors: list[dict[str, Any]]) -> NoReturn:
        self._failures += 1
        if self._failures > self.retries:
            raise _exhausted(self.retries, output, errors)
        raise RetryOutput(UserMessage(correction))

    def found(self, executions: Sequence[ToolExecution]) -> Any:
        """The output of a tool round (its first valid output call), or `NOT_FOUND`; raises
        `OutputValidationError` when the round's output calls failed and retries ran out."""
        if self.schema is None:
            return NOT_FOUND
        names = {member.tool_name for member in self.schema.members}
        failed: ToolExecution | None = None
        for execution in executions:
            if execution.request.name not in names:
                continue
            if execution.error is None:
                return execution.result_object
            failed = failed or execution
        if failed is not None:  # the output calls failed: one retry used
            self._failures += 1
            if self._failures > self.retries:
                error = failed.error
                if isinstance(error, _InvalidOutput):
                    raise _exhausted(self.retries, error.output, error.errors)
                kind = "model_retry" if isinstance(error, ModelRetry) else type(error).__name__
                raise _exhausted(
                    self.retries, failed.request.arguments, [{"loc": (), "msg": failed.result, "type": kind}]
                )
        return NOT_FOUND

    async def _judge(self, member: OutputMember, text: str, context: ToolContext, how: str) -> Any:
        """The validated (and user-checked) value of `text`, or `_InvalidOutput` with the correction."""
        try:
            value = member.validate_json(text)
        except pydantic.ValidationError as exc:
            value = self._nulls_as_absent(member, text)
            if value is NOT_FOUND:
                errors = [dict(e) for e in exc.errors(include_url=False)]
                raise _InvalidOutput(_correction(errors, how), output=text, errors=errors) from None
        if self.validator is not None:
            try:
                value = self.validator(value, context)
                if inspect.isawaitable(value):
                    value = await value
            except ModelRetry as retry:
                raise _InvalidOutput(
                    f"{retry.message}\nFix this and {how}.", output=text, errors=[_retry_error(retry)]
                ) from None
            except Exception as exc:  # a failing validator is a failed output, whatever the mode
                message = str(exc) or type(exc).__name__
                error = {"loc": (), "msg": message, "type": type(exc).__name__}
                raise _InvalidOutput(f"{message}\nFix this and {how}.", output=text, errors=[error]) from exc
        return value

    def _nulls_as_absent(self, member: OutputMember, text: str) -> Any:
        """Native mode: a strict schema made every optional field required and nullable, so a null may
        stand for a field left out: the value without its nulls, if that validates (else `NOT_FOUND`)."""
        if self.mode != "native":
            return NOT_FOUND
        try:
            value = member.adapter.validate_python(_without_nulls(member.restored(msgspec.json.decode(text))))
        except (msgspec.DecodeError, pydantic.ValidationError, RecursionError):
            return NOT_FOUND
        return value["result"] if member.wrapped else value

    # -- streaming ----------------------------------------------------------------------------------

    def watch(
        self, events: AsyncIterator[ModelEvent], round: int, typed: Listener | None
    ) -> AsyncIterator[ModelEvent]:
        """`events` with partial outputs sent to `typed` as they stream; in the native and prompted modes
        the answer text is the output, so it is not passed on as text."""
        return _Watch(events, self, round, typed, self.attempt)


class _Watch:
    """Model events passing by; the output's JSON (a tool call's arguments, or the text) is parsed as it
    streams and every partial value that grew is sent as a `PartialOutput`."""

    __slots__ = (
        "_events",
        "_index",
        "_last",
        "_member",
        "_parser",
        "_seen",
        "_text",
        "_tools",
        "_tracker",
        "_typed",
        "attempt",
        "round",
    )

    def __init__(
        self,
        events: AsyncIterator[ModelEvent],
        run: OutputRun,
        round: int,
        typed: Listener | None,
        attempt: int,
    ) -> None:
        self._events = events
        self._typed = typed
        self.round = round
        self.attempt = attempt
        self._text = run.mode != "tool"  # the text is the output: not passed on
        schema = run.schema
        self._text = self._text and schema is not None
        self._tools = {m.tool_name: m for m in schema.members} if typed and schema is not None else {}
        self._member = schema.whole if self._text and typed and schema is not None else None
        self._tracker = PartialTracker(self._member) if self._member is not None else None
        self._index: int | None = None  # the output call being watched (tool mode)
        self._parser = PartialJSON()
        self._seen: dict[str, int] = {}  # the shape of the last partial sent (see `_feed`)
        self._last: Any = NOT_FOUND  # the last partial sent

    def __aiter__(self) -> _Watch:
        return self

    async def __anext__(self) -> ModelEvent:
        while True:
            event = await self._events.__anext__()
            kind = type(event)
            if kind is TextDelta and self._text:
                if self._member is not None:
                    await self._feed(event.text)  # type: ignore[union-attr]
                continue
            if kind is ToolCallDelta and self._tools:
                delta: Any = event
                if self._index is None and delta.name in self._tools:
                    self._index = delta.index
                    self._member = self._tools[delta.name]
                    self._tracker = PartialTracker(self._member)
                if delta.index == self._index and delta.arguments:
                    await self._feed(delta.arguments)
            return event

    async def _feed(self, piece: str) -> None:
        parser = self._parser
        if not parser.feed(piece) or parser.done:  # the whole value comes with the final result
            return
        tracker = self._tracker
        assert tracker is not None and self._typed is not None
        partial = tracker.update(parser.value)
        if partial is None:
            return
        value, used = partial
        # Its fields, and for a list its length: a partial that would have fewer than the last one waits.
        shape = {key: len(item) if isinstance(item, list) else -1 for key, item in used.items()}
        seen = self._seen
        if any(shape.get(key, -2) < size for key, size in seen.items()) or _same(value, self._last):
            return
        self._seen, self._last = shape, value
        await self._typed(PartialOutput(value, self.round, self.attempt))


def _same(value: Any, last: Any) -> bool:
    """Whether a partial equals the last one sent; cheap: a list field is compared by length and last item
    (the items before it were whole, and stay as they were)."""
    if type(value) is not type(last):
        return False
    if isinstance(value, pydantic.BaseModel):
        value, last = value.__dict__, last.__dict__
    if not isinstance(value, dict):
        return _same_item(value, last)
    if value.keys() != last.keys():
        return False
    return all(_same_item(item, last[key]) for key, item in value.items())


def _same_item(item: Any, last: Any) -> bool:
    if isinstance(item, list) and isinstance(last, list):
        return len(item) == len(last) and (not item or item[-1] == last[-1])
    return bool(item == last)


# -- helpers --------------------------------------------------------------------------------------------

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def structured_output(agent: Any, output_type: Any) -> OutputRun | None:
    """The `OutputRun` of one invocation of `agent` (its output settings, `output_type` for this call), or
    None for plain text without a validator. The native mode falls back to the tool mode for a model that
    does not declare `supports_response_format`."""
    mode = check_mode(agent.output_mode)
    retries = check_retries(agent.output_retries)
    validator = agent.output_validator
    if validator is not None and not callable(validator):
        raise IllegalConfigurationError(
            f"output_validator must be a function (value, ctx) -> value, got {type(validator).__name__}"
        )
    name = agent.output_tool_name
    if not isinstance(name, str) or not _TOOL_NAME.match(name):
        raise IllegalConfigurationError(
            f"output_tool_name must be 1-64 letters, digits, '_' or '-', got {name!r}"
        )
    if output_type is str:
        return None if validator is None else OutputRun(None, "prompted", retries, validator)
    schema = output_schema(output_type, name)
    if mode == "native" and not getattr(agent.model, "supports_response_format", False):
        mode = "tool"
    return OutputRun(schema, mode, retries, validator)


def check_mode(mode: str) -> OutputMode:
    if mode not in _MODES:
        raise IllegalConfigurationError(f"output_mode must be 'tool', 'native' or 'prompted', got {mode!r}")
    return mode  # type: ignore[return-value]


def check_retries(retries: int) -> int:
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise IllegalConfigurationError(f"output_retries must be an int >= 0, got {retries!r}")
    return retries


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


def _processed(value: Any) -> str:
    return PROCESSED


def _json_text(text: str) -> str:
    """The JSON in an answer: a code fence's content, or the first whole JSON object in the text (prose
    before and after it, a `{` in the prose before it, are passed over); failing that, the text from the
    first `{` to the last `}`, so the correction names what is wrong with it."""
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return text
    if start == 0 and end == len(text) - 1:
        return text  # the whole answer is the candidate: the validator reads it at once
    tries = 0
    while start >= 0 and tries < _MAX_JSON_STARTS:
        try:
            _, stop = _raw_decode(text, start)
        except (ValueError, RecursionError):
            start, tries = text.find("{", start + 1), tries + 1
            continue
        return text[start:stop]
    return text[text.find("{") : end + 1]


def _format_name(output_type: Any) -> str:
    name = getattr(output_type, "__name__", None)
    if isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
        return name
    return "output"


def _correction(errors: list[dict[str, Any]], how: str) -> str:
    """The retry request for a failed validation: one line per error, naming the field and what it needs."""
    lines = ["The output is not valid:"]
    for error in errors[:_MAX_LISTED_ERRORS]:
        where = _where(error.get("loc", ())) or "(the whole output)"
        line = f"- {where}: {error.get('msg')}"
        if error.get("type") not in ("missing", "json_invalid") and "input" in error:
            shown = repr(error["input"])
            if len(shown) > _MAX_INPUT_REPR:
                shown = shown[: _MAX_INPUT_REPR - 3] + "..."
            line += f" (got {shown})"
        lines.append(line)
    if len(errors) > _MAX_LISTED_ERRORS:
        lines.append(f"- ... and {len(errors) - _MAX_LISTED_ERRORS} more")
    lines.append(f"Fix these errors and {how}.")
    return "\n".join(lines)


def _where(loc: Sequence[Any]) -> str:
    """A field's path, shortened when it is deep (a recursive model nested 250 levels)."""
    parts = [str(part) for part in loc]
    if len(parts) > 8:
        parts = [*parts[:3], f"...({len(parts) - 5} levels)...", *parts[-2:]]
    return ".".join(parts)


def _retry_error(retry: ModelRetry) -> dict[str, Any]:
    return {"loc": (), "msg": retry.message, "type": "model_retry"}


def _exhausted(retries: int, output: str | None, errors: list[dict[str, Any]]) -> OutputValidationError:
    summary = "; ".join(f"{_where(e.get('loc', ())) or 'output'}: {e.get('msg')}" for e in errors[:3])
    return OutputValidationError(
        f"The model's output was still invalid after {retries} "
        f"{'retry' if retries == 1 else 'retries'} (output_retries={retries}): {summary}",
        output=output,
        errors=errors,
    )
