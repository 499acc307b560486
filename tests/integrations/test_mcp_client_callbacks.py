"""What an MCP server asks of, or tells, an `MCPToolset`: elicitation (`elicitation_handler`), sampling
(`sampling_model`, here an `OpenAIChatModel` talking to a fake OpenAI server over a real socket), log
messages (`on_log`) and progress (`on_progress`). Against the `mcp` SDK's server (tests/mcp_demo_server.py)
over stdio and over streamable HTTP, in protocol 2026-07-28 (where the server asks through "input
required" results) and over HTTP in the protocol before it (where it sends requests of its own).

The OAuth client providers (`auth=`) are tested against the official conformance suite's authorization
servers: tests/integrations/test_mcp_conformance.py.
"""

from __future__ import annotations

import base64
import logging
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp.client.context import ClientRequestContext

from agentloop import (
    AiMessage,
    IllegalConfigurationError,
    ImageContent,
    SystemMessage,
    ToolExecutionError,
    UserMessage,
)
from agentloop.mcp import MCPToolset
from agentloop.mcp._callbacks import sampling_request
from agentloop.models import OpenAIChatModel
from agentloop.testing import FakeOpenAIServer
from tests.integrations.test_mcp import DEMO, HTTPServer, stdio

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["stdio", "http", "http-legacy"])
async def demo(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """The demo server as MCPToolset takes it: a command (stdio) or a URL (a process serving HTTP)."""
    legacy = ["--legacy"] if request.param.endswith("legacy") else []
    if request.param.startswith("stdio"):
        yield stdio(DEMO, "stdio", *legacy)
        return
    server = HTTPServer(sys.executable, DEMO, "http", "{port}", str(tmp_path), *legacy)
    await server.start()
    try:
        yield server.url
    finally:
        server.kill()


# -- elicitation ------------------------------------------------------------------------------------------


async def test_an_async_elicitation_handler_answers_the_server_with_the_sdk_types(demo: Any) -> None:
    seen: list[types.ElicitRequestParams] = []

    async def handler(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        seen.append(params)
        return types.ElicitResult(action="accept", content={"name": "Ada", "age": 36})

    async with MCPToolset(demo, elicitation_handler=handler) as toolset:
        result = await toolset.call_tool("ask", {"question": "Who are you?"})
    assert result.text == "accept: Ada, 36"
    (params,) = seen
    assert isinstance(params, types.ElicitRequestFormParams)
    assert params.message == "Who are you?"
    assert set(params.requested_schema["properties"]) == {"name", "age"}


async def test_a_sync_elicitation_handler_runs_in_a_worker_thread(demo: Any) -> None:
    threads: list[threading.Thread] = []

    def handler(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        threads.append(threading.current_thread())
        return types.ElicitResult(action="decline")

    async with MCPToolset(demo, elicitation_handler=handler) as toolset:
        assert (await toolset.call_tool("ask", {"question": "Name?"})).text == "decline"
    assert threads and threads[0] is not threading.main_thread()


async def test_a_failing_handler_fails_the_servers_request_without_its_message(
    demo: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def handler(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        raise ValueError("password=hunter2")

    async with MCPToolset(demo, elicitation_handler=handler) as toolset:
        with caplog.at_level(logging.WARNING, logger="agentloop.mcp"):
            with pytest.raises(ToolExecutionError) as caught:
                await toolset.call_tool("ask", {"question": "Name?"})
            # the connection survives a broken handler
            assert (await toolset.call_tool("add", {"a": 1, "b": 2})).text == "3"
    assert "hunter2" not in str(caught.value) and "hunter2" not in caplog.text
    assert "elicitation_handler raised ValueError" in caplog.text


async def test_a_handler_answering_something_else_is_named_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with MCPToolset(stdio(DEMO, "stdio"), elicitation_handler=lambda context, params: "yes") as toolset:
        with caplog.at_level(logging.WARNING, logger="agentloop.mcp"), pytest.raises(ToolExecutionError):
            await toolset.call_tool("ask", {"question": "Name?"})
    assert "elicitation_handler raised TypeError" in caplog.text


async def test_without_a_handler_the_client_offers_no_elicitation() -> None:
    async with MCPToolset(stdio(DEMO, "stdio")) as toolset:
        with pytest.raises(ToolExecutionError):
            await toolset.call_tool("ask", {"question": "Name?"})


# -- sampling ---------------------------------------------------------------------------------------------


async def test_a_chat_model_answers_the_servers_sampling_request(demo: Any) -> None:
    with FakeOpenAIServer(["Cats sleep much"]) as fake:
        model = OpenAIChatModel("gpt-4o-mini", base_url=fake.base_url, api_key="test")
        async with MCPToolset(demo, sampling_model=model) as toolset:
            result = await toolset.call_tool("summarize", {"text": "A long story about cats."})
        (request,) = fake.requests
    assert result.text.startswith("Cats sleep much (")
    assert result.text.endswith(", endTurn)")
    body = request.json
    assert body["messages"] == [
        {"role": "system", "content": "Summarize in three words."},
        {"role": "user", "content": "A long story about cats."},
    ]
    assert 50 in (body.get("max_tokens"), body.get("max_completion_tokens"))
    assert body["temperature"] == 0.2
    assert body["stop"] == ["END"]


async def test_a_failing_model_fails_the_sampling_request_and_the_tool() -> None:
    with FakeOpenAIServer([]) as fake:  # no reply scripted: the fake answers with an error
        model = OpenAIChatModel("gpt-4o-mini", base_url=fake.base_url, api_key="test", max_retries=0)
        async with MCPToolset(stdio(DEMO, "stdio"), sampling_model=model) as toolset:
            with pytest.raises(ToolExecutionError):
                await toolset.call_tool("summarize", {"text": "x"})


# -- logging and progress ---------------------------------------------------------------------------------


async def test_log_messages_and_progress_reach_on_log_and_on_progress(demo: Any) -> None:
    logs: list[types.LoggingMessageNotificationParams] = []
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with MCPToolset(demo, on_log=logs.append, on_progress=on_progress) as toolset:
        assert (await toolset.call_tool("work", {"steps": 3})).text == "worked"
    # Over HTTP before 2026-07-28 the SDK's server may send them on two streams: their order may change.
    assert sorted((log.level, str(log.data)) for log in logs) == [
        ("info", "step 1"),
        ("info", "step 2"),
        ("info", "step 3"),
        ("warning", "{'finished': 3}"),
    ]
    assert progress == [(1, 3, "step 1 of 3"), (2, 3, "step 2 of 3"), (3, 3, "step 3 of 3")]


async def test_a_failing_on_progress_is_logged_and_the_call_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    def on_progress(done: float, total: float | None, message: str | None) -> None:
        raise RuntimeError("secret")

    async with MCPToolset(stdio(DEMO, "stdio"), on_progress=on_progress) as toolset:
        with caplog.at_level(logging.WARNING, logger="agentloop.mcp"):
            assert (await toolset.call_tool("work", {"steps": 2})).text == "worked"
    assert "on_progress raised RuntimeError" in caplog.text and "secret" not in caplog.text


# -- configuration ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("elicitation_handler", 3, "elicitation_handler takes a function, got int"),
        ("on_log", "print", "on_log takes a function, got str"),
        ("on_progress", [], "on_progress takes a function, got list"),
        ("sampling_model", "gpt-4o", "sampling_model takes a ChatModel"),
    ],
)
def test_bad_handlers_are_refused_with_what_was_wrong(option: str, value: object, message: str) -> None:
    with pytest.raises(IllegalConfigurationError, match=message):
        MCPToolset(["python", "server.py"], **{option: value})


def test_sampling_messages_become_a_chat_request_with_pictures_from_the_user() -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
    params = types.CreateMessageRequestParams(
        messages=[
            types.SamplingMessage(
                role="user",
                content=[
                    types.TextContent(type="text", text="What is this?"),
                    types.ImageContent(
                        type="image", data=base64.b64encode(png).decode(), mime_type="image/png"
                    ),
                ],
            ),
            types.SamplingMessage(role="assistant", content=types.TextContent(type="text", text="A dot.")),
            types.SamplingMessage(role="user", content=types.TextContent(type="text", text="Sure?")),
        ],
        max_tokens=20,
        system_prompt="Be brief.",
    )
    request = sampling_request(params)
    system, user, ai, again = request.messages
    assert system == SystemMessage("Be brief.")
    assert isinstance(user, UserMessage) and user.text == "What is this?"
    (picture,) = (part for part in user.contents if isinstance(part, ImageContent))
    assert picture.data == png and picture.media_type == "image/png"
    assert ai == AiMessage(text="A dot.") and again == UserMessage("Sure?")
    assert request.parameters == {"max_tokens": 20}


@pytest.mark.parametrize(
    ("content", "role", "message"),
    [
        (
            types.AudioContent(type="audio", data="AAAA", mime_type="audio/wav"),
            "user",
            "holds a 'audio' block",
        ),
        (types.ImageContent(type="image", data="AAAA", mime_type="image/png"), "assistant", "'image' block"),
        (types.TextContent(type="text", text="hi"), "assistant", "holds no user message"),
    ],
)
def test_sampling_content_without_an_agentloop_message_is_refused(
    content: Any, role: str, message: str
) -> None:
    params = types.CreateMessageRequestParams(
        messages=[types.SamplingMessage(role=role, content=content)],  # type: ignore[arg-type]
        max_tokens=5,
    )
    with pytest.raises(ValueError, match=message):
        sampling_request(params)
