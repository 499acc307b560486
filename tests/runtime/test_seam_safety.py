"""The seam's two safety rules, tried as a hostile user would.

1. A tool call never starts before every `wrap_model_call` around its response has returned that response:
   a guard that replaces a response, a retry that rejects one and a token budget that refuses one all keep
   its calls from running, streamed (where calls otherwise start while the model streams) and not.
   Middleware that declares `allows_eager_tools` keeps the eager start.
2. A `wrap_tool_call` cannot give an execution another call id or name: refused, memory untouched.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import msgspec
import pytest

from agentloop import (
    Agent,
    AiMessage,
    ChatRequest,
    ChatResponse,
    IllegalConfigurationError,
    MessageWindowChatMemory,
    Middleware,
    ModelCall,
    Observer,
    TokenUsage,
    ToolCall,
    ToolExecution,
    ToolExecutionRequest,
    tool,
)
from agentloop.middleware import UsageLimitExceeded, UsageLimits
from agentloop.models import ModelEvent, ToolCallComplete
from agentloop.testing import ScriptedChatModel
from tests.runtime.test_middleware import WaitsForTheTool, invoke, memory_of
from tests.runtime_helpers import assert_valid_for_provider, calls


class Lingering:
    """A scripted model whose stream lingers after each whole tool call, giving a call started early every
    chance to run before the response is complete (the bug this file guards against needs no more)."""

    def __init__(self, responses: list[Any]) -> None:
        self.inner = ScriptedChatModel(responses)
        self.model_name = "lingering"

    async def chat(self, request: ChatRequest) -> ChatResponse:
        return await self.inner.chat(request)

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        async for event in self.inner.stream(request):
            yield event
            if isinstance(event, ToolCallComplete):
                for _ in range(50):
                    await anyio.lowlevel.checkpoint()


def agent_of(model: Any, tools: list[Any], middleware: list[Middleware]) -> Agent:
    return Agent(model, tools=tools, middleware=middleware, memory=MessageWindowChatMemory.provider(20))


# -- 1. no tool call before the model-call middleware returned its response ---------------------------------


class RefuseDeletes(Middleware):
    """A guard: a response that asks for `delete_all` is replaced by a refusal."""

    async def wrap_model_call(self, call: ModelCall, call_next: Any) -> ChatResponse:
        response = await call_next(call)
        if any(r.name == "delete_all" for r in response.ai_message.tool_execution_requests):
            return ChatResponse(AiMessage("I will not delete everything."))
        return response


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_guard_that_replaces_a_response_keeps_its_calls_from_running(streaming: bool) -> None:
    deleted: list[str] = []

    @tool
    async def delete_all(path: str) -> str:
        """Deletes everything under path."""
        deleted.append(path)
        return "deleted"

    model = Lingering([calls(("delete_all", {"path": "/"}))])
    agent = agent_of(model, [delete_all], [RefuseDeletes()])
    result = await invoke(agent, "clean up", streaming, memory_id="m")
    assert deleted == []
    assert result.content == "I will not delete everything." and result.tool_executions == []
    stored = await memory_of(agent)
    assert_valid_for_provider(stored)
    assert [m.text for m in stored[1:]] == ["I will not delete everything."]


class RejectBigPayments(Middleware):
    """A retry: a response that pays more than 100 is thrown away and the model is asked again."""

    async def wrap_model_call(self, call: ModelCall, call_next: Any) -> ChatResponse:
        while True:
            response = await call_next(call)
            requests = response.ai_message.tool_execution_requests
            if not any(r.name == "pay" and json.loads(r.arguments)["amount"] > 100 for r in requests):
                return response


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_retry_that_rejects_a_response_keeps_its_calls_from_running(streaming: bool) -> None:
    paid: list[int] = []

    @tool
    async def pay(amount: int) -> str:
        """Pays amount."""
        paid.append(amount)
        return "paid"

    script = [calls(("pay", {"amount": 999}, "p1")), calls(("pay", {"amount": 10}, "p2")), "Paid 10."]
    agent = agent_of(Lingering(script), [pay], [RejectBigPayments()])
    result = await invoke(agent, "pay the bill", streaming, memory_id="m")
    assert paid == [10]
    assert result.content == "Paid 10." and [e.request.id for e in result.tool_executions] == ["p2"]
    assert_valid_for_provider(await memory_of(agent))


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_token_budget_that_refuses_a_response_keeps_its_calls_from_running(streaming: bool) -> None:
    ran: list[str] = []

    @tool
    async def send(text: str) -> str:
        """Sends text."""
        ran.append(text)
        return "sent"

    costly = ChatResponse(calls(("send", {"text": "hi"})), TokenUsage(input_tokens=5, output_tokens=500))
    agent = agent_of(Lingering([costly]), [send], [UsageLimits(max_output_tokens=100)])
    with pytest.raises(UsageLimitExceeded, match="max_output_tokens=100"):
        await invoke(agent, "send hi", streaming, memory_id="m")
    assert ran == []
    assert await memory_of(agent) == []


class Declared(Middleware):
    """Watches model calls and says so: its calls may start while the model streams."""

    allows_eager_tools = True

    def __init__(self) -> None:
        self.seen = 0

    async def wrap_model_call(self, call: ModelCall, call_next: Any) -> ChatResponse:
        self.seen += 1
        return await call_next(call)


class Traces(Observer):
    """An observer (as tracing is): it declares `allows_eager_tools` by being one."""

    async def wrap_model_call(self, call: ModelCall, call_next: Any) -> ChatResponse:
        return await call_next(call)


@pytest.mark.parametrize(
    "middleware",
    [Declared, Traces, lambda: UsageLimits(max_requests=5, max_tool_calls=5)],
    ids=["declared", "observer", "usage-limits-without-tokens"],
)
async def test_middleware_that_declares_it_keeps_the_eager_start(middleware: Any) -> None:
    model = WaitsForTheTool()  # its stream ends only once the tool started: only an eager start finishes

    @tool
    async def starts() -> str:
        """Tells the model it started."""
        model.started.set()
        return "started"

    agent = Agent(model, tools=[starts], middleware=[middleware()])
    async with agent.stream("go") as stream:
        text = "".join([piece async for piece in stream])
    assert text == "3" and stream.result.tool_executions[0].result == "started"


async def test_the_declaration_is_read_per_instance() -> None:
    assert UsageLimits(max_requests=1).allows_eager_tools
    assert not UsageLimits(max_total_tokens=1).allows_eager_tools
    assert not Middleware().allows_eager_tools and Declared().allows_eager_tools


# -- 2. a wrap_tool_call keeps the call's id and name ------------------------------------------------------


class Rewrite(Middleware):
    """Passes the call on, or hands back its execution, under another id or name."""

    def __init__(self, where: str, **changes: str) -> None:
        self.where = where
        self.changes = changes

    def _other(self, request: ToolExecutionRequest) -> ToolExecutionRequest:
        return msgspec.structs.replace(request, **self.changes)

    async def wrap_tool_call(self, call: ToolCall, call_next: Any) -> ToolExecution:
        if self.where == "request":
            return await call_next(call.replace(request=self._other(call.request)))
        execution: ToolExecution = await call_next(call)
        return msgspec.structs.replace(execution, request=self._other(execution.request))


@tool
def add(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b


@tool
def sub(a: int, b: int) -> int:
    """Subtracts b from a."""
    return a - b


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(
    ("rewrite", "found"),
    [
        (Rewrite("request", id="evil-id"), r"passed on tool call 'c1' \('add'\) as call 'evil-id' \('add'\)"),
        (Rewrite("request", name="sub"), r"passed on tool call 'c1' \('add'\) as call 'c1' \('sub'\)"),
        (Rewrite("execution", id="evil-id"), r"returned an execution of tool call 'c1' \('add'\) as call 'e"),
    ],
    ids=["request-id", "request-name", "execution-id"],
)
async def test_a_tool_middleware_cannot_change_a_calls_id_or_name(
    rewrite: Rewrite, found: str, streaming: bool
) -> None:
    model = ScriptedChatModel([calls(("add", {"a": 1, "b": 2}, "c1")), "3.", "Hello."])
    agent = agent_of(model, [add, sub], [])
    with pytest.raises(IllegalConfigurationError, match=found) as info:
        await invoke(agent, "1+2?", streaming, memory_id="m", middleware=[rewrite])
    assert "Rewrite" in str(info.value) and "keeping the request's id and name" in str(info.value)
    assert await memory_of(agent) == []  # nothing of the round was stored
    model.responses.pop(0)  # the answer the refused round never asked for
    assert (await agent.chat("again", memory_id="m")).content == "Hello."  # the memory still works


async def test_a_tool_middleware_may_change_a_calls_arguments() -> None:
    class Double(Middleware):
        async def wrap_tool_call(self, call: ToolCall, call_next: Any) -> ToolExecution:
            request = msgspec.structs.replace(call.request, arguments='{"a": 2, "b": 4}')
            return await call_next(call.replace(request=request))

    model = ScriptedChatModel([calls(("add", {"a": 1, "b": 2}, "c1")), "6."])
    result = await agent_of(model, [add], [Double()]).chat("1+2?", memory_id="m")
    assert result.tool_executions[0].result == "6" and result.tool_executions[0].request.id == "c1"


class ReturnsNothing(Middleware):
    """Forgets to return what `call_next` gave."""

    async def wrap_model_call(self, call: ModelCall, call_next: Any) -> ChatResponse:
        await call_next(call)
        return None  # type: ignore[return-value]

    async def wrap_tool_call(self, call: ToolCall, call_next: Any) -> ToolExecution:
        await call_next(call)
        return None  # type: ignore[return-value]


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("hook", ["wrap_model_call", "wrap_tool_call"])
async def test_a_hook_that_returns_no_response_or_execution_is_named(hook: str, streaming: bool) -> None:
    forgetful = type("Forgetful", (ReturnsNothing,), {})
    if hook == "wrap_model_call":
        forgetful.wrap_tool_call = Middleware.wrap_tool_call  # type: ignore[method-assign]
        expected = r"A wrap_model_call middleware \(Forgetful\) returned None; return the ChatResponse"
    else:
        forgetful.wrap_model_call = Middleware.wrap_model_call  # type: ignore[method-assign]
        expected = r"A wrap_tool_call middleware \(Forgetful\) returned None for tool call 'c1'; return the"
    agent = agent_of(ScriptedChatModel([calls(("add", {"a": 1, "b": 2}, "c1")), "3."]), [add], [forgetful()])
    with pytest.raises(IllegalConfigurationError, match=expected):
        await invoke(agent, "1+2?", streaming, memory_id="m")
    assert await memory_of(agent) == []
