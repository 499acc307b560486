"""A conversation sent by a browser, as agentloop messages, and a way to run an agent over it.

What a page sends is untrusted: system messages are dropped (the server owns the instructions), only text
and finished tool calls are kept (a call without its result would make the history invalid for every
provider), and nothing in it decides what runs: paused runs are answered from the server's own records.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Sequence
from typing import Any

from .. import (
    Agent,
    AiMessage,
    ChatMessage,
    TokenStream,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)

__all__ = ["History", "stream_with_history"]


class History:
    """A `ChatMemory` holding one request's conversation: what the page sent, then what this invocation
    adds (dropped with the request). It records no paused rounds: those live in `PausedRuns`."""

    def __init__(self, messages: Sequence[ChatMessage]) -> None:
        self._messages = list(messages)

    @property
    def id(self) -> Any:
        return None

    async def messages(self) -> list[ChatMessage]:
        return list(self._messages)

    async def add(self, messages: Sequence[ChatMessage]) -> None:
        self._messages.extend(messages)

    async def clear(self) -> None:
        self._messages.clear()


def _over(agent: Agent[Any], history: Sequence[ChatMessage]) -> Agent[Any]:
    """The agent, over `history` instead of a memory (a shallow copy: same model, tools and settings)."""
    if not history:
        return agent
    clone = copy.copy(agent)
    clone.memory = History(history)
    return clone


def stream_with_history(
    agent: Agent[Any],
    question: UserMessage,
    history: Sequence[ChatMessage],
    *,
    memory_id: Any,
    context: Any = None,
) -> TokenStream[Any]:
    """`agent.stream(question)`: over the page's `history` when the agent has no memory of its own, else over
    its memory under `memory_id` (the page's history is then ignored: the server has the conversation)."""
    if agent.memory is not None:
        return agent.stream(question, memory_id=memory_id, context=context)
    return _over(agent, history).stream(question, context=context)


def resume_with_history(
    agent: Agent[Any],
    pending: bytes | str,
    decisions: Any,
    history: Sequence[ChatMessage],
    *,
    context: Any = None,
) -> TokenStream[Any]:
    """`agent.resume_stream(...)`, over the conversation before the paused turn (agents without memory)."""
    target = agent if agent.memory is not None else _over(agent, history)
    return target.resume_stream(pending, decisions, context=context)


_SAFE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def call_id(value: str) -> str:
    """A tool call id from a page, as providers accept it (letters, digits, `_`, `-`; at most 64): kept when
    it is one (agentloop's own ids are), else replaced by a digest of it, the same for the call and its
    result."""
    if _SAFE_ID.fullmatch(value):
        return value
    return "call_" + hashlib.sha256(value.encode()).hexdigest()[:24]


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
