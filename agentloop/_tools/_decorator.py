"""The `@tool` decorator and turning Python objects (functions, methods, classes) into `Tool`s."""

from __future__ import annotations

import inspect
import sys
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Protocol, overload

import msgspec

from .._values._errors import IllegalConfigurationError
from .._values._records import ReturnBehavior
from .._values._spec import ToolSpecification, check_tool_name
from ._schema import Signature, UnresolvedAnnotationError, compile_signature
from ._threads import qualified_name
from ._tool import (
    ATTR,
    ApprovalRule,
    C,
    F,
    Tool,
    check_approval_rule,
    check_background,
    check_converter,
    check_metadata,
    check_result_limit,
    check_return_behavior,
    check_timeout,
)

# -- @tool ---------------------------------------------------------------------------------------------------


class _ToolDefinition(msgspec.Struct, eq=False):
    """What `@tool` recorded on a function; compiles (and caches) its signature per way of binding."""

    function: Callable[..., Any]
    name: str
    description: str | None
    return_behavior: ReturnBehavior
    metadata: dict[str, Any]
    timeout: float | None
    result_converter: Callable[[Any], str] | None
    localns: Mapping[str, Any] | None
    requires_approval: ApprovalRule = None
    result_limit: int | None = None
    background: bool = False
    _compiled: dict[bool, tuple[Signature, ToolSpecification]] = msgspec.field(default_factory=dict)

    def compiled(self, skip_first: bool) -> tuple[Signature, ToolSpecification]:
        found = self._compiled.get(skip_first)
        if found is None:
            signature = compile_signature(
                self.function, owner=repr(self.name), skip_first=skip_first, localns=self.localns
            )
            spec = ToolSpecification(
                name=self.name,
                description=self.description,
                parameters=signature.parameters,
                metadata=dict(self.metadata),
            )
            found = self._compiled[skip_first] = (signature, spec)
        return found

    def bind(self, call: Callable[..., Any], *, skip_first: bool, source: str) -> Tool:
        signature, spec = self.compiled(skip_first)
        return Tool._from_signature(self, call, signature, spec, source)


class _ToolDecorator(Protocol):
    """What `@tool(...)` returns: applied to a function, method, staticmethod or classmethod."""

    @overload
    def __call__(self, func: F, /) -> F: ...
    @overload
    def __call__(self, func: C, /) -> C: ...


@overload
def tool(
    *description: str,
    name: str | None = None,
    return_behavior: ReturnBehavior | str = ReturnBehavior.TO_LLM,
    metadata: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    result_converter: Callable[[Any], str] | None = None,
    requires_approval: ApprovalRule | bool = None,
    result_limit: int | None = None,
    background: bool = False,
) -> _ToolDecorator: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    return_behavior: ReturnBehavior | str = ReturnBehavior.TO_LLM,
    metadata: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    result_converter: Callable[[Any], str] | None = None,
    requires_approval: ApprovalRule | bool = None,
    result_limit: int | None = None,
    background: bool = False,
) -> _ToolDecorator: ...


@overload
def tool(
    func: F,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    return_behavior: ReturnBehavior | str = ReturnBehavior.TO_LLM,
    metadata: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    result_converter: Callable[[Any], str] | None = None,
    requires_approval: ApprovalRule | bool = None,
    result_limit: int | None = None,
    background: bool = False,
) -> F: ...


@overload
def tool(
    func: C,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    return_behavior: ReturnBehavior | str = ReturnBehavior.TO_LLM,
    metadata: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    result_converter: Callable[[Any], str] | None = None,
    requires_approval: ApprovalRule | bool = None,
    result_limit: int | None = None,
    background: bool = False,
) -> C: ...


def tool(
    *args: Any,
    name: str | None = None,
    description: str | None = None,
    return_behavior: ReturnBehavior | str = ReturnBehavior.TO_LLM,
    metadata: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    result_converter: Callable[[Any], str] | None = None,
    requires_approval: ApprovalRule | bool = None,
    result_limit: int | None = None,
    background: bool = False,
) -> Any:
    """Marks a function or method as a tool a model can call; the function itself stays unchanged.

    Forms: `@tool`, `@tool("description")`, `@tool("line 1", "line 2")` (joined with newlines), and
    `@tool(name=, description=, return_behavior=, metadata={...}, timeout=, result_converter=,
    requires_approval=)`. Works on functions, methods, static and class methods, sync or async. The name
    defaults to the function's; the description to its docstring. `timeout` (seconds) bounds each call;
    `result_converter` turns the result into the text the model reads; `requires_approval` (True, or
    `(ToolApprovalRequest, ToolContext) -> bool`) makes a call wait for a person's yes (docs/approval.md);
    `result_limit` (tokens) keeps a longer result aside and gives the model its beginning and the
    `read_tool_result` tool (docs/context.md). `background=True` starts each call's work as a background
    task: the model is told at once that it started, and gets the result later (docs/tools.md).
    """
    if args and not isinstance(args[0], str):
        if len(args) > 1:
            raise IllegalConfigurationError("tool(func) takes the function alone; give options as keywords")
        text = description
    else:
        bad = [a for a in args if not isinstance(a, str)]
        if bad:
            raise IllegalConfigurationError(
                f"@tool(...) takes description strings as positional arguments, got {type(bad[0]).__name__}"
            )
        if args and description is not None:
            raise IllegalConfigurationError("@tool: give the description positionally or as description=")
        text = "\n".join(args) if args else description

    def decorator(target: Any, _depth: int = 1) -> Any:
        definition = _definition(
            target.__func__ if isinstance(target, (staticmethod, classmethod)) else target,
            name=name,
            description=text,
            return_behavior=return_behavior,
            metadata=metadata,
            timeout=timeout,
            result_converter=result_converter,
            localns=_definition_namespace(_depth),
            requires_approval=requires_approval,
            result_limit=result_limit,
            background=background,
        )
        return _decorate(target, definition)

    if args and not isinstance(args[0], str):
        return decorator(args[0], 2)
    return decorator


def _decorate(target: Any, definition: _ToolDefinition) -> Any:
    """Records `definition` on the function behind `target` and compiles its signature when it can."""
    func = definition.function
    if isinstance(target, staticmethod):
        skip_first = False
    elif isinstance(target, classmethod):
        skip_first = True
    else:
        skip_first = _looks_like_method(func)
    try:
        definition.compiled(skip_first)  # fail fast on a bad signature; the schema is cached
    except UnresolvedAnnotationError:
        pass  # names a type defined later (e.g. the enclosing class): compiled at first use
    existing = definition_of(func)
    if existing is not None and existing.function is func:
        raise IllegalConfigurationError(
            f"{qualified_name(func)} is already the tool {existing.name!r}; a function can be one tool only "
            "(wrap it in another function, or build a Tool(specification, executor))"
        )
    try:
        setattr(func, ATTR, definition)
    except (AttributeError, TypeError) as exc:
        raise IllegalConfigurationError(f"@tool cannot mark {func!r}: {exc}") from exc
    return target


def _definition(
    func: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    return_behavior: ReturnBehavior | str,
    metadata: Mapping[str, Any] | None,
    timeout: float | None,
    result_converter: Callable[[Any], str] | None,
    localns: Mapping[str, Any] | None,
    requires_approval: ApprovalRule | bool = None,
    result_limit: int | None = None,
    background: bool = False,
) -> _ToolDefinition:
    if inspect.ismethod(func):
        raise IllegalConfigurationError(
            "@tool goes on the function definition (inside the class), not on a bound method"
        )
    if not callable(func):
        raise IllegalConfigurationError(f"@tool decorates functions and methods, not {type(func).__name__}")
    tool_name = check_tool_name(
        name if name is not None else getattr(func, "__name__", ""), qualified_name(func)
    )
    if inspect.isgeneratorfunction(func):
        raise IllegalConfigurationError(
            f"Tool {tool_name!r} is a sync generator; a tool returns its result. To stream values while it "
            "runs, make it an `async def` generator (each yielded value is a ToolOutputDelta event, the last "
            "one its result); else collect the values into a list and return it"
        )
    if description is not None and not isinstance(description, str):
        raise IllegalConfigurationError(f"Tool {tool_name!r}: description must be a str")
    if not description or description.isspace():
        doc = getattr(func, "__doc__", None)
        description = inspect.cleandoc(doc) if isinstance(doc, str) and doc.strip() else None
    return _ToolDefinition(
        function=func,
        name=tool_name,
        description=description,
        return_behavior=check_return_behavior(return_behavior, tool_name),
        metadata=check_metadata(metadata, tool_name),
        timeout=check_timeout(timeout, f"Tool {tool_name!r}: timeout"),
        result_converter=check_converter(result_converter, tool_name),
        localns=localns,
        requires_approval=check_approval_rule(requires_approval, f"Tool {tool_name!r}"),
        result_limit=check_result_limit(result_limit, f"Tool {tool_name!r}"),
        background=check_background(background, f"Tool {tool_name!r}"),
    )


def _definition_namespace(depth: int) -> Mapping[str, Any] | None:
    """Local names visible where the decorated function is defined (for its string annotations).

    Module-level code needs nothing beyond the function's globals. In a class body, the enclosing
    function's locals are added, since a class body does not see them otherwise.
    """
    frame = sys._getframe(depth + 1)
    if frame.f_code.co_name == "<module>":
        return None
    namespace: dict[str, Any] = {}
    outer = frame.f_back
    in_class_body = "__module__" in frame.f_locals and "__qualname__" in frame.f_locals
    if in_class_body and outer is not None and outer.f_code.co_name != "<module>":
        namespace.update(outer.f_locals)
    namespace.update(frame.f_locals)
    return namespace


def _looks_like_method(func: Callable[..., Any]) -> bool:
    """Defined in a class body with a first parameter named self/cls: the binding supplies it."""
    parts = getattr(func, "__qualname__", "").split(".")
    if len(parts) < 2 or parts[-2] == "<locals>":
        return False
    try:
        first = next(iter(inspect.signature(func).parameters), None)
    except (TypeError, ValueError):
        return False
    return first in ("self", "cls")


# -- from Python objects to tools -------------------------------------------------------------------------

_plain_definitions: weakref.WeakKeyDictionary[Callable[..., Any], _ToolDefinition] = (
    weakref.WeakKeyDictionary()
)


def definition_of(func: object) -> _ToolDefinition | None:
    """The `@tool` definition recorded on `func` (a function, staticmethod or classmethod), if any."""
    if isinstance(func, (staticmethod, classmethod)):
        func = func.__func__
    found = getattr(func, ATTR, None)
    return found if isinstance(found, _ToolDefinition) else None


def _definition_for_function(func: Callable[..., Any]) -> _ToolDefinition:
    """`@tool`'s definition, or one made (and cached) for a plain function: name and docstring."""
    found = definition_of(func)
    if found is not None:
        return found
    found = _plain_definitions.get(func)
    if found is None:
        found = _definition(
            func,
            name=None,
            description=None,
            return_behavior=ReturnBehavior.TO_LLM,
            metadata=None,
            timeout=None,
            result_converter=None,
            localns=None,
        )
        _plain_definitions[func] = found
    return found


def function_tool(func: Callable[..., Any]) -> Tool:
    """A `Tool` for a function or bound method, with or without `@tool`."""
    if isinstance(func, staticmethod):
        func = func.__func__
    if isinstance(func, classmethod):
        raise IllegalConfigurationError(
            f"{qualified_name(func.__func__)} is a classmethod object; pass it through its class "
            "(MyClass.method)"
        )
    if inspect.ismethod(func):
        definition = _definition_for_function(func.__func__)
        return definition.bind(func, skip_first=True, source=f"method {qualified_name(func.__func__)}")
    definition = _definition_for_function(func)
    if _looks_like_method(func):
        raise IllegalConfigurationError(
            f"{qualified_name(func)} is an instance method taken from its class; pass an instance "
            "(MyClass().method, or the instance itself) so it has a `self`"
        )
    return definition.bind(func, skip_first=False, source=f"function {qualified_name(func)}")


_members_cache: weakref.WeakKeyDictionary[type, tuple[tuple[str, Any], ...]] = weakref.WeakKeyDictionary()


def tool_members(cls: type) -> tuple[tuple[str, Any], ...]:
    """`(name, attribute)` of every `@tool` method `cls` resolves to, base classes' first.

    An override without `@tool` is not a tool, as in LangChain4j.
    """
    found = _members_cache.get(cls)
    if found is None:
        names: dict[str, None] = {}
        for klass in reversed(cls.__mro__):
            names.update(dict.fromkeys(vars(klass)))
        members = []
        for member_name in names:
            attribute = next(vars(k)[member_name] for k in cls.__mro__ if member_name in vars(k))
            if definition_of(attribute) is not None:
                members.append((member_name, attribute))
        found = tuple(members)
        try:
            _members_cache[cls] = found
        except TypeError:
            pass
    return found


def tools_of(obj: object) -> list[Tool]:
    """The tools of an object's (or a class's) `@tool` methods, bound to it."""
    owner = obj if isinstance(obj, type) else type(obj)
    result: list[Tool] = []
    for member_name, attribute in tool_members(owner):
        definition = definition_of(attribute)
        assert definition is not None
        qualname = f"{owner.__qualname__}.{member_name}"
        if isinstance(attribute, staticmethod):
            result.append(
                definition.bind(attribute.__func__, skip_first=False, source=f"static method {qualname}")
            )
        elif isinstance(attribute, classmethod) or not isinstance(obj, type):
            kind = "class method" if isinstance(attribute, classmethod) else "method"
            result.append(
                definition.bind(getattr(obj, member_name), skip_first=True, source=f"{kind} {qualname}")
            )
        else:
            raise IllegalConfigurationError(
                f"{qualname} is an instance method, but the class {owner.__qualname__} was given as tools; "
                f"pass an instance ({owner.__qualname__}(...)) instead"
            )
    return result


def tool_specification_from(func: Callable[..., Any]) -> ToolSpecification:
    """The `ToolSpecification` of one function or method (with or without `@tool`)."""
    if isinstance(func, (staticmethod, classmethod)):
        skip_first = isinstance(func, classmethod)
        func = func.__func__
    elif inspect.ismethod(func):
        func, skip_first = func.__func__, True
    elif inspect.isfunction(func) or callable(func):
        skip_first = _looks_like_method(func)
    else:
        raise IllegalConfigurationError(
            f"tool_specification_from takes a function, got {type(func).__name__}"
        )
    return _definition_for_function(func).compiled(skip_first)[1]
