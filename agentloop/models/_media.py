"""Pictures and documents on their way to a provider: the checks every provider shares.

Each provider writes content in its own wire format (its module); what is common lives here: refusing them
where a model takes text only, and the note that replaces a picture a tool returned when the provider can
take pictures only in a user turn.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentloop._values._content import DocumentContent, ImageContent
from agentloop._values._errors import BadRequestError, IllegalConfigurationError
from agentloop._values._messages import ChatMessage, ToolExecutionResultMessage, UserMessage

__all__ = ["media_of_results_note", "refuse_media", "web_url"]


def web_url(part: ImageContent | DocumentContent, provider: str) -> str:
    """The http(s) URL of `part`; a cloud storage URI (`s3://`, `gs://`) is refused before anything is sent,
    since only Bedrock and Gemini read those."""
    if not part.is_web_url:
        raise IllegalConfigurationError(
            f"{provider} cannot fetch {part.url!r}: it takes pictures and documents as bytes or http(s) URLs "
            "(s3:// URIs are Bedrock's, gs:// Gemini's); give data= or an http(s) URL"
        )
    assert part.url is not None
    return part.url


def refuse_media(messages: Sequence[ChatMessage], *, provider: str, model: str) -> None:
    """Raises `BadRequestError` (before anything is sent) when a user message holds a picture or document:
    `model` takes text only. Pictures a tool returned are not refused: the result's text names them."""
    for n, message in enumerate(messages):
        if isinstance(message, UserMessage) and message.has_media:
            kinds = sorted(
                {
                    "a picture" if isinstance(p, ImageContent) else "a document"
                    for p in message.contents
                    if isinstance(p, (ImageContent, DocumentContent))
                }
            )
            raise BadRequestError(
                f"{provider}: {model} takes text only, and message {n} (a user message) holds "
                f"{' and '.join(kinds)}; nothing was sent. Use a model that reads images and documents "
                "(OpenAIChatModel with a vision model, OpenAIResponsesModel, AnthropicChatModel), or send "
                "text only",
                provider=provider,
            )


def media_of_results_note(results: Sequence[ToolExecutionResultMessage]) -> str:
    """The text before the pictures of tool results sent in a user turn (for providers whose tool results
    take text only): which call each picture came from, in order."""
    names = ", ".join(f"{r.tool_name} (call {r.id})" if r.id else r.tool_name for r in results)
    return f"The pictures and documents returned by the tool calls above, in order: {names}."
