"""`Agent`: a chat model with tools, memory and a system message; `chat()`, `stream()`, `ask()` (and
`chat_sync()`, `ask_sync()` for code without an event loop)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, Literal, overload

import anyio

from .._conforms import conforms
from .._features.approval import ApprovalRules, Decision, PendingApproval
from .._features.approval._gate import ApprovalGate, Resume
from .._features.output import (
    DEFAULT_OUTPUT_TOOL_NAME,
    OutputMode,
    OutputRun,
    OutputValidator,
    structured_output,
)
from .._features.pricing import Priced, PricingLike, resolve_pricing
from .._features.results import ResultShelf
from .._features.runner import RunnerHook
from .._features.search import check_native_model, has_deferred, search_filters
from .._memory._chat import ChatMemory, WindowProvider, exclusive_access
from .._memory._history import checked_history
from .._runtime._background import BackgroundTasks, InvocationTasks, has_background, report_lost
from .._runtime._handle import RunHandle
from .._runtime._loop import Invocation, Listener, run_invocation
from .._runtime._observe import Observer, default_observer, observer_for
from .._runtime._seam import CallContext, InvocationCall, Middleware, Seam, check_middleware
from .._runtime._stream import TokenStream
from .._runtime._sync import close_at_exit, run_sync
from .._tools._execution import (
    DEFAULT_MAX_CALLS,
    DEFAULT_MAX_RESULT_CHARS,
    ExecutionOptions,
    ToolRunner,
)
from .._tools._tool import Tool, check_result_limit
from .._tools._toolset import ToolProvider, is_dynamic, resolve_tools
from .._values._background import BackgroundTask, starting_background
from .._values._context import ToolContext, new_invocation_id
from .._values._errors import (
    AgentLoopError,
    ApprovalError,
    IllegalConfigurationError,
    InvocationTimeoutError,
)
from .._values._messages import (
    ChatMessage,
    FinishReason,
    SystemMessage,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserInput,
    UserMessage,
)
from .._values._options import NO_OPTIONS, CallOptions
from .._values._records import ReturnBehavior
from .._values._result import Result
from ..control import RunCommand, RunControl
from ..models import ChatModel
from ..models._base import model_name_of, provider_of
from ._agent_tool import agent_tool
from ._control import IfBusy, RunTarget, check_control, check_if_busy, registered, when_busy

if TYPE_CHECKING:
    from typing import TypeAlias

    from typing_extensions import TypeForm, TypeVar

    OutputT = TypeVar("OutputT", default=str)
    T = TypeVar("T")
    OutputType: TypeAlias = "TypeForm[T] | Sequence[TypeForm[T]]"
else:
    from typing import TypeVar, Union

    from typing_extensions import TypeForm

    OutputT = TypeVar("OutputT")
    T = TypeVar("T")
    OutputType = Union[TypeForm[T], Sequence[TypeForm[T]]]  # so help() and get_type_hints() resolve it

__all__ = ["Agent"]

SystemMessageLike = str | Callable[[Any], "Awaitable[str | None] | str | None"] | None
MemoryLike = ChatMemory | Callable[[Any], ChatMemory] | None
ErrorHandler = Callable[[Exception, ToolExecutionRequest], "str | Awaitable[str]"]
HallucinationStrategy = Callable[
    [ToolExecutionRequest], "str | ToolExecutionResultMessage | Awaitable[str | ToolExecutionResultMessage]"
]

DEFAULT_MEMORY_ID = "default"

_STATELESS: Any = object()
"""The memory id of an invocation that uses no memory at all (an agent-tool's default)."""


class Agent(Generic[OutputT]):
    """A chat model put to work with tools, memory and instructions.

    `model` is a `ChatModel` or a model string such as `"openai:gpt-4o-mini"` (see `infer_model`). `memory` is
    one `ChatMemory` shared by every invocation, or a function from memory id to that id's memory (e.g.
    `MessageWindowChatMemory.provider(20)`); without it every invocation starts afresh.

    `output_type` makes every invocation end in a validated value of that type (`Result.output`; see
    docs/output.md), delivered as `output_mode` says, corrected at most `output_retries` times.

    A call to a tool that does not exist gets, by default (`hallucinated_tool_name_strategy="tell_model"`),
    an error result naming the tools the model can call, so it corrects itself; a function
    `request -> text` answers instead, and None raises `HallucinatedToolError` (aborting the invocation).

    For durable-execution engines: `tool_runner` runs every tool call (see `ToolRunner`), `clock` and
    `id_factory` replace the system clock and the random invocation ids, and `ordered_events=True` reports
    `ToolExecuted` events in call order instead of completion order.

    `middleware`: `Middleware` around every model call, tool call and invocation, outermost first (a call's
    own `middleware=` runs inside these); see docs/middleware.md. `tool_result_limit` (tokens): a longer
    tool result is kept aside and the model gets its beginning and a `read_tool_result` tool (a tool's own
    `@tool(result_limit=...)` wins); see docs/context.md.

    `instrument`: True traces this agent with OpenTelemetry (`agentloop-runtime[otel]`), an
    `agentloop.otel.Instrumentation` with those settings, False never; None (default) follows
    `agentloop.instrument()`. `pricing`: how `Result.cost` is worked out: a function
    `(usage, model, provider) -> USD` per model call, True for the genai-prices package, False for none;
    None (default) uses genai-prices when it is installed (`agentloop-runtime[prices]`).

    `control`: where running invocations register so that `cancel()` / `steer()` reach them, from this
    process (`agentloop.control.LocalRunControl`, the default: one per agent) or from any process sharing a
    `SQLiteRunControl(path)` / `RedisRunControl(url)`; see docs/runtime.md, "Stopping and steering a run".
    """

    def __init__(
        self,
        model: ChatModel | str,
        *,
        tools: Any = (),
        tool_provider: ToolProvider | Callable[..., Any] | None = None,
        system_message: SystemMessageLike = None,
        memory: MemoryLike = None,
        max_tool_rounds: int = 100,
        max_concurrent_tools: int | None = None,
        tool_timeout: float | None = None,
        context: Mapping[str, Any] | None = None,
        hallucinated_tool_name_strategy: HallucinationStrategy | Literal["tell_model"] | None = "tell_model",
        tool_arguments_error_handler: ErrorHandler | None = None,
        tool_execution_error_handler: ErrorHandler | None = None,
        eager_tools: bool = True,
        max_tool_result_chars: int | None = DEFAULT_MAX_RESULT_CHARS,
        max_tool_calls_per_response: int | None = DEFAULT_MAX_CALLS,
        name: str | None = None,
        description: str | None = None,
        tool_runner: ToolRunner | None = None,
        ordered_events: bool = False,
        clock: Callable[[], datetime] | None = None,
        id_factory: Callable[[], str] | None = None,
        requires_approval: Any = None,
        approval_handler: Callable[..., Any] | None = None,
        instrument: Any = None,
        pricing: PricingLike = None,
        output_type: OutputType[OutputT] | None = None,
        output_mode: OutputMode = "tool",
        output_retries: int = 1,
        output_validator: OutputValidator | None = None,
        output_tool_name: str = DEFAULT_OUTPUT_TOOL_NAME,
        middleware: Sequence[Middleware] | None = None,
        tool_result_limit: int | None = None,
        control: RunControl | None = None,
    ) -> None:
        if isinstance(model, str):
            from ..models import infer_model

            model = infer_model(model)
        if max_tool_rounds < 0:
            raise IllegalConfigurationError(f"max_tool_rounds must be >= 0, got {max_tool_rounds}")
        if max_concurrent_tools is not None and max_concurrent_tools < 1:
            raise IllegalConfigurationError(f"max_concurrent_tools must be >= 1, got {max_concurrent_tools}")
        self.model: ChatModel = model
        self.tools = resolve_tools(tools)
        if has_deferred(self.tools):  # ToolSearch(native=True): refused at once for a model without one
            check_native_model(model)
        self.tool_provider = tool_provider
        self.system_message = system_message
        self.memory = memory
        self.max_tool_rounds = max_tool_rounds
        self.context: Mapping[str, Any] = MappingProxyType(dict(context or {}))
        self.eager_tools = eager_tools
        self.name = name
        self.description = description
        self.options = ExecutionOptions(
            timeout=tool_timeout,
            max_concurrency=max_concurrent_tools,
            hallucinated_tool_name_strategy=hallucinated_tool_name_strategy,
            tool_arguments_error_handler=tool_arguments_error_handler,
            tool_execution_error_handler=tool_execution_error_handler,
            max_result_chars=max_tool_result_chars,
            max_calls=max_tool_calls_per_response,
            tool_runner=tool_runner,
            clock=clock,
        )
        if callable(getattr(tool_runner, "reserve", None)):
            raise IllegalConfigurationError(
                "Agent(tool_runner=...): this runner has a reserve(request) method, which agentloop no "
                "longer calls. Number your steps in a middleware's before_tool_call(call) hook instead (same "
                "order: call order, before each call's task starts; docs/durable.md, 'The seams')"
            )
        self.ordered_events = ordered_events
        self.id_factory: Callable[[], str] = id_factory or new_invocation_id
        self.approval = ApprovalRules.build(requires_approval, approval_handler)
        self._instrument = instrument
        self._observer: Observer | None = observer_for(instrument)
        chosen_pricing = resolve_pricing(pricing)  # a feature on the seam (its `on_result`)
        self._priced: Priced | None = None
        if chosen_pricing is not None:
            self._priced = Priced(chosen_pricing, provider_of(model), model_name_of(model))
        self.output_type: Any = str if output_type is None else output_type
        self.output_mode: OutputMode = output_mode
        self.output_retries = output_retries
        self.output_validator = output_validator
        self.output_tool_name = output_tool_name
        structured_output(self, self.output_type)  # checks the settings now rather than at the first call
        self.middleware: tuple[Middleware, ...] = check_middleware(middleware, "Agent(middleware=...)")
        # The seam of a call without middleware of its own: (its observer, the agent's middleware, the seam).
        self._seam: tuple[Observer | None, tuple[Middleware, ...], ToolRunner | None, Seam] | None = None
        self._memories: dict[Any, ChatMemory] = {}
        self.tool_result_limit = check_result_limit(tool_result_limit, "Agent(tool_result_limit=...)")
        self._shelf = ResultShelf(self.tool_result_limit)
        self.control: RunControl = check_control(control)
        self._background = BackgroundTasks(self._deliver_background)
        self._lifetime: AbstractAsyncContextManager[None] | None = None

    # -- invocations --------------------------------------------------------------------------------------

    @overload
    async def chat(
        self,
        message: UserInput,
        *,
        memory_id: Any = None,
        context: Mapping[str, Any] | None = None,
        tools: Any = None,
        timeout: float | None = None,
        message_history: Sequence[ChatMessage] | None = None,
        output_type: None = None,
        middleware: Sequence[Middleware] | None = None,
        if_busy: IfBusy = "wait",
    ) -> Result[OutputT]: ...

    @overload
    async def chat(
        self,
        message: UserInput,
        *,
        memory_id: Any = None,
        context: Mapping[str, Any] | None = None,
        tools: Any = None,
        timeout: float | None = None,
        message_history: Sequence[ChatMessage] | None = None,
        output_type: OutputType[T],
        middleware: Sequence[Middleware] | None = None,
        if_busy: IfBusy = "wait",
    ) -> Result[T]: ...

    async def chat(
        self,
        message: UserInput,
        *,
        memory_id: Any = None,
        context: Mapping[str, Any] | None = None,
        tools: Any = None,
        timeout: float | None = None,
        message_history: Sequence[ChatMessage] | None = None,
        output_type: Any = None,
        middleware: Sequence[Middleware] | None = None,
        if_busy: IfBusy = "wait",
    ) -> Result[Any]:
        """Runs one invocation to its end and returns its `Result` (final text and every tool execution).

        `tools` replaces the agent's tools for this call; `context` is merged over the agent's (the call's
        values win) and reaches tools as `ToolContext`; `timeout` bounds the whole invocation, model calls
        and tools together. `output_type` replaces the agent's for this call; `middleware` runs inside the
        agent's for this call. `message_history` gives the conversation so far for this call instead of a
        memory (`result.new_messages` is what to append to it); with a `memory_id` too it raises
        `IllegalConfigurationError` (docs/runtime.md). `if_busy`: what happens when an invocation already
        runs on `memory_id`: "wait" for it (the default), "steer" (hand it this message and return its
        Result), "interrupt" (cancel it, then run) or "reject" (raise `MemoryBusyError`).
        """
        options = _call_options(output_type, middleware)
        memory_id, history = _history_or_memory(memory_id, message_history)
        busy = check_if_busy(if_busy)
        return await self._invoke(
            message, memory_id, context, tools, timeout, None, options, history=history, if_busy=busy
        )

    @overload
    def stream(
        self,
        message: UserInput,
        *,
        memory_id: Any = None,
        context: Mapping[str, Any] | None = None,
        tools: Any = None,
        timeout: float | None = None,
        message_history: Sequence[ChatMessage] | None = None,
        output_type: None = None,
        middleware: Sequence[Middleware] | None = None,
        if_busy: IfBusy = "wait",
    ) -> TokenStream[OutputT]: ...

    @overload
    def stream(
        self,
        message: UserInput,
        *,
        memory_id: Any = None,
        context: Mapping[str, Any] | None = None,
        tools: Any = None,
        timeout: float | None = None,
        message_history: Sequence[ChatMessage] | None = None,
        output_type: OutputType[T],
        middleware: Sequence[Middleware] | None = None,
        if_busy: IfBusy = "wait",
    ) -> TokenStream[T]: ...

    def stream(
        self,
        message: UserInput,
        *,
        memory_id: Any = None,
        context: Mapping[str, Any] | None = None,
        tools: Any = None,
        timeout: float | None = None,
        message_history: Sequence[ChatMessage] | None = None,
        output_type: Any = None,
        middleware: Sequence[Middleware] | None = None,
        if_busy: IfBusy = "wait",
    ) -> TokenStream[Any]:
        """Starts a streaming invocation: iterate the `TokenStream` for text, `.events()` for typed events,
        `.outputs()` for the structured output as it grows, or register callbacks and `await
        stream.start()`. Nothing runs until it is consumed."""
        toolset = None if tools is None else resolve_tools(tools)
        resolved = self.output_type if output_type is None else output_type
        if output_type is not None:
            structured_output(self, resolved)  # checks the call's output type now, not when the stream starts
        options = _call_options(output_type, middleware)
        memory_id, history = _history_or_memory(memory_id, message_history)  # checked now, too
        busy = check_if_busy(if_busy)
        handle = RunHandle()
        # What the stream runs with its listener (a partial: no closure cells held while it streams).
        runner = functools.partial(
            self._invoke, message, memory_id, context, toolset, timeout,
            options=options, history=history, if_busy=busy, handle=handle,
        )  # fmt: skip
        description = f"agent={self.name or type(self.model).__name__}"
        return TokenStream(runner, description=description, structured=resolved is not str, handle=handle)

    async def ask(
        self,
        message: UserInput,
        *,
        memory_id: Any = None,
        context: Mapping[str, Any] | None = None,
        tools: Any = None,
        timeout: float | None = None,
        if_busy: IfBusy = "wait",
    ) -> str:
        """Like `chat()`, returning only the answer text.

        Raises `IllegalConfigurationError` when an immediate-return tool ends the invocation: there is no text
        then, and only a `Result` (from `chat()` or `stream()`) can carry the tools' outcome; and for an agent
        with a structured `output_type` (use `chat()`: its `Result.output` is the value).
        """
        if self.output_type is not str:
            raise IllegalConfigurationError(
                f"ask() returns text, but this agent's output_type is {self.output_type!r}; use "
                "`(await agent.chat(...)).output`"
            )
        result = await self.chat(
            message, memory_id=memory_id, context=context, tools=tools, timeout=timeout, if_busy=if_busy
        )
        if result.finish_reason is FinishReason.APPROVAL_REQUIRED:
            raise ApprovalError(
                "Tool calls of this invocation wait for approval, so there is no answer text yet; use "
                "`await agent.chat(...)` and resume its `result.pending` with `agent.resume(...)`",
                pending_id=result.pending.id if result.pending is not None else None,
            )
        if result.content is None:
            if result.finish_reason is FinishReason.TOOL_EXECUTION:
                names = ", ".join(e.request.name for e in result.tool_executions[-1:])
                raise IllegalConfigurationError(
                    f"An immediate-return tool ({names}) ended the invocation, so there is no answer text; "
                    "use `await agent.chat(...)` or `agent.stream(...)`, whose Result holds the tool "
                    "executions"
                )
            return ""
        return result.content

    @overload
    def chat_sync(
        self,
        message: UserInput,
        *,
        memory_id: Any = None,
        context: Mapping[str, Any] | None = None,
        tools: Any = None,
        timeout: float | None = None,
        message_history: Sequence[ChatMessage] | None = None,
        output_type: None = None,
        if_busy: IfBusy = "wait",
    ) -> Result[OutputT]: ...

    @overload
    def chat_sync(
        self,
        message: UserInput,
        *,
        memory_id: Any = None,
        context: Mapping[str, Any] | None = None,
        tools: Any = None,
        timeout: float | None = None,
        message_history: Sequence[ChatMessage] | None = None,
        output_type: OutputType[T],
        if_busy: IfBusy = "wait",
    ) -> Result[T]: ...

    def chat_sync(self, message: UserInput, **options: Any) -> Result[Any]:
        """`chat()` for scripts and notebooks: blocks until the `Result` is there (same options as `chat()`).

        Works inside Jupyter's running loop too (the call then runs on a worker thread). Use one style per
        agent: its model's connections belong to the loop of the sync calls.
        """
        close_at_exit(self.model)
        return run_sync(self.chat, message, **options)

    def ask_sync(self, message: UserInput, **options: Any) -> str:
        """`ask()` for scripts and notebooks: blocks until the answer text is there (see `chat_sync`)."""
        close_at_exit(self.model)
        return run_sync(self.ask, message, **options)

    def resume_sync(
        self,
        pending: PendingApproval | bytes | str,
        decisions: Mapping[str, Decision],
        *,
        context: Mapping[str, Any] | None = None,
        tools: Any = None,
        timeout: float | None = None,
    ) -> Result[OutputT]:
        """`resume()` for scripts and notebooks: blocks until the `Result` is there (see `chat_sync`)."""
        close_at_exit(self.model)
        return run_sync(self.resume, pending, decisions, context=context, tools=tools, timeout=timeout)

    async def resume(
        self,
        pending: PendingApproval | bytes | str,
        decisions: Mapping[str, Decision],
        *,
        context: Mapping[str, Any] | None = None,
        tools: Any = None,
        timeout: float | None = None,
        output_type: Any = None,
        middleware: Sequence[Middleware] | None = None,
    ) -> Result[OutputT]:
        """Goes on with a paused invocation (`result.pending`, or its `to_json()` bytes): approved calls run,
        denied ones get their error result, the round is committed as one unit and the model is called.

        `decisions` maps every waiting call id to True, False or `Denied(reason)`. A decision missing or
        unknown, a state altered since it paused, or a round already resumed raise `ApprovalError` and run
        nothing. `context` and `tools` are not stored in the paused state: give them again if the paused
        invocation had them. Works in the process that paused, or in any process with an agent built the same
        way over a memory store that records paused rounds (docs/approval.md).

        The call's own `output_type` and `middleware` travel with the paused round: the same
        `PendingApproval` object resumes under them; one read back from JSON names them, and `resume()`
        then needs them again (`output_type=`, `middleware=`): anything else raises `ApprovalError`.
        """
        resume = Resume(pending, decisions)
        options = _resume_options(resume, output_type, middleware)
        return await self._resume(resume, context, tools, timeout, None, options)

    def resume_stream(
        self,
        pending: PendingApproval | bytes | str,
        decisions: Mapping[str, Decision],
        *,
        context: Mapping[str, Any] | None = None,
        tools: Any = None,
        timeout: float | None = None,
        output_type: Any = None,
        middleware: Sequence[Middleware] | None = None,
    ) -> TokenStream[OutputT]:
        """`resume()` as a `TokenStream`; the state and the decisions are checked before it returns."""
        resume = Resume(pending, decisions)
        options = _resume_options(resume, output_type, middleware)
        toolset = None if tools is None else resolve_tools(tools)
        handle = RunHandle()

        async def runner(emit: Listener) -> Result[OutputT]:
            return await self._resume(resume, context, toolset, timeout, emit, options, handle)

        resolved = self.output_type if options.output_type is None else options.output_type
        description = f"agent={self.name or type(self.model).__name__} (resumed)"
        return TokenStream(runner, description=description, structured=resolved is not str, handle=handle)

    async def _resume(
        self,
        resume: Resume,
        context: Mapping[str, Any] | None,
        tools: Any,
        timeout: float | None,
        emit: Listener | None,
        options: CallOptions,
        handle: RunHandle | None = None,
    ) -> Result[Any]:
        pending = resume.pending
        return await self._invoke(
            pending.user_message, pending.memory_id, context, tools, timeout, emit, options, resume,
            handle=handle,
        )  # fmt: skip

    def _invoke(
        self,
        message: UserInput,
        memory_id: Any,
        context: Mapping[str, Any] | None,
        tools: Any,
        timeout: float | None,
        emit: Listener | None,
        options: CallOptions = NO_OPTIONS,
        resume: Resume | None = None,
        history: Sequence[ChatMessage] = (),
        if_busy: IfBusy = "wait",
        handle: RunHandle | None = None,
    ) -> Awaitable[Result[Any]]:
        """The invocation to await. Plain functions down to `_run_registered` hand on the next coroutine
        rather than awaiting it: no frame of theirs stays alive while a stream is held open."""
        user_message = UserMessage.of(message)
        merged = self.context if not context else MappingProxyType({**self.context, **context})
        seam = self._seam_for(options.middleware)
        if resume is not None:
            invocation_id = resume.pending.invocation_id
        else:  # a middleware's id factory (a durable engine's run id), else the agent's
            invocation_id = self.id_factory() if seam.id_factory is None else seam.id_factory()
        if seam.invocation is None:
            return self._invoke_with(
                user_message,
                memory_id,
                merged,
                tools,
                timeout,
                emit,
                options,
                resume,
                seam,
                invocation_id,
                history,
                if_busy,
                handle,
            )
        public_id = None if memory_id is _STATELESS else memory_id
        call = InvocationCall(
            user_message,
            CallContext(self, invocation_id, public_id, merged),
            options.output_type,
            emit is not None,
        )

        async def call_next(call: InvocationCall) -> Result[Any]:
            chosen = (
                options
                if call.output_type is options.output_type
                else CallOptions(call.output_type, options.middleware)
            )
            return await self._invoke_with(
                call.message,
                memory_id,
                call.context.context,
                tools,
                timeout,
                emit,
                chosen,
                resume,
                seam,
                invocation_id,
                history,
                if_busy,
                handle,
            )

        return seam.invocation(call, call_next)

    def _seam_for(self, call_middleware: tuple[Middleware, ...]) -> Seam:
        """The middleware of one invocation, outermost first: the observer (tracing) when one is set and
        enabled, the agent's middleware, the call's, then the agent's `tool_runner` (`RunnerHook`). Without
        middleware of the call's own it is built once per observer, middleware and runner
        (`agentloop.instrument()` may change the observer between invocations)."""
        observer = default_observer() if self._instrument is None else self._observer
        if observer is not None and not observer.enabled:
            observer = None
        runner = self.options.tool_runner
        if call_middleware:
            return Seam.of(_chosen(observer, self.middleware, call_middleware, runner))
        cached = self._seam
        if (
            cached is None
            or cached[0] is not observer
            or cached[1] is not self.middleware
            or cached[2] is not runner
        ):
            seam = Seam.of(_chosen(observer, self.middleware, (), runner))
            cached = self._seam = (observer, self.middleware, runner, seam)
        return cached[3]

    def _invoke_with(
        self,
        user_message: UserMessage,
        memory_id: Any,
        merged: Mapping[str, Any],
        tools: Any,
        timeout: float | None,
        emit: Listener | None,
        options: CallOptions,
        resume: Resume | None,
        seam: Seam,
        invocation_id: str,
        history: Sequence[ChatMessage] = (),
        if_busy: IfBusy = "wait",
        handle: RunHandle | None = None,
    ) -> Awaitable[Result[Any]]:
        toolset = self.tools if tools is None else resolve_tools(tools)
        resolved = self.output_type if options.output_type is None else options.output_type
        output = (
            None if resolved is str and self.output_validator is None else structured_output(self, resolved)
        )
        if output is not None and output.mode == "tool":
            toolset = resolve_tools([toolset, output.tools()])
        if self._shelf.applies(toolset):  # long results kept aside: the model may read on
            toolset = resolve_tools([toolset, [self._shelf.reader]])
        run = _Run(
            user_message,
            memory_id,
            merged,
            toolset,
            None,
            emit,
            output,
            resume,
            seam,
            invocation_id,
            options,
            history,
            if_busy,
            handle,
        )
        if timeout is None:
            return self._run(run)
        return self._run_within(run, timeout)

    async def _run_within(self, run: _Run, timeout: float) -> Result[Any]:
        run = dataclasses.replace(run, deadline=anyio.current_time() + timeout)
        with anyio.move_on_after(timeout) as scope:
            return await self._run(run)
        assert scope.cancelled_caught
        raise InvocationTimeoutError(
            f"The invocation did not finish within its timeout of {timeout:g} s "
            "(model calls and tools together)",
            timeout=timeout,
        )

    def _run(self, run: _Run) -> Awaitable[Result[Any]]:
        memory_id = run.memory_id
        if memory_id is _STATELESS:
            memory, memory_id = None, None
        else:
            memory = self._memory_for(memory_id)
        dynamic = self.tool_provider is not None
        clock = (
            run.seam.clock or self.options.now
        )  # a middleware's clock (a durable engine's), else the agent's
        gate = ApprovalGate(self.approval, run.resume, clock)
        # None when no call of this invocation can need approval (the seam then stays empty).
        approval = gate if gate.needed(run.toolset, dynamic) else None
        if run.if_busy != "wait" and memory_id is not None:
            return self._run_unless_busy(run, memory, memory_id, approval)
        return self._run_held(run, memory, memory_id, approval)

    async def _run_unless_busy(
        self, run: _Run, memory: ChatMemory | None, memory_id: Any, approval: ApprovalGate | None
    ) -> Result[Any]:
        """`if_busy` other than "wait": the outcome of the invocation already running when steered into it,
        else this one's."""
        answered = await when_busy(self.control, run.if_busy, memory_id, run.user_message, run.invocation_id)
        if answered is not None:  # steered into the invocation already running: its outcome
            return answered
        return await self._run_held(run, memory, memory_id, approval)

    def _run_held(
        self, run: _Run, memory: ChatMemory | None, memory_id: Any, approval: ApprovalGate | None
    ) -> Awaitable[Result[Any]]:
        handle = run.handle if run.handle is not None else RunHandle()
        target = RunTarget(handle)
        if not has_background(run.toolset) and self.tool_provider is None:
            return self._run_registered(run, memory, memory_id, approval, handle, target, None)
        return self._run_with_background(run, memory, memory_id, approval, handle, target)

    async def _run_with_background(
        self,
        run: _Run,
        memory: ChatMemory | None,
        memory_id: Any,
        approval: ApprovalGate | None,
        handle: RunHandle,
        target: RunTarget,
    ) -> Result[Any]:
        """The invocation of a toolset with background tools: their tasks, and their results after it."""
        background = self._background.invocation(run.invocation_id, memory_id, run.emit)
        async with background.scope():
            try:
                result = await self._run_registered(
                    run, memory, memory_id, approval, handle, target, background
                )
            finally:
                with anyio.CancelScope(shield=True):  # its undelivered results go on, even when cancelled
                    await background.ended()
            if result.finish_reason is FinishReason.CANCELLED:
                background.cancel()  # a cancelled invocation that ran its own tasks: they end with it
        return result

    async def _run_registered(
        self,
        run: _Run,
        memory: ChatMemory | None,
        memory_id: Any,
        approval: ApprovalGate | None,
        handle: RunHandle,
        target: RunTarget,
        background: InvocationTasks | None,
    ) -> Result[Any]:
        """The invocation itself, holding its memory and registered with run control."""
        dynamic = self.tool_provider is not None
        async with exclusive_access(memory), registered(self.control, run.invocation_id, memory_id, target):
            if memory is not None and memory_id is not None and has_background(run.toolset):
                await report_lost(memory, self._background)
            invocation = Invocation(
                model=self.model,
                user_message=run.user_message,
                system_message=_with_instructions(await self._system_message_for(memory_id), run.output),
                memory=memory,
                tools=run.toolset,
                tool_provider=self.tool_provider,  # type: ignore[arg-type]
                options=_execution_options(self.options, run.seam),
                max_tool_rounds=self.max_tool_rounds,
                memory_id=memory_id,
                invocation_id=run.invocation_id,
                context=run.context,
                deadline=run.deadline,
                eager_tools=self.eager_tools,
                ordered_events=self.ordered_events,
                agent_name=self.name,
                seam=run.seam.with_features(
                    [handle, *_features(run, approval, self._shelf, background, self._priced)]
                ),
                call_context=CallContext(
                    self, run.invocation_id, memory_id, run.context, _output_tool_names(run.output)
                ),
                dynamic_tools=dynamic and is_dynamic(self.tool_provider),
                call_options=run.options,
                history=run.history,
            )
            try:
                # Background tools read the starter (None: this invocation has none, so nothing is set).
                with nullcontext() if background is None else starting_background(background):
                    result = target.result = await run_invocation(invocation, run.emit)
            finally:
                handle.ended = True
        return result

    async def _deliver_background(self, task: BackgroundTask, message: UserMessage) -> bool:
        """A finished background task's result for its memory id: steered into the invocation running on it,
        else committed to its memory now (so a store that outlives the process keeps it for the next
        invocation, before that one's user message). False when neither could take it (no memory)."""
        try:
            if await self.control.send(RunCommand.steer(message), memory_id=task.memory_id):
                return True
        except AgentLoopError:  # it ended just now: the memory takes the message once it is free
            pass
        memory = self._memory_for(task.memory_id)
        if memory is None:
            return False
        async with exclusive_access(memory):
            await memory.add([message])
        return True

    # -- lifetime -----------------------------------------------------------------------------------------

    async def __aenter__(self) -> Agent[OutputT]:
        """Enters the agent: background tasks then run in its own task group and outlive the invocation
        that started them; leaving the block (or `aclose()`) cancels those still running."""
        self._lifetime = self._background.running()
        await self._lifetime.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Cancels the background tasks still running (each recorded as cancelled); the agent stays usable,
        its later background tasks then running inside their invocation."""
        lifetime, self._lifetime = self._lifetime, None
        if lifetime is not None:
            await lifetime.__aexit__(None, None, None)

    # -- run control --------------------------------------------------------------------------------------

    async def cancel(
        self,
        *,
        memory_id: Any = None,
        invocation_id: str | None = None,
        after_round: bool = False,
        reason: str | None = None,
    ) -> bool:
        """Cancels the invocation with that id, or every invocation running on that memory id, in whichever
        process shares this agent's `control`: at once, or once the round in flight committed
        (`after_round`). Its Result has `finish_reason` `CANCELLED` and `cancel_reason` `reason`. False when
        nothing of that id runs."""
        _one_target("cancel", memory_id, invocation_id)
        command = RunCommand.cancel(after_round=after_round, reason=reason)
        return await self.control.send(command, invocation_id=invocation_id, memory_id=memory_id)

    async def steer(
        self, message: UserInput, *, memory_id: Any = None, invocation_id: str | None = None
    ) -> bool:
        """Hands `message` to the invocation with that id (or those running on that memory id) in whichever
        process shares this agent's `control`: added before its next model call; one about to finish calls
        the model once more to answer it. False when nothing of that id runs (then start an invocation with
        it instead)."""
        _one_target("steer", memory_id, invocation_id)
        user = UserMessage.of(message)
        return await self.control.send(
            RunCommand.steer(user), invocation_id=invocation_id, memory_id=memory_id
        )

    # -- memory -------------------------------------------------------------------------------------------

    def _memory_for(self, memory_id: Any) -> ChatMemory | None:
        memory = self.memory
        if memory is None or conforms(memory, ChatMemory):
            return memory
        key = DEFAULT_MEMORY_ID if memory_id is None else memory_id
        if isinstance(memory, WindowProvider) and memory.stateless:
            return memory(key)  # nothing to keep: one per invocation, so no object per id served stays
        found = self._memories.get(key)
        if found is None:
            found = self._memories[key] = memory(key)
        return found

    def memory_for(self, memory_id: Any) -> ChatMemory | None:
        """The `ChatMemory` an invocation with `memory_id` uses (None without memory): the agent's memory, or
        what its provider function makes for the id (kept per id as `forget()` says). For integrations that
        wrap the memory an invocation sees, e.g. `agentloop.dbos` running its reads and writes as steps."""
        return self._memory_for(memory_id)

    def __copy__(self) -> Agent[OutputT]:
        """`copy.copy(agent)`: a shallow copy that keeps its own memories per memory id, so a copy given
        another `memory` provider never answers with a memory the original's provider made."""
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone._memories = {}
        return clone

    def forget(self, memory_id: Any) -> None:
        """Drops the memory object kept for `memory_id` (its store keeps the messages). Memories made by
        `MessageWindowChatMemory.provider` are not kept (one is made per invocation); those of any other
        provider function are kept per memory id until forgotten."""
        self._memories.pop(DEFAULT_MEMORY_ID if memory_id is None else memory_id, None)

    async def _system_message_for(self, memory_id: Any) -> SystemMessage | None:
        source = self.system_message
        if source is None:
            return None
        text = source(memory_id) if callable(source) else source
        if inspect.isawaitable(text):
            text = await text
        return SystemMessage(text) if text else None

    # -- agents as tools ----------------------------------------------------------------------------------

    def as_tool(
        self,
        name: str | None = None,
        description: str | None = None,
        *,
        return_behavior: ReturnBehavior = ReturnBehavior.TO_LLM,
        timeout: float | None = None,
        memory_id: Callable[[ToolContext], Any] | None = None,
    ) -> Tool:
        """This agent as a tool of another agent: one string argument `request`, answered by `chat()`.

        The tool's `ToolExecution.result_object` is this agent's `Result`, so its own tool executions stay
        visible to the caller. The outer context is passed on; memory is not shared. By default each call
        runs without memory (it stands alone, whoever the caller is); `memory_id=lambda ctx: ...` derives a
        memory id for this agent's own memory from the caller's `ToolContext` (e.g. `ctx.memory_id`, to
        give each of the caller's users their own sub-conversation).
        """
        tool_name = name or self.name
        if not tool_name:
            raise IllegalConfigurationError("Give the agent a name (Agent(name=...) or as_tool(name=...))")

        async def invoke(text: str, ctx: ToolContext) -> Result[Any]:
            own_id = _STATELESS if memory_id is None else memory_id(ctx)
            return await self._invoke(text, own_id, ctx.context, None, ctx.remaining_time(), None)

        return agent_tool(tool_name, description or self.description, invoke, return_behavior, timeout)

    def __agentloop_tools__(self) -> list[Tool]:
        """An agent given in another agent's `tools=` becomes a tool through `as_tool()`."""
        return [self.as_tool()]

    def __repr__(self) -> str:
        parts = [f"model={self.model!r}", f"tools={[t.name for t in self.tools]}"]
        if self.name:
            parts.insert(0, f"name={self.name!r}")
        if self.memory is not None:
            parts.append(f"memory={self.memory!r}")
        return f"Agent({', '.join(parts)})"


def _history_or_memory(
    memory_id: Any, message_history: Sequence[ChatMessage] | None
) -> tuple[Any, tuple[ChatMessage, ...]]:
    """The memory id and history one call runs with: a `message_history` replaces the memory for the call
    (nothing is read from it or written to it); with a `memory_id` too, it is ambiguous which conversation
    goes on, so that is refused."""
    if message_history is None:
        return memory_id, ()
    if memory_id is not None:
        raise IllegalConfigurationError(
            "Give either memory_id (the agent's memory keeps the conversation) or message_history (you keep "
            "it and append result.new_messages), not both"
        )
    return _STATELESS, checked_history(message_history)


def _with_instructions(message: SystemMessage | None, output: OutputRun | None) -> SystemMessage | None:
    return message if output is None else output.system_message(message)


def _execution_options(options: ExecutionOptions, seam: Seam) -> ExecutionOptions:
    """The agent's options for tool calls, with the clock a middleware gives (a durable engine's) if any."""
    return options if seam.clock is None else dataclasses.replace(options, clock=seam.clock)


def _chosen(
    observer: Observer | None,
    agents: tuple[Middleware, ...],
    calls: tuple[Middleware, ...],
    runner: ToolRunner | None,
) -> tuple[Middleware, ...]:
    """The middleware of one invocation's seam, outermost first (the built-in features go outside them)."""
    watching = () if observer is None else (observer,)
    running = () if runner is None else (RunnerHook(runner),)
    return (*watching, *agents, *calls, *running)


def _features(
    run: _Run,
    gate: ApprovalGate | None,
    shelf: ResultShelf,
    background: InvocationTasks | None,
    priced: Priced | None,
) -> list[Middleware]:
    """The built-in features' middleware of one invocation, outermost first (outside the user's)."""
    output, tools = run.output, run.toolset
    features: list[Middleware] = [] if background is None else [background]
    if priced is not None:
        features.append(priced)
    if output is not None:
        features.append(output)
    if gate is not None:
        features.append(gate)
    if tools is not None:
        features += search_filters(tools)  # each ToolSearch shows only what its searches found
        if shelf.applies(tools):
            features.append(shelf)
    return features


@dataclass(frozen=True, slots=True)
class _Run:
    """One invocation's settings, resolved by `Agent._invoke_with` for `Agent._run`."""

    user_message: UserMessage
    memory_id: Any
    context: Mapping[str, Any]
    toolset: Any
    deadline: float | None
    emit: Listener | None
    output: OutputRun | None
    resume: Resume | None
    seam: Seam
    invocation_id: str
    options: CallOptions
    history: Sequence[ChatMessage] = ()
    if_busy: IfBusy = "wait"
    handle: RunHandle | None = None


def _one_target(what: str, memory_id: Any, invocation_id: str | None) -> None:
    if (memory_id is None) == (invocation_id is None):
        raise IllegalConfigurationError(
            f"Agent.{what}() takes exactly one of memory_id= or invocation_id= (got "
            f"{'both' if memory_id is not None else 'neither'})"
        )


def _call_options(output_type: Any, middleware: Any) -> CallOptions:
    """A call's own options, checked (`NO_OPTIONS` when it chose none)."""
    chosen = check_middleware(middleware, "middleware=")
    if output_type is None and not chosen:
        return NO_OPTIONS
    return CallOptions(output_type, chosen)


def _resume_options(resume: Resume, output_type: Any, middleware: Any) -> CallOptions:
    """The options a paused round resumes under: those given, else those it paused with (kept by the
    `PendingApproval` object); they must match what the paused round recorded."""
    pending = resume.pending
    kept = pending.call_options if pending.call_options is not None else NO_OPTIONS
    options = CallOptions(
        kept.output_type if output_type is None else output_type,
        kept.middleware if middleware is None else check_middleware(middleware, "resume(middleware=...)"),
    )
    paused_output, paused_middleware = pending.paused_with
    output, chosen = options.labels()
    if (output, chosen) != (paused_output, paused_middleware):
        raise ApprovalError(
            f"Paused round {pending.id} paused under output_type={paused_output or 'the agent default'} and "
            f"middleware={list(paused_middleware)}, but resume() was given output_type="
            f"{output or 'the agent default'} and middleware={list(chosen)}: pass the call's own "
            "output_type= and middleware= again (a round read back from JSON cannot carry Python objects); "
            "nothing ran",
            pending_id=pending.id,
        )
    return options


def _output_tool_names(output: OutputRun | None) -> frozenset[str]:
    """The names of the output tools of an invocation in the tool mode (none in the other modes)."""
    if output is None or output.mode != "tool" or output.schema is None:
        return frozenset()
    return frozenset(member.tool_name for member in output.schema.members)
