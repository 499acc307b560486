"""A conversation sent by a browser, as agentloop messages, and how the apps start or resume an agent with it.

What a page sends is untrusted: system messages are dropped (the server owns the instructions), only text,
attachments and finished tool calls are kept (a call without its result would make the history invalid for
every provider), and nothing in it decides what runs: paused runs are answered from the server's own records.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

from .. import (
    Agent,
    AiMessage,
    ChatMessage,
    DocumentContent,
    IllegalConfigurationError,
    ImageContent,
    TokenStream,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from .._api._control import IF_BUSY
from ._asgi import HTTPError

__all__ = ["resume_stream", "stream_with_history"]


def stream_with_history(
    agent: Agent[Any],
    question: UserMessage,
    history: Sequence[ChatMessage],
    *,
    memory_id: Any,
    context: Any = None,
    if_busy: Any = "wait",
) -> TokenStream[Any]:
    """`agent.stream(question)`: with the page's `history` as `message_history` when the agent has no memory
    of its own, else over its memory under `memory_id` (the page's history is then ignored: the server has
    the conversation). A history that breaks the providers' rules is a 400 `HTTPError` naming the message."""
    if agent.memory is not None:
        return agent.stream(question, memory_id=memory_id, context=context, if_busy=if_busy)
    try:
        return agent.stream(question, message_history=list(history), context=context)
    except IllegalConfigurationError as error:
        raise HTTPError(400, "BadRequest", f"The conversation cannot go to the model: {error}") from None


def check_if_busy(app: str, if_busy: Any) -> Any:
    """An app's `if_busy=` option, checked when the app is built."""
    if if_busy not in IF_BUSY:
        raise IllegalConfigurationError(
            f"{app}(if_busy={if_busy!r}): choose 'wait', 'steer', 'interrupt' or 'reject' (what a request "
            "does while an invocation runs on its memory id; see docs/web.md)"
        )
    return if_busy


async def refuse_if_busy(agent: Agent[Any], memory_id: Any, if_busy: Any) -> None:
    """`if_busy="reject"`: a 409 before anything streams when an invocation runs on `memory_id` (in this
    process or any other sharing the agent's run control)."""
    if (
        if_busy == "reject"
        and memory_id is not None
        and agent.memory is not None
        and await agent.control.busy(memory_id)
    ):
        raise HTTPError(
            409,
            "MemoryBusy",
            f"An answer for conversation {memory_id!r} is still being written; try again once it finished",
        )


def resume_stream(
    agent: Agent[Any], pending: bytes | str, decisions: Any, *, context: Any = None
) -> TokenStream[Any]:
    """`agent.resume_stream(...)`: the conversation comes from the server's paused state (which carries the
    `message_history` the run started with) or the agent's memory, never from the page's answer."""
    return agent.resume_stream(pending, decisions, context=context)


_SAFE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def call_id(value: str) -> str:
    """A tool call id from a page, as providers accept it (letters, digits, `_`, `-`; at most 64): kept when
    it is one (agentloop's own ids are), else replaced by a digest of it, the same for the call and its
    result."""
    if _SAFE_ID.fullmatch(value):
        return value
    return "call_" + hashlib.sha256(value.encode()).hexdigest()[:24]


def media(
    url: str, media_type: str | None, name: str | None = None, *, part: str | None = None
) -> ImageContent | DocumentContent:
    """A picture or a PDF a page attached (a `data:` URL or a web address the provider fetches), by its media
    type or, without one, by the kind of `part` ("image", "document"); ValueError naming what is wrong for
    anything else."""
    kind = (media_type or "").lower()
    if kind.startswith("image/") or (not kind and part == "image"):
        return ImageContent(url=url, media_type=kind or None)
    if kind == "application/pdf" or (not kind and part == "document"):
        return DocumentContent(url=url, media_type=kind or None, name=name)
    raise ValueError(
        f"an attachment of type {media_type!r} cannot go to the model: attach pictures (PNG, JPEG, GIF, "
        "WebP) or PDF documents"
    )


def user_message(parts: Sequence[str | ImageContent | DocumentContent]) -> UserMessage | None:
    """The user's text and attachments, in order, as one message (None when there is nothing)."""
    if not any(isinstance(p, (ImageContent, DocumentContent)) for p in parts):
        text = "".join(p for p in parts if isinstance(p, str))
        return UserMessage(text) if text else None
    return UserMessage.of(list(parts))


def tool_result_text(value: Any) -> str:
    """A tool output a page sent back, as the text the model reads."""
    if isinstance(value, str):
        return value
    import msgspec

    try:
        return msgspec.json.encode(value).decode()
    except TypeError:
        return str(value)


def assistant_turn(
    steps: Sequence[tuple[str, list[tuple[ToolExecutionRequest, str, bool]]]],
) -> list[ChatMessage]:
    """An assistant message of a page as agentloop messages: per step, its text and finished calls, then
    the calls' results."""
    out: list[ChatMessage] = []
    for text, calls in steps:
        if not text and not calls:
            continue
        out.append(AiMessage(text or None, [request for request, _, _ in calls]))
        out += [ToolExecutionResultMessage(r.id, r.name, result, is_error) for r, result, is_error in calls]
    return out
