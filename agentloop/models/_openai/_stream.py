"""Chat Completions stream chunks as agentloop events, and the whole `ChatResponse` at their end."""

from __future__ import annotations

from agentloop._values._messages import (
    AiMessage,
    ChatResponse,
    TokenUsage,
    ToolExecutionRequest,
    is_whole_object,
)

from .._base import (
    ModelEvent,
    ResponseComplete,
    TextDelta,
    ThinkingDelta,
    ToolCallComplete,
    ToolCallDelta,
)
from ._response import arguments_text, finish_reason, is_function_call, token_usage
from ._shapes import Chunk, ToolCall


class _Call:
    """One tool call being reassembled from its deltas."""

    __slots__ = ("complete", "id", "name", "parts")

    def __init__(self, call_id: str | None, name: str | None) -> None:
        self.id = call_id
        self.name = name
        self.parts: list[str] = []
        self.complete = False

    def request(self, cut: bool = False) -> ToolExecutionRequest:
        """The call; empty arguments mean `{}` (a tool without parameters) unless the response was `cut`
        by its token limit right there (then they stay empty, so the call is refused, not run)."""
        arguments = "".join(self.parts)
        return ToolExecutionRequest(self.id, self.name or "", arguments if arguments or cut else "{}")


class StreamState:
    """Turns Chat Completions chunks into model events and, at the end, the whole `ChatResponse`."""

    __slots__ = (
        "answered",
        "calls",
        "finish_reason",
        "id",
        "ignored",
        "model",
        "text",
        "thinking",
        "usage",
        "wire_index",
    )

    def __init__(self) -> None:
        self.answered = False  # a chunk for choice 0 arrived
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.calls: list[_Call] = []
        self.wire_index: dict[int, int] = {}
        self.ignored: set[int] = set()  # wire indexes of calls of a kind agentloop does not run
        self.finish_reason: str | None = None
        self.usage: TokenUsage | None = None
        self.id: str | None = None
        self.model: str | None = None

    def feed(self, chunk: Chunk) -> list[ModelEvent]:
        events: list[ModelEvent] = []
        if chunk.id and self.id is None:
            self.id = chunk.id
        if chunk.model and self.model is None:
            self.model = chunk.model
        if chunk.usage is not None:
            self.usage = token_usage(chunk.usage)
        for choice in chunk.choices or ():
            if choice.index != 0:
                continue
            self.answered = True
            delta = choice.delta
            if delta is not None:
                thinking = delta.reasoning_content or delta.reasoning
                if thinking:
                    self.thinking.append(thinking)
                    events.append(ThinkingDelta(thinking))
                text = delta.content or delta.refusal
                if text:
                    self.text.append(text)
                    events.append(TextDelta(text))
                if delta.tool_calls:
                    for call in delta.tool_calls:
                        self._call_delta(call, events)
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
                self._complete(events)
        return events

    def _call_delta(self, call: ToolCall, events: list[ModelEvent]) -> None:
        if call.index in self.ignored or not is_function_call(call):
            if call.index is not None:  # its later pieces carry only the index
                self.ignored.add(call.index)
            return
        function = call.function
        name = function.name if function is not None else None
        arguments = function.arguments if function is not None else None
        piece = (
            arguments
            if isinstance(arguments, str)
            else ("" if arguments is None else arguments_text(arguments))
        )
        if call.index is not None:
            wire = call.index
        elif call.id is None and self.calls:
            wire = max(self.wire_index) if self.wire_index else 0
        else:
            wire = max(self.wire_index, default=-1) + 1
        position = self.wire_index.get(wire)
        if position is not None:
            known = self.calls[position]
            if call.id and known.id and call.id != known.id:
                position = None  # same index, another id: a new call (some servers never advance the index)
        if position is None:
            self._complete(events, only_whole=True)  # a new call starts: earlier ones may be done
            position = len(self.calls)
            self.wire_index[wire] = position
            new = _Call(call.id, name)
            if piece:
                new.parts.append(piece)
            self.calls.append(new)
            events.append(ToolCallDelta(position, call.id, name, piece))
            return
        known = self.calls[position]
        if known.id is None and call.id:
            known.id = call.id
        if known.name is None and name:
            known.name = name
        if piece and not (known.complete and piece.isspace()):  # white space after a whole object: nothing
            known.parts.append(piece)
            events.append(ToolCallDelta(position, None, None, piece))

    def _complete(self, events: list[ModelEvent], *, only_whole: bool = False) -> None:
        """Reports the calls not reported yet: all of them at the end of the response; when a new call
        starts, only those whose arguments are a whole JSON object (servers may interleave the pieces of
        several calls, so a call whose arguments are still open waits for the end)."""
        for position, call in enumerate(self.calls):
            if call.complete or (only_whole and not (call.parts and is_whole_object("".join(call.parts)))):
                continue
            call.complete = True
            events.append(ToolCallComplete(position, call.request(self._cut(position))))

    def _cut(self, position: int) -> bool:
        """Whether the call at `position` may have been cut by the token limit (the last one, then)."""
        return self.finish_reason == "length" and position == len(self.calls) - 1

    def finish(self) -> list[ModelEvent]:
        events: list[ModelEvent] = []
        self._complete(events)
        requests = tuple(call.request(self._cut(position)) for position, call in enumerate(self.calls))
        message = AiMessage(
            "".join(self.text) if self.text else None,
            requests,
            "".join(self.thinking) if self.thinking else None,
        )
        response = ChatResponse(
            message, self.usage, finish_reason(self.finish_reason, bool(requests)), self.model, self.id
        )
        events.append(ResponseComplete(response))
        return events
