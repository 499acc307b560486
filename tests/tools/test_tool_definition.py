"""Defining tools: `@tool` in every form, what counts as tools, tool sets, providers, ToolContext."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Annotated, Any

import anyio
import anyio.to_thread
import pytest

import agentloop
from agentloop import (
    Agent,
    IllegalConfigurationError,
    P,
    ReturnBehavior,
    ToolContext,
    ToolExecutionRequest,
    ToolProvider,
    ToolProviderRequest,
    ToolProviderResult,
    ToolSpecification,
    UserMessage,
    tool,
    tool_specification_from,
    tool_specifications_from,
)
from agentloop._tools._tool import Tool
from agentloop._tools._toolset import Toolset, ToolSource, is_dynamic, provide_tools, resolve_tools
from agentloop.testing import TestModel

# -- the forms of @tool -----------------------------------------------------------------------------------


@tool
def bare(a: int) -> int:
    """Doubles a number.

    Indented second paragraph.
    """
    return a * 2


@tool("Adds one")
def described(a: int) -> int:
    """Ignored: an explicit description wins."""
    return a + 1


@tool("Line one", "Line two")
def multi_line() -> str:
    return "x"


@tool(
    name="renamed",
    description="Explicit",
    return_behavior=ReturnBehavior.IMMEDIATE,
    metadata={"cache_control": {"type": "ephemeral"}},
    timeout=2.5,
    result_converter=str.upper,
)
async def configured(text: str) -> str:
    return text


@tool()
def empty_parens() -> None:
    pass


def test_bare_decorator_uses_name_and_cleaned_docstring() -> None:
    spec = tool_specification_from(bare)
    assert spec.name == "bare"
    assert spec.description == "Doubles a number.\n\nIndented second paragraph."


def test_description_strings_win_over_the_docstring_and_join_with_newlines() -> None:
    assert tool_specification_from(described).description == "Adds one"
    assert tool_specification_from(multi_line).description == "Line one\nLine two"


def test_no_description_and_no_docstring_gives_none() -> None:
    assert tool_specification_from(empty_parens).description is None
    assert tool_specification_from(empty_parens).name == "empty_parens"


def test_every_option_is_recorded() -> None:
    spec = tool_specification_from(configured)
    assert (spec.name, spec.description) == ("renamed", "Explicit")
    assert spec.metadata == {"cache_control": {"type": "ephemeral"}}
    (t,) = resolve_tools(configured)
    assert t.return_behavior is ReturnBehavior.IMMEDIATE
    assert t.timeout == 2.5
    assert t.to_text("abc") == "ABC"
    assert t.is_async


async def test_decorated_functions_stay_ordinary_functions() -> None:
    assert bare(21) == 42
    assert described(1) == 2
    assert await configured("hi") == "hi"  # the converter only applies to what the model reads
    assert bare.__name__ == "bare"


class Calculator:
    factor = 10

    @tool("Sums 2 given numbers")
    def add(self, a: float, b: float) -> float:
        return a + b

    @tool
    async def square_root(self, x: Annotated[float, P("The number, must be >= 0")]) -> float:
        """Returns a square root of a given number."""
        return float(x**0.5)

    @tool
    @staticmethod
    def negate(x: int) -> int:
        return -x

    @staticmethod
    @tool
    def absolute(x: int) -> int:
        return abs(x)

    @tool
    @classmethod
    def scale(cls, x: int) -> int:
        return x * cls.factor

    @classmethod
    @tool
    def shrink(cls, x: int) -> int:
        return x // cls.factor

    def not_a_tool(self) -> None: ...


async def test_methods_static_and_class_methods_in_both_decorator_orders() -> None:
    calc = Calculator()
    assert calc.add(1, 2) == 3
    assert await calc.square_root(16) == 4
    assert Calculator.negate(3) == -3
    assert Calculator.absolute(-3) == 3
    assert Calculator.scale(2) == 20
    assert Calculator.shrink(20) == 2

    specs = {s.name: s for s in tool_specifications_from(calc)}
    assert list(specs) == ["add", "square_root", "negate", "absolute", "scale", "shrink"]
    for name in ("negate", "absolute", "scale", "shrink"):
        assert specs[name].parameters == {
            "type": "object",
            "properties": {"x": {"type": "integer"}},
            "required": ["x"],
        }, name
    assert specs["add"].description == "Sums 2 given numbers"
    assert specs["square_root"].description == "Returns a square root of a given number."


def test_specifications_from_a_class_need_no_instance() -> None:
    assert [s.name for s in tool_specifications_from(Calculator)] == [
        "add",
        "square_root",
        "negate",
        "absolute",
        "scale",
        "shrink",
    ]


def test_a_class_with_instance_tool_methods_cannot_be_executed_without_an_instance() -> None:
    with pytest.raises(
        IllegalConfigurationError, match=r"Calculator\.add is an instance method.*Calculator\("
    ):
        resolve_tools(Calculator)


def test_a_class_with_only_static_and_class_tools_works_as_tools() -> None:
    class Static:
        @tool
        @staticmethod
        def ping() -> str:
            return "pong"

        @tool
        @classmethod
        def name(cls) -> str:
            return cls.__name__

    assert resolve_tools(Static).names == ("ping", "name")


def test_an_unbound_method_needs_an_instance() -> None:
    with pytest.raises(IllegalConfigurationError, match="pass an instance"):
        resolve_tools(Calculator.add)
    assert resolve_tools(Calculator().add).names == ("add",)


def test_subclasses_inherit_tools_and_an_undecorated_override_is_not_a_tool() -> None:
    class Base:
        @tool
        def a(self) -> str:
            return "base a"

        @tool
        def b(self) -> str:
            return "base b"

    class Child(Base):
        def a(self) -> str:  # overridden without @tool
            return "child a"

        @tool
        def c(self) -> str:
            return "child c"

    assert resolve_tools(Child()).names == ("b", "c")


# -- options are checked when the tool is defined ---------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"name": "has space"}, "not usable"),
        ({"name": "x" * 65}, "not usable"),
        ({"timeout": 0}, "timeout must be a positive number"),
        ({"timeout": -1.5}, "timeout must be a positive number"),
        ({"timeout": True}, "timeout must be a positive number"),
        ({"return_behavior": "sometimes"}, "TO_LLM, IMMEDIATE, IMMEDIATE_IF_LAST"),
        ({"metadata": {"x": object()}}, "JSON-serialisable"),
        ({"metadata": {1: "x"}}, "str keys"),
        ({"result_converter": "upper"}, "result_converter must be a callable"),
    ],
)
def test_bad_options_are_rejected(options: dict[str, Any], message: str) -> None:
    def f() -> None: ...

    with pytest.raises(IllegalConfigurationError, match=message):
        tool(**options)(f)


def test_description_given_twice_or_non_string_is_rejected() -> None:
    with pytest.raises(IllegalConfigurationError, match=r"or as description="):
        tool("a", description="b")
    with pytest.raises(IllegalConfigurationError, match="description strings"):
        tool("a", 3)  # type: ignore[call-overload]


def test_sync_generators_are_rejected_async_ones_stream() -> None:
    def gen() -> Iterator[int]:
        yield 1

    async def agen() -> Any:
        yield 1

    with pytest.raises(IllegalConfigurationError, match="sync generator"):
        tool(gen)
    assert tool(agen) is agen  # a streaming tool (tests/tools/test_tool_progress.py)


def test_return_behavior_accepts_names_and_values() -> None:
    assert ReturnBehavior("IMMEDIATE") is ReturnBehavior.IMMEDIATE
    assert ReturnBehavior("immediate_if_last") is ReturnBehavior.IMMEDIATE_IF_LAST
    assert ReturnBehavior("to_llm") is ReturnBehavior.TO_LLM

    @tool(return_behavior="IMMEDIATE_IF_LAST")
    def f() -> None: ...

    (t,) = resolve_tools(f)
    assert t.return_behavior is ReturnBehavior.IMMEDIATE_IF_LAST


# -- what counts as tools -----------------------------------------------------------------------------------


def plain_function(city: str) -> str:
    """Plain function without @tool."""
    return city


async def booking_executor(request: ToolExecutionRequest, context: ToolContext) -> str:
    return "booked"


BOOKING = ToolSpecification(name="get_booking", description="Returns booking details")


class AgentLike:
    def __agentloop_tools__(self) -> list[Tool]:
        return [Tool(ToolSpecification(name="sub_agent"), booking_executor)]


def test_everything_tools_like_resolves() -> None:
    programmatic = Tool(ToolSpecification(name="direct"), booking_executor)
    toolset = resolve_tools(
        [
            bare,
            plain_function,
            Calculator(),
            (BOOKING, booking_executor),
            programmatic,
            Toolset([Tool(ToolSpecification(name="from_set"), booking_executor)]),
            AgentLike(),
            (f for f in [described]),  # any iterable, nested
        ]
    )
    assert toolset.names == (
        "bare",
        "plain_function",
        "add",
        "square_root",
        "negate",
        "absolute",
        "scale",
        "shrink",
        "get_booking",
        "direct",
        "from_set",
        "sub_agent",
        "described",
    )
    assert toolset.get("direct") is programmatic
    assert tool_specification_from(plain_function).description == "Plain function without @tool."


def test_toolset_api() -> None:
    toolset = resolve_tools([bare, described])
    assert len(toolset) == 2
    assert "bare" in toolset
    assert "missing" not in toolset
    assert toolset.get("missing") is None
    assert [t.name for t in toolset] == ["bare", "described"]
    assert [s.name for s in toolset.specifications] == ["bare", "described"]
    assert resolve_tools(toolset) is toolset
    assert resolve_tools(None) is Toolset.EMPTY
    assert len(Toolset.EMPTY) == 0
    assert resolve_tools([]).names == ()
    assert "bare" in repr(toolset)


@pytest.mark.parametrize(
    "bad",
    [42, "bare", {"bare": bare}, object(), Calculator.not_a_tool, int],
    ids=["int", "str", "dict", "object", "undecorated-method", "class"],
)
def test_unusable_objects_say_what_is_accepted(bad: Any) -> None:
    with pytest.raises(IllegalConfigurationError, match=r"a @tool function|pass an instance"):
        resolve_tools(bad)


def test_duplicate_names_name_both_sources() -> None:
    @tool(name="bare")
    def other_bare() -> None: ...

    with pytest.raises(IllegalConfigurationError) as info:
        resolve_tools([bare, other_bare])
    message = str(info.value)
    assert "Two tools are named 'bare'" in message
    assert "test_tool_definition.bare" in message
    assert "other_bare" in message
    assert "@tool(name=...)" in message


def test_the_same_tool_given_twice_says_so() -> None:
    with pytest.raises(IllegalConfigurationError, match="given twice"):
        resolve_tools([bare, bare])


def test_duplicates_across_kinds_are_caught() -> None:
    with pytest.raises(IllegalConfigurationError, match=r"Two tools are named 'add'.*programmatic"):
        resolve_tools([Calculator(), (ToolSpecification(name="add"), booking_executor)])


def test_programmatic_tools_are_checked() -> None:
    with pytest.raises(IllegalConfigurationError, match="must be a ToolSpecification"):
        Tool("spec", booking_executor)  # type: ignore[arg-type]
    with pytest.raises(IllegalConfigurationError, match="executor must be a callable"):
        Tool(BOOKING, "not callable")  # type: ignore[arg-type]
    with pytest.raises(IllegalConfigurationError, match="timeout"):
        Tool(BOOKING, booking_executor, timeout=-1)

    class Bad:
        def __agentloop_tools__(self) -> list[Any]:
            return ["nope"]

    with pytest.raises(IllegalConfigurationError, match="must yield Tool objects"):
        resolve_tools(Bad())


def test_a_tool_source_is_declared_and_only_its_instances_are_tools() -> None:
    assert agentloop.ToolSource is ToolSource
    assert isinstance(AgentLike(), ToolSource) and isinstance(Agent(TestModel()), ToolSource)
    assert resolve_tools([AgentLike()]).names == ("sub_agent",)
    assert not isinstance(plain_function, ToolSource) and not isinstance(object(), ToolSource)
    # The class itself is no source (its method needs an instance): it is refused as a class without tools.
    with pytest.raises(IllegalConfigurationError, match=r"Cannot use class .*AgentLike \(it has no @tool"):
        resolve_tools(AgentLike)


def test_programmatic_tools_are_never_validated_by_agentloop() -> None:
    t = Tool(BOOKING, booking_executor)
    assert t.prepare("this is not JSON") is None
    assert t.specification is BOOKING


# -- providers ---------------------------------------------------------------------------------------------


def _provider_request() -> ToolProviderRequest:
    return ToolProviderRequest(UserMessage("book it"), memory_id="m", invocation_id="inv", messages=())


async def test_a_provider_object_is_asked_for_tools() -> None:
    class Provider:
        dynamic = True

        async def provide_tools(self, request: ToolProviderRequest) -> ToolProviderResult | None:
            if "book" in request.user_message.text:
                return ToolProviderResult([(BOOKING, booking_executor)])
            return None

    provider = Provider()
    assert isinstance(provider, ToolProvider)
    assert is_dynamic(provider)
    assert (await provide_tools(provider, _provider_request())).names == ("get_booking",)
    request = ToolProviderRequest(UserMessage("hello"))
    assert await provide_tools(provider, request) is Toolset.EMPTY


async def test_a_callable_object_without_provide_tools_is_a_plain_provider() -> None:
    class Callable:
        async def __call__(self, request: ToolProviderRequest) -> ToolProviderResult:
            return ToolProviderResult([(BOOKING, booking_executor)])

    provider = Callable()
    assert not isinstance(provider, ToolProvider)
    assert (await provide_tools(provider, _provider_request())).names == ("get_booking",)


async def test_plain_callables_are_providers_and_sync_ones_run_in_a_worker_thread() -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []

    def sync_provider(request: ToolProviderRequest) -> ToolProviderResult:
        seen.append(threading.get_ident())
        return ToolProviderResult(bare)

    async def async_provider(request: ToolProviderRequest) -> None:
        return None

    assert (await provide_tools(sync_provider, _provider_request())).names == ("bare",)
    assert seen
    assert seen[0] != loop_thread
    assert await provide_tools(async_provider, _provider_request()) is Toolset.EMPTY
    assert not is_dynamic(sync_provider)


async def test_a_provider_returning_something_else_is_an_error() -> None:
    async def wrong(request: ToolProviderRequest) -> list[Any]:
        return [bare]

    with pytest.raises(IllegalConfigurationError, match="return a ToolProviderResult or None"):
        await provide_tools(wrong, _provider_request())
    with pytest.raises(IllegalConfigurationError, match="provide_tools"):
        await provide_tools(42, _provider_request())


def test_provider_results_resolve_their_tools_when_built() -> None:
    result = ToolProviderResult([bare, (BOOKING, booking_executor)])
    assert result.toolset.names == ("bare", "get_booking")
    with pytest.raises(IllegalConfigurationError, match="Two tools are named 'bare'"):
        ToolProviderResult([bare, bare])


# -- ToolContext -------------------------------------------------------------------------------------------


def test_tool_context_looks_up_the_invocation_context() -> None:
    ctx = ToolContext("inv-1", memory_id="user-1", context={"tenant": "acme"})
    assert ctx["tenant"] == "acme"
    assert ctx.get("tenant") == "acme"
    assert ctx.get("missing", "default") == "default"
    assert "tenant" in ctx
    assert "missing" not in ctx
    with pytest.raises(KeyError):
        ctx["missing"]
    assert ctx.remaining_time() is None
    assert ToolContext("inv").context == {}


async def test_remaining_time_works_in_the_loop_and_in_worker_threads() -> None:
    ctx = ToolContext("inv", deadline=anyio.current_time() + 10)
    in_loop = ctx.remaining_time()
    in_thread = await anyio.to_thread.run_sync(ctx.remaining_time)
    assert in_loop is not None
    assert in_thread is not None
    assert 9 < in_thread <= in_loop <= 10


def test_a_function_can_be_one_tool_only() -> None:
    def f() -> None: ...

    tool(f, name="first")
    with pytest.raises(IllegalConfigurationError, match="already the tool 'first'"):
        tool(f, name="second")


async def test_a_wrapping_decorator_over_a_tool_keeps_the_tool_and_runs_the_wrapper() -> None:
    import functools

    from agentloop import execute_tool_calls

    calls: list[str] = []

    def logged(func: Any) -> Any:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(func.__name__)
            return func(*args, **kwargs)

        return wrapper

    @logged
    @tool("Doubles x")
    def double(x: int) -> int:
        return 2 * x

    assert tool_specification_from(double).parameters["properties"] == {"x": {"type": "integer"}}
    (execution,) = await execute_tool_calls([ToolExecutionRequest("1", "double", '{"x": 4}')], double)
    assert execution.result == "8"
    assert calls == ["double"]
