"""`DBOSAgent`: an `Agent` whose invocations run as DBOS workflows, so a crashed worker's run finishes
elsewhere and no finished tool call runs twice.

One invocation is one workflow; inside it every model call is a step, every tool call is a step (the
calls of one response still run concurrently), and the memory's read and each committed round are steps. A
replayed workflow gets each finished step's recorded output instead of running it again, so the model is not
asked twice, tools do not run twice and a round is committed once.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Union

import anyio
import msgspec
import pydantic
import pydantic_core
from dbos import DBOS, SetWorkflowID, StepOptions

from agentloop import (
    Agent,
    ApprovalError,
    ChatMemory,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    Decision,
    Denied,
    FinishReason,
    IllegalConfigurationError,
    Middleware,
    PendingApproval,
    Result,
    TokenUsage,
    ToolCall,
    ToolExecution,
    ToolExecutionRequest,
    ToolRunner,
    VersionedChatMemoryStore,
    decode,
    encode,
    exclusive_access,
)
from agentloop.models import ChatModel, ModelEvent, StructuredOutputModel

logger = logging.getLogger("agentloop.dbos")

__all__ = [
    "APPROVAL_TOPIC",
    "PENDING_EVENT",
    "DBOSAgent",
    "decode_result",
    "encode_decisions",
    "encode_result",
]


class DBOSAgent:
    """Runs `agent`'s invocations as DBOS workflows named `agentloop.<name>` (asyncio only, like DBOS).

    Create it before `DBOS.launch()` (DBOS registers workflows before it recovers them) and with the same
    `name` in every process that may recover its runs. `model_step` and `tool_step` are DBOS step options
    (`retries_allowed`, `max_attempts`, ...); by default steps are not retried by DBOS, since the providers
    already retry what is safe to retry.
    """

    def __init__(
        self,
        agent: Agent,
        *,
        name: str | None = None,
        model_step: StepOptions | None = None,
        tool_step: StepOptions | None = None,
        approval_timeout: float = 7 * 24 * 3600.0,
    ) -> None:
        self.agent = agent
        name = name or agent.name
        if not name:
            raise IllegalConfigurationError(
                "DBOSAgent needs a stable name (DBOSAgent(agent, name=...) or Agent(name=...)): after a "
                "restart DBOS finds a run's workflow by it"
            )
        self.name: str = name
        if approval_timeout <= 0:
            raise IllegalConfigurationError(f"approval_timeout must be > 0 seconds, got {approval_timeout!r}")
        self.approval_timeout = approval_timeout
        if agent.approval.handler is not None:
            raise IllegalConfigurationError(
                "A DBOSAgent makes approval a durable wait (pending() / approve()): build its agent without "
                "approval_handler (an inline handler would be asked again when a run is replayed)"
            )
        self._model_step: StepOptions = {"retries_allowed": False, **(model_step or {})}
        self._tool_step: StepOptions = {"retries_allowed": False, **(tool_step or {})}

        async def workflow(
            message: str,
            memory_id: Any,
            context: dict[str, Any] | None,
            output_type: Any = None,
            middleware: tuple[Middleware, ...] = (),
        ) -> bytes:
            return await self._run(message, memory_id, context, output_type, middleware)

        self._workflow = DBOS.workflow(name=f"agentloop.{self.name}")(workflow)

    async def chat(
        self,
        message: str,
        *,
        memory_id: Any = None,
        context: Mapping[str, Any] | None = None,
        workflow_id: str | None = None,
        output_type: Any = None,
        middleware: Sequence[Middleware] | None = None,
    ) -> Result[Any]:
        """Runs one invocation as a workflow and returns its `Result`.

        With `workflow_id`, the call is idempotent: a second call with the same id (in this or another
        process) returns the first run's result, waiting for it if it still runs, and runs nothing again.
        `output_type` and `middleware` are this call's own (as for `Agent.chat`); the workflow's record
        carries them (DBOS pickles a workflow's arguments), so a recovered run goes on under them.
        """
        _check_asyncio()
        chosen = _middleware(middleware)
        args = (message, memory_id, dict(context) if context else None, output_type, chosen)
        if workflow_id is None:
            handle = await DBOS.start_workflow_async(self._workflow, *args)
        else:
            with SetWorkflowID(workflow_id):
                handle = await DBOS.start_workflow_async(self._workflow, *args)
        return decode_result(await handle.get_result(), self._output_type(output_type))

    async def ask(
        self,
        message: str,
        *,
        memory_id: Any = None,
        context: Mapping[str, Any] | None = None,
        workflow_id: str | None = None,
    ) -> str:
        """Like `chat()`, returning only the answer text ("" when there is none)."""
        result = await self.chat(message, memory_id=memory_id, context=context, workflow_id=workflow_id)
        return result.content or ""

    async def result(self, workflow_id: str, *, output_type: Any = None) -> Result[Any]:
        """The `Result` of the run `workflow_id`, waiting for it to finish (e.g. after another executor
        recovered it). `output_type`: the run's own, when it was started with one."""
        _check_asyncio()
        handle: Any = await DBOS.retrieve_workflow_async(workflow_id)
        return decode_result(await handle.get_result(), self._output_type(output_type))

    def _output_type(self, output_type: Any) -> Any:
        return self.agent.output_type if output_type is None else output_type

    async def pending(self, workflow_id: str, *, timeout: float = 60.0) -> PendingApproval | None:
        """The tool calls the run `workflow_id` waits for a person to approve: waits up to `timeout` seconds
        for the run to pause, and returns None when it did not (or no longer waits)."""
        _check_asyncio()
        data = await DBOS.get_event_async(workflow_id, PENDING_EVENT, timeout_seconds=timeout)
        return PendingApproval.from_json(data) if data else None

    async def approve(self, workflow_id: str, decisions: Mapping[str, Decision]) -> None:
        """Sends the decisions `{call_id: True | False | Denied(reason)}` to the paused run `workflow_id`,
        from any process connected to DBOS; the run goes on where it stopped (after a restart too).

        Raises `ApprovalError` (and sends nothing) when the run does not wait, or the decisions do not
        answer exactly the calls it waits for."""
        pending = await self.pending(workflow_id, timeout=0)
        if pending is None:
            raise ApprovalError(f"Run {workflow_id!r} does not wait for an approval; nothing was sent")
        pending.check_decisions(decisions)
        await DBOS.send_async(workflow_id, encode_decisions(decisions, pending.id), APPROVAL_TOPIC)

    async def take_over(self, workflow_id: str, *, output_type: Any = None) -> Result[Any]:
        """Resumes the run `workflow_id` in this process (one left PENDING by a crashed executor on another
        machine) from its last finished step, and returns its `Result`."""
        _check_asyncio()
        handle: Any = await DBOS.resume_workflow_async(workflow_id)
        return decode_result(await handle.get_result(), self._output_type(output_type))

    async def cancel(self, workflow_id: str, *, reason: str | None = None) -> bool:
        """Cancels the run `workflow_id` across the durable boundary: DBOS marks the workflow cancelled (no
        executor recovers or resumes it) and run control cancels its invocation in whichever process runs
        it now (the round in flight is not committed, so the memory stays valid for the next invocation).
        True if the invocation was running; its `chat()` / `result()` then raise DBOS's
        `DBOSAwaitedWorkflowCancelledError`. The workflow's invocation id is its workflow id."""
        _check_asyncio()
        await DBOS.cancel_workflow_async(workflow_id)
        return await self.agent.cancel(invocation_id=workflow_id, reason=reason)

    # -- inside the workflow ------------------------------------------------------------------------------

    async def _run(
        self,
        message: str,
        memory_id: Any,
        context: dict[str, Any] | None,
        output_type: Any = None,
        middleware: tuple[Middleware, ...] = (),
    ) -> bytes:
        workflow_id = DBOS.workflow_id
        assert workflow_id is not None
        durable = copy.copy(self.agent)  # its own memories per id (Agent.__copy__)
        durable.model = _StepModel(self.agent.model, f"{self.name}.model", self._model_step)
        steps = _ToolSteps(self.name, self._tool_step, self.agent.options.tool_runner, workflow_id)
        durable.options = dataclasses.replace(self.agent.options, tool_runner=steps)
        durable.middleware = (steps, *self.agent.middleware)  # first: its invocation id wins
        if self.agent.memory is not None:
            original = self.agent

            def memory_for(key: Any) -> ChatMemory:
                inner = original.memory_for(key)
                assert inner is not None
                return _StepMemory(inner, f"{self.name}.memory")

            durable.memory = memory_for
        result = await durable.chat(
            message, memory_id=memory_id, context=context, output_type=output_type, middleware=middleware
        )
        while result.finish_reason is FinishReason.APPROVAL_REQUIRED and result.pending is not None:
            resumed = await self._wait_for_approval(durable, result.pending, context)
            result = _joined(result, result.pending, resumed)
        return encode_result(result)

    async def _wait_for_approval(
        self, durable: Agent, pending: PendingApproval, context: dict[str, Any] | None
    ) -> Result[str]:
        """A durable wait: the paused round is published as an event and the decisions arrive as a message
        (`approve()`); a restart in between waits on. No decision within `approval_timeout` denies all."""
        await DBOS.set_event_async(PENDING_EVENT, pending.to_json())
        started = await DBOS.run_step_async({"name": f"{self.name}.approval.wait"}, time.time)
        decisions: dict[str, Decision] | None = None
        while decisions is None:
            left = self.approval_timeout - (time.time() - started)
            message = await DBOS.recv_async(APPROVAL_TOPIC, timeout_seconds=max(left, 0.0))
            if message is None:
                reason = f"No decision arrived within {self.approval_timeout:g} s"
                decisions = {r.call_id: Denied(reason) for r in pending.requests}
            else:
                decisions = _decisions_for(pending, message)  # None: not for this round, wait on
        await DBOS.set_event_async(PENDING_EVENT, b"")
        return await durable.resume(pending, decisions, context=context)

    def __repr__(self) -> str:
        return f"DBOSAgent(name={self.name!r}, agent={self.agent!r})"


class _ToolSteps(Middleware):
    """Runs each tool call as a DBOS step: the agent's tool runner (innermost around each call, inside every
    middleware), keeping the agent's own runner inside the step. As a middleware it numbers the steps in
    call order as the loop takes the calls on (`before_tool_call`), so a replay pairs every call with its
    own record whatever order the calls reach the runner in (their approval checks finish in any order),
    and gives the invocation the workflow's id (`id_factory`)."""

    def __init__(self, name: str, options: StepOptions, inner: ToolRunner | None, workflow_id: str) -> None:
        self.id_factory = lambda: workflow_id
        self._name = name
        self._options = options
        self._inner = inner
        self._reserved: dict[str | None, Any] = {}

    def before_tool_call(self, call: ToolCall) -> None:
        self._reserved[call.request.id] = DBOS.reserve_step()

    async def __call__(
        self, request: ToolExecutionRequest, run: Callable[[], Awaitable[ToolExecution]]
    ) -> ToolExecution:
        async def step() -> bytes:
            inner = self._inner
            return encode(await (run() if inner is None else inner(request, run)), "tool_execution")

        options: StepOptions = {"name": f"{self._name}.tool.{request.name}", **self._options}
        reservation = self._reserved.pop(request.id, None)
        if reservation is None:
            recorded = await DBOS.run_step_async(options, step)
        else:
            recorded = await reservation.run_async(options, step)
        execution: ToolExecution = decode(recorded, "tool_execution")
        return execution


class _StepModel:
    """A model whose `chat()` runs as a DBOS step: a replay gets the recorded response."""

    def __init__(self, model: ChatModel, name: str, options: StepOptions) -> None:
        self._model = model
        self._options: StepOptions = {"name": name, **options}

    @property
    def supports_response_format(self) -> bool:
        """As the wrapped model: a durable run keeps the `native` output mode."""
        model = self._model
        return isinstance(model, StructuredOutputModel) and model.supports_response_format is True

    @property
    def supports_tool_search(self) -> bool:
        """As the wrapped model: a durable run keeps the provider's own tool search."""
        return getattr(self._model, "supports_tool_search", False) is True

    async def chat(self, request: ChatRequest) -> ChatResponse:
        async def step() -> bytes:
            return encode(await self._model.chat(request), "chat_response")

        response: ChatResponse = decode(await DBOS.run_step_async(self._options, step), "chat_response")
        return response

    def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        raise IllegalConfigurationError(
            "A DBOSAgent calls its model whole (chat()); streaming is not durable"
        )


class _StepMemory:
    """A memory whose read and writes run as DBOS steps, so a replayed run sees the conversation as it was
    when the run first read it and commits each round once.

    Over a versioned store (every store agentloop ships) a commit is exactly once even when the worker died
    after the store committed but before DBOS recorded the step: the store's version is recorded before the
    commit, and the invocation holds the memory id alone, so a version that moved on is this commit's own.
    """

    def __init__(self, inner: ChatMemory, name: str) -> None:
        self._inner = inner
        self._name = name

    @property
    def id(self) -> Any:
        return self._inner.id

    @property
    def store(self) -> Any:
        """The inner memory's store, when it has one (paused rounds are recorded there)."""
        return getattr(self._inner, "store", None)

    def exclusive(self) -> AbstractAsyncContextManager[object]:
        return exclusive_access(self._inner)

    async def messages(self) -> list[ChatMessage]:
        async def step() -> bytes:
            return encode(await self._inner.messages(), "messages")

        recorded = await DBOS.run_step_async({"name": f"{self._name}.read"}, step)
        messages: list[ChatMessage] = decode(recorded, "messages")
        return messages

    async def add(self, messages: Sequence[ChatMessage]) -> None:
        version = await DBOS.run_step_async({"name": f"{self._name}.version"}, self._version)

        async def step() -> None:
            if version is not None and await self._version() != version:
                return  # this commit reached the store before the worker died: not again
            await self._inner.add(messages)

        await DBOS.run_step_async({"name": f"{self._name}.commit"}, step)

    async def _version(self) -> int | None:
        store = self.store
        if not isinstance(store, VersionedChatMemoryStore):
            return None
        return (await store.load(self._inner.id, max_messages=1)).version

    async def clear(self) -> None:
        await DBOS.run_step_async({"name": f"{self._name}.clear"}, self._inner.clear)


# -- decisions as a workflow message -------------------------------------------------------------------------

PENDING_EVENT = "agentloop.pending_approval"
"""The workflow event holding a paused run's `PendingApproval.to_json()` (empty once decided)."""
APPROVAL_TOPIC = "agentloop.approval"
"""The topic a paused run receives its decisions on (`encode_decisions`)."""


def encode_decisions(decisions: Mapping[str, Decision], pending_id: str | None = None) -> bytes:
    """Decisions as the message a paused run waits for on `APPROVAL_TOPIC` (for senders such as a
    `dbos.DBOSClient` in a process that runs no workflows). With `pending_id` (`PendingApproval.id`), a run
    applies them only to that paused round."""
    encoded: dict[str, Any] = {}
    for call_id, decision in decisions.items():
        if isinstance(decision, Denied):
            encoded[call_id] = {"denied": decision.reason}
        elif decision is True or decision is False:
            encoded[call_id] = decision
        else:
            raise IllegalConfigurationError(
                f"The decision for call {call_id!r} must be True, False or Denied(reason), got {decision!r}"
            )
    return msgspec.json.encode({"pending": pending_id, "decisions": encoded})


def _decisions_for(pending: PendingApproval, data: Any) -> dict[str, Decision] | None:
    """The decisions of a message if they answer exactly `pending`'s waiting calls; else None, logged (a
    late message for an earlier round, a mistyped call id): the run waits on rather than failing."""
    try:
        message = msgspec.json.decode(data, type=dict[str, Any])
        if message.get("pending") not in (None, pending.id):
            raise ApprovalError(f"the decisions are for paused round {message.get('pending')}")
        decisions: dict[str, Decision] = {
            call_id: Denied(value.get("denied")) if isinstance(value, dict) else bool(value)
            for call_id, value in dict(message["decisions"]).items()
        }
        return pending.check_decisions(decisions)
    except (ApprovalError, msgspec.DecodeError, KeyError, TypeError, AttributeError, ValueError) as error:
        logger.warning(
            "Run %s ignored a message on %s that does not answer paused round %s (%s); it waits on",
            DBOS.workflow_id,
            APPROVAL_TOPIC,
            pending.id,
            error,
        )
        return None


# -- the Result as a workflow's output -----------------------------------------------------------------------


_RESULT_FORMAT = 2
_NULL = msgspec.Raw(b"null")
"""Format of a run's recorded `Result`: 2 added `format` and `output` (the structured output as JSON); a
record without `format` is format 1 and reads the same way (its output, if any, was not kept). The
optional `cancel_reason` (a run that run control stopped, written only when there is one) needs no new
format: a record without it reads None, and a reader that does not know it skips it."""


class _StoredResult(msgspec.Struct, frozen=True):
    content: str | None
    tool_executions: msgspec.Raw
    token_usage: TokenUsage | None
    finish_reason: FinishReason | None
    intermediate_responses: list[msgspec.Raw]
    final_response: msgspec.Raw  # null when there is none
    messages: msgspec.Raw
    memory_id: Any
    invocation_id: str
    format: int = 1
    output: msgspec.Raw = _NULL  # the structured output as JSON; null for text
    cancel_reason: str | msgspec.UnsetType = msgspec.UNSET  # left out of the record when None


def encode_result(result: Result[Any]) -> bytes:
    """A `Result` as JSON, its parts in agentloop's storage format (`agentloop.encode`)."""
    final = result.final_response
    return msgspec.json.encode(
        _StoredResult(
            content=result.content,
            tool_executions=msgspec.Raw(encode(list(result.tool_executions), "tool_executions")),
            token_usage=result.token_usage,
            finish_reason=result.finish_reason,
            intermediate_responses=[
                msgspec.Raw(encode(r, "chat_response")) for r in result.intermediate_responses
            ],
            final_response=msgspec.Raw(b"null" if final is None else encode(final, "chat_response")),
            messages=msgspec.Raw(encode(list(result.messages), "messages")),
            memory_id=result.memory_id,
            invocation_id=result.invocation_id,
            format=_RESULT_FORMAT,
            output=_output_json(result),
            cancel_reason=msgspec.UNSET if result.cancel_reason is None else result.cancel_reason,
        )
    )


def _output_json(result: Result[Any]) -> msgspec.Raw:
    output = result.output
    if output is None or output is result.content:
        return _NULL
    return msgspec.Raw(pydantic_core.to_json(output))


def decode_result(data: bytes, output_type: Any = str) -> Result[Any]:
    """Reads what `encode_result` wrote; a structured output is validated as `output_type` again."""
    stored = msgspec.json.decode(data, type=_StoredResult)
    if stored.format > _RESULT_FORMAT:
        raise IllegalConfigurationError(
            f"This run's result was recorded in format {stored.format}, newer than this release reads "
            f"({_RESULT_FORMAT}): upgrade agentloop"
        )
    final = None if bytes(stored.final_response) == b"null" else stored.final_response
    output: Any = stored.content
    if bytes(stored.output) != b"null" and output_type is not str:
        output = _validated(bytes(stored.output), output_type)
    return Result(
        content=stored.content,
        tool_executions=decode(stored.tool_executions, "tool_executions"),
        token_usage=stored.token_usage,
        finish_reason=stored.finish_reason,
        intermediate_responses=[decode(r, "chat_response") for r in stored.intermediate_responses],
        final_response=None if final is None else decode(final, "chat_response"),
        messages=tuple(decode(stored.messages, "messages")),
        memory_id=stored.memory_id,
        invocation_id=stored.invocation_id,
        output=output,
        cancel_reason=None if isinstance(stored.cancel_reason, msgspec.UnsetType) else stored.cancel_reason,
    )


def _validated(data: bytes, output_type: Any) -> Any:
    """The recorded output read back as `output_type` (a type, or a list of types: their union)."""
    target: Any = Union[tuple(output_type)] if isinstance(output_type, (list, tuple)) else output_type
    adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(target)
    return adapter.validate_json(data)


def _joined(paused: Result[str], pending: PendingApproval, resumed: Result[str]) -> Result[str]:
    """One Result for a run that paused and went on, as an uninterrupted run's would be: the paused part's
    earlier rounds, then the resumed part (which lists the paused round whole), usage summed."""
    paused_ai = pending.response.ai_message
    return dataclasses.replace(
        resumed,
        tool_executions=[e for e in paused.tool_executions if e.round != pending.round]
        + list(resumed.tool_executions),
        intermediate_responses=[r for r in paused.intermediate_responses if r.ai_message != paused_ai]
        + list(resumed.intermediate_responses),
        token_usage=paused.token_usage + resumed.token_usage if paused.token_usage else resumed.token_usage,
        messages=(*paused.messages, *resumed.messages[_overlap(paused.messages, resumed.messages) :]),
    )


def _overlap(before: Sequence[ChatMessage], after: Sequence[ChatMessage]) -> int:
    """How many of `after`'s first messages repeat `before`'s last ones (a resume carries the messages its
    memory did not hold: without memory, the whole invocation so far)."""
    for size in range(min(len(before), len(after)), 0, -1):
        if list(before[-size:]) == list(after[:size]):
            return size
    return 0


def _middleware(middleware: Any) -> tuple[Middleware, ...]:
    """`chat(middleware=...)` as a tuple, checked here: a wrong one fails the call, not the workflow."""
    if middleware is None:
        return ()
    if isinstance(middleware, Middleware):
        return (middleware,)
    listed = isinstance(middleware, Sequence) and not isinstance(middleware, str)
    items = middleware if listed else [middleware]
    for item in items:
        if not isinstance(item, Middleware):
            raise IllegalConfigurationError(
                f"DBOSAgent.chat(middleware=...): {item!r} is not an agentloop.Middleware; give a list of "
                "Middleware instances (subclass agentloop.Middleware)"
            )
    return tuple(items)


def _check_asyncio() -> None:
    if anyio.get_cancelled_exc_class() is not asyncio.CancelledError:
        raise IllegalConfigurationError(
            "DBOSAgent runs on asyncio only (DBOS's workflows and steps are asyncio code); run this part of "
            "your program with asyncio.run() or anyio.run(..., backend='asyncio')"
        )
