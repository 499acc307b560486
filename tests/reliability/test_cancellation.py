"""Cancellation at every await point, systematically.

The model, the tools, the memory, the tool provider and the system message of one agent are instrumented
with numbered checkpoints. A clean run counts them (N, about twenty: before the request, while it is in
flight or at each kind of stream event, inside each tool, between rounds, during each memory commit...);
then for k in range(N) a fresh invocation is cancelled while it waits at checkpoint k: by cancelling the
task that awaits `chat()`, by `aclose()` from another task, by cancelling the task iterating the stream, or
by `stream.cancel()` / `stream.cancel(after_round=True)` (the stream then ends with a CANCELLED Result that
lists exactly what memory got; after the round, nothing in flight is cancelled and the round commits).
After each one: the checkpoint observed the cancellation (or, for a shielded memory commit, finished it), no
task runs on, every tool that started has ended, every model stream was closed, no connection is checked out
of the pool, memory is valid for the provider, and the next invocation on the same memory succeeds against a
fake that checks the conversation the way the real API does. OpenAI and Anthropic, asyncio and trio.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from agentloop import (
    Agent,
    AiMessage,
    ChatRequest,
    ChatResponse,
    FinishReason,
    MessageWindowChatMemory,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolProviderRequest,
    tool,
)
from agentloop._values._messages import ChatMessage
from agentloop.models import ResponseComplete, TextDelta, ToolCallComplete, ToolCallDelta
from agentloop.models._base import ModelEvent
from agentloop.testing._fake_server import FakeServer, RecordedRequest

from ._support import (
    Fault,
    ToolProbe,
    checked_out,
    running_tasks,
    seed_messages,
    server_connections_after_close,
)
from ._wire import PROVIDERS, Requests, provider_model, shared

pytestmark = pytest.mark.anyio

VARIANTS = {
    "chat": "cancel the task awaiting chat()",
    "stream-aclose": "aclose() the TokenStream from another task",
    "stream-cancel": "cancel the task iterating the TokenStream",
    "stream.cancel()": "stream.cancel() from another task: the stream ends normally, its Result CANCELLED",
    "stream.cancel(after_round=True)": "cancel(after_round=True): the round in flight commits, then it ends",
}
COMMANDED = frozenset({"stream.cancel()", "stream.cancel(after_round=True)"})  # these end with a Result
SHIELDED = frozenset({"memory.commit"})  # commits are shielded: the checkpoint finishes, the round is kept
ROUND_ONE = AiMessage(
    text="Let me check.",
    tool_execution_requests=[
        ToolExecutionRequest("call_paris", "weather", '{"city": "Paris"}'),
        ToolExecutionRequest("call_london", "weather", '{"city": "London"}'),
    ],
)


class Checkpoints:
    """Numbered await points: the `target`-th one reached waits there until the test has cancelled."""

    def __init__(self, target: int | None = None) -> None:
        self.target = target
        self.names: list[str] = []
        self.reached = anyio.Event()
        self.reached_name: str | None = None
        self.release = anyio.Event()
        self.observed_cancel = False

    async def __call__(self, name: str) -> None:
        number = len(self.names)
        self.names.append(name)
        if number != self.target:
            await anyio.lowlevel.checkpoint()
            return
        self.reached_name = name
        self.reached.set()
        try:
            await self.release.wait()  # cancelled here, unless this point is shielded
            await anyio.lowlevel.checkpoint()
        except anyio.get_cancelled_exc_class():
            self.observed_cancel = True
            raise


class CheckpointModel:
    """A provider model with a checkpoint before each request, while a chat() request is in flight, and
    at the first event of each kind of a stream (the response is open there)."""

    def __init__(self, inner: Any, checkpoint: Checkpoints) -> None:
        self.inner = inner
        self.checkpoint = checkpoint
        self.streams_opened = 0
        self.streams_closed = 0

    async def chat(self, request: ChatRequest) -> ChatResponse:
        await self.checkpoint("model.request")
        responses: list[ChatResponse] = []

        async def send() -> None:
            responses.append(await self.inner.chat(request))

        async with anyio.create_task_group() as tg:
            tg.start_soon(send)
            await self.checkpoint("model.in_flight")  # the fake delays its answer: the request is on the wire
        return responses[0]

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        await self.checkpoint("model.request")
        self.streams_opened += 1
        seen: set[str] = set()
        try:
            async with aclosing(self.inner.stream(request)) as events:
                async for event in events:
                    name = _event_name(event)
                    if name is not None and (name not in seen or name == "model.call_complete"):
                        seen.add(name)
                        await self.checkpoint(name)
                    yield event
        finally:
            self.streams_closed += 1


def _event_name(event: ModelEvent) -> str | None:
    if isinstance(event, TextDelta):
        return "model.first_text"
    if isinstance(event, ToolCallDelta):
        return "model.first_call_piece"
    if isinstance(event, ToolCallComplete):
        return "model.call_complete"
    if isinstance(event, ResponseComplete):
        return "model.response_complete"
    return None


class CheckpointMemory:
    """A `MessageWindowChatMemory` with a checkpoint before each read and inside each commit."""

    def __init__(self, checkpoint: Checkpoints) -> None:
        self.inner = MessageWindowChatMemory(200)
        self.checkpoint = checkpoint
        self.id = self.inner.id

    async def messages(self) -> list[ChatMessage]:
        await self.checkpoint("memory.read")
        return await self.inner.messages()

    async def add(self, messages: Any) -> None:
        await self.checkpoint("memory.commit")
        await self.inner.add(messages)

    async def clear(self) -> None:
        await self.inner.clear()


class CheckpointProvider:
    """A dynamic tool provider (asked before every model call) that adds nothing but a checkpoint."""

    dynamic = True

    def __init__(self, checkpoint: Checkpoints) -> None:
        self.checkpoint = checkpoint
        self.asked = 0

    async def provide_tools(self, request: ToolProviderRequest) -> None:
        self.asked += 1
        await self.checkpoint("provider.first_call" if self.asked == 1 else "provider.between_rounds")


def checkpoint_weather(probe: ToolProbe, checkpoint: Checkpoints) -> Any:
    @tool
    async def weather(city: str) -> str:
        """Current weather in a city."""
        probe.started.append(city)
        try:
            await checkpoint(f"tool.{city}.start")
            await checkpoint(f"tool.{city}.working")
        except anyio.get_cancelled_exc_class():
            probe.cancelled.append(city)
            raise
        probe.finished.append(city)
        return f"Sunny in {city}"

    return weather


def respond(provider: str) -> Any:
    """The fake's answer, by what the conversation needs next: tool calls, the final answer, or "Fine."."""

    def answer(request: RecordedRequest) -> Any:
        last = request.json["messages"][-1]
        content = last.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        if last.get("role") == "tool" or blocks[-1].get("type") == "tool_result":
            return "All done: sunny everywhere."
        if blocks[-1].get("text") == "again":
            return "Fine."
        return ROUND_ONE

    return answer


class Sweep:
    """One agent per run, over one model and one fake server shared by the whole sweep."""

    def __init__(self, provider: str, variant: str, server: FakeServer, fault: Fault) -> None:
        self.provider = provider
        self.variant = variant
        self.server = server
        self.fault = fault
        self.model = provider_model(provider, server)
        self.delay = 0.01 if variant == "chat" else 0.0  # keeps chat() requests in flight at their checkpoint
        self.results: list[Any] = []  # the Result of each commanded (stream.cancel) invocation

    def agent(self, checkpoint: Checkpoints) -> tuple[Agent, CheckpointModel, CheckpointMemory, ToolProbe]:
        probe = ToolProbe()
        model = CheckpointModel(self.model, checkpoint)
        memory = CheckpointMemory(checkpoint)

        async def system_message(memory_id: Any) -> str:
            await checkpoint("system_message")
            return "You report the weather."

        agent = Agent(
            model,
            tools=[checkpoint_weather(probe, checkpoint)],
            tool_provider=CheckpointProvider(checkpoint),
            system_message=system_message,
            memory=memory,
        )
        return agent, model, memory, probe

    def script(self, replies: int) -> Requests:
        """Queues answers; two spare ones, for a cancelled request the server reads only later."""
        requests = Requests(self.server)
        for _ in range(replies + 2):
            self.server.add(respond(self.provider), headers_delay=self.delay)
        return requests

    async def invoke(self, agent: Agent, checkpoint: Checkpoints, message: str) -> None:
        """One invocation, cancelled the way this sweep's variant cancels when `checkpoint` is reached."""
        streams: list[Any] = []
        async with anyio.create_task_group() as tg:
            with anyio.CancelScope() as consumer:

                async def cancel_at_checkpoint() -> None:
                    await checkpoint.reached.wait()
                    shielded = checkpoint.reached_name in SHIELDED
                    if self.variant == "stream-aclose":
                        if shielded:
                            checkpoint.release.set()
                        await streams[0].aclose()
                    elif self.variant in COMMANDED:
                        await streams[0].cancel(after_round="after_round" in self.variant, reason="stop")
                        checkpoint.release.set()  # a point the command cancels sees it at its next await
                    else:
                        consumer.cancel()
                        if shielded:
                            checkpoint.release.set()

                tg.start_soon(cancel_at_checkpoint)
                if self.variant == "chat":
                    await agent.chat(message)
                else:
                    async with agent.stream(message) as stream:
                        streams.append(stream)
                        async for _ in stream.events():
                            pass
                        if self.variant in COMMANDED:
                            self.results.append(stream.result)
            tg.cancel_scope.cancel()

    async def check_commanded(self, name: str, checkpoint: Checkpoints, messages: list[ChatMessage]) -> None:
        """What `stream.cancel()` promises, wherever it came: a Result (CANCELLED, with the reason) unless
        the answer was already final; rounds committed whole; at once, the point saw the cancellation unless
        it was a shielded commit or came before the loop (the system message); after the round, nothing
        in flight is cancelled: the tools finished and their round is in memory."""
        result = self.results.pop()
        final = len(messages) > 2 and messages[-1] == AiMessage("All done: sunny everywhere.")
        if final and result.finish_reason is FinishReason.STOP:  # the command came with the answer
            assert self.variant.endswith("(after_round=True)") or name in SHIELDED, name
        else:
            assert (result.finish_reason, result.cancel_reason) == (FinishReason.CANCELLED, "stop"), name
        assert list(result.messages) == messages[2:], "the Result lists exactly what was committed"
        if self.variant == "stream.cancel()":
            outside = name in SHIELDED or name == "system_message"
            assert checkpoint.observed_cancel is not outside, f"{name}: observed {checkpoint.observed_cancel}"
        else:
            assert not checkpoint.observed_cancel, f"{name}: cancelled although after_round=True"
            if name.startswith("tool."):  # the round in flight finished and committed
                assert isinstance(messages[-1], ToolExecutionResultMessage), name

    async def count(self) -> list[str]:
        """The checkpoints of one uncancelled invocation, in the order they were reached."""
        checkpoint = Checkpoints()
        agent, _, memory, _ = self.agent(checkpoint)
        await memory.inner.add(seed_messages())
        self.script(2)
        await self.invoke(agent, checkpoint, "go")
        assert checkpoint.reached_name is None
        assert (await memory.inner.messages())[-1] == AiMessage("All done: sunny everywhere.")
        return checkpoint.names

    async def cancel_at(self, k: int) -> str:
        """Cancels an invocation at checkpoint `k`, checks everything, and returns the checkpoint's name."""
        before = running_tasks()
        checkpoint = Checkpoints(k)
        agent, model, memory, probe = self.agent(checkpoint)
        await memory.inner.add(seed_messages())
        requests = self.script(2)
        await self.invoke(agent, checkpoint, "go")
        name = checkpoint.reached_name
        assert name is not None, f"checkpoint {k} was never reached"
        if self.variant in COMMANDED:
            await self.check_commanded(name, checkpoint, await memory.inner.messages())
        elif name in SHIELDED:
            assert not checkpoint.observed_cancel, "a shielded commit was interrupted"
        else:
            assert checkpoint.observed_cancel, f"checkpoint {k} ({name}) did not observe the cancellation"
        assert not probe.still_running(), f"tools still running: {probe.still_running()}"
        assert model.streams_opened == model.streams_closed, "a model stream was left open"
        self.fault.check_tasks(before)
        assert checked_out(self.model) == 0, "a connection is still checked out of the pool"
        messages = await memory.inner.messages()
        self.fault.check_memory(messages)
        assert messages[:2] == seed_messages()
        if name == "memory.commit":  # the unit being committed when the cancellation came is whole
            assert len(messages) > 2
        # The next invocation on the same memory succeeds, and the fake accepts the conversation.
        checkpoint.target = None
        self.script(1)
        assert (await agent.chat("again")).content == "Fine."
        self.fault.check_memory(await memory.inner.messages())
        assert not requests.unanswered
        return name


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_cancellation_at_every_checkpoint(
    provider: str, variant: str, fault: Fault, servers: dict[str, FakeServer]
) -> None:
    mode = "chat" if variant == "chat" else "stream"
    with shared(servers[provider]) as server:
        sweep = Sweep(provider, variant, server, fault)
        names = await sweep.count()
        fault.declare(
            "cancellation",
            f"cancelled at each of {len(names)} checkpoints: {VARIANTS[variant]}",
            "the checkpoint observes it (a commit completes); no task, tool, stream or connection left; "
            "memory valid; the next invocation works",
            provider=provider,
            mode=mode,
        )
        kinds = {name.split(".")[0] for name in names}
        assert kinds == {"system_message", "memory", "provider", "model", "tool"}
        assert {"memory.read", "memory.commit", "provider.between_rounds", "model.request"} <= set(names)
        assert {"tool.Paris.start", "tool.Paris.working", "tool.London.working"} <= set(names)
        expected_model = (
            {"model.in_flight"} if mode == "chat" else {"model.first_text", "model.call_complete"}
        )
        assert expected_model <= set(names)
        # The order of concurrent checkpoints (two tools, a stream) may differ between runs; their number not.
        cancelled_at = [await sweep.cancel_at(k) for k in range(len(names))]
        assert {name.split(".")[0] for name in cancelled_at} == kinds
        assert fault.record is not None
        fault.record.counts["cancellation_points"] += len(names)
        await fault.check_connections(sweep.model, server)
    assert await server_connections_after_close(server) == 0
