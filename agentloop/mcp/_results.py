"""From an MCP `CallToolResult` to what agentloop records: the model's text and the result object."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from .. import MCPToolError
from .._values._content import IMAGE_MEDIA_TYPES, ImageContent
from .._values._convert import result_to_text

__all__ = ["MCPToolError", "MCPToolResult", "content_text", "result_of"]


@dataclass(frozen=True, slots=True)
class MCPToolResult:
    """What an MCP tool answered; the `result_object` of its `ToolExecution`.

    `structured` is the tool's structured content, with the SDK's `{"result": x}` wrapper of a plain value
    removed (None when the tool sent none). `text` is what the model reads. `content` holds the raw
    content blocks (text, images, resources...) as the server sent them.
    """

    text: str
    structured: Any = None
    content: Sequence[types.ContentBlock] = field(default=(), repr=False)

    @property
    def media(self) -> tuple[ImageContent, ...]:
        """The result's image blocks as `ImageContent`: they go to the model beside `text`, as pictures."""
        return tuple(
            ImageContent(base64.b64decode(block.data), media_type=block.mime_type)
            for block in self.content
            if isinstance(block, types.ImageContent) and block.mime_type in IMAGE_MEDIA_TYPES
        )


def content_text(blocks: Sequence[object]) -> str:
    """The text of a result's content blocks, joined with newlines; other kinds become placeholders.

    Images and audio: `[image: image/png, 1234 bytes]` (the images themselves go to the model too: see
    `MCPToolResult.media`); a resource link: `[resource: uri]`; an embedded
    text resource: its text; an embedded binary resource: `[resource: uri, mime type, n bytes]`.
    """
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, (types.ImageContent, types.AudioContent)):
            kind = "image" if isinstance(block, types.ImageContent) else "audio"
            parts.append(f"[{kind}: {block.mime_type}, {_decoded_size(block.data)} bytes]")
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource: {block.uri}]")
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, types.TextResourceContents):
                parts.append(resource.text)
            else:
                mime = resource.mime_type or "application/octet-stream"
                parts.append(f"[resource: {resource.uri}, {mime}, {_decoded_size(resource.blob)} bytes]")
        else:  # a content kind newer than this code
            parts.append(f"[{getattr(block, 'type', 'content')}]")
    return "\n".join(parts)


def _decoded_size(data: str) -> int:
    """Bytes that `data` (base64) decodes to, without decoding it."""
    padding = len(data) - len(data.rstrip("="))
    return max(0, len(data) * 3 // 4 - padding)


def result_of(result: types.CallToolResult, *, server: str, tool_name: str) -> MCPToolResult:
    """The `MCPToolResult` of a successful call; raises `MCPToolError` for an `isError` one."""
    text = content_text(result.content)
    if result.is_error:
        raise MCPToolError(
            text or f"The MCP tool {tool_name!r} failed without a message",
            server=server,
            tool_name=tool_name,
        )
    structured: Any = result.structured_content
    if isinstance(structured, dict) and len(structured) == 1 and "result" in structured:
        structured = structured["result"]
    if not result.content and result.structured_content is not None:
        text = result_to_text(structured)
    return MCPToolResult(text=text, structured=structured, content=tuple(result.content))
