"""`ClearToolResults`: older tool results are replaced by a short placeholder in what is sent to the model;
memory keeps them whole."""

from __future__ import annotations

import math

import msgspec

from .._runtime._seam import Middleware, ModelCall, NextModelCall
from .._values._messages import ChatMessage, ChatResponse, ToolExecutionResultMessage
from ._checks import check_count

__all__ = ["ClearToolResults"]

_CHARS_PER_TOKEN = 4


class ClearToolResults(Middleware):
    """Sends only the newest `keep_last` tool results whole; each older one of at least `min_tokens` tokens
    (about four characters a token) is sent as a placeholder naming the tool and saying it was cleared, so
    the model calls the tool again if it needs the result. The call and the result message stay (a tool call
    is never left without its result), and memory keeps every result as it was.

    Like Anthropic's context editing: clearing changes the request from the first cleared result on, so the
    provider's prompt cache is rebuilt from there; a larger `min_tokens` clears less often.
    """

    allows_eager_tools = True  # it only shortens the request; the response passes as it is

    def __init__(self, keep_last: int = 3, *, min_tokens: int = 100) -> None:
        self.keep_last = check_count("ClearToolResults", "keep_last", keep_last, 0)
        self.min_tokens = check_count("ClearToolResults", "min_tokens", min_tokens, 0)

    def __repr__(self) -> str:
        return f"ClearToolResults(keep_last={self.keep_last}, min_tokens={self.min_tokens})"

    async def wrap_model_call(self, call: ModelCall, call_next: NextModelCall) -> ChatResponse:
        messages = call.request.messages
        results = [i for i, m in enumerate(messages) if isinstance(m, ToolExecutionResultMessage)]
        older = results[: max(len(results) - self.keep_last, 0)]
        cleared: dict[int, ChatMessage] = {}
        for index in older:
            result = messages[index]
            assert isinstance(result, ToolExecutionResultMessage)
            if _tokens(result) >= self.min_tokens:
                cleared[index] = msgspec.structs.replace(result, text=placeholder(result), contents=())
        if not cleared:
            return await call_next(call)
        sent = [cleared.get(i, m) for i, m in enumerate(messages)]
        return await call_next(call.replace(request=msgspec.structs.replace(call.request, messages=sent)))


def placeholder(result: ToolExecutionResultMessage) -> str:
    """What the model sees instead of a cleared result."""
    return (
        f"[The result of this {result.tool_name} call ({_tokens(result)} tokens) was cleared to save "
        "context; call the tool again if you need it.]"
    )


def _tokens(result: ToolExecutionResultMessage) -> int:
    chars = len(result.text) + sum(len(getattr(c, "text", "") or "") for c in result.contents)
    media = sum(1 for c in result.contents if not hasattr(c, "text"))
    return math.ceil(chars / _CHARS_PER_TOKEN) + 800 * media
