"""Serving agentloop tools over MCP: what a tool sends while it runs (logs, progress, questions to the
client), the content blocks it returns, and the resources and prompts a server offers, seen by the SDK's
own client (in process, both anyio backends). The client speaks the 2025-11-25 protocol (`mode="legacy"`,
the initialize handshake) that today's clients use, and the 2026-07-28 one where it differs.
The same server is checked over HTTP by the official conformance suite
(tests/integrations/test_mcp_conformance.py)."""

from __future__ import annotations

import base64
import json
import threading
import warnings
from typing import Any

import mcp_types as types
import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPDeprecationWarning

from agentloop import (
    Agent,
    AiMessage,
    IllegalConfigurationError,
    ImageContent,
    ToolContext,
    ToolExecutionRequest,
    tool,
)
from agentloop.mcp import server_from
from agentloop.mcp._catalog import catalog_of
from agentloop.testing import ScriptedChatModel
from tests.mcp_conformance_server import PNG

pytestmark = pytest.mark.anyio


@tool("Logs three lines and reports progress between them")
async def chatty(ctx: ToolContext) -> str:
    ctx.debug("a detail")
    ctx.info("started")
    await ctx.report_progress(1, 2, "half way")
    ctx.warning("careful")
    await ctx.report_progress(2, 2)
    ctx.error("done with an error line")
    return "finished"


@tool("A sync tool that logs from its worker thread")
def threaded(ctx: ToolContext) -> str:
    ctx.info(f"from a thread: {threading.current_thread() is not threading.main_thread()}")
    return "ok"


@tool("Asks the user for a name, then the client's model for a greeting")
async def greet(ctx: ToolContext) -> str:
    answer = await ctx.elicit("Who are you?", {"type": "object", "properties": {"name": {"type": "string"}}})
    if answer.action != "accept":
        return f"no name ({answer.action})"
    greeting = await ctx.sample(f"Greet {answer.content['name']}", max_tokens=20, system="Be brief")
    return f"{answer.content['name']}: {greeting}"


@tool("Returns a picture and a caption")
def picture() -> list[Any]:
    return ["a red pixel", ImageContent(data=PNG, media_type="image/png")]


def readme() -> str:
    """The project's readme"""
    return "# hello"


def profile(user: str) -> dict[str, Any]:
    """A user's profile"""
    return {"user": user, "admin": False}


def logo() -> bytes:
    return PNG


def review(code: str, language: str = "python") -> str:
    """Asks for a code review"""
    return f"Review this {language}: {code}"


SERVER = server_from(
    [chatty, threaded, greet, picture],
    resources={"docs://readme": readme, "users://{user}/profile": profile, "img://logo": logo},
    prompts=[review],
)


async def test_logs_and_progress_reach_the_client_in_order_before_the_result() -> None:
    received: list[tuple[str, Any]] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        received.append((params.level, params.data))

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        received.append(("progress", (progress, total, message)))

    async with Client(SERVER, logging_callback=on_log, mode="legacy") as client:
        with warnings.catch_warnings():  # the SDK flags setLevel as gone from the 2026-07-28 protocol
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await client.set_logging_level("info")  # the debug line is filtered out
        result = await client.call_tool("chatty", {}, progress_callback=on_progress)
    assert result.content[0].text == "finished"  # type: ignore[union-attr]
    assert received == [
        ("info", "started"),
        ("progress", (1, 2, "half way")),
        ("warning", "careful"),
        ("progress", (2, 2, None)),
        ("error", "done with an error line"),
    ]


async def test_on_the_2026_protocol_logs_follow_the_level_the_request_asks_for() -> None:
    received: list[Any] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        received.append(params.level)

    async with Client(SERVER, logging_callback=on_log, log_level="warning") as client:
        result = await client.call_tool("chatty", {})
    assert result.content[0].text == "finished"  # type: ignore[union-attr]
    assert received == ["warning", "error"]


async def test_a_sync_tool_logs_from_its_worker_thread() -> None:
    received: list[Any] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        received.append(params.data)

    async with Client(SERVER, logging_callback=on_log, mode="legacy") as client:
        result = await client.call_tool("threaded", {})
    assert result.content[0].text == "ok"  # type: ignore[union-attr]
    assert received == ["from a thread: True"]


async def test_a_tool_asks_the_user_and_the_clients_model() -> None:
    asked: list[Any] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async def sample(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked.append((params.messages[0].content.text, params.max_tokens, params.system_prompt))  # type: ignore[union-attr]
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="Hello, Ada!"), model="test"
        )

    async with Client(SERVER, elicitation_callback=elicit, sampling_callback=sample, mode="legacy") as client:
        result = await client.call_tool("greet", {})
    assert result.content[0].text == "Ada: Hello, Ada!"  # type: ignore[union-attr]
    assert asked == ["Who are you?", ("Greet Ada", 20, "Be brief")]


async def test_a_declined_question_reaches_the_tool() -> None:
    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    async with Client(SERVER, elicitation_callback=elicit, mode="legacy") as client:
        result = await client.call_tool("greet", {})
    assert result.content[0].text == "no name (decline)"  # type: ignore[union-attr]


async def test_outside_mcp_logging_is_a_no_op_and_questions_fail_clearly() -> None:
    model = ScriptedChatModel(
        [AiMessage(tool_execution_requests=[ToolExecutionRequest("1", "greet", "{}")]), "ok"]
    )
    agent = Agent(model, tools=[chatty, greet])
    result = await agent.chat("hi")
    error = result.tool_executions[0].result
    assert "works only while the tool is served over MCP" in error
    model2 = ScriptedChatModel(
        [AiMessage(tool_execution_requests=[ToolExecutionRequest("1", "chatty", "{}")]), "ok"]
    )
    result2 = await Agent(model2, tools=[chatty]).chat("hi")
    assert result2.tool_executions[0].result == "finished"


async def test_a_tool_returns_content_blocks() -> None:
    async with Client(SERVER, mode="legacy") as client:
        result = await client.call_tool("picture", {})
    text, image = result.content
    assert isinstance(text, types.TextContent) and text.text == "a red pixel"
    assert isinstance(image, types.ImageContent) and image.mime_type == "image/png"
    assert base64.b64decode(image.data) == PNG


async def test_resources_and_templates_are_listed_and_read() -> None:
    async with Client(SERVER, mode="legacy") as client:
        listed = await client.list_resources()
        templates = await client.list_resource_templates()
        text = await client.read_resource("docs://readme")
        made = await client.read_resource("users://ada/profile")
        binary = await client.read_resource("img://logo")
    assert {str(r.uri) for r in listed.resources} == {"docs://readme", "img://logo"}
    assert [t.uri_template for t in templates.resource_templates] == ["users://{user}/profile"]
    assert text.contents[0].text == "# hello"  # type: ignore[union-attr]
    assert json.loads(made.contents[0].text) == {"user": "ada", "admin": False}  # type: ignore[union-attr]
    assert made.contents[0].mime_type == "application/json"
    assert base64.b64decode(binary.contents[0].blob) == PNG  # type: ignore[union-attr]


async def test_prompts_are_listed_and_rendered_with_their_arguments() -> None:
    async with Client(SERVER, mode="legacy") as client:
        listed = await client.list_prompts()
        rendered = await client.get_prompt("review", {"code": "x = 1"})
    (prompt,) = listed.prompts
    assert prompt.name == "review" and prompt.description == "Asks for a code review"
    assert [(a.name, a.required) for a in prompt.arguments or ()] == [("code", True), ("language", False)]
    assert rendered.messages[0].content.text == "Review this python: x = 1"  # type: ignore[union-attr]


async def test_an_unknown_resource_or_prompt_is_an_error_naming_it() -> None:
    async with Client(SERVER, mode="legacy") as client:
        with pytest.raises(Exception, match="Unknown resource: docs://nope"):
            await client.read_resource("docs://nope")
        with pytest.raises(Exception, match="Unknown prompt: 'nope'"):
            await client.get_prompt("nope", {})


def test_bad_resources_and_prompts_are_refused_with_what_to_give() -> None:
    with pytest.raises(IllegalConfigurationError, match=r"give \{uri: function\}"):
        catalog_of({"docs://x": 42}, None)
    with pytest.raises(IllegalConfigurationError, match="two prompts are named 'review'"):
        catalog_of(None, [review, review])


async def test_a_memory_id_parameter_served_over_mcp_gets_its_default() -> None:
    """An MCP call has no memory id: a `ToolMemoryId` parameter gets its default (it got None), or None
    when it has none; inside an agent with a memory id it still gets that id."""
    from typing import Annotated

    from agentloop import MessageWindowChatMemory, ToolMemoryId

    @tool
    def whoami(user: Annotated[str, ToolMemoryId] = "anonymous") -> str:
        """Says whose conversation this is."""
        return f"user={user}"

    @tool
    def bare(user: Annotated[Any, ToolMemoryId]) -> str:
        """Says whose conversation this is, without a default."""
        return f"user={user}"

    async with Client(server_from([whoami, bare]), mode="legacy") as client:
        defaulted = await client.call_tool("whoami", {})
        missing = await client.call_tool("bare", {})
    assert [block.text for block in defaulted.content] == ["user=anonymous"]  # type: ignore[union-attr]
    assert [block.text for block in missing.content] == ["user=None"]  # type: ignore[union-attr]
    call = AiMessage(None, [ToolExecutionRequest("c1", "whoami", "{}")])
    agent = Agent(ScriptedChatModel([call, "ok", call, "ok"]), tools=[whoami])
    stateless = await agent.chat("who?")
    assert stateless.tool_executions[0].result == "user=anonymous"
    remembering = Agent(
        ScriptedChatModel([call, "ok"]), tools=[whoami], memory=MessageWindowChatMemory.provider(10)
    )
    assert (await remembering.chat("who?", memory_id="ada")).tool_executions[0].result == "user=ada"
