"""`Tool`, one executable tool, and `ReturnBehavior`: a specification bound to something callable."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, Union

import msgspec

from .._values._context import ToolContext, report_output
from .._values._convert import result_to_text
from .._values._errors import IllegalConfigurationError
from .._values._messages import ToolExecutionRequest
from .._values._records import ReturnBehavior
from .._values._spec import ToolSpecification, check_tool_name
from .._values._text import valid_text
from ._arguments import validate_arguments
from ._schema import Signature
from ._threads import is_async_callable, qualified_name, run_sync_in_worker

if TYPE_CHECKING:
    pass


F = TypeVar("F", bound=Callable[..., Any])
ApprovalRule = Union[Literal[True], Callable[..., Any], None]
"""A tool's `requires_approval` as stored: None (never), True (always), or a predicate `(request, ctx)`."""
C = TypeVar("C", bound="classmethod[Any, Any, Any]")
ATTR = "__agentloop_tool__"


class ToolExecutor(Protocol):
    """Runs a programmatic tool: `async (request, context) -> str | object` (a sync function also works).

    `request.arguments` is the model's JSON text, unvalidated. The result becomes text as any tool's does.
    """

    def __call__(self, request: ToolExecutionRequest, context: ToolContext, /) -> Any: ...


# -- the executable tool -----------------------------------------------------------------------------------


class Tool:
    """One executable tool: its specification, how to run it, and how its result becomes text.

    Build programmatic tools with `Tool(specification, executor)`; `@tool` functions and methods become
    `Tool`s when an agent (or `resolve_tools`) takes them.
    """

    __slots__ = (
        "_call",
        "_is_async",
        "_signature",
        "_streams",
        "background",
        "name",
        "requires_approval",
        "result_converter",
        "result_limit",
        "return_behavior",
        "source",
        "specification",
        "timeout",
    )

    name: str
    specification: ToolSpecification
    return_behavior: ReturnBehavior
    timeout: float | None
    result_converter: Callable[[Any], str] | None
    source: str
    """Where the tool came from, for error messages (e.g. "function app.tools.get_weather")."""
    requires_approval: ApprovalRule
    """None, True, or `(ToolApprovalRequest, ToolContext) -> bool`: whether a call waits for a person."""
    background: bool
    """True: a call starts the work as a background task and the model is told so at once; the result
    reaches the model later as a steering message (docs/tools.md, "Background tools")."""
    result_limit: int | None
    """Tokens of a result the model gets whole (None: the agent's `tool_result_limit`); a longer result is
    kept aside and the model gets its beginning and the `read_tool_result` tool."""

    def __init__(
        self,
        specification: ToolSpecification,
        executor: ToolExecutor,
        *,
        return_behavior: ReturnBehavior | str = ReturnBehavior.TO_LLM,
        timeout: float | None = None,
        result_converter: Callable[[Any], str] | None = None,
        source: str | None = None,
        requires_approval: ApprovalRule | bool = None,
        result_limit: int | None = None,
        background: bool = False,
    ) -> None:
        if not isinstance(specification, ToolSpecification):
            raise IllegalConfigurationError(
                f"Tool(specification, executor): specification must be a ToolSpecification, "
                f"got {type(specification).__name__}"
            )
        if not callable(executor):
            raise IllegalConfigurationError(
                f"Tool {specification.name!r}: the executor must be a callable "
                f"`(request, context) -> str | object`, got {type(executor).__name__}"
            )
        self._setup(
            specification,
            executor,
            None,
            check_return_behavior(return_behavior, specification.name),
            check_timeout(timeout, f"Tool {specification.name!r}: timeout"),
            check_converter(result_converter, specification.name),
            source or f"programmatic tool {specification.name!r} ({qualified_name(executor)})",
            check_approval_rule(requires_approval, f"Tool {specification.name!r}"),
            check_result_limit(result_limit, f"Tool {specification.name!r}"),
            check_background(background, f"Tool {specification.name!r}"),
        )

    @classmethod
    def _from_signature(
        cls,
        definition: Any,  # a `_decorator._ToolDefinition` (that module builds on this one)
        call: Callable[..., Any],
        signature: Signature,
        specification: ToolSpecification,
        source: str,
    ) -> Tool:
        self = cls.__new__(cls)
        self._setup(
            specification,
            call,
            signature,
            definition.return_behavior,
            definition.timeout,
            definition.result_converter,
            source,
            definition.requires_approval,
            definition.result_limit,
            definition.background,
        )
        return self

    def _setup(
        self,
        specification: ToolSpecification,
        call: Callable[..., Any],
        signature: Signature | None,
        return_behavior: ReturnBehavior,
        timeout: float | None,
        result_converter: Callable[[Any], str] | None,
        source: str,
        requires_approval: ApprovalRule = None,
        result_limit: int | None = None,
        background: bool = False,
    ) -> None:
        self.name = check_tool_name(specification.name, source)
        self.background = background
        self.requires_approval = requires_approval
        self.result_limit = result_limit
        self.specification = specification
        self.return_behavior = return_behavior
        self.timeout = timeout
        self.result_converter = result_converter
        self.source = source
        self._call = call
        self._signature = signature
        self._streams = inspect.isasyncgenfunction(call)
        self._is_async = self._streams or is_async_callable(call)

    @property
    def is_async(self) -> bool:
        """True when the tool runs in the event loop; False when it runs in a worker thread."""
        return self._is_async

    def prepare(self, arguments: str) -> dict[str, Any] | None:
        """The validated keyword arguments for `arguments` (JSON text); raises `ToolArgumentsError`.

        Programmatic tools validate nothing here (None): their executor receives the request as sent.
        """
        if self._signature is None:
            return None
        return validate_arguments(arguments, self._signature, self.name)

    async def invoke(self, prepared: dict[str, Any] | None, context: ToolContext) -> Any:
        """Runs the tool with what `prepare` returned; `context.request` is the call being served."""
        signature = self._signature
        if signature is None:
            if self._streams:
                return await self._last_of(self._call(context.request, context), context)
            if self._is_async:
                result = await self._call(context.request, context)
            else:
                result = await run_sync_in_worker(
                    self._call, context.request, context, what=f"Tool {self.name!r}"
                )
        else:
            kwargs = prepared if prepared is not None else {}
            memory_id = context.memory_id
            for name in signature.memory_id_params:  # no memory id (MCP, a stateless call): the default
                if memory_id is not None or name not in signature.memory_id_defaults:
                    kwargs[name] = memory_id
            for name in signature.context_params:
                kwargs[name] = context
            if self._streams:
                return await self._last_of(self._call(**kwargs), context)
            if self._is_async:
                result = await self._call(**kwargs)
            else:
                call = functools.partial(self._call, **kwargs)
                result = await run_sync_in_worker(call, what=f"Tool {self.name!r}")
        if inspect.isawaitable(result):  # from an async callable (sync ones' were awaited by the worker call)
            result = await result
        return result

    async def _last_of(self, values: Any, context: ToolContext) -> Any:
        """A streaming tool (an async generator): each value it yields is reported as it comes (a
        `ToolOutputDelta`); the last one is its result. The generator is closed however the call ends."""
        count = 0
        last: Any = None
        try:
            async for value in values:
                count += 1
                last = value
                await report_output(context.request, value, count, self.to_text)
        finally:
            await values.aclose()
        if count == 0:
            raise ValueError(
                f"Tool {self.name!r} is a streaming tool (an async generator) that yielded nothing; its last "
                "yielded value is its result, so yield at least once"
            )
        return last

    def to_text(self, result: Any) -> str:
        """The text the model reads for `result`: the tool's `result_converter`, else the default rules."""
        converter = self.result_converter
        if converter is None:
            return result_to_text(result)
        return self._checked_text(converter(result))

    async def text_of(self, result: Any) -> str:
        """As `to_text`, awaiting what a `result_converter` returns when it is awaitable (a sync converter
        that hands back a coroutine, or an async one)."""
        converter = self.result_converter
        if converter is None:
            return result_to_text(result)
        text = converter(result)
        if inspect.isawaitable(text):
            text = await text
        return self._checked_text(text)

    def _checked_text(self, text: object) -> str:
        if not isinstance(text, str):
            raise TypeError(
                f"the result_converter of tool {self.name!r} returned {type(text).__name__}, expected str"
            )
        return valid_text(text)

    def __repr__(self) -> str:
        kind = "async" if self._is_async else "sync"
        behavior = self.return_behavior.name
        return f"Tool({self.name!r}, {kind}, return_behavior={behavior}, source={self.source!r})"


def check_return_behavior(value: ReturnBehavior | str, name: str) -> ReturnBehavior:
    try:
        return ReturnBehavior(value)
    except ValueError:
        choices = ", ".join(m.name for m in ReturnBehavior)
        raise IllegalConfigurationError(
            f"Tool {name!r}: return_behavior {value!r} is not one of {choices}"
        ) from None


def check_approval_rule(value: ApprovalRule | bool, what: str) -> ApprovalRule:
    """`requires_approval` as stored: None (never), True (always) or a predicate; `what` names its owner."""
    if value is None or value is False:
        return None
    if value is True or callable(value):
        return value
    raise IllegalConfigurationError(
        f"{what}: requires_approval must be True, False or a callable `(request, ctx) -> bool`, got {value!r}"
    )


def check_timeout(value: float | None, what: str) -> float | None:
    """`value` as seconds, when it is None or a positive number; `what` names it in the error."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise IllegalConfigurationError(f"{what} must be a positive number of seconds or None, got {value!r}")
    return float(value)


def check_converter(value: Callable[[Any], str] | None, name: str) -> Callable[[Any], str] | None:
    if value is not None and not callable(value):
        raise IllegalConfigurationError(
            f"Tool {name!r}: result_converter must be a callable `(result) -> str`, "
            f"got {type(value).__name__}"
        )
    return value


def check_metadata(value: Mapping[str, Any] | None, name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise IllegalConfigurationError(f"Tool {name!r}: metadata must be a dict with str keys")
    try:
        msgspec.json.encode(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise IllegalConfigurationError(f"Tool {name!r}: metadata must be JSON-serialisable: {exc}") from exc
    return dict(value)


def check_result_limit(value: Any, what: str) -> int | None:
    """`result_limit` / `tool_result_limit` as stored: None, or a number of tokens >= 1."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise IllegalConfigurationError(
            f"{what}: result_limit must be None or an int >= 1 (tokens), got {value!r}"
        )
    return value


def check_background(value: Any, what: str) -> bool:
    """`background=` as stored: a bool."""
    if not isinstance(value, bool):
        raise IllegalConfigurationError(f"{what}: background must be True or False, got {value!r}")
    return value
