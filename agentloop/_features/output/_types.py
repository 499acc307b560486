"""Compiling an output type once: its JSON schema, validator and the shape of its partial values."""

from __future__ import annotations

import dataclasses
import re
import types
from collections.abc import Callable, Mapping
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    Literal,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

import msgspec
from typing_extensions import TypedDict, is_typeddict

from agentloop._features.output._partial import list_item_adapter
from agentloop._tools._schema import strip_titles
from agentloop._values._context import ToolContext
from agentloop._values._errors import IllegalConfigurationError, ModelRetry
from agentloop.models._strict import has_maps, restore_maps

if TYPE_CHECKING:
    import pydantic


OutputMode = Literal["tool", "native", "prompted"]
OutputValidator = Callable[[Any, ToolContext], Any]
"""`(value, ctx) -> value` (sync or async): checks or adjusts a valid output; raise `ModelRetry` to retry."""

DEFAULT_OUTPUT_TOOL_NAME = "final_result"
PROCESSED = "Final result processed."
NOT_USED = "Output tool not used: a final result was already processed."

MODES = ("tool", "native", "prompted")
_UNION_TYPES: tuple[Any, ...] = (Union, types.UnionType)
MAX_LISTED_ERRORS = 10
MAX_INPUT_REPR = 80
FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


class InvalidOutput(ModelRetry):
    """An output call that did not validate: `message` is the correction, `output`/`errors` for the record."""

    def __init__(self, message: str, *, output: str | None, errors: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.output = output
        self.errors = errors


# -- compiling a type -----------------------------------------------------------------------------------


class _Field(msgspec.Struct, frozen=True):
    name: str  # the attribute (the JSON key may be an alias)
    adapter: pydantic.TypeAdapter[Any]


class OutputMember(msgspec.Struct, frozen=True):
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
    list_items: Mapping[str, pydantic.TypeAdapter[Any]] = msgspec.field(default_factory=dict)
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
        import pydantic

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
        import pydantic

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


class OutputSchema(msgspec.Struct, frozen=True):
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
    import pydantic

    return isinstance(t, type) and (
        issubclass(t, pydantic.BaseModel) or dataclasses.is_dataclass(t) or is_typeddict(t)
    )


def _member(output_type: Any, tool_name: str) -> OutputMember:
    import pydantic

    try:
        adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(output_type)
        raw = adapter.json_schema()
    except Exception as exc:
        raise IllegalConfigurationError(
            f"output_type {output_type!r} cannot be validated or described as JSON: {exc}"
        ) from exc
    schema: dict[str, Any] = _root_inlined(strip_titles(raw))
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
