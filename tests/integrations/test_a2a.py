"""A2A both ways, over real HTTP on 127.0.0.1: `a2a_app` served by uvicorn and driven by a2a-sdk's own
client (send, stream, get, cancel, the card, conversations by contextId), and `A2AAgent` calling a2a-sdk's
own server classes (and our app) as a tool of a local agent. The clients run on asyncio and trio; the
servers run on uvicorn's asyncio loop in a thread (a2a-sdk's server is asyncio-only)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)
from starlette.applications import Starlette

from agentloop import (
    Agent,
    BadRequestError,
    ChatMessage,
    IllegalConfigurationError,
    InvocationCall,
    MessageWindowChatMemory,
    Middleware,
    ToolExecutionError,
    tool,
)
from agentloop.a2a import A2AAgent, a2a_app
from agentloop.testing import FunctionChatModel, ScriptedChatModel
from tests.runtime_helpers import calls
from tests.ui_clients import serving

pytestmark = pytest.mark.anyio


class Gate:
    """Lets a test hold the served model mid-answer (to cancel it) and see that it started."""

    def __init__(self) -> None:
        self.started = False
        self.cancelled = False
        self.seen_context: dict[str, Any] = {}


def echo_agent(gate: Gate) -> Agent:
    async def answer(messages: list[ChatMessage], tools: Any) -> str:
        said = str(messages[-1].text)
        if said == "boom":
            raise BadRequestError("the provider refused the request", provider="openai", status_code=400)
        if said == "hang":
            gate.started = True
            try:
                await anyio.sleep_forever()
            finally:
                gate.cancelled = True
        users = sum(1 for m in messages if type(m).__name__ == "UserMessage")
        return f"you said {said} (message {users} of this conversation)"

    class SeeContext(Middleware):
        async def wrap_invocation(self, call: InvocationCall, call_next: Any) -> Any:
            gate.seen_context = dict(call.context.context)
            return await call_next(call)

    memory = MessageWindowChatMemory.provider(50)
    return Agent(FunctionChatModel(answer, chunk_size=4), memory=memory, middleware=[SeeContext()])


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, Gate]]:
    gate = Gate()
    app = a2a_app(
        echo_agent(gate),
        name="Echo agent",
        description="Says back what it was told.",
        skills=[{"id": "echo", "name": "echo", "description": "echoes", "tags": ["test"]}],
    )
    with serving(app) as url:
        yield url, gate


async def sdk_client(url: str, http: httpx.AsyncClient, *, streaming: bool) -> Any:
    from a2a.client import A2ACardResolver

    card = await A2ACardResolver(http, url).get_agent_card()
    return ClientFactory(ClientConfig(streaming=streaming, httpx_client=http)).create(card)


def user(text: str, context_id: str | None = None) -> SendMessageRequest:
    message = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=text)])
    if context_id:
        message.context_id = context_id
    return SendMessageRequest(message=message)


async def test_the_agent_card_names_the_agent_its_skills_and_where_to_call(served: tuple[str, Gate]) -> None:
    url, _ = served
    async with httpx.AsyncClient() as http:
        card = (await http.get(url + "/.well-known/agent-card.json")).json()
    assert card["name"] == "Echo agent"
    assert card["description"] == "Says back what it was told."
    assert card["capabilities"]["streaming"] is True
    assert card["skills"][0]["id"] == "echo"
    assert card["supportedInterfaces"][0]["url"].rstrip("/") == url
    assert card["supportedInterfaces"][0]["protocolBinding"] == "JSONRPC"


async def test_message_send_answers_with_a_completed_task(served: tuple[str, Gate]) -> None:
    url, _ = served
    async with httpx.AsyncClient() as http:
        client = await sdk_client(url, http, streaming=False)
        events = [event async for event in client.send_message(user("hello"))]
        task = events[-1].task
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        text = "".join(part.text for artifact in task.artifacts for part in artifact.parts)
        assert text == "you said hello (message 1 of this conversation)"
        again = await client.get_task(GetTaskRequest(id=task.id))
        assert again.status.state == TaskState.TASK_STATE_COMPLETED
        assert again.context_id == task.context_id


async def test_message_stream_sends_the_answer_in_chunks_and_the_context_id_keeps_the_memory(
    served: tuple[str, Gate],
) -> None:
    url, _ = served
    async with httpx.AsyncClient() as http:
        client = await sdk_client(url, http, streaming=True)
        chunks, states, context = [], [], ""
        async for event in client.send_message(user("one")):
            if event.HasField("artifact_update"):
                chunks.append(event.artifact_update.artifact.parts[0].text)
                context = event.artifact_update.context_id
            if event.HasField("status_update"):
                states.append(event.status_update.status.state)
        assert len(chunks) > 3  # streamed, not in one piece
        assert "".join(chunks) == "you said one (message 1 of this conversation)"
        assert states[-1] == TaskState.TASK_STATE_COMPLETED
        # the same contextId: the same memory id, the conversation goes on
        later = [e async for e in client.send_message(user("two", context))]
        text = "".join(
            p.text for e in later if e.HasField("artifact_update") for p in e.artifact_update.artifact.parts
        )
        assert text == "you said two (message 2 of this conversation)"


async def test_the_invocation_context_names_the_task_the_conversation_and_the_metadata(
    served: tuple[str, Gate],
) -> None:
    url, gate = served
    async with httpx.AsyncClient() as http:
        client = await sdk_client(url, http, streaming=False)
        request = user("who")
        request.metadata.update({"tenant": "acme"})
        task = [e async for e in client.send_message(request)][-1].task
    assert gate.seen_context == {
        "a2a_task_id": task.id,
        "a2a_context_id": task.context_id,
        "a2a_tenant": "",
        "a2a_user": None,
        "a2a_metadata": {"tenant": "acme"},
    }


async def test_tasks_cancel_cancels_the_running_invocation(served: tuple[str, Gate]) -> None:
    url, gate = served
    async with httpx.AsyncClient(timeout=30) as http:
        client = await sdk_client(url, http, streaming=True)
        task_id = ""
        async with anyio.create_task_group() as group:

            async def run() -> None:
                nonlocal task_id
                async for event in client.send_message(user("hang")):
                    if event.HasField("task"):
                        task_id = event.task.id
                    if event.HasField("status_update"):
                        task_id = event.status_update.task_id

            group.start_soon(run)
            with anyio.fail_after(10):
                while not (gate.started and task_id):
                    await anyio.sleep(0.01)
            cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
            assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        with anyio.fail_after(10):
            while not gate.cancelled:
                await anyio.sleep(0.01)
        task = await client.get_task(GetTaskRequest(id=task_id))
        assert task.status.state == TaskState.TASK_STATE_CANCELED
        # nothing of the cancelled round was stored: the conversation's next message is its first
        later = [e async for e in client.send_message(user("after", task.context_id))]
        updates = [e.artifact_update for e in later if e.HasField("artifact_update")]
        text = "".join(p.text for update in updates for p in update.artifact.parts)
        assert text == "you said after (message 1 of this conversation)"


async def test_a_failed_invocation_fails_the_task_naming_the_error(served: tuple[str, Gate]) -> None:
    url, _ = served
    async with httpx.AsyncClient() as http:
        client = await sdk_client(url, http, streaming=True)
        statuses = [
            e.status_update.status
            async for e in client.send_message(user("boom"))
            if e.HasField("status_update")
        ]
    assert statuses[-1].state == TaskState.TASK_STATE_FAILED
    assert statuses[-1].message.parts[0].text == "BadRequestError: the provider refused the request"


async def test_a_call_waiting_for_approval_fails_the_task_saying_why() -> None:
    @tool(requires_approval=True)
    def delete_all() -> str:
        """Deletes everything."""
        return "deleted"

    agent = Agent(ScriptedChatModel([calls(("delete_all", {}))]), tools=[delete_all])
    app = a2a_app(agent, name="Risky", description="Deletes things.")
    with serving(app) as url:  # over uvicorn's asyncio loop: a2a-sdk's server does not run on trio
        async with httpx.AsyncClient() as http:
            client = await sdk_client(url, http, streaming=True)
            events = [e async for e in client.send_message(user("clean up"))]
    status = [e.status_update.status for e in events if e.HasField("status_update")][-1]
    assert status.state == TaskState.TASK_STATE_FAILED
    assert "calls of delete_all wait for approval" in status.message.parts[0].text


async def test_a_0_3_client_is_answered_too(served: tuple[str, Gate]) -> None:
    """The method names and shapes of protocol 0.3 (`message/send`, `tasks/get`), as raw JSON-RPC."""
    url, _ = served
    message = {"role": "user", "parts": [{"kind": "text", "text": "old"}], "messageId": uuid.uuid4().hex}
    async with httpx.AsyncClient() as http:
        sent = await http.post(
            url, json={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
        )
        task = sent.json()["result"]
        assert task["kind"] == "task" and task["status"]["state"] == "completed"
        answer = "".join(part["text"] for part in task["artifacts"][0]["parts"])
        assert answer == "you said old (message 1 of this conversation)"
        got = await http.post(
            url, json={"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": task["id"]}}
        )
        assert got.json()["result"]["status"]["state"] == "completed"


def sdk_server_app() -> Starlette:
    """A remote agent written with a2a-sdk's own server classes only: answers in three streamed chunks, or
    fails when asked to."""

    class Executor(AgentExecutor):
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            assert context.message is not None
            task = context.current_task or new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
            updater = TaskUpdater(event_queue, task.id, task.context_id)
            await updater.start_work()
            asked = context.get_user_input()
            if asked == "fail":
                await updater.failed(updater.new_agent_message([Part(text="the weather service is down")]))
                return
            for n, chunk in enumerate(["Sunny ", "in ", asked]):
                await updater.add_artifact(
                    [Part(text=chunk)], artifact_id="a", append=n > 0, last_chunk=n == 2
                )
            await updater.complete()

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            raise NotImplementedError

    card = AgentCard(
        name="Weather agent!",
        description="Tells the weather of a city.",
        version="1",
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(id="weather", name="weather", description="The weather of a city", tags=["weather"])
        ],
    )
    handler = DefaultRequestHandler(Executor(), InMemoryTaskStore(), card)
    app = Starlette(routes=[*create_jsonrpc_routes(handler, "/")])
    app.state.card = card
    return app


@pytest.fixture(scope="module")
def remote() -> Iterator[str]:
    app = sdk_server_app()
    with serving(app) as url:
        app.state.card.supported_interfaces.append(
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        )
        app.router.routes.extend(create_agent_card_routes(app.state.card))
        yield url


async def test_a_remote_sdk_agent_is_a_tool_of_a_local_agent_its_answer_streamed(remote: str) -> None:
    weather = A2AAgent(remote)
    card = await weather.fetch_card()
    assert card.name == "Weather agent!"
    model = ScriptedChatModel([calls(("Weather_agent", {"request": "Paris"})), "It is sunny in Paris."])
    agent = Agent(model, tools=[weather])
    (tool,) = list(agent.tools)
    assert tool.name == "Weather_agent"
    assert tool.specification.description == "Tells the weather of a city."
    result = await agent.chat("weather in Paris?")
    assert result.content == "It is sunny in Paris."
    assert result.tool_executions[0].result == "Sunny in Paris"
    assert [chunk async for chunk in weather.stream("Rome")] == ["Sunny ", "in ", "Rome"]


async def test_a_remote_failure_reaches_the_model_as_the_tools_error(remote: str) -> None:
    weather = A2AAgent(remote, name="weather", description="The weather.")
    with pytest.raises(ToolExecutionError, match="failed: the weather service is down"):
        async for _ in weather.stream("fail"):
            pass
    model = ScriptedChatModel([calls(("weather", {"request": "fail"})), "Sorry."])
    result = await Agent(model, tools=[weather]).chat("weather?")
    assert "the weather service is down" in str(model.requests[1].messages[-1])
    assert result.content == "Sorry."


async def test_a2a_agent_calls_an_agentloop_agent_served_by_a2a_app(served: tuple[str, Gate]) -> None:
    url, _ = served
    echo = A2AAgent(url)
    model = ScriptedChatModel([calls(("Echo_agent", {"request": "ping"})), "done"])
    result = await Agent(model, tools=[echo]).chat("go")
    assert result.tool_executions[0].result == "you said ping (message 1 of this conversation)"


async def test_a_remote_agent_that_cannot_be_reached_is_named() -> None:
    with pytest.raises(IllegalConfigurationError, match="cannot read the remote agent card"):
        Agent(ScriptedChatModel([]), tools=[A2AAgent("http://127.0.0.1:9")])
    with pytest.raises(IllegalConfigurationError, match="must be an http"):
        A2AAgent("localhost:8000")


def test_a2a_app_checks_its_settings() -> None:
    with pytest.raises(IllegalConfigurationError, match=r"name=...\) must be a non-empty str"):
        a2a_app(Agent(ScriptedChatModel([])), name="", description="x")
    with pytest.raises(IllegalConfigurationError, match="is not a skill"):
        a2a_app(Agent(ScriptedChatModel([])), name="x", description="x", skills=["echo"])


async def test_tasks_cancel_goes_through_the_agents_run_control() -> None:
    """The cancel is a run-control command (what reaches a worker sharing a SQLite/Redis control), sent to
    the task's contextId, and the invocation ends CANCELLED rather than being torn down."""
    from agentloop.control import LocalRunControl, RunCommand

    sent: list[tuple[RunCommand, Any, bool]] = []

    class Recording(LocalRunControl):
        async def send(
            self, command: RunCommand, *, invocation_id: Any = None, memory_id: Any = None
        ) -> bool:
            delivered = await super().send(command, invocation_id=invocation_id, memory_id=memory_id)
            sent.append((command, memory_id, delivered))
            return delivered

    gate = Gate()
    agent = echo_agent(gate)
    agent.control = Recording()
    app = a2a_app(agent, name="Echo agent", description="Says back what it was told.")
    with serving(app) as url:
        async with httpx.AsyncClient(timeout=30) as http:
            client = await sdk_client(url, http, streaming=True)
            ids: dict[str, str] = {}
            async with anyio.create_task_group() as group:

                async def run() -> None:
                    async for event in client.send_message(user("hang", "conv-7")):
                        if event.HasField("task"):
                            ids["task"] = event.task.id
                        if event.HasField("status_update"):
                            ids["task"] = event.status_update.task_id

                group.start_soon(run)
                with anyio.fail_after(10):
                    while not (gate.started and ids):
                        await anyio.sleep(0.01)
                cancelled = await client.cancel_task(CancelTaskRequest(id=ids["task"]))
                assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    command, memory_id, delivered = sent[0]  # the handler's; the executor's own cancel then finds it ended
    assert command.kind == "cancel" and (command.reason or "").startswith("A2A tasks/cancel of task ")
    assert memory_id == "conv-7" and delivered is True
    assert all(c.kind == "cancel" and m == "conv-7" for c, m, _ in sent)
    assert gate.cancelled
