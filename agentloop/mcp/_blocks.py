"""What a served tool returned, as MCP content blocks.

A tool may return agentloop's `ImageContent` / `DocumentContent` (an image block / an embedded binary
resource), the SDK's content blocks as they are (`AudioContent`, `EmbeddedResource`, `ResourceLink`...), or a
list of these and strings (one block each, in order). Anything else goes as its text, and as structured
content when it is data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mcp_types as types
import pydantic_core

from .. import DocumentContent, ImageContent, Result, ToolExecution

__all__ = ["content_blocks", "structured_content"]

_SDK_BLOCKS = (
    types.TextContent,
    types.ImageContent,
    types.AudioContent,
    types.EmbeddedResource,
    types.ResourceLink,
)


def content_blocks(value: Any) -> list[types.ContentBlock] | None:
    """The blocks for a tool's return value, or None when it is not made of content (send its text)."""
    if isinstance(value, (str, bytes)) or value is None:
        return None
    block = _block(value)
    if block is not None:
        return [block]
    if isinstance(value, Sequence) and value and any(not isinstance(item, str) for item in value):
        blocks = [
            types.TextContent(type="text", text=item) if isinstance(item, str) else _block(item)
            for item in value
        ]
        if all(item is not None for item in blocks):
            return [item for item in blocks if item is not None]
    return None


def _block(value: Any) -> types.ContentBlock | None:
    if isinstance(value, _SDK_BLOCKS):
        return value
    if isinstance(value, ImageContent):
        if value.data is None:  # a picture on the web: point to it
            return types.ResourceLink(
                type="resource_link", uri=str(value.url), name="image", mime_type=value.media_type
            )
        return types.ImageContent(type="image", data=value.base64, mime_type=value.media_type or "image/png")
    if isinstance(value, DocumentContent):
        if value.data is None:
            return types.ResourceLink(
                type="resource_link", uri=str(value.url), name=value.filename, mime_type=value.media_type
            )
        return types.EmbeddedResource(
            type="resource",
            resource=types.BlobResourceContents(
                uri=f"file:///{value.filename}",
                mime_type=value.media_type or "application/pdf",
                blob=value.base64,
            ),
        )
    return None


def structured_content(execution: ToolExecution) -> dict[str, Any] | None:
    """The result as structured content when it is data (a dict, a model, a number...): None for text.

    A value that is not a JSON object goes as `{"result": value}`, as the SDK's own servers send it.
    """
    value = execution.result_object
    if value is None or isinstance(value, (str, Result)):
        return None
    try:
        data = pydantic_core.to_jsonable_python(value)
    except (pydantic_core.PydanticSerializationError, ValueError, TypeError):
        return None
    return data if isinstance(data, dict) else {"result": data}
