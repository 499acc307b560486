"""From a tool function's signature to the JSON schema the model sees and the validator its arguments meet.

Everything here runs once per tool function (at `@tool` time, or at first use when an annotation names a type
that is not defined yet); the per-call path only uses the compiled `Signature`. pydantic is imported by the
first compile, not with this module, so `import agentloop` does not load it.
"""

from __future__ import annotations

import inspect
import types
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any, Union, get_args, get_origin, get_type_hints

import msgspec

from .._values._context import ToolContext, ToolMemoryId
from .._values._errors import IllegalConfigurationError

if TYPE_CHECKING:
    import pydantic
    from pydantic.json_schema import GenerateJsonSchema

__all__ = ["P", "Signature", "UnresolvedAnnotationError", "compile_signature"]


@dataclass(frozen=True, slots=True)
class P:
    """Describes one tool parameter to the model: `city: Annotated[str, P("City name")]`.

    `required=False` lets the model leave the parameter out; without a Python default it is then passed as
    None. A parameter with a Python default is optional whatever `required` says.
    `pydantic.Field(description=...)` works wherever `P` does.
    """

    description: str | None = None
    required: bool = True


class UnresolvedAnnotationError(IllegalConfigurationError):
    """An annotation names something that does not exist (yet): the signature is compiled at first use."""


class Signature(msgspec.Struct, frozen=True):
    """A tool function's parameters, compiled: the schema for the model and what each call needs."""

    parameters: dict[str, Any]
    """JSON schema (type object) of the parameters the model fills in."""
    names: tuple[str, ...]
    """The model-visible parameters, in the order the validator returns them."""
    validate: Callable[[Any], Any]
    """Validates a decoded JSON object into an instance whose `__dict__` values follow `names`."""
    memory_id_params: tuple[str, ...]
    context_params: tuple[str, ...]
    memory_id_defaults: frozenset[str] = frozenset()
    """Memory-id parameters with a default: it stands when the call has no memory id (None)."""


_CONFIG: pydantic.ConfigDict = {
    "extra": "ignore",
    "protected_namespaces": (),
    "arbitrary_types_allowed": False,
}
_EMPTY = inspect.Parameter.empty
_UNION_TYPES: tuple[Any, ...] = (Union, types.UnionType)


def compile_signature(
    fn: Callable[..., Any], *, owner: str, skip_first: bool = False, localns: Mapping[str, Any] | None = None
) -> Signature:
    """Compiles `fn`'s parameters. `owner` names the tool in error messages; `skip_first` drops self/cls.

    Raises `IllegalConfigurationError` for a signature a model cannot fill in (`*args`, positional-only
    parameters, types pydantic cannot validate or describe), `UnresolvedAnnotationError` when an annotation
    cannot be resolved.
    """
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError) as exc:
        raise IllegalConfigurationError(f"Tool {owner}: cannot read the signature of {fn!r}: {exc}") from exc
    if skip_first:
        params = params[1:]
    globalns = getattr(inspect.unwrap(fn), "__globals__", {})
    fields: dict[str, Any] = {}
    names: list[str] = []
    memory_ids: list[str] = []
    defaulted: list[str] = []
    contexts: list[str] = []
    for param in params:
        _check_kind(param, owner)
        annotation = _resolve(param, globalns, localns, owner)
        injected = _injection(annotation)
        if injected == "memory_id":
            memory_ids.append(param.name)
            if param.default is not _EMPTY:
                defaulted.append(param.name)
        elif injected == "context":
            contexts.append(param.name)
        else:
            fields[f"p{len(names)}"] = _field(param, annotation)
            names.append(param.name)
    model = _build_model(fn, fields, names, owner)
    return Signature(
        parameters=_json_schema(model, names, owner),
        names=tuple(names),
        validate=model.__pydantic_validator__.validate_python,
        memory_id_params=tuple(memory_ids),
        context_params=tuple(contexts),
        memory_id_defaults=frozenset(defaulted),
    )


def _check_kind(param: inspect.Parameter, owner: str) -> None:
    if param.kind is inspect.Parameter.VAR_POSITIONAL or param.kind is inspect.Parameter.VAR_KEYWORD:
        star = "*" if param.kind is inspect.Parameter.VAR_POSITIONAL else "**"
        raise IllegalConfigurationError(
            f"Tool {owner} takes {star}{param.name}: a model can only fill in named parameters; "
            "declare each parameter explicitly"
        )
    if param.kind is inspect.Parameter.POSITIONAL_ONLY:
        raise IllegalConfigurationError(
            f"Tool {owner}: parameter {param.name!r} is positional-only, but tools are called with keyword "
            "arguments; remove the '/' from the signature"
        )


def _resolve(
    param: inspect.Parameter, globalns: dict[str, Any], localns: Mapping[str, Any] | None, owner: str
) -> Any:
    if param.annotation is _EMPTY:
        return Any

    # get_type_hints on a one-annotation shim resolves string and nested forward references alike, and
    # keeps one unresolvable annotation (or the return annotation) from spoiling the others.
    def shim() -> None: ...

    shim.__annotations__ = {"x": param.annotation}
    try:
        return get_type_hints(shim, globalns, dict(localns or {}), include_extras=True)["x"]
    except NameError as exc:
        raise UnresolvedAnnotationError(
            f"Tool {owner}: the annotation of parameter {param.name!r} ({param.annotation!r}) cannot be "
            f"resolved: {exc}. Define the type before the tool is used."
        ) from exc
    except Exception as exc:
        raise IllegalConfigurationError(
            f"Tool {owner}: the annotation of parameter {param.name!r} ({param.annotation!r}) is "
            f"invalid: {exc}"
        ) from exc


def _injection(annotation: Any) -> str | None:
    """'memory_id' or 'context' for parameters the runtime fills in, None for the model's parameters."""
    if get_origin(annotation) is Annotated:
        base, *metadata = get_args(annotation)
        if any(m is ToolMemoryId or isinstance(m, ToolMemoryId) for m in metadata):
            return "memory_id"
        annotation = base
    if annotation is ToolContext:
        return "context"
    if get_origin(annotation) in _UNION_TYPES:
        members = [_unannotated(a) for a in get_args(annotation) if a is not type(None)]
        if members == [ToolContext]:
            return "context"
    return None


def _unannotated(annotation: Any) -> Any:
    return get_args(annotation)[0] if get_origin(annotation) is Annotated else annotation


def _field(param: inspect.Parameter, annotation: Any) -> tuple[Any, Any]:
    """The pydantic field for one parameter: (annotation with our Field first, default)."""
    import pydantic

    metadata: list[Any] = []
    if get_origin(annotation) is Annotated:
        annotation, *metadata = get_args(annotation)
    marks = [m for m in metadata if isinstance(m, P)]
    mark = marks[-1] if marks else P()
    # The parameter's name is the alias: the model's fields may be called anything (`json`, `_x`,
    # `model_config`) without clashing with BaseModel attributes. Our Field goes first, so a user's
    # `Field(...)` in the same Annotated wins where both say something.
    ours = pydantic.Field(alias=param.name)
    if mark.description is not None:
        ours = pydantic.Field(alias=param.name, description=mark.description)
    rest = [m for m in metadata if not isinstance(m, P)]
    if param.default is not _EMPTY:
        default = param.default
    elif mark.required:
        default = ...
    else:
        default = None
    return Annotated[tuple([annotation, ours, *rest])], default


def _build_model(
    fn: Callable[..., Any], fields: dict[str, Any], names: list[str], owner: str
) -> type[pydantic.BaseModel]:
    import pydantic

    try:
        return pydantic.create_model(
            f"{getattr(fn, '__name__', 'tool')}_arguments",
            __config__=_CONFIG,
            __module__=getattr(fn, "__module__", None) or __name__,
            **fields,
        )
    except Exception as exc:
        # Name the parameter at fault: try each field on its own.
        for (annotation, _), name in zip(fields.values(), names, strict=True):
            try:
                with warnings.catch_warnings():  # the field's alias means nothing to a lone TypeAdapter
                    warnings.simplefilter("ignore")
                    pydantic.TypeAdapter(annotation)
            except pydantic.PydanticSchemaGenerationError as field_exc:
                raise _unsupported_type(owner, name, annotation, field_exc) from None
            except Exception as field_exc:
                raise IllegalConfigurationError(
                    f"Tool {owner}: parameter {name!r} has a type agentloop cannot validate: {field_exc}"
                ) from field_exc
        raise IllegalConfigurationError(f"Tool {owner}: cannot build its parameters: {exc}") from exc


SUPPORTED_TYPES = (
    "str, int, float, bool, None, enums, Literal, datetime/date/time/timedelta, UUID, Decimal, and lists, "
    "tuples, sets and dicts of these, Optional/unions, pydantic models, dataclasses and TypedDicts"
)
"""The parameter types a tool may take (anything pydantic validates from JSON)."""


def _unsupported_type(owner: str, name: str, annotation: Any, error: Exception) -> IllegalConfigurationError:
    """The error for a parameter whose type pydantic cannot validate from JSON: which parameter, which type
    (the inner one pydantic tripped on, in `list[Foo]` it is `Foo`), what is accepted, and how to pass
    runtime objects instead (pydantic's own advice, `arbitrary_types_allowed`, is not for tool users)."""
    culprit = str(error).partition("schema for ")[2].partition(". Set `arbitrary")[0].strip()
    if culprit.startswith("<class '"):  # "<class 'module.Name'>"
        culprit = culprit[8:-2].rpartition(".")[2]
    declared = _type_name(_unannotated(annotation))
    inner = f" (its part {culprit} is not a JSON type)" if culprit and culprit != declared else ""
    return IllegalConfigurationError(
        f"Tool {owner}: parameter {name!r} has type {declared}{inner}: a model sends JSON, so agentloop "
        f"cannot fill it in. Tool parameters may be {SUPPORTED_TYPES}. To give a tool a runtime object "
        "(a client, a lock, a connection), pass it through `Agent(context={...})` and take a `ToolContext` "
        "parameter, or bind it in a closure or a method's `self`."
    )


def _type_name(annotation: Any) -> str:
    """`list[Foo]`, not `list[mymodule.Foo]`: how the user wrote the type."""
    args = get_args(annotation)
    origin = get_origin(annotation)
    if origin is not None and args:
        base = getattr(origin, "__qualname__", None) or repr(origin).replace("typing.", "")
        if origin in _UNION_TYPES:
            return " | ".join(_type_name(a) for a in args)
        inner = ", ".join(
            _type_name(a) if not isinstance(a, list) else f"[{', '.join(map(_type_name, a))}]" for a in args
        )
        return f"{base}[{inner}]"
    if isinstance(annotation, type):
        return "None" if annotation is type(None) else annotation.__qualname__
    return repr(annotation).replace("typing.", "").replace("collections.abc.", "")


_DECIMAL_PATTERN = r"^-?[0-9]+(\.[0-9]+)?$"


@cache
def _schema_generator() -> type[GenerateJsonSchema]:
    """pydantic's generator, with a pattern on the string form of `Decimal` so a model knows what to send
    (defined at first use: the base class is pydantic's)."""
    from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
    from pydantic_core import core_schema

    class _SchemaGenerator(GenerateJsonSchema):
        def decimal_schema(self, schema: core_schema.DecimalSchema) -> JsonSchemaValue:
            json_schema = super().decimal_schema(schema)
            for branch in json_schema.get("anyOf", [json_schema]):
                if branch.get("type") == "string":
                    branch.setdefault("pattern", _DECIMAL_PATTERN)
            return json_schema

    return _SchemaGenerator


def _json_schema(model: type[pydantic.BaseModel], names: list[str], owner: str) -> dict[str, Any]:
    import pydantic

    _SchemaGenerator = _schema_generator()
    try:
        raw = model.model_json_schema(schema_generator=_SchemaGenerator)
    except Exception as exc:
        for name, info in zip(names, model.model_fields.values(), strict=True):
            try:
                pydantic.TypeAdapter(info.annotation or Any).json_schema(schema_generator=_SchemaGenerator)
            except Exception as field_exc:
                reason = str(field_exc).splitlines()[0]
                raise IllegalConfigurationError(
                    f"Tool {owner}: parameter {name!r} has type {_type_name(info.annotation)}, which has no "
                    f"JSON schema to show the model ({reason}). Tool parameters may be {SUPPORTED_TYPES}."
                ) from field_exc
        raise IllegalConfigurationError(
            f"Tool {owner}: a parameter type has no JSON schema to show the model: {exc}"
        ) from exc
    cleaned = strip_titles(raw)
    schema: dict[str, Any] = {"type": "object", "properties": cleaned.pop("properties", {})}
    if "required" in cleaned:
        schema["required"] = cleaned.pop("required")
    cleaned.pop("type", None)
    defs = cleaned.pop("$defs", None)
    schema.update(cleaned)
    if defs:
        schema["$defs"] = defs
    return schema


# Keywords whose value is a schema, a list of schemas, or a name -> schema map; everything else
# (`enum`, `const`, `default`, `examples`, ...) holds data and is left alone.
_SCHEMA_KEYS = frozenset(
    {"items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else"}
)
_SCHEMA_LIST_KEYS = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
_SCHEMA_MAP_KEYS = frozenset({"properties", "$defs", "definitions", "patternProperties"})


def strip_titles(schema: Any) -> Any:
    """`schema` without pydantic's generated "title"s (noise for a model; descriptions stay)."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SCHEMA_KEYS:
            out[key] = strip_titles(value)
        elif key in _SCHEMA_LIST_KEYS and isinstance(value, list):
            out[key] = [strip_titles(v) for v in value]
        elif key in _SCHEMA_MAP_KEYS and isinstance(value, dict):
            out[key] = {name: strip_titles(v) for name, v in value.items()}
        else:
            out[key] = value
    return out
