"""Pictures and documents on the wire: OpenAI Chat Completions (`image_url`, `file`; a tool's pictures in a
user turn after its results), Anthropic (`image` / `document` blocks, in `tool_result` too), the embedded
model's refusal, and what tools (MCP ones included) return."""

from __future__ import annotations

import base64
from typing import Any

import mcp_types as types
import pytest

from agentloop import (
    Agent,
    AiMessage,
    BadRequestError,
    ChatRequest,
    DocumentContent,
    IllegalConfigurationError,
    ImageContent,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
    tool,
)
from agentloop.mcp._results import result_of
from agentloop.models import AnthropicChatModel, LocalChatModel, OpenAIChatModel
from agentloop.testing import FakeAnthropicServer, FakeOpenAIServer

pytestmark = pytest.mark.anyio

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\n%%EOF\n"
B64_PNG = base64.b64encode(PNG).decode()
QUESTION = UserMessage.of(
    [
        "Compare",
        ImageContent(PNG),
        ImageContent(url="https://example.com/cat.jpg"),
        DocumentContent(PDF, name="r.pdf"),
    ]
)


@tool
def screenshot() -> list[Any]:
    """Takes a screenshot."""
    return ["The screen:", ImageContent(PNG)]


SHOT = ToolExecutionRequest("call_1", "screenshot", "{}")


async def test_openai_chat_sends_image_url_and_file_parts() -> None:
    async with (
        FakeOpenAIServer(["Two pictures."]) as server,
        OpenAIChatModel("gpt-4o", base_url=server.base_url, api_key="k") as model,
    ):
        await model.chat(ChatRequest([QUESTION]))
    content = server.requests[0].json["messages"][0]["content"]
    assert content == [
        {"type": "text", "text": "Compare"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64_PNG}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        {
            "type": "file",
            "file": {
                "filename": "r.pdf",
                "file_data": f"data:application/pdf;base64,{base64.b64encode(PDF).decode()}",
            },
        },
    ]


def test_openai_chat_refuses_a_document_url_before_sending() -> None:
    model = OpenAIChatModel("gpt-4o", base_url="http://127.0.0.1:9/v1", api_key="k")
    request = ChatRequest([UserMessage("Read", [DocumentContent(url="https://example.com/a.pdf")])])
    with pytest.raises(IllegalConfigurationError, match=r"takes a document as its bytes, not a URL"):
        model.build_body(request, stream=False)


@pytest.mark.parametrize("streaming", [True, False])
async def test_openai_chat_gets_a_tools_picture_in_a_user_turn_after_the_results(streaming: bool) -> None:
    other = ToolExecutionRequest("call_2", "screenshot", "{}")
    async with FakeOpenAIServer([AiMessage(None, (SHOT, other)), "A login page."]) as server:
        agent = Agent(OpenAIChatModel("gpt-4o", base_url=server.base_url, api_key="k"), tools=[screenshot])
        if streaming:
            async with agent.stream("What is on screen?") as stream:
                await stream.start()
                result = stream.result
        else:
            result = await agent.chat("What is on screen?")
    assert result.output == "A login page."
    messages = server.requests[1].json["messages"]  # the fake checked them as OpenAI does: accepted
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "user"]
    assert messages[2]["content"] == f"The screen:\n[image 1: image/png, {len(PNG)} bytes]"
    note, first, second = messages[4]["content"]
    assert note["text"] == (
        "The pictures and documents returned by the tool calls above, in order: screenshot (call call_1), "
        "screenshot (call call_2)."
    )
    assert first == second == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64_PNG}"}}


async def test_anthropic_sends_image_and_document_blocks_and_pictures_in_tool_results() -> None:
    async with FakeAnthropicServer(["Two pictures.", AiMessage(None, (SHOT,)), "A login page."]) as server:
        model = AnthropicChatModel("claude-sonnet-4-5", base_url=server.base_url, api_key="k")
        await model.chat(ChatRequest([QUESTION]))
        result = await Agent(model, tools=[screenshot]).chat("What is on screen?")
        await model.aclose()
    assert result.output == "A login page."
    blocks = server.requests[0].json["messages"][0]["content"]
    assert blocks == [
        {"type": "text", "text": "Compare"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64_PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        {
            "type": "document",
            "source": {
                "type": "base64",
                "media_type": "application/pdf",
                "data": base64.b64encode(PDF).decode(),
            },
        },
    ]
    tool_result = server.requests[2].json["messages"][2]["content"][0]
    assert tool_result == {
        "type": "tool_result",
        "tool_use_id": "call_1",
        "content": [
            {"type": "text", "text": f"The screen:\n[image 1: image/png, {len(PNG)} bytes]"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64_PNG}},
        ],
    }


async def test_the_embedded_model_refuses_pictures_before_doing_anything(tmp_path: Any) -> None:
    model = LocalChatModel(model_path=tmp_path / "absent.gguf", progress=False)  # never loaded: refused first
    with pytest.raises(
        BadRequestError,
        match=r"takes text only, and message 0 \(a user message\) holds a document and a picture",
    ):
        await model.chat(ChatRequest([QUESTION]))
    with pytest.raises(BadRequestError, match="nothing was sent"):
        async for _ in model.stream(ChatRequest([UserMessage("Read", [DocumentContent(PDF)])])):
            pass


def test_a_tools_pictures_go_beside_its_text_and_errors_carry_none() -> None:
    from agentloop._values._convert import result_media, result_to_text

    image = ImageContent(PNG)
    assert result_to_text(image) == f"[image 1: image/png, {len(PNG)} bytes]"
    assert result_to_text(["a", image, {"b": 1}, DocumentContent(url="https://x.org/p.pdf")]) == (
        f'a\n[image 1: image/png, {len(PNG)} bytes]\n{{"b":1}}\n[document 2: application/pdf, https://x.org/p.pdf]'
    )
    assert result_media(["a", image]) == (image,) and result_media({"a": 1}) == ()
    message = ToolExecutionResultMessage.from_request(SHOT, "x", contents=[image])
    assert message.has_media and message.contents == (image,)


def test_mcp_image_results_become_image_content() -> None:
    result = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="Here:"),
            types.ImageContent(type="image", data=B64_PNG, mime_type="image/png"),
        ]
    )
    answer = result_of(result, server="s", tool_name="shot")
    assert answer.text == f"Here:\n[image: image/png, {len(PNG)} bytes]"
    assert answer.media == (ImageContent(PNG, media_type="image/png"),)
    from agentloop._values._convert import result_media

    assert result_media(answer) == answer.media


@pytest.mark.parametrize("uri", ["s3://bucket/cat.png", "gs://bucket/cat.png"])
def test_cloud_storage_uris_are_kept_and_refused_by_providers_that_cannot_fetch_them(uri: str) -> None:
    from agentloop.models import OpenAIResponsesModel

    image = ImageContent(url=uri)
    assert (image.url, image.media_type, image.is_web_url) == (uri, "image/png", False)
    assert ImageContent(url="https://x.org/a.png").is_web_url and not ImageContent(PNG).is_web_url
    request = ChatRequest([UserMessage("What is it?", [image])])
    for model in (
        OpenAIChatModel("gpt-4o", base_url="http://127.0.0.1:9/v1", api_key="k"),
        OpenAIResponsesModel("gpt-5", base_url="http://127.0.0.1:9/v1", api_key="k"),
        AnthropicChatModel("claude-sonnet-4-5", base_url="http://127.0.0.1:9", api_key="k"),
    ):
        with pytest.raises(
            IllegalConfigurationError, match=r"cannot fetch '(s3|gs)://bucket/cat.png'.*give data="
        ):
            model.build_body(request, stream=False)
