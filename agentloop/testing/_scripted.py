"""`ScriptedChatModel`: replays scripted answers in order, streamed the way a real provider streams them.

The replay machinery here (cutting text into tokens, emitting tool-call pieces, estimating usage) is shared
by every offline model of `agentloop.testing`, so they all stream exactly alike.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Union

import anyio
import anyio.lowlevel
import msgspec

from agentloop._values._errors import AgentLoopError
from agentloop._values._messages import (
    AiMessage,
    ChatRequest,
    ChatResponse,
    FinishReason,
    TokenUsage,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
)
from agentloop.models._base import (
    ModelEvent,
    ResponseComplete,
    TextDelta,
    ThinkingDelta,
    ToolCallComplete,
    ToolCallDelta,
)

__all__ = ["Answer", "ScriptedChatModel", "ScriptedResponse", "Tokenizer", "split_tokens"]

Tokenizer = Callable[[str], Iterable[str]]
"""Cuts a text into the pieces a stream delivers; the pieces must join back to the text exactly."""

Answer = Union[AiMessage, str, ChatResponse]
"""What an offline model answers: a message, plain text (an `AiMessage` with that text), or a response."""

ScriptedResponse = Union[
    AiMessage,
    str,
    ChatResponse,
    BaseException,
    Callable[[ChatRequest], Union[Answer, Awaitable[Answer]]],
]
"""One entry of a script: an answer, an exception to raise for that request, or a function of the request."""

# Words and runs of punctuation, each with the whitespace before it: close to how real tokenizers cut text,
# and every character belongs to exactly one piece.
_TOKEN = re.compile(r"\s*\w+|\s*[^\w\s]+|\s+")


def split_tokens(text: str) -> list[str]:
    """Cuts `text` into word and punctuation pieces, each keeping the whitespace before it.

    `"".join(split_tokens(text)) == text` always holds.
    """
    return _TOKEN.findall(text)


def _fixed_size(size: int) -> Tokenizer:
    def cut(text: str) -> list[str]:
        return [text[i : i + size] for i in range(0, len(text), size)]

    return cut


def make_tokenizer(chunk_size: int | None, tokenizer: Tokenizer | None, owner: str) -> Tokenizer:
    """The tokenizer an offline model was configured with (`chunk_size` and `tokenizer` are exclusive)."""
    if chunk_size is not None and tokenizer is not None:
        raise ValueError(f"{owner}: give chunk_size or tokenizer, not both")
    if chunk_size is not None:
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"{owner}: chunk_size must be a positive int, got {chunk_size!r}")
        return _fixed_size(chunk_size)
    return tokenizer if tokenizer is not None else split_tokens


def _count_tokens(text: str | None) -> int:
    return len(_TOKEN.findall(text)) if text else 0


def estimate_usage(request: ChatRequest, message: AiMessage) -> TokenUsage:
    """A plausible usage: one token per word or punctuation run of what was sent and what was answered."""
    sent = 0
    for m in request.messages:
        sent += _count_tokens(m.text) + (
            _count_tokens(m.tool_name) if type(m) is ToolExecutionResultMessage else 0
        )
        if type(m) is AiMessage:
            for call in m.tool_execution_requests:
                sent += _count_tokens(call.name) + _count_tokens(call.arguments)
    for spec in request.tool_specifications:
        sent += _count_tokens(spec.name) + _count_tokens(spec.description)
        sent += _count_tokens(msgspec.json.encode(spec.parameters).decode())
    answered = _count_tokens(message.text) + _count_tokens(message.thinking)
    for call in message.tool_execution_requests:
        answered += _count_tokens(call.name) + _count_tokens(call.arguments)
    return TokenUsage(sent, answered)


class CallIds:
    """Hands out fresh tool-call ids `call_1`, `call_2`, ... (one sequence per model, over its responses)."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last = 0

    def fill(self, message: AiMessage) -> AiMessage:
        """`message` with every tool call that has no id given a fresh one."""
        if all(call.id is not None for call in message.tool_execution_requests):
            return message
        calls = []
        for call in message.tool_execution_requests:
            if call.id is None:
                self._last += 1
                call = ToolExecutionRequest(f"call_{self._last}", call.name, call.arguments)
            calls.append(call)
        return msgspec.structs.replace(message, tool_execution_requests=tuple(calls))


def to_response(
    answer: object,
    request: ChatRequest,
    *,
    ids: CallIds,
    token_usage: TokenUsage | None,
    model_name: str,
    what: str,
) -> ChatResponse:
    """The `ChatResponse` for one answer. A `ChatResponse` is taken exactly as given; messages are completed
    with fresh call ids, a finish reason and a usage (the configured one, else an estimate)."""
    if type(answer) is ChatResponse:
        return answer
    if isinstance(answer, str):
        message = AiMessage(text=answer)
    elif type(answer) is AiMessage:
        message = ids.fill(answer)
    else:
        raise TypeError(f"{what} must be an AiMessage, a str or a ChatResponse, got {type(answer).__name__}")
    finish = FinishReason.TOOL_EXECUTION if message.tool_execution_requests else FinishReason.STOP
    usage = token_usage if token_usage is not None else estimate_usage(request, message)
    return ChatResponse(message, usage, finish, model_name)


async def resolve(value: object) -> object:
    """Awaits `value` when a user function returned an awaitable (async functions), else returns it."""
    if inspect.isawaitable(value):
        return await value
    return value


@dataclass(frozen=True, slots=True)
class Replay:
    """How an offline model plays a response back: the pieces its text is cut into, the pause per event."""

    tokenizer: Tokenizer
    delay: float = 0.0

    def pieces(self, text: str) -> list[str]:
        """`text` cut into stream pieces, checked to join back to `text` exactly."""
        parts = [part for part in self.tokenizer(text) if part]
        if "".join(parts) != text:
            raise AgentLoopError(
                f"the tokenizer {self.tokenizer!r} lost characters: its pieces do not join back"
            )
        return parts

    def events(self, response: ChatResponse) -> Iterator[ModelEvent]:
        """The events a provider would stream for `response`: thinking, text, each tool call's pieces followed
        by its `ToolCallComplete`, and finally `ResponseComplete`."""
        message = response.ai_message
        if message.thinking:
            for part in self.pieces(message.thinking):
                yield ThinkingDelta(part)
        if message.text:
            for part in self.pieces(message.text):
                yield TextDelta(part)
        for index, call in enumerate(message.tool_execution_requests):
            # Like OpenAI and Anthropic: the first piece names the call, the arguments follow in slices.
            yield ToolCallDelta(index, call.id, call.name, "")
            for part in self.pieces(call.arguments):
                yield ToolCallDelta(index, None, None, part)
            yield ToolCallComplete(index, call)
        yield ResponseComplete(response)

    async def pause(self) -> None:
        """Waits the configured delay (or just lets other tasks run, and cancellation in)."""
        if self.delay > 0:
            await anyio.sleep(self.delay)
        else:
            await anyio.lowlevel.checkpoint()


def check_delay(delay: float, owner: str) -> float:
    """`delay` validated: a number of seconds >= 0."""
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0:
        raise ValueError(f"{owner}: delay must be a number of seconds >= 0, got {delay!r}")
    return float(delay)


class ScriptedChatModel:
    """A chat model that answers each request with the next scripted response, offline and deterministic.

    Each entry is an `AiMessage`, a `str` (answered as `AiMessage(text=...)`), a `ChatResponse` (replayed
    exactly, usage and finish reason included), an exception (raised for that request), or a function
    `(ChatRequest) -> answer` (sync or async) for answers that depend on the request. Tool calls without an
    id get fresh ids `call_1`, `call_2`, ... Every request is kept in `.requests`.

    `stream()` cuts text and thinking into word-sized pieces (or `chunk_size` characters, or whatever
    `tokenizer` returns) and tool-call arguments likewise, exactly as providers stream them; `delay` seconds
    pass before each event, to stand in for a slow model.
    """

    supports_response_format = True
    """It takes `ChatRequest.response_format` (structured output in native mode): the answer is the JSON."""

    def __init__(
        self,
        responses: Sequence[ScriptedResponse],
        *,
        token_usage: TokenUsage | None = None,
        delay: float = 0.0,
        chunk_size: int | None = None,
        tokenizer: Tokenizer | None = None,
        model_name: str = "scripted",
    ) -> None:
        if isinstance(responses, (str, AiMessage, ChatResponse)):
            raise TypeError("ScriptedChatModel takes a sequence of responses: wrap the single one in a list")
        self.responses: list[ScriptedResponse] = list(responses)
        self.requests: list[ChatRequest] = []
        self.model_name = model_name
        self._token_usage = token_usage
        self._replay = Replay(
            make_tokenizer(chunk_size, tokenizer, "ScriptedChatModel"),
            check_delay(delay, "ScriptedChatModel"),
        )
        self._ids = CallIds()

    @property
    def remaining(self) -> int:
        """How many scripted responses have not been used yet."""
        return max(0, len(self.responses) - len(self.requests))

    async def _respond(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        number = len(self.requests)
        if number > len(self.responses):
            raise AgentLoopError(
                f"ScriptedChatModel has no response left for request #{number}; it was given "
                f"{len(self.responses)}. Script one more response, or check why the model was called again."
            )
        item = self.responses[number - 1]
        if isinstance(item, BaseException):
            raise item
        what = f"ScriptedChatModel response #{number}"
        answer: object = item
        if callable(item):
            answer = await resolve(item(request))
            what += " (returned by a function)"
        return to_response(
            answer,
            request,
            ids=self._ids,
            token_usage=self._token_usage,
            model_name=self.model_name,
            what=what,
        )

    async def chat(self, request: ChatRequest) -> ChatResponse:
        """The next scripted response."""
        response = await self._respond(request)
        await self._replay.pause()
        return response

    async def stream(self, request: ChatRequest) -> AsyncGenerator[ModelEvent, None]:
        """The next scripted response, as stream events."""
        response = await self._respond(request)
        for event in self._replay.events(response):
            await self._replay.pause()
            yield event

    def __repr__(self) -> str:
        return f"ScriptedChatModel(responses={len(self.responses)}, requests={len(self.requests)})"
