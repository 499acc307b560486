"""Defining tools: the `@tool` decorator, `ReturnBehavior`, and `Tool`, one executable tool.

`@tool` leaves the function as it was (still an ordinary callable) and records how to offer it to a model;
its signature is compiled into a JSON schema and a validator once, at decoration time (or at first use when
an annotation names a type defined later). A `Tool` binds that to something callable: a function, a bound
method, or a programmatic `(ToolSpecification, executor)` pair.
"""

from __future__ import annotations

import enum
import functools
import inspect
import logging
import math
import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar, Union, overload

import anyio
import anyio.to_thread
import msgspec
from anyio.lowlevel import RunVar

from ._arguments import validate_arguments
from ._context import ToolContext, ToolMemoryId
from ._convert import result_to_text
from ._errors import IllegalConfigurationError
from ._messages import ToolExecutionRequest
from ._schema import P, Signature, UnresolvedAnnotationError, compile_signature
from ._spec import ToolSpecification, check_tool_name
from ._text import valid_text

__all__ = [
    "ABANDONED_THREADS_PER_TOOL",
    "TOOL_THREADS",
    "P",
    "ReturnBehavior",
    "Tool",
    "ToolContext",
    "ToolExecutor",
    "ToolMemoryId",
    "abandoned_threads",
    "busy_threads",
    "run_sync_in_worker",
    "starved_call",
    "tool",
    "tool_specification_from",
]

_F = TypeVar("_F", bound=Callable[..., Any])
ApprovalRule = Union[Literal[True], Callable[..., Any], None]
"""A tool's `requires_approval` as stored: None (never), True (always), or a predicate `(request, ctx)`."""
_C = TypeVar("_C", bound="classmethod[Any, Any, Any]")
_ATTR = "__agentloop_tool__"


class ReturnBehavior(str, enum.Enum):
    """What happens with a tool's result (LangChain4j's `ReturnBehavior`).

    `TO_LLM` (default): the result goes back to the model, which answers or calls more tools.
    `IMMEDIATE`: the invocation returns the results without asking the model again, when every call of
    the response is `IMMEDIATE`/`IMMEDIATE_IF_LAST` and none failed.
    `IMMEDIATE_IF_LAST`: as `IMMEDIATE`, and also when this call is the response's last one.
    """

    TO_LLM = "to_llm"
    IMMEDIATE = "immediate"
    IMMEDIATE_IF_LAST = "immediate_if_last"

    @classmethod
    def _missing_(cls, value: object) -> ReturnBehavior | None:
        # Accept the names too, in any case: ReturnBehavior("IMMEDIATE").
        if isinstance(value, str):
            for member in cls:
                if value.lower() in (member.value, member.name.lower()):
                    return member
        return None


class ToolExecutor(Protocol):
    """Runs a programmatic tool: `async (request, context) -> str | object` (a sync function also works).

    `request.arguments` is the model's JSON text, unvalidated. The result becomes text as any tool's does.
    """

    def __call__(self, request: ToolExecutionRequest, context: ToolContext, /) -> Any: ...


# -- running sync code -------------------------------------------------------------------------------------

TOOL_THREADS = 40
"""Worker threads sync tools (and sync executors/providers) may run at once in the process, counting those
still running after their caller stopped waiting (a timeout, a cancellation): an exact bound on the threads
this layer keeps busy. A call that finds them all busy waits for one to end."""

ABANDONED_THREADS_PER_TOOL = 4
"""Threads one tool (or provider) may leave running after their callers stopped waiting; at that many, new
calls of that tool wait for one to end instead of starting yet another thread (other tools go on)."""

logger = logging.getLogger("agentloop")
_threads_lock = threading.Lock()
_busy = 0  # threads of this layer running (or about to run) sync code, abandoned ones included
_abandoned: dict[int, int] = {}  # id(owner) -> threads still running whose caller stopped waiting
_starved: ContextVar[str | None] = ContextVar("agentloop_worker_starved", default=None)


def abandoned_threads(func: Callable[..., Any] | None = None) -> int:
    """Threads still running after their caller stopped waiting: of the code `func` runs, or of everyone."""
    with _threads_lock:
        if func is None:
            return sum(_abandoned.values())
        return _abandoned.get(_worker_key(func), 0)


def busy_threads() -> int:
    """Worker threads of this layer running sync code now (at most `TOOL_THREADS`), abandoned ones
    included."""
    with _threads_lock:
        return _busy


def starved_call() -> str | None:
    """Why the current task's last `run_sync_in_worker` call was still waiting to start a thread when it was
    cancelled (None if it was not): read by the tool executor to explain a timeout (the model sees it)."""
    reason = _starved.get()
    _starved.set(None)
    return reason


def _worker_key(func: Callable[..., Any]) -> int:
    """What counts as "the same tool" for abandoned threads: the code it runs (partials and bound methods
    unwrapped), so the tools a provider builds afresh for each invocation still share one count."""
    while isinstance(func, functools.partial):
        func = func.func
    func = getattr(func, "__func__", func)
    code = getattr(func, "__code__", None)
    return id(code if code is not None else type(func))


async def run_sync_in_worker(func: Callable[..., Any], *args: Any, what: str = "") -> Any:
    """`func(*args)` in a worker thread of the tool layer's bounded pool; an awaitable it returns is awaited.

    The same on asyncio and trio: a call takes one of the process's `TOOL_THREADS` slots for as long as its
    thread runs. On cancellation it stops waiting at once; the thread, which cannot be interrupted, runs to
    its end (holding its slot) and counts as abandoned for the code it runs until then. While that code has
    `ABANDONED_THREADS_PER_TOOL` abandoned threads, or every slot is busy, a new call starts no thread: it
    waits until one ends, or its own timeout or cancellation comes first (then `starved_call()` says why).
    `what` names the caller in the messages (e.g. "Tool 'search'").
    """
    key = _worker_key(func)
    call = _WorkerCall(key)
    await _take_slot(call, what or _qualname(func))

    def work() -> tuple[Any] | None:
        if not call.begin():  # the caller stopped waiting before the thread got to it: nothing to run
            return None
        try:
            return (func(*args),)  # boxed: trio refuses a worker that returns a coroutine
        finally:
            call.end()

    try:
        boxed = await anyio.to_thread.run_sync(work, abandon_on_cancel=True, limiter=_unbounded())
    except BaseException:
        call.leave()
        raise
    assert boxed is not None  # `work` returns None only to a caller that already left
    result = boxed[0]
    if inspect.isawaitable(result):  # a sync callable that handed back a coroutine: awaited on both backends
        result = await result
    return result


_thread_runner: RunVar[anyio.CapacityLimiter] = RunVar("agentloop_tool_thread_runner")


def _unbounded() -> anyio.CapacityLimiter:
    """The limiter handed to anyio: never full (the slots above are the bound), so the backends' different
    ways of holding it (trio keeps an abandoned thread's token until the thread ends, asyncio frees it at
    once) change nothing."""
    try:
        return _thread_runner.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(math.inf)
        _thread_runner.set(limiter)
        return limiter


async def _take_slot(call: _WorkerCall, who: str) -> None:
    """Takes a slot for `call` once its code has fewer than `ABANDONED_THREADS_PER_TOOL` abandoned threads
    and fewer than `TOOL_THREADS` threads are busy; until then the caller waits (cancellable, its timeout
    running).

    Slots are freed by threads ending, in other threads, and the waiter may be on any event loop, so the count
    is polled, backing off from 1 ms to 20 ms: the wait only happens under load or while a tool is hung.
    """
    global _busy
    delay = 0.001
    reason: str | None = None
    while True:
        with _threads_lock:
            mine, abandoned = _abandoned.get(call.key, 0), sum(_abandoned.values())
            if mine < ABANDONED_THREADS_PER_TOOL and _busy < TOOL_THREADS:
                _busy += 1
                call.holds_slot = True
                break
            busy = _busy
        if reason is None and (mine >= ABANDONED_THREADS_PER_TOOL or abandoned):
            if mine >= ABANDONED_THREADS_PER_TOOL:
                held = f"{mine} earlier calls of it are"
            else:
                held = f"all {busy} worker threads are busy, {abandoned} of them with calls"
            reason = (
                f"{who} could not start: {held} still running after they timed out or were cancelled (a "
                "sync function cannot be interrupted); if it is hung, give its blocking calls a timeout or "
                "make it async"
            )
            logger.warning("%s; it waits for one of them to end", reason)
            _starved.set(reason)
        await anyio.sleep(delay)
        delay = min(delay * 2, 0.02)
    if reason is not None:
        _starved.set(None)


class _WorkerCall:
    """Where one call of `run_sync_in_worker` stands; read and written under `_threads_lock`.

    The slot is given back by whoever sees the call end: the thread when it finishes, or the caller when it
    leaves before the thread started. A call whose caller left before its thread started never runs
    (asyncio's worker skips it anyway; trio's would run it), so the same calls run on both backends, and
    only started threads count as abandoned.
    """

    __slots__ = ("finished", "holds_slot", "key", "left", "started")

    def __init__(self, key: int) -> None:
        self.key = key
        self.holds_slot = False
        self.started = False
        self.finished = False
        self.left = False

    def begin(self) -> bool:
        """In the thread, first: whether to run at all (the caller is still waiting)."""
        with _threads_lock:
            self.started = not self.left
            return self.started

    def end(self) -> None:
        """In the thread, last: the slot is given back, and an abandoned call counted out."""
        with _threads_lock:
            self.finished = True
            self._free()
            if self.left:
                _forget(self.key)

    def leave(self) -> None:
        """In the event loop, when the caller stops waiting: a thread still running counts as abandoned (and
        keeps its slot until it ends); a thread that never started gives its slot back now."""
        with _threads_lock:
            self.left = True
            if self.started and not self.finished:
                _abandoned[self.key] = _abandoned.get(self.key, 0) + 1
            elif not self.started:
                self.finished = True  # never started, and never will
                self._free()

    def _free(self) -> None:
        global _busy
        if self.holds_slot:
            self.holds_slot = False
            _busy -= 1


def _forget(key: int) -> None:
    """One abandoned thread of `key` ended (called with the lock held)."""
    left = _abandoned[key] - 1
    if left:
        _abandoned[key] = left
    else:
        del _abandoned[key]


def _is_async_callable(func: object) -> bool:
    """An `async def` function (bound, partial...) or an object whose class has an `async def __call__`."""
    if inspect.iscoroutinefunction(func):
        return True
    return inspect.iscoroutinefunction(getattr(type(func), "__call__", None))  # noqa: B004


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
        "name",
        "requires_approval",
        "result_converter",
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
            _check_return_behavior(return_behavior, specification.name),
            check_timeout(timeout, f"Tool {specification.name!r}: timeout"),
            _check_converter(result_converter, specification.name),
            source or f"programmatic tool {specification.name!r} ({_qualname(executor)})",
            check_approval_rule(requires_approval, f"Tool {specification.name!r}"),
        )

    @classmethod
    def _from_signature(
        cls,
        definition: _ToolDefinition,
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
    ) -> None:
        self.name = check_tool_name(specification.name, source)
        self.requires_approval = requires_approval
        self.specification = specification
        self.return_behavior = return_behavior
        self.timeout = timeout
        self.result_converter = result_converter
        self.source = source
        self._call = call
        self._signature = signature
        self._is_async = _is_async_callable(call)

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
            if self._is_async:
                result = await self._call(context.request, context)
            else:
                result = await run_sync_in_worker(
                    self._call, context.request, context, what=f"Tool {self.name!r}"
                )
        else:
            kwargs = prepared if prepared is not None else {}
            for name in signature.memory_id_params:
                kwargs[name] = context.memory_id
            for name in signature.context_params:
                kwargs[name] = context
            if self._is_async:
                result = await self._call(**kwargs)
            else:
                call = functools.partial(self._call, **kwargs)
                result = await run_sync_in_worker(call, what=f"Tool {self.name!r}")
        if inspect.isawaitable(result):  # from an async callable (sync ones' were awaited by the worker call)
            result = await result
        return result

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


# -- @tool ---------------------------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class _ToolDefinition:
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
    _compiled: dict[bool, tuple[Signature, ToolSpecification]] = field(default_factory=dict)

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
    def __call__(self, func: _F, /) -> _F: ...
    @overload
    def __call__(self, func: _C, /) -> _C: ...


@overload
def tool(
    *description: str,
    name: str | None = None,
    return_behavior: ReturnBehavior | str = ReturnBehavior.TO_LLM,
    metadata: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    result_converter: Callable[[Any], str] | None = None,
    requires_approval: ApprovalRule | bool = None,
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
) -> _ToolDecorator: ...


@overload
def tool(
    func: _F,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    return_behavior: ReturnBehavior | str = ReturnBehavior.TO_LLM,
    metadata: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    result_converter: Callable[[Any], str] | None = None,
    requires_approval: ApprovalRule | bool = None,
) -> _F: ...


@overload
def tool(
    func: _C,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    return_behavior: ReturnBehavior | str = ReturnBehavior.TO_LLM,
    metadata: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    result_converter: Callable[[Any], str] | None = None,
    requires_approval: ApprovalRule | bool = None,
) -> _C: ...


def tool(
    *args: Any,
    name: str | None = None,
    description: str | None = None,
    return_behavior: ReturnBehavior | str = ReturnBehavior.TO_LLM,
    metadata: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    result_converter: Callable[[Any], str] | None = None,
    requires_approval: ApprovalRule | bool = None,
) -> Any:
    """Marks a function or method as a tool a model can call; the function itself stays unchanged.

    Forms: `@tool`, `@tool("description")`, `@tool("line 1", "line 2")` (joined with newlines), and
    `@tool(name=, description=, return_behavior=, metadata={...}, timeout=, result_converter=,
    requires_approval=)`. Works on functions, methods, static and class methods, sync or async. The name
    defaults to the function's; the description to its docstring. `timeout` (seconds) bounds each call;
    `result_converter` turns the result into the text the model reads; `requires_approval` (True, or
    `(ToolApprovalRequest, ToolContext) -> bool`) makes a call wait for a person's yes (docs/approval.md).
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
            f"{_qualname(func)} is already the tool {existing.name!r}; a function can be one tool only "
            "(wrap it in another function, or build a Tool(specification, executor))"
        )
    try:
        setattr(func, _ATTR, definition)
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
) -> _ToolDefinition:
    if inspect.ismethod(func):
        raise IllegalConfigurationError(
            "@tool goes on the function definition (inside the class), not on a bound method"
        )
    if not callable(func):
        raise IllegalConfigurationError(f"@tool decorates functions and methods, not {type(func).__name__}")
    tool_name = check_tool_name(name if name is not None else getattr(func, "__name__", ""), _qualname(func))
    if inspect.isasyncgenfunction(func) or inspect.isgeneratorfunction(func):
        raise IllegalConfigurationError(
            f"Tool {tool_name!r} is a generator; a tool must return its result (collect it into a list)"
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
        return_behavior=_check_return_behavior(return_behavior, tool_name),
        metadata=_check_metadata(metadata, tool_name),
        timeout=check_timeout(timeout, f"Tool {tool_name!r}: timeout"),
        result_converter=_check_converter(result_converter, tool_name),
        localns=localns,
        requires_approval=check_approval_rule(requires_approval, f"Tool {tool_name!r}"),
    )


def _check_return_behavior(value: ReturnBehavior | str, name: str) -> ReturnBehavior:
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


def _check_converter(value: Callable[[Any], str] | None, name: str) -> Callable[[Any], str] | None:
    if value is not None and not callable(value):
        raise IllegalConfigurationError(
            f"Tool {name!r}: result_converter must be a callable `(result) -> str`, "
            f"got {type(value).__name__}"
        )
    return value


def _check_metadata(value: Mapping[str, Any] | None, name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise IllegalConfigurationError(f"Tool {name!r}: metadata must be a dict with str keys")
    try:
        msgspec.json.encode(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise IllegalConfigurationError(f"Tool {name!r}: metadata must be JSON-serialisable: {exc}") from exc
    return dict(value)


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


def _qualname(obj: object) -> str:
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{module}.{qualname}" if module else qualname


# -- from Python objects to tools -------------------------------------------------------------------------

_plain_definitions: weakref.WeakKeyDictionary[Callable[..., Any], _ToolDefinition] = (
    weakref.WeakKeyDictionary()
)


def definition_of(func: object) -> _ToolDefinition | None:
    """The `@tool` definition recorded on `func` (a function, staticmethod or classmethod), if any."""
    if isinstance(func, (staticmethod, classmethod)):
        func = func.__func__
    found = getattr(func, _ATTR, None)
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
            f"{_qualname(func.__func__)} is a classmethod object; pass it through its class (MyClass.method)"
        )
    if inspect.ismethod(func):
        definition = _definition_for_function(func.__func__)
        return definition.bind(func, skip_first=True, source=f"method {_qualname(func.__func__)}")
    definition = _definition_for_function(func)
    if _looks_like_method(func):
        raise IllegalConfigurationError(
            f"{_qualname(func)} is an instance method taken from its class; pass an instance "
            "(MyClass().method, or the instance itself) so it has a `self`"
        )
    return definition.bind(func, skip_first=False, source=f"function {_qualname(func)}")


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
