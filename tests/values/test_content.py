"""Pictures and documents in messages: the content types, their validation, and how the codec and every
memory store keep them (once, in the round that added them)."""

from __future__ import annotations

import base64
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentloop import (
    Agent,
    AiMessage,
    ChatRequest,
    DocumentContent,
    ImageContent,
    MessageWindowChatMemory,
    TextContent,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from agentloop._values._codec import CodecError, decode, decode_messages, encode, encode_messages
from agentloop.testing import FunctionChatModel
from tests.features.memory.test_stores import make_store  # noqa: F401 (fixture)
from tests.store_servers import free_port, redis_server, redis_url  # noqa: F401 (fixtures)

# ruff: noqa: F811 (the fixtures above are arguments of the tests below)

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 64
WEBP = b"RIFF\x24\x00\x00\x00WEBPVP8 " + b"\x00" * 32
PDF = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"


def test_image_format_is_read_from_the_bytes() -> None:
    assert ImageContent(PNG).media_type == "image/png"
    assert ImageContent(JPEG).media_type == "image/jpeg"
    assert ImageContent(WEBP).media_type == "image/webp"
    assert ImageContent(b"GIF89a...").media_type == "image/gif"
    assert ImageContent(PNG, media_type="IMAGE/PNG").media_type == "image/png"


def test_bad_images_are_refused_with_what_to_do() -> None:
    with pytest.raises(ValueError, match="cannot tell the format of these bytes; give media_type="):
        ImageContent(b"hello")
    with pytest.raises(ValueError, match=r"exactly one of data= .* or url="):
        ImageContent()
    with pytest.raises(ValueError, match="exactly one of data="):
        ImageContent(PNG, url="https://example.com/cat.png")
    with pytest.raises(
        ValueError, match=r"url must be an http\(s\) URL, a data: URL, or a cloud storage URI"
    ):
        ImageContent(url="file:///etc/passwd")
    with pytest.raises(ValueError, match="media_type 'image/tiff' is not one of image/png"):
        ImageContent(PNG, media_type="image/tiff")
    with pytest.raises(ValueError, match="not valid base64"):
        ImageContent(url="data:image/png;base64,@@@")


@pytest.mark.parametrize(
    "make",
    [
        lambda: ImageContent(b""),
        lambda: ImageContent(b"", media_type="image/png"),
        lambda: ImageContent(url="data:image/png;base64,"),
        lambda: DocumentContent(b""),
        lambda: DocumentContent(bytearray(), media_type="application/pdf"),
        lambda: DocumentContent(url="data:application/pdf;base64,"),
    ],
)
def test_empty_pictures_and_documents_are_refused_before_anything_is_sent(make: Any) -> None:
    """Every provider answers 400 to an empty file: refused where it is made, saying what to do."""
    with pytest.raises(ValueError, match=r"data is empty \(0 bytes\); give the file's bytes"):
        make()
    stored = encode_messages([UserMessage("look", [ImageContent(PNG)])]).replace(base64.b64encode(PNG), b"")
    with pytest.raises(CodecError, match="data is empty"):  # nor read back from a store
        decode_messages(stored)


def test_a_data_url_is_kept_as_bytes(tmp_path: Path) -> None:
    image = ImageContent(url="data:image/png;base64," + base64.b64encode(PNG).decode())
    assert (image.data, image.url, image.media_type) == (PNG, None, "image/png")
    assert image.data_url.startswith("data:image/png;base64,iVBORw0KGgo")


def test_an_image_url_is_kept_and_its_type_guessed_from_the_path() -> None:
    image = ImageContent(url="https://example.com/a/cat.jpg?size=2")
    assert (image.data, image.media_type, image.data_url) == (None, "image/jpeg", image.url)
    assert ImageContent(url="https://example.com/render").media_type is None
    with pytest.raises(ValueError, match="no bytes to encode"):
        _ = ImageContent(url="https://example.com/cat.png").base64


def test_from_path_reads_the_file(tmp_path: Path) -> None:
    (tmp_path / "cat.png").write_bytes(PNG)
    (tmp_path / "report.pdf").write_bytes(PDF)
    (tmp_path / "notes.txt").write_bytes(b"hello")
    assert ImageContent.from_path(tmp_path / "cat.png") == ImageContent(PNG, media_type="image/png")
    document = DocumentContent.from_path(tmp_path / "report.pdf")
    assert (document.data, document.media_type, document.filename) == (PDF, "application/pdf", "report.pdf")
    with pytest.raises(ValueError, match=r"notes\.txt' is not a file of a format agentloop sends"):
        ImageContent.from_path(tmp_path / "notes.txt")


def test_documents_are_pdf_and_have_a_name() -> None:
    assert DocumentContent(PDF).filename == "document.pdf"
    assert DocumentContent(url="https://example.com/papers/attention.pdf").filename == "attention.pdf"
    assert DocumentContent(PDF, name="q3.pdf").filename == "q3.pdf"
    with pytest.raises(ValueError, match="media_type 'text/html' is not one of application/pdf"):
        DocumentContent(b"<html>", media_type="text/html")


def test_base64_is_computed_once_per_image() -> None:
    image = ImageContent(PNG)
    first = image.base64
    assert base64.b64decode(first) == PNG
    assert image.base64 is first  # later rounds reuse the same string
    assert image == ImageContent(PNG) and hash(image) == hash(ImageContent(PNG))


def test_repr_does_not_print_the_bytes() -> None:
    assert repr(ImageContent(PNG)) == f"ImageContent({len(PNG)} bytes, media_type='image/png')"
    assert "attention" in repr(DocumentContent(url="https://example.com/attention.pdf"))


def test_user_message_holds_text_and_parts_in_order() -> None:
    image = ImageContent(PNG)
    message = UserMessage.of(["Compare", image, "with", ImageContent(JPEG)])
    assert message.text == "Compare\nwith"
    assert [type(part).__name__ for part in message.contents] == [
        "TextContent",
        "ImageContent",
        "TextContent",
        "ImageContent",
    ]
    assert message.has_media
    caption = UserMessage("What is on this picture?", [image])
    assert caption.contents == (TextContent("What is on this picture?"), image)
    assert UserMessage.of("hi") == UserMessage("hi") and not UserMessage("hi").has_media
    assert UserMessage.of(image).contents == (image,) and UserMessage.of(image).text == ""
    with pytest.raises(ValueError, match="text= differs from the text parts of contents="):
        UserMessage("one", ["two", image])
    with pytest.raises(
        TypeError, match="parts are strings, TextContent, ImageContent or DocumentContent, not int"
    ):
        UserMessage.of(["x", 3])  # type: ignore[list-item]


def conversation() -> list[Any]:
    image = ImageContent(PNG)
    return [
        UserMessage.of(["What is on this picture?", image, DocumentContent(PDF, name="a.pdf")]),
        AiMessage(
            None,
            [ToolExecutionRequest("c1", "screenshot", "{}")],
            provider_state={"openai-responses": {"items": [{"type": "reasoning", "id": "rs_1"}]}},
        ),
        ToolExecutionResultMessage("c1", "screenshot", "[image 1]", contents=[ImageContent(JPEG)]),
        AiMessage("A cat.", provider_state={"gemini": {"signature": "c2ln"}}),
    ]


def test_the_codec_round_trips_content_and_provider_state() -> None:
    messages = conversation()
    assert decode_messages(encode_messages(messages)) == messages
    assert decode(encode(messages)) == messages
    encoded = encode_messages(messages)
    assert encoded.count(base64.b64encode(PNG)) == 1  # the bytes once, as base64, no data URL
    # Rows written before content existed read back unchanged, and text-only messages encode as before.
    assert decode_messages(b'[{"type":"user","text":"hi"},{"type":"ai","text":"yo"}]') == [
        UserMessage("hi"),
        AiMessage("yo"),
    ]
    assert encode_messages([UserMessage("hi"), AiMessage("yo")]) == (
        b'[{"type":"user","text":"hi"},{"type":"ai","text":"yo"}]'
    )


@pytest.mark.parametrize("make_store", ["memory", "sqlite", "redis"], indirect=True)
async def test_stores_keep_images_once_in_the_round_that_added_them(make_store: Any, tmp_path: Path) -> None:
    store = make_store()
    first = conversation()
    version = await store.append("m", first, expected_version=0)
    for turn in range(3):
        version = await store.append(
            "m", [UserMessage(f"q{turn}"), AiMessage(f"a{turn}")], expected_version=version
        )
    loaded = await store.load("m")
    assert loaded.messages[: len(first)] == first
    assert loaded.messages[len(first)].text == "q0"
    reopened = make_store()  # another process on the same data reads the pictures back exactly
    assert (await reopened.load("m")).messages == loaded.messages
    if (tmp_path / "chat.db").exists():
        rows = sqlite3.connect(tmp_path / "chat.db").execute("SELECT body FROM agentloop_round").fetchall()
        assert len(rows) == 4
        assert sum(body.count(base64.b64encode(PNG)) for (body,) in rows) == 1


async def test_agent_chat_takes_a_list_and_memory_keeps_it() -> None:
    seen: list[ChatRequest] = []

    def answer(messages: list[Any], tools: list[Any], request: ChatRequest) -> str:
        seen.append(request)
        return f"seen {len(messages)}"

    agent = Agent(FunctionChatModel(answer), memory=MessageWindowChatMemory.provider(max_messages=10))
    image = ImageContent(PNG)
    result = await agent.chat(["What is on this picture?", image], memory_id="u")
    assert result.output == "seen 1"
    asked = seen[0].messages[-1]
    assert isinstance(asked, UserMessage)
    assert asked.contents == (TextContent("What is on this picture?"), image)
    await agent.chat("And now?", memory_id="u")
    again = seen[1].messages[0]
    assert isinstance(again, UserMessage) and again.contents[1] is image  # the same object, not a copy
