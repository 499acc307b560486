"""`Agent.chat_sync()` / `ask_sync()`: blocking calls for scripts and notebooks, a loop running or not."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from agentloop import Agent, AiMessage, ModelConnectionError, ToolExecutionRequest, tool
from agentloop.models import OpenAIChatModel
from agentloop.testing import FakeOpenAIServer, ScriptedChatModel


@tool("Adds two numbers")
def add(a: float, b: float) -> float:
    return a + b


def adding_agent() -> Agent:
    model = ScriptedChatModel(
        [AiMessage(tool_execution_requests=[ToolExecutionRequest("c1", "add", '{"a": 2, "b": 3}')]), "5"]
    )
    return Agent(model, tools=[add])


def test_chat_sync_returns_the_result_from_plain_code() -> None:
    result = adding_agent().chat_sync("2 + 3?")
    assert result.content == "5"
    assert [e.result for e in result.tool_executions] == ["5.0"]


def test_ask_sync_passes_options_and_raises_typed_errors() -> None:
    agent = Agent(ScriptedChatModel(["alice's answer"]), memory=None)
    assert agent.ask_sync("hi", memory_id="alice", context={"x": 1}) == "alice's answer"
    with FakeOpenAIServer() as server:
        url = server.base_url
    broken = Agent(OpenAIChatModel("m", base_url=url, api_key="k", max_retries=0))
    with pytest.raises(ModelConnectionError, match=r"OpenAI-compatible server at http://127\.0\.0\.1"):
        broken.ask_sync("hi")


def test_sync_calls_share_one_loop_so_pooled_connections_are_reused() -> None:
    with FakeOpenAIServer(["one", "two", "three"]) as server:
        agent = Agent(OpenAIChatModel("m", base_url=server.base_url, api_key="k"))
        assert [agent.ask_sync("hi") for _ in range(3)] == ["one", "two", "three"]
        assert server.connections_opened == 1


async def test_chat_sync_works_inside_a_running_loop_like_jupyter() -> None:
    # A notebook cell runs inside the kernel's event loop: a blocking call there must not fail with
    # "this event loop is already running" (it runs on agentloop's own loop thread meanwhile).
    with FakeOpenAIServer(["first", "second"]) as server:
        agent = Agent(OpenAIChatModel("m", base_url=server.base_url, api_key="k"))
        assert agent.ask_sync("hi") == "first"
        assert agent.chat_sync("again").content == "second"
        assert server.connections_opened == 1


async def test_a_sync_tool_may_call_another_agent_synchronously() -> None:
    # A sync tool runs in a worker thread of the running loop: its sync call runs back on that loop.
    expert = Agent(ScriptedChatModel(["Tokyo"]))

    @tool("Asks the geography expert")
    def ask_expert(question: str) -> str:
        return expert.ask_sync(question)

    model = ScriptedChatModel(
        [
            AiMessage(
                tool_execution_requests=[ToolExecutionRequest("c1", "ask_expert", '{"question": "?"}')]
            ),
            "It is Tokyo.",
        ]
    )
    result = await Agent(model, tools=[ask_expert]).chat("Capital of Japan?")
    assert result.tool_executions[0].result == "Tokyo"
    assert result.content == "It is Tokyo."


def test_ctrl_c_cancels_the_running_call_and_raises_keyboard_interrupt() -> None:
    script = textwrap.dedent(
        """
        import signal
        import anyio
        from agentloop import Agent, AiMessage, ToolExecutionRequest, tool
        from agentloop.testing import ScriptedChatModel

        # A process started with SIGINT ignored (as some runners start their workers) keeps ignoring it;
        # a terminal's Ctrl-C reaches Python's default handler, so install it as a terminal would.
        signal.signal(signal.SIGINT, signal.default_int_handler)

        @tool("Waits a long time")
        async def slow() -> str:
            print("tool started", flush=True)
            try:
                await anyio.sleep(60)
            finally:
                print("tool cancelled", flush=True)
            return "never"

        call = AiMessage(tool_execution_requests=[ToolExecutionRequest("c1", "slow", "{}")])
        agent = Agent(ScriptedChatModel([call, "done"]), tools=[slow])
        try:
            agent.chat_sync("go")
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "tool started"
    started = time.monotonic()
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    assert out.split() == ["tool", "cancelled", "interrupted"], err
    assert process.returncode == 0
    assert time.monotonic() - started < 10


def test_no_unclosed_transport_at_exit_under_python_dev_mode() -> None:
    # The model's pooled connection lives on the sync calls' loop: it is closed at exit before that loop,
    # instead of being garbage-collected open ("ResourceWarning: unclosed transport").
    script = textwrap.dedent(
        """
        from agentloop import Agent
        from agentloop.models import OpenAIChatModel
        from agentloop.testing import FakeOpenAIServer

        with FakeOpenAIServer(["hello", "again"]) as server:
            agent = Agent(OpenAIChatModel("m", base_url=server.base_url, api_key="k"))
            print(agent.chat_sync("hi").content, agent.ask_sync("and?"))
        """
    )
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error::ResourceWarning", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "hello again"
    assert "ResourceWarning" not in done.stderr and "unclosed" not in done.stderr, done.stderr
