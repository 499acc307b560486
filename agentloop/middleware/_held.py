"""What a streamed `OutputGuardrail` holds back: the answer's text, released only once checked.

`HeldStream` wraps the model of one model call. Its `stream()` passes every event through except answer
text, which it keeps until the text so far has passed the guardrail's check: at the end of the answer
(`hold="answer"`), at each sentence end (`"sentence"`), or every N characters (an int). A check that trips
raises `GuardrailTripped` before the held text is yielded, so a consumer (a `TokenStream`, a web page) never
receives text the guardrail blocks. Text of a response that asks for tools is not an answer: it is released
unchecked at the end of that response, as `chat()` stores it unchecked.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from .._values._messages import ChatRequest, ChatResponse
from ..models import ModelEvent, ResponseComplete, TextDelta

__all__ = ["HeldStream", "Hold"]

Hold = Any  # "answer", "sentence", an int (characters), or None
_SENTENCE_END = re.compile(r"[.!?…。！？](?=\s)|\n")


class HeldStream:
    """The model of one call, with its streamed answer text held until `check(text_so_far)` passed."""

    def __init__(self, model: Any, hold: Hold, check: Callable[[str], Awaitable[None]]) -> None:
        self._model = model
        self._hold = hold
        self._check = check
        self.checked: str | None = None  # the whole answer text checked at the end of a stream

    def __getattr__(self, name: str) -> Any:  # everything else is the wrapped model's (name, provider...)
        return getattr(self._model, name)

    async def chat(self, request: ChatRequest) -> ChatResponse:
        """Not streamed: the guardrail checks the whole response afterwards."""
        response: ChatResponse = await self._model.chat(request)
        return response

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        """The wrapped stream, its text released only as far as it was checked."""
        held: list[str] = []  # pieces not yet released
        text: list[str] = []  # all the answer text so far
        released = 0  # characters of `text` already released
        async for event in self._model.stream(request):
            if type(event) is TextDelta:
                held.append(event.text)
                text.append(event.text)
                boundary = self._boundary("".join(text), released)
                if boundary is not None:
                    await self._check("".join(text)[:boundary])
                    released_now, held = _split(held, boundary - released)
                    for piece in released_now:  # the pieces as the model sent them (the last one cut)
                        yield TextDelta(piece)
                    released = boundary
                continue
            if isinstance(event, ResponseComplete):
                answer = event.response.ai_message
                if not answer.tool_execution_requests:
                    await self._check("".join(text))
                    self.checked = answer.text
                for piece in held:
                    yield TextDelta(piece)
                held = []
            yield event

    def _boundary(self, text: str, released: int) -> int | None:
        """Where the text may be released up to (after a check), or None to keep holding."""
        hold = self._hold
        if hold == "sentence":
            last = None
            for match in _SENTENCE_END.finditer(text, released):
                last = match.end()
            return last
        if isinstance(hold, int) and len(text) - released >= hold:
            return len(text)
        return None


def _split(pieces: list[str], count: int) -> tuple[list[str], list[str]]:
    """`pieces` cut after `count` characters: (the pieces before, the pieces after), a piece cut in two
    when the cut falls inside it."""
    before: list[str] = []
    for n, piece in enumerate(pieces):
        if count <= 0:
            return before, pieces[n:]
        if len(piece) <= count:
            before.append(piece)
            count -= len(piece)
            continue
        return [*before, piece[:count]], [piece[count:], *pieces[n + 1 :]]
    return before, []
