"""AG-UI events (CopilotKit and other AG-UI clients) from an agentloop `TokenStream`.

One run is `RUN_STARTED`, then text as `TEXT_MESSAGE_START` / `_CONTENT` / `_END`, reasoning as
`REASONING_START` ... `REASONING_END`, each tool call as `TOOL_CALL_START` / `_ARGS` (while the model writes
it) / `_END`, what it reports while it runs as `ACTIVITY_SNAPSHOT`s (activity types `tool-progress` and
`tool-output`), its outcome as `TOOL_CALL_RESULT`, and finally `RUN_FINISHED` (its `outcome` an interrupt per
call that waits for approval) or `RUN_ERROR`. The order is what AG-UI clients verify: a message or call is
closed before the run ends, no text is open while a tool call streams, nothing follows `RUN_ERROR`.
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
    IntermediateResponse,
    PartialResponse,
    PartialThinking,
    PartialToolCall,
    TokenStream,
    ToolExecuted,
    ToolOutputDelta,
    ToolProgress,
)
from ._record import approval_id, error_text, park
from ._runs import InMemoryPausedRuns, PausedRuns

__all__ = ["AG_UI_HEADERS", "AgUiEvents", "ag_ui_events"]

AG_UI_HEADERS = {"content-type": "text/event-stream", "cache-control": "no-cache", "x-accel-buffering": "no"}
"""The response headers of an AG-UI event stream (server-sent events, never cached or buffered by a proxy)."""

_encode = msgspec.json.Encoder().encode
_default_runs = InMemoryPausedRuns()

Event = dict[str, Any]


def sse(event: Event) -> str:
    return f"data: {_encode(event).decode()}\n\n"


class _Call:
    __slots__ = ("ended", "name", "pieces", "started", "ui_id")

    def __init__(self, ui_id: str) -> None:
        self.ui_id = ui_id
        self.name: str | None = None
        self.pieces: list[str] = []
        self.started = False
        self.ended = False


def _activity(ui_id: str, event: ToolProgress | ToolOutputDelta) -> Event:
    """What a running tool reported, as an AG-UI activity (`ACTIVITY_SNAPSHOT`, replacing the one before):
    `tool-progress` for `ctx.report_progress`, `tool-output` for a streaming tool's latest value. One activity
    message per call and kind; the final result still comes as `TOOL_CALL_RESULT`."""
    if isinstance(event, ToolProgress):
        content: dict[str, Any] = {"toolCallId": ui_id, "toolName": event.tool_name}
        content.update(progress=event.progress, total=event.total, message=event.message)
        kind = "tool-progress"
    else:
        output = to_jsonable_python(event.value, fallback=repr)
        content = {"toolCallId": ui_id, "toolName": event.tool_name, "output": output}
        kind = "tool-output"
    return {
        "type": "ACTIVITY_SNAPSHOT",
        "messageId": f"{ui_id}-{kind}",
        "activityType": kind,
        "content": content,
        "replace": True,
    }


class AgUiEvents:
    """The state of one AG-UI run: which text, reasoning and tool calls are open. `feed(event)` returns the
    AG-UI events a stream event becomes."""

    def __init__(self, thread_id: str, run_id: str) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self._prefix = secrets.token_hex(4)
        self._ui_ids: dict[str, str] = {}
        self._calls: dict[tuple[int, int], _Call] = {}
        self._running: dict[str, _Call] = {}  # tool call id -> its call, from BeforeToolExecution on
        self._text: str | None = None
        self._reasoning: str | None = None
        self._last_message: str | None = None

    @classmethod
    def resuming(cls, thread_id: str, run_id: str, round: int, ui_ids: dict[str, str]) -> AgUiEvents:
        """A run that goes on with tool round `round` of an earlier run: the client has its calls (`ui_ids`),
        started and ended, so only their results come."""
        state = cls(thread_id, run_id)
        state._ui_ids = dict(ui_ids)
        for name in ui_ids:
            tool_round, _, index = name.partition(".")
            if int(tool_round) == round:
                call = state._call(round, int(index))
                call.started = call.ended = True
        return state

    @property
    def ui_ids(self) -> dict[str, str]:
        return dict(self._ui_ids)

    def started(self) -> Event:
        return {"type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.run_id}

    def _id(self, kind: str) -> str:
        return f"{kind}_{secrets.token_hex(8)}"

    def _close_text(self, out: list[Event]) -> None:
        if self._text is not None:
            out.append({"type": "TEXT_MESSAGE_END", "messageId": self._text})
            self._text = None
        if self._reasoning is not None:
            out.append({"type": "REASONING_MESSAGE_END", "messageId": self._reasoning})
            out.append({"type": "REASONING_END", "messageId": self._reasoning})
            self._reasoning = None

    def _close_calls(self, out: list[Event]) -> None:
        for call in self._calls.values():
            if call.started and not call.ended:
                call.ended = True
                out.append({"type": "TOOL_CALL_END", "toolCallId": call.ui_id})

    def close(self) -> list[Event]:
        """Ends every open message and call (before `RUN_FINISHED`)."""
        out: list[Event] = []
        self._close_text(out)
        self._close_calls(out)
        return out

    def _call(self, round: int, index: int) -> _Call:
        call = self._calls.get((round, index))
        if call is None:
            name = f"{round}.{index}"
            ui_id = self._ui_ids.get(name)
            if ui_id is None:
                ui_id = self._ui_ids[name] = f"call_{self._prefix}_{round}_{index}"
            call = self._calls[(round, index)] = _Call(ui_id)
        return call

    def _start(self, call: _Call, name: str, out: list[Event]) -> None:
        if call.started:
            return
        self._close_text(out)
        call.started, call.name = True, name
        event: Event = {"type": "TOOL_CALL_START", "toolCallId": call.ui_id, "toolCallName": name}
        if self._last_message is not None:
            event["parentMessageId"] = self._last_message
        out.append(event)
        pieces = "".join(call.pieces)
        call.pieces = []
        if pieces:
            out.append({"type": "TOOL_CALL_ARGS", "toolCallId": call.ui_id, "delta": pieces})

    def _whole(self, call: _Call, name: str, arguments: str, out: list[Event]) -> None:
        """The call started (with all its arguments if none streamed) and ended."""
        if not call.started:
            call.pieces = [arguments]
            self._start(call, name, out)
        if not call.ended:
            call.ended = True
            out.append({"type": "TOOL_CALL_END", "toolCallId": call.ui_id})

    def feed(self, event: Any) -> list[Event]:
        out: list[Event] = []
        kind = type(event)
        if kind is PartialResponse:
            if not event.text:
                return out
            if self._text is None:
                self._close_text(out)
                self._close_calls(out)
                self._text = self._last_message = self._id("msg")
                out.append({"type": "TEXT_MESSAGE_START", "messageId": self._text, "role": "assistant"})
            out.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": self._text, "delta": event.text})
        elif kind is PartialThinking:
            if not event.text:
                return out
            if self._reasoning is None:
                self._close_text(out)
                self._close_calls(out)
                self._reasoning = self._id("reasoning")
                out.append({"type": "REASONING_START", "messageId": self._reasoning})
                out.append(
                    {"type": "REASONING_MESSAGE_START", "messageId": self._reasoning, "role": "reasoning"}
                )
            out.append(
                {"type": "REASONING_MESSAGE_CONTENT", "messageId": self._reasoning, "delta": event.text}
            )
        elif kind is PartialToolCall:
            call = self._call(event.round + 1, event.index)
            if call.ended:
                return out
            if not call.started:
                call.pieces.append(event.arguments)
                if event.name is not None:
                    self._start(call, event.name, out)
            elif event.arguments:
                out.append({"type": "TOOL_CALL_ARGS", "toolCallId": call.ui_id, "delta": event.arguments})
        elif kind is IntermediateResponse:
            self._close_text(out)
            self._last_message = None  # the next model call's tool calls belong to its own message
            for index, request in enumerate(event.response.ai_message.tool_execution_requests):
                self._whole(self._call(event.round + 1, index), request.name, request.arguments, out)
        elif kind is BeforeToolExecution:
            request = event.request
            call = self._call(event.round, event.index)
            self._whole(call, request.name, request.arguments, out)
            if request.id:
                self._running[request.id] = call
        elif kind is ToolProgress or kind is ToolOutputDelta:
            running = self._running.get(event.call_id)
            if running is not None:
                out.append(_activity(running.ui_id, event))
        elif kind is ToolExecuted:
            execution = event.execution
            request = execution.request
            call = self._call(execution.round, execution.index)
            self._whole(call, request.name, request.arguments, out)
            out.append(
                {
                    "type": "TOOL_CALL_RESULT",
                    "messageId": self._id("result"),
                    "toolCallId": call.ui_id,
                    "content": execution.result,
                    "role": "tool",
                }
            )
        elif kind is CompleteResponse:
            out += self.close()
            finished: Event = {"type": "RUN_FINISHED", "threadId": self.thread_id, "runId": self.run_id}
            output = event.result.output  # the answer text, or the structured output as JSON
            if output is not None:
                finished["result"] = to_jsonable_python(output, fallback=repr)
            usage = event.token_usage
            if usage is not None:
                total = (
                    usage.total_tokens
                    if usage.total_tokens is not None
                    else usage.input_tokens + usage.output_tokens
                )
                finished["usage"] = [
                    {
                        "inputTokens": usage.input_tokens,
                        "outputTokens": usage.output_tokens,
                        "totalTokens": total,
                    }
                ]
            out.append(finished)
        return out

    def interrupted(self, event: ApprovalRequired, token: str) -> list[Event]:
        """The end of a run that waits: each waiting call shown whole, then `RUN_FINISHED` whose outcome holds
        one interrupt per call (`reason: "tool_approval"`), answered in the next run's `resume`."""
        out: list[Event] = []
        interrupts: list[Event] = []
        for position, request in enumerate(event.requests):
            call = self._call(request.round, request.index)
            self._whole(call, request.tool_name, request.arguments, out)
            interrupts.append(
                {
                    "id": approval_id(token, position),
                    "reason": "tool_approval",
                    "message": f"Run tool {request.tool_name!r} with {request.arguments}?",
                    "toolCallId": call.ui_id,
                }
            )
        out += self.close()
        out.append(
            {
                "type": "RUN_FINISHED",
                "threadId": self.thread_id,
                "runId": self.run_id,
                "outcome": {"type": "interrupt", "interrupts": interrupts},
            }
        )
        return out


async def ag_ui_events(
    stream: TokenStream[Any],
    *,
    thread_id: str,
    run_id: str,
    runs: PausedRuns | None = None,
    on_error: Callable[[BaseException], str] | None = None,
    _state: AgUiEvents | None = None,
) -> AsyncIterator[str]:
    """Runs `stream` as the AG-UI run `run_id` of thread `thread_id` and yields its events as SSE text
    (`data: {...}\\n\\n`): answer with the headers in `AG_UI_HEADERS`.

    `runs`: where a run that pauses for approval waits (an in-process store by default); its interrupts'
    ids are what the next run's `resume` entries answer. `on_error(error) -> text` is the `RUN_ERROR`
    message (by default an agentloop error's message; for anything else a generic text, details logged).
    Closing this generator stops the invocation.
    """
    state = _state or AgUiEvents(thread_id, run_id)
    yield sse(state.started())
    paused = False
    try:
        async with stream:
            async for event in stream.events():
                if type(event) is ApprovalRequired:
                    paused = True
                    token, _ = await park(
                        runs if runs is not None else _default_runs, event.pending, state.ui_ids
                    )
                    for item in state.interrupted(event, token):
                        yield sse(item)
                    continue
                if paused:
                    continue  # the paused invocation's CompleteResponse: RUN_FINISHED was sent
                for item in state.feed(event):
                    yield sse(item)
    except Exception as error:
        yield sse(
            {"type": "RUN_ERROR", "message": (on_error or error_text)(error), "code": type(error).__name__}
        )
