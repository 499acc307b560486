"""Sets of tools: turning what users pass as `tools=` into a `Toolset`, and asking `ToolProvider`s for more.

Accepted as tools ("tools-like"): a `@tool` function, a plain function (its docstring is its description),
a bound method, an object or class with `@tool` methods, a `(ToolSpecification, executor)` pair, a `Tool`,
a `Toolset`, a `ToolSource` (an object whose `__agentloop_tools__()` returns `Tool`s), or an iterable of
those.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

import msgspec

from .._conforms import conforms
from .._values._errors import IllegalConfigurationError
from .._values._messages import ChatMessage, UserMessage
from .._values._spec import ToolSpecification
from ._decorator import definition_of, function_tool, tool_members, tools_of
from ._threads import is_async_callable, run_sync_in_worker
from ._tool import Tool

__all__ = [
    "ToolProvider",
    "ToolProviderRequest",
    "ToolProviderResult",
    "ToolSource",
    "ToolsLike",
    "Toolset",
    "is_dynamic",
    "provide_tools",
    "resolve_tools",
    "tool_specifications_from",
]

ToolsLike = Any
"""Anything `resolve_tools` accepts (see the module docstring)."""

_ACCEPTED = (
    "a @tool function, a plain function, a bound method, an object or class with @tool methods, "
    "a (ToolSpecification, executor) pair, a Tool, a Toolset, or a list of those"
)


class Toolset:
    """An immutable set of tools with unique names: what one invocation offers the model."""

    __slots__ = ("_tools", "specifications")

    EMPTY: ClassVar[Toolset]

    _tools: dict[str, Tool]
    specifications: tuple[ToolSpecification, ...]

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        by_name: dict[str, Tool] = {}
        for item in tools:
            if not isinstance(item, Tool):
                raise IllegalConfigurationError(f"Toolset takes Tool objects, got {type(item).__name__}")
            previous = by_name.get(item.name)
            if previous is not None:
                raise IllegalConfigurationError(_duplicate_message(item.name, previous, item))
            by_name[item.name] = item
        self._tools = by_name
        self.specifications = tuple(t.specification for t in by_name.values())

    def get(self, name: str) -> Tool | None:
        """The tool called `name`, or None."""
        return self._tools.get(name)

    @property
    def names(self) -> tuple[str, ...]:
        """Every tool's name, in the order given."""
        return tuple(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __repr__(self) -> str:
        return f"Toolset({list(self._tools)!r})"


Toolset.EMPTY = Toolset()


def _duplicate_message(name: str, first: Tool, second: Tool) -> str:
    if first.source == second.source:
        where = f"{first.source} was given twice"
    else:
        where = f"{first.source} and {second.source}"
    return (
        f"Two tools are named {name!r}: {where}. Tool names must be unique within one agent call; "
        "rename one with @tool(name=...) or drop the duplicate"
    )


@runtime_checkable
class ToolSource(Protocol):
    """An object that is a set of tools itself (an `Agent`, an `MCPToolset`), so it can go in `tools=[...]`:
    `__agentloop_tools__()` returns its `Tool`s, each checked when the tools are resolved."""

    def __agentloop_tools__(self) -> Iterable[Tool]: ...


def resolve_tools(tools: ToolsLike | None) -> Toolset:
    """The `Toolset` for anything tools-like.

    Raises `IllegalConfigurationError` for duplicate names (naming both sources) or unusable objects.
    """
    if tools is None:
        return Toolset.EMPTY
    if isinstance(tools, Toolset):
        return tools
    collected: list[Tool] = []
    _collect(tools, collected)
    return Toolset(collected)


def _collect(obj: Any, out: list[Tool]) -> None:
    if isinstance(obj, Tool):
        out.append(obj)
    elif isinstance(obj, Toolset):
        out.extend(obj)
    elif isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], ToolSpecification):
        out.append(Tool(obj[0], obj[1]))
    elif not isinstance(obj, type) and conforms(obj, ToolSource):
        for item in obj.__agentloop_tools__():
            if not isinstance(item, Tool):
                raise IllegalConfigurationError(
                    f"{type(obj).__name__}.__agentloop_tools__() must yield Tool objects, "
                    f"got {type(item).__name__}"
                )
            out.append(item)
    elif (
        inspect.isfunction(obj) or inspect.ismethod(obj) or isinstance(obj, (staticmethod, functools.partial))
    ):
        out.append(function_tool(obj))
    elif tool_members(obj if isinstance(obj, type) else type(obj)):
        out.extend(tools_of(obj))
    elif isinstance(obj, Iterable) and not isinstance(obj, (str, bytes, bytearray, Mapping, type)):
        for item in obj:
            _collect(item, out)
    else:
        what = f"class {obj.__qualname__}" if isinstance(obj, type) else f"{type(obj).__qualname__} object"
        hint = " (it has no @tool methods)" if not isinstance(obj, (str, bytes, Mapping)) else ""
        raise IllegalConfigurationError(f"Cannot use {what}{hint} as tools; pass {_ACCEPTED}")


def tool_specifications_from(obj: object) -> list[ToolSpecification]:
    """The `ToolSpecification`s of every `@tool` method of an object or class (or of any tools-like value).

    A class needs no instance here: only the specifications are built.
    """
    if isinstance(obj, type):
        specs = []
        for _, attribute in tool_members(obj):
            definition = definition_of(attribute)
            assert definition is not None
            specs.append(definition.compiled(not isinstance(attribute, staticmethod))[1])
        return specs
    return list(resolve_tools(obj).specifications)


# -- dynamic tools -----------------------------------------------------------------------------------------


class ToolProviderRequest(msgspec.Struct, frozen=True):
    """What a `ToolProvider` may look at to choose the tools of one invocation."""

    user_message: UserMessage
    memory_id: Any = None
    invocation_id: str = ""
    messages: tuple[ChatMessage, ...] = ()
    """The conversation so far (memory plus the new user message)."""


@dataclass(frozen=True, slots=True)
class ToolProviderResult:
    """The tools a `ToolProvider` offers for one invocation (anything tools-like); checked when built."""

    tools: ToolsLike
    _toolset: Toolset = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_toolset", resolve_tools(self.tools))

    @property
    def toolset(self) -> Toolset:
        """The tools, resolved."""
        return self._toolset


@runtime_checkable
class ToolProvider(Protocol):
    """Chooses tools per invocation (LangChain4j's `ToolProvider`), e.g. from a database or an MCP server.

    Asked once before each invocation; when it has a true `dynamic` attribute, before each model call.
    Returning None offers nothing. A plain function `request -> ToolProviderResult | None` (sync or async)
    works as a provider too.
    """

    async def provide_tools(self, request: ToolProviderRequest) -> ToolProviderResult | None: ...


def _name_of(provider: object) -> str:
    return getattr(provider, "__qualname__", None) or type(provider).__qualname__


@runtime_checkable
class DynamicToolProvider(Protocol):
    """A tool provider whose tools may change during an invocation: with `dynamic` True it is asked again
    before every model call (MCP toolsets whose servers announce list changes are)."""

    dynamic: bool


def is_dynamic(provider: object) -> bool:
    """True when `provider` asks to be consulted before every model call (`DynamicToolProvider`)."""
    return isinstance(provider, DynamicToolProvider) and bool(provider.dynamic)


async def provide_tools(provider: object, request: ToolProviderRequest) -> Toolset:
    """Asks `provider` (a `ToolProvider` or a plain callable) for its tools; None means none.

    Sync providers run in a worker thread, async ones in the event loop.
    """
    call = provider.provide_tools if conforms(provider, ToolProvider) else provider
    if not callable(call):
        raise IllegalConfigurationError(
            f"A tool provider must have a provide_tools(request) method or be callable, got "
            f"{type(provider).__name__}"
        )
    if is_async_callable(call):
        result = await call(request)
    else:
        result = await run_sync_in_worker(call, request, what=f"tool provider {_name_of(provider)}")
    if inspect.isawaitable(result):  # an async __call__ that returned an awaitable of its own
        result = await result
    if result is None:
        return Toolset.EMPTY
    if isinstance(result, ToolProviderResult):
        return result.toolset
    raise IllegalConfigurationError(
        f"Tool provider {provider!r} returned {type(result).__name__}; return a ToolProviderResult or None"
    )
