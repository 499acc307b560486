"""Edges met at the providers and the tools, as fault rows: shapes a newer API sends, histories a provider
would reject, a guarded answer streamed to a consumer, a retried tool call's events, a hung sync tool called
many times at once."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentloop import (
    Agent,
    AiMessage,
    BeforeToolExecution,
    MessageWindowChatMemory,
    ToolExecuted,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolRetrying,
    ToolSpecification,
    UserMessage,
    execute_tool_calls,
    tool,
)
from agentloop._tools._threads import THREADS_PER_TOOL, TOOL_THREADS, busy_threads
from agentloop._tools._tool import Tool
from agentloop.middleware import GuardrailTripped, OutputGuardrail
from agentloop.testing import ScriptedChatModel
from agentloop.testing._fake_server import FakeServer
from tests.models.test_provider_contract import NEWER
from tests.runtime.test_middleware import retrying_agent

from ._support import Fault, invoke, running_tasks, seed_messages
from ._wire import ANSWER, MODES, PROVIDERS, Requests, provider_model, shared

pytestmark = pytest.mark.anyio
mode_param = pytest.mark.parametrize("mode", MODES)


@pytest.mark.parametrize("provider", PROVIDERS)
@mode_param
async def test_what_a_newer_api_sends(
    provider: str, mode: str, servers: dict[str, FakeServer], fault: Fault
) -> None:
    fault.declare(
        "wire",
        "output items, content blocks and streamed events of unknown kinds, fields of unexpected types",
        "ignored unread (each kind logged once at DEBUG); the answer arrives whole",
        provider=provider,
        mode=mode,
    )
    newer = NEWER[provider][0]
    before = running_tasks()
    with shared(servers[provider]) as server:
        requests = Requests(server)
        model = provider_model(provider, server)
        memory = MessageWindowChatMemory(50)
        await memory.add(seed_messages())
        server.add(lambda request: newer(server, server.render(ANSWER, request)))
        outcome = await invoke(Agent(model, memory=memory), mode, "Weather?")
        assert outcome.result is not None, outcome.error
        assert outcome.result.content == ANSWER and len(requests) == 1
        fault.check_memory(await memory.messages())
        await fault.check_connections(model, server)
    fault.check_tasks(before)


@pytest.mark.parametrize("provider", PROVIDERS)
@mode_param
async def test_tool_rounds_in_the_history_of_an_agent_without_tools(
    provider: str, mode: str, servers: dict[str, FakeServer], fault: Fault
) -> None:
    fault.declare(
        "wire",
        "tool rounds in the history, the agent without tools (a web page showing an earlier agent's tools)",
        "sent as text where the API needs tools declared for them (Anthropic, Bedrock); answered",
        provider=provider,
        mode=mode,
    )
    before = running_tasks()
    with shared(servers[provider]) as server:
        requests = Requests(server)
        model = provider_model(provider, server)
        memory = MessageWindowChatMemory(50)
        await memory.add(
            [
                UserMessage("Weather in Paris?"),
                AiMessage(None, [ToolExecutionRequest("call_1", "weather", '{"city": "Paris"}')]),
                ToolExecutionResultMessage("call_1", "weather", "sunny"),
                AiMessage("Sunny."),
            ]
        )
        server.add(ANSWER)
        outcome = await invoke(Agent(model, memory=memory), mode, "And tomorrow?")
        assert outcome.result is not None, outcome.error
        assert outcome.result.content == ANSWER and len(requests) == 1
        assert b"sunny" in requests[0].body
        fault.check_memory(await memory.messages())
        await fault.check_connections(model, server)
    fault.check_tasks(before)


@mode_param
async def test_a_guarded_answer_streamed(mode: str, fault: Fault) -> None:
    fault.declare(
        "output",
        "an OutputGuardrail trips on a streamed answer (default hold)",
        "GuardrailTripped; the consumer received none of the blocked text; memory unchanged",
        mode=mode,
    )
    before = running_tasks()
    memory = MessageWindowChatMemory(50)
    await memory.add(seed_messages())
    guard = OutputGuardrail(lambda text: "hunter2" in text, name="no-secrets")
    agent = Agent(ScriptedChatModel(["The admin password is hunter2."]), memory=memory, middleware=[guard])
    outcome = await invoke(agent, mode, "password?")
    assert isinstance(outcome.error, GuardrailTripped) and outcome.tokens == []
    assert await memory.messages() == seed_messages()
    fault.check_memory(await memory.messages())
    fault.check_tasks(before)


async def test_a_retried_tool_call_is_one_call_to_its_observers(fault: Fault) -> None:
    fault.declare(
        "tool",
        "a tool call ToolRetry runs three times",
        "one BeforeToolExecution, a ToolRetrying per further attempt, one ToolExecuted",
        mode="stream",
    )
    before = running_tasks()
    agent = retrying_agent([])
    async with agent.stream("go") as stream:
        kinds = [type(e).__name__ async for e in stream.events()]
    assert [k for k in kinds if k in ("BeforeToolExecution", "ToolRetrying", "ToolExecuted")] == [
        BeforeToolExecution.__name__,
        ToolRetrying.__name__,
        ToolRetrying.__name__,
        ToolExecuted.__name__,
    ]
    fault.check_tasks(before)


async def test_many_calls_of_one_hung_sync_tool(fault: Fault) -> None:
    fault.declare(
        "tool",
        f"45 concurrent calls of one hung sync tool, all timed out ({TOOL_THREADS} worker threads)",
        f"they hold {THREADS_PER_TOOL} threads, not all; another sync tool runs at once",
    )
    import threading

    release = threading.Event()

    def blocks(request: Any, context: Any) -> str:
        release.wait(30)
        return "released"

    @tool(timeout=5)
    def healthy() -> str:
        return "fine"

    try:
        hang = Tool(ToolSpecification("hang"), blocks, timeout=0.05)
        results = await execute_tool_calls(
            [ToolExecutionRequest(f"c{i}", "hang", "{}") for i in range(45)], [hang]
        )
        # At most THREADS_PER_TOOL threads hang (fewer when the timeout came before a thread had started
        # on a loaded machine: a call abandoned before its thread ran holds none).
        assert all(e.has_failed for e in results) and 0 < busy_threads() <= THREADS_PER_TOOL
        [execution] = await execute_tool_calls([ToolExecutionRequest("h", "healthy", "{}")], [healthy])
        assert execution.result == "fine"
    finally:
        release.set()
        with anyio.fail_after(10):
            while busy_threads():  # the released threads on their way out
                await anyio.sleep(0.005)
