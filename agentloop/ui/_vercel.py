"""The Vercel AI SDK's UI message stream (what `useChat` reads), from an agentloop `TokenStream`.

Each chunk is one SSE `data:` line of JSON; the stream ends with `data: [DONE]`. One model call is one step
(`start-step` ... `finish-step`), text and reasoning come as `*-start` / `*-delta` / `*-end` blocks, a tool
call as `tool-input-start` / `tool-input-delta` while the model writes it, `tool-input-available` once its
arguments validated, then `tool-output-available` or `tool-output-error`; a call that waits for a person
gets a `tool-approval-request` whose `approvalId` the page answers in its next request. A structured
output (`output_type=`) arrives as a `data-output` part, replaced as it grows. While a tool runs, its
`ctx.report_progress` reports are a `data-tool-progress` part (id: the call's UI id, replaced by each
report), and the values a streaming tool yields are `tool-output-available` chunks with `preliminary: true`
(the SDK's preliminary tool output) before the final one.

Tool call ids shown to the page are namespaced per invocation (`call_<random>_<round>_<index>`): providers
may reuse their own ids across responses, and a page must never merge two calls into one part.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
from pydantic_core import to_jsonable_python

from .. import (
    ApprovalRequired,
    BeforeToolExecution,
    CompleteResponse,
    FinishReason,
    IntermediateResponse,
    PartialOutput,
    PartialResponse,
    PartialThinking,
    PartialToolCall,
    TokenStream,
    ToolArgumentsError,
    ToolDeniedError,
    ToolExecuted,
    ToolOutputDelta,
    ToolProgress,
)
from ._record import approval_id, error_text, park
from ._runs import InMemoryPausedRuns, PausedRuns

__all__ = ["VERCEL_AI_HEADERS", "vercel_ai_events"]

VERCEL_AI_HEADERS = {
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    "x-vercel-ai-ui-message-stream": "v1",
    "x-accel-buffering": "no",
}
"""The response headers of a UI message stream (the SDK's `UI_MESSAGE_STREAM_HEADERS`)."""

_FINISH = {
    FinishReason.STOP: "stop",
    FinishReason.LENGTH: "length",
    FinishReason.CONTENT_FILTER: "content-filter",
    FinishReason.TOOL_EXECUTION: "tool-calls",
    FinishReason.APPROVAL_REQUIRED: "tool-calls",
}

_encode = msgspec.json.Encoder().encode
_default_runs = InMemoryPausedRuns()

Chunk = dict[str, Any]


def sse(chunk: Chunk) -> str:
    """One chunk as an SSE event."""
    return f"data: {_encode(chunk).decode()}\n\n"


DONE = "data: [DONE]\n\n"


def _input(arguments: str) -> Any:
    """A call's arguments as the page gets them: the decoded JSON, or the text when it is not JSON."""
    try:
        return msgspec.json.decode(arguments or "{}")
    except (msgspec.DecodeError, RecursionError):
        return arguments


def _output(value: Any) -> Chunk:
    """A structured output (`output_type=`) as the page's `data-output` part: each partial replaces the one
    before (same id), the final value last."""
    return {"type": "data-output", "id": "output", "data": to_jsonable_python(value, fallback=repr)}


def _reported(ui_id: str, event: ToolProgress | ToolOutputDelta) -> Chunk:
    """What a running tool reported: its progress as the call's `data-tool-progress` part (same id: each
    report replaces the one before), a streaming tool's value as the AI SDK's preliminary tool output (a
    `tool-output-available` with `preliminary: true`; the final one comes without it)."""
    if isinstance(event, ToolProgress):
        data: dict[str, Any] = {"toolCallId": ui_id, "toolName": event.tool_name, "progress": event.progress}
        data.update(total=event.total, message=event.message)
        return {"type": "data-tool-progress", "id": ui_id, "data": data}
    output = to_jsonable_python(event.value, fallback=repr)
    return {
        "type": "tool-output-available",
        "toolCallId": ui_id,
        "output": output,
        "dynamic": True,
        "preliminary": True,
    }


class _Call:
    __slots__ = ("available", "name", "pieces", "started", "ui_id")

    def __init__(self, ui_id: str) -> None:
        self.ui_id = ui_id
        self.name: str | None = None
        self.pieces: list[str] = []
        self.started = False
        self.available = False


class VercelChunks:
    """The state of one stream: which step, text, reasoning and tool blocks are open. `feed(event)` returns
    the chunks an event becomes; `close()` the chunks that end every open block."""

    def __init__(self) -> None:
        self._prefix = f"call_{secrets.token_hex(4)}"
        self._ui_ids: dict[str, str] = {}  # "<tool round>.<index>" -> the page's id
        self._asked: frozenset[str] = frozenset()  # UI ids whose approval the page answered
        self._calls: dict[tuple[int, int], _Call] = {}
        self._running: dict[str, _Call] = {}  # tool call id -> its call, from BeforeToolExecution on
        self._step: int | None = None  # the model round whose step is open
        self._text: str | None = None
        self._reasoning: str | None = None
        self._blocks = 0

    @classmethod
    def resuming(cls, round: int, ui_ids: dict[str, str], asked: frozenset[str]) -> VercelChunks:
        """The state of a stream that goes on with tool round `round` of a message the page already shows:
        its calls are there (`ui_ids`), the step that asked for them still open; `asked` are the calls
        whose approval the page answered (a denial of one ends as `tool-output-denied`)."""
        chunks = cls()
        chunks._ui_ids = dict(ui_ids)
        chunks._asked = asked
        chunks._step = round - 1
        for name in ui_ids:
            tool_round, _, index = name.partition(".")
            if int(tool_round) == round:
                call = chunks._call(round, int(index))
                call.started = call.available = True
        return chunks

    @property
    def ui_ids(self) -> dict[str, str]:
        """Every tool call shown so far: `"<tool round>.<index>"` -> its UI id."""
        return dict(self._ui_ids)

    # -- blocks ---------------------------------------------------------------------------------------

    def _new_block(self, kind: str) -> str:
        self._blocks += 1
        return f"{kind}_{self._prefix[5:]}_{self._blocks}"

    def _close_text(self, out: list[Chunk]) -> None:
        if self._text is not None:
            out.append({"type": "text-end", "id": self._text})
            self._text = None
        if self._reasoning is not None:
            out.append({"type": "reasoning-end", "id": self._reasoning})
            self._reasoning = None

    def _enter(self, model_round: int, out: list[Chunk]) -> None:
        """Opens the step of `model_round` (ending the one before)."""
        if self._step == model_round:
            return
        self._close_text(out)
        if self._step is not None:
            out.append({"type": "finish-step"})
        out.append({"type": "start-step"})
        self._step = model_round

    def close(self) -> list[Chunk]:
        out: list[Chunk] = []
        self._close_text(out)
        if self._step is not None:
            out.append({"type": "finish-step"})
            self._step = None
        return out

    # -- tool calls -----------------------------------------------------------------------------------

    def _call(self, round: int, index: int) -> _Call:
        key = (round, index)
        call = self._calls.get(key)
        if call is None:
            name = f"{round}.{index}"
            ui_id = self._ui_ids.get(name)
            if ui_id is None:
                ui_id = self._ui_ids[name] = f"{self._prefix}_{round}_{index}"
            call = self._calls[key] = _Call(ui_id)
        return call

    def _start_call(self, call: _Call, name: str, out: list[Chunk]) -> None:
        if not call.started:
            self._close_text(out)
            call.started = True
            call.name = name
            out.append(
                {"type": "tool-input-start", "toolCallId": call.ui_id, "toolName": name, "dynamic": True}
            )

    def _available(self, call: _Call, name: str, arguments: str, out: list[Chunk]) -> None:
        self._start_call(call, name, out)
        if not call.available:
            call.available = True
            out.append(
                {
                    "type": "tool-input-available",
                    "toolCallId": call.ui_id,
                    "toolName": name,
                    "input": _input(arguments),
                    "dynamic": True,
                }
            )

    def _tool_step(self, tool_round: int, out: list[Chunk]) -> None:
        """Tool events of round n belong to the step of model call n - 1 (open it on a resumed stream)."""
        if self._step is None:
            self._enter(tool_round - 1, out)

    # -- events ---------------------------------------------------------------------------------------

    def feed(self, event: Any) -> list[Chunk]:
        out: list[Chunk] = []
        kind = type(event)
        if kind is PartialResponse:
            self._enter(event.round, out)
            if self._reasoning is not None:
                out.append({"type": "reasoning-end", "id": self._reasoning})
                self._reasoning = None
            if self._text is None:
                self._text = self._new_block("text")
                out.append({"type": "text-start", "id": self._text})
            out.append({"type": "text-delta", "id": self._text, "delta": event.text})
        elif kind is PartialThinking:
            self._enter(event.round, out)
            if self._text is not None:
                out.append({"type": "text-end", "id": self._text})
                self._text = None
            if self._reasoning is None:
                self._reasoning = self._new_block("reasoning")
                out.append({"type": "reasoning-start", "id": self._reasoning})
            out.append({"type": "reasoning-delta", "id": self._reasoning, "delta": event.text})
        elif kind is PartialToolCall:
            self._enter(event.round, out)
            call = self._call(event.round + 1, event.index)
            if not call.started:
                if event.name is None:
                    call.pieces.append(event.arguments)  # the name comes later: keep the pieces
                    return out
                self._start_call(call, event.name, out)
                event_pieces = [*call.pieces, event.arguments]
                call.pieces = []
            else:
                event_pieces = [event.arguments]
            text = "".join(event_pieces)
            if text and not call.available:
                out.append({"type": "tool-input-delta", "toolCallId": call.ui_id, "inputTextDelta": text})
        elif kind is IntermediateResponse:
            self._enter(event.round, out)
            self._close_text(out)
            for index, request in enumerate(event.response.ai_message.tool_execution_requests):
                self._start_call(self._call(event.round + 1, index), request.name, out)
        elif kind is BeforeToolExecution:
            self._tool_step(event.round, out)
            request = event.request
            call = self._call(event.round, event.index)
            self._available(call, request.name, request.arguments, out)
            if request.id:
                self._running[request.id] = call
        elif kind is ToolProgress or kind is ToolOutputDelta:
            running = self._running.get(event.call_id)
            if running is not None:
                out.append(_reported(running.ui_id, event))
        elif kind is ToolExecuted:
            self._executed(event, out)
        elif kind is PartialOutput:
            self._enter(event.round, out)
            out.append(_output(event.output))
        elif kind is CompleteResponse:
            output = event.result.output
            if output is not None and not isinstance(output, str):
                out.append(_output(output))
            out += self.close()
            reason = _FINISH.get(event.result.finish_reason or FinishReason.OTHER, "other")
            out.append({"type": "finish", "finishReason": reason})
        return out

    def _executed(self, event: ToolExecuted, out: list[Chunk]) -> None:
        execution = event.execution
        request = execution.request
        self._tool_step(execution.round, out)
        call = self._call(execution.round, execution.index)
        if isinstance(execution.error, ToolArgumentsError) and not call.available:
            self._start_call(call, request.name, out)
            call.available = True
            out.append(
                {
                    "type": "tool-input-error",
                    "toolCallId": call.ui_id,
                    "toolName": request.name,
                    "input": _input(request.arguments),
                    "errorText": execution.result,
                    "dynamic": True,
                }
            )
            return
        self._available(call, request.name, request.arguments, out)
        if isinstance(execution.error, ToolDeniedError) and call.ui_id in self._asked:
            out.append({"type": "tool-output-denied", "toolCallId": call.ui_id})
        elif execution.is_error:
            out.append({"type": "tool-output-error", "toolCallId": call.ui_id, "errorText": execution.result})
        else:
            out.append(
                {"type": "tool-output-available", "toolCallId": call.ui_id, "output": execution.result}
            )

    def approval_requests(self, event: ApprovalRequired, token: str) -> list[Chunk]:
        """The waiting calls as the page sees them: their input, then one `tool-approval-request` each."""
        out: list[Chunk] = []
        for position, request in enumerate(event.requests):
            self._tool_step(request.round, out)
            call = self._call(request.round, request.index)
            self._available(call, request.tool_name, request.arguments, out)
            out.append(
                {
                    "type": "tool-approval-request",
                    "approvalId": approval_id(token, position),
                    "toolCallId": call.ui_id,
                }
            )
        return out


async def vercel_ai_events(
    stream: TokenStream[Any],
    *,
    runs: PausedRuns | None = None,
    message_id: str | None = None,
    on_error: Callable[[BaseException], str] | None = None,
    _chunks: VercelChunks | None = None,
) -> AsyncIterator[str]:
    """Runs `stream` and yields its UI message stream chunks as SSE text (`data: {...}\\n\\n`), ending with
    `data: [DONE]`: answer with the headers in `VERCEL_AI_HEADERS`.

    `runs`: where a run that pauses for approval waits (`PausedRuns`; an in-process store by default).
    `message_id`: the assistant message id sent in `start` (a new one by default). `on_error(error) -> text`
    says what the page is told of a failure (by default an agentloop error's message; for anything else a
    generic text, the details logged). Closing this generator stops the invocation.
    """
    chunks = _chunks or VercelChunks()
    start: Chunk = {"type": "start"}
    if _chunks is None:
        start["messageId"] = message_id or f"msg_{secrets.token_hex(12)}"
    elif message_id is not None:
        start["messageId"] = message_id
    yield sse(start)
    try:
        async with stream:
            async for event in stream.events():
                if type(event) is ApprovalRequired:
                    token, _ = await park(
                        runs if runs is not None else _default_runs, event.pending, chunks.ui_ids
                    )
                    for chunk in chunks.approval_requests(event, token):
                        yield sse(chunk)
                    continue
                for chunk in chunks.feed(event):
                    yield sse(chunk)
    except Exception as error:
        for chunk in chunks.close():
            yield sse(chunk)
        yield sse({"type": "error", "errorText": (on_error or error_text)(error)})
    yield DONE
