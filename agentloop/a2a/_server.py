"""`a2a_app`: an agent served over A2A (JSON-RPC binding) with a2a-sdk's own request handler and task store.

Each A2A task is one invocation: the task's `contextId` is the memory id (so a client that sends the same
`contextId` again continues the conversation), the answer streams as one artifact (`answer`) in text chunks,
and `tasks/cancel` cancels the running invocation through the agent's run control (nothing of its current
round is stored), in whichever worker runs it when the workers share a task store and a run control.
a2a-sdk's server runs on asyncio only (uvicorn's loop, as every ASGI server here).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part, TaskState
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .. import AgentLoopError, ApprovalError, FinishReason, IllegalConfigurationError

__all__ = ["ANSWER", "a2a_app"]

ANSWER = "answer"
"""The name of the artifact an invocation's answer streams into."""


class _AgentExecutor(AgentExecutor):
    """Runs one invocation per A2A task and publishes its answer as it streams."""

    def __init__(self, agent: Any) -> None:
        self._agent = agent
        self._running: dict[str, anyio.CancelScope] = {}

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        if message is None:
            raise IllegalConfigurationError("A2A: a task was started without a message")
        task = context.current_task or new_task_from_user_message(message)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        scope = self._running[task.id] = anyio.CancelScope()
        try:
            with scope:
                finished = await self._answer(
                    context.get_user_input(), task.context_id, _context_of(context), updater
                )
        except AgentLoopError as error:
            failure = f"{type(error).__name__}: {error}"
            await updater.failed(updater.new_agent_message([Part(text=failure)]))
            return
        finally:
            self._running.pop(task.id, None)
        if not scope.cancelled_caught and finished:  # a cancelled one: `cancel` marked the task
            await updater.complete()

    async def _answer(self, text: str, memory_id: str, context: dict[str, Any], updater: TaskUpdater) -> bool:
        """Streams the answer as one artifact; each chunk is sent once the next one came (so the last one
        can say it is the last). False when the invocation was cancelled."""
        artifact = f"{updater.task_id}-{ANSWER}"
        held: str | None = None
        first = True
        async with self._agent.stream(text, memory_id=memory_id, context=context) as stream:
            async for token in stream:
                if held is not None:
                    await updater.add_artifact(
                        [Part(text=held)],
                        artifact_id=artifact,
                        name=ANSWER,
                        append=not first,
                        last_chunk=False,
                    )
                    first = False
                held = token
            pending = stream.result.pending
            if stream.result.finish_reason is FinishReason.CANCELLED:
                return False
        if pending is not None:  # nobody could approve it over A2A
            waiting = ", ".join(request.tool_name for request in pending.requests)
            raise ApprovalError(
                f"The agent's calls of {waiting} wait for approval, which an A2A client cannot give; give "
                "the served agent an approval_handler"
            )
        await updater.add_artifact(
            [Part(text=held or "")], artifact_id=artifact, name=ANSWER, append=not first, last_chunk=True
        )
        return True

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """`tasks/cancel`: the task's conversation (its contextId, the invocation's memory id) is cancelled
        wherever it runs, through the agent's run control; the task is marked cancelled."""
        task_id, context_id = context.task_id or "", context.context_id or ""
        reason = f"A2A tasks/cancel of task {task_id}"
        reached = bool(context_id) and await self._agent.cancel(memory_id=context_id, reason=reason)
        scope = self._running.get(task_id)
        if scope is not None and not reached:
            scope.cancel()  # not running yet (waiting for its memory): stopped where it waits
        await TaskUpdater(event_queue, task_id, context_id).cancel()


class _Handler(DefaultRequestHandler):
    """a2a-sdk's request handler, with `tasks/cancel` reaching the invocation wherever it runs: a task another
    worker runs is only marked cancelled in the shared task store by the SDK (its worker would notice at its
    next save, which a model call in flight never makes), so the agent's run control cancels it first."""

    def __init__(self, agent: Any, *args: Any) -> None:
        super().__init__(*args)
        self._agent = agent

    async def on_cancel_task(self, params: Any, context: Any) -> Any:
        found: Any = await self.task_store.get(params.id, context)
        task = getattr(found, "task", found)  # a versioned store gives the task with its version
        if task is not None and task.status.state not in _OVER and task.context_id:
            await self._agent.cancel(memory_id=task.context_id, reason=f"A2A tasks/cancel of task {task.id}")
        return await super().on_cancel_task(params, context)


_OVER = (
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_REJECTED,
)


def _context_of(request: RequestContext) -> dict[str, Any]:
    """The invocation's `context=`: the A2A task and conversation, the tenant, the authenticated user (None
    when the request was not authenticated) and the message's metadata; for tools and keyed limits."""
    user = request.call_context.user
    return {
        "a2a_task_id": request.task_id,
        "a2a_context_id": request.context_id,
        "a2a_tenant": request.tenant,
        "a2a_user": user.user_name if user.is_authenticated else None,
        "a2a_metadata": request.metadata,
    }


def _skills(skills: Sequence[Any] | None, name: str, description: str) -> list[AgentSkill]:
    """The card's skills; without any, one named after the agent (the protocol asks for at least one)."""
    if not skills:
        return [AgentSkill(id="chat", name=name, description=description, tags=["chat"])]
    out = []
    for skill in skills:
        if isinstance(skill, AgentSkill):
            out.append(skill)
        elif isinstance(skill, dict):
            out.append(AgentSkill(**skill))
        else:
            raise IllegalConfigurationError(
                f"a2a_app(skills=...): {skill!r} is not a skill; give a2a.types.AgentSkill objects or dicts "
                "with id, name, description and tags"
            )
    return out


def a2a_app(
    agent: Any,
    *,
    name: str,
    description: str,
    skills: Sequence[Any] | None = None,
    url: str | None = None,
    version: str = "1.0.0",
    task_store: TaskStore | None = None,
) -> Starlette:
    """An ASGI app serving `agent` over A2A: its agent card at `/.well-known/agent-card.json` and JSON-RPC
    (`SendMessage` / `message/send`, `SendStreamingMessage` / `message/stream`, `GetTask` / `tasks/get`,
    `CancelTask` / `tasks/cancel`) at `/`.

    `skills`: what the card advertises (`a2a.types.AgentSkill` objects or dicts of their fields; default one
    skill, "chat", with the agent's name and description); `url`: the
    address clients reach the app at, as the card gives it (default: the address each card request came
    to, which is right unless a proxy rewrites it). `task_store`: where tasks are kept (an a2a-sdk
    `TaskStore`; default in memory, one process). With several workers give them one shared task store
    (a2a-sdk's `DatabaseTaskStore`), the agent a shared memory store and a shared run control
    (`Agent(control=RedisRunControl(url))`): any worker then answers `tasks/get` and `tasks/cancel` for a
    task another worker runs (docs/serving.md).
    """
    for what, value in (("name", name), ("description", description)):
        if not isinstance(value, str) or not value.strip():
            raise IllegalConfigurationError(f"a2a_app({what}=...) must be a non-empty str, got {value!r}")
    card = AgentCard(
        name=name,
        description=description,
        version=version,
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=_skills(skills, name, description),
    )

    def card_at(address: str) -> AgentCard:
        served = AgentCard()
        served.CopyFrom(card)
        served.supported_interfaces.append(
            AgentInterface(url=address, protocol_binding="JSONRPC", protocol_version="1.0")
        )
        return served

    tasks = task_store if task_store is not None else InMemoryTaskStore()
    handler = _Handler(agent, _AgentExecutor(agent), tasks, card_at(url or "/"))

    async def agent_card(request: Request) -> JSONResponse:
        return JSONResponse(agent_card_to_dict(card_at(url or str(request.base_url))))

    routes = [
        Route(AGENT_CARD_WELL_KNOWN_PATH, agent_card, methods=["GET"]),
        *create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True),
    ]
    return Starlette(routes=routes)
