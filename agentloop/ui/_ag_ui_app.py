"""`ag_ui_app(agent)`: an ASGI app answering AG-UI `RunAgentInput` requests with the run's events.

The input's `messages` are the thread as the client holds it (AG-UI messages: `user`, `assistant` with
`toolCalls`, `tool` with `toolCallId`); system and developer messages are dropped (the server sets the
instructions), and an assistant's tool call is kept only with its result. A run whose tool calls wait for
approval ends with `RUN_FINISHED` whose `outcome` lists one interrupt per call; the next run answers them
in `resume` (`status: "resolved"` with `payload: {"approved": true | false, "reason"?: "..."}`, or
`status: "cancelled"`, which denies).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from .. import (
    Agent,
    AiMessage,
    ApprovalError,
    ChatMessage,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from ._ag_ui import AG_UI_HEADERS, AgUiEvents, ag_ui_events
from ._asgi import HTTPError, Receive, Scope, Send, UIApp, stream_sse
from ._history import (
    call_id,
    check_if_busy,
    media,
    refuse_if_busy,
    resume_stream,
    stream_with_history,
    tool_result_text,
    user_message,
)
from ._runs import InMemoryPausedRuns, PausedRuns
from ._vercel_app import ANYONE, PerRequest, check_options, resolve_decisions, ui_request

__all__ = ["ag_ui_app", "read_run_input"]


def _bad(message: str) -> HTTPError:
    return HTTPError(400, "BadRequest", message)


def _content(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts: the text ones
        return "".join(
            p["text"]
            for p in value
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        )
    return ""


def _user(message: dict[str, Any], where: str) -> UserMessage | None:
    """A user message's text, image and document parts as one message; `HTTPError` 400 for an attachment
    the model cannot take."""
    content = message.get("content")
    if not isinstance(content, list):
        return user_message([content] if isinstance(content, str) else [])
    found: list[Any] = []
    for n, part in enumerate(content):
        if not isinstance(part, dict):
            continue
        kind, source = part.get("type"), part.get("source")
        if kind == "text" and isinstance(part.get("text"), str):
            found.append(part["text"])
        elif kind in ("audio", "video"):
            raise _bad(
                f"{where}.content[{n}]: {kind} cannot go to the model: attach pictures or PDF documents"
            )
        elif kind in ("image", "document"):
            if not isinstance(source, dict) or not isinstance(source.get("value"), str):
                raise _bad(f"{where}.content[{n}]: an {kind} part needs a source {{type, value, mimeType}}")
            mime = source.get("mimeType") if isinstance(source.get("mimeType"), str) else None
            if source.get("type") == "data":
                url = f"data:{mime};base64,{source['value']}"
            elif source.get("type") == "url":
                url = source["value"]
            else:
                raise _bad(
                    f"{where}.content[{n}]: give the {kind} as data or a URL (not a provider's file id)"
                )
            try:
                found.append(media(url, mime, part=kind))
            except ValueError as error:
                raise _bad(f"{where}.content[{n}]: {error}") from None
    return user_message(found)


def to_messages(messages: list[dict[str, Any]]) -> list[ChatMessage]:
    """AG-UI messages as agentloop messages (user text, assistant text and answered tool calls)."""
    results: dict[str, tuple[str, bool]] = {}
    for message in messages:
        if message.get("role") == "tool" and isinstance(message.get("toolCallId"), str):
            error = message.get("error")
            if isinstance(error, str) and error:
                results[message["toolCallId"]] = (error, True)
            else:
                results[message["toolCallId"]] = (_content(message.get("content")), False)
    out: list[ChatMessage] = []
    for n, message in enumerate(messages):
        role = message.get("role")
        if role == "user":
            said = _user(message, f"messages[{n}]")
            if said is not None:
                out.append(said)
        elif role == "assistant":
            calls = []
            raw: dict[str, str] = {}  # provider-safe id -> the id the client used
            for call in message.get("toolCalls") or ():
                if (
                    not isinstance(call, dict)
                    or not isinstance(call.get("id"), str)
                    or call["id"] not in results
                ):
                    continue
                function = call.get("function")
                if not isinstance(function, dict):
                    continue
                name, arguments = function.get("name"), function.get("arguments")
                if isinstance(name, str):
                    raw[call_id(call["id"])] = call["id"]
                    calls.append(
                        ToolExecutionRequest(
                            call_id(call["id"]),
                            name,
                            arguments if isinstance(arguments, str) else tool_result_text(arguments),
                        )
                    )
            answered = _content(message.get("content"))
            if answered or calls:
                out.append(AiMessage(answered or None, calls))
                out += [ToolExecutionResultMessage(c.id, c.name, *results[raw[c.id or ""]]) for c in calls]
    return out


def read_run_input(body: Any) -> tuple[str, str, list[dict[str, Any]], list[dict[str, Any]]]:
    """`(threadId, runId, messages, resume)` of a `RunAgentInput`; `HTTPError` 400 naming what is wrong."""
    if not isinstance(body, dict):
        raise _bad("The body must be a RunAgentInput object {threadId, runId, messages, ...}")
    thread_id, run_id, messages = body.get("threadId"), body.get("runId"), body.get("messages")
    if not isinstance(thread_id, str) or not isinstance(run_id, str):
        raise _bad("RunAgentInput needs `threadId` and `runId` (strings)")
    if not isinstance(messages, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages
    ):
        raise _bad("RunAgentInput.messages must be a list of messages, each an object with a `role`")
    resume = body.get("resume") or []
    if not isinstance(resume, list) or not all(
        isinstance(r, dict) and isinstance(r.get("interruptId"), str) for r in resume
    ):
        raise _bad("RunAgentInput.resume must be a list of {interruptId, status, payload}")
    return thread_id, run_id, messages, resume


def _answers(resume: list[dict[str, Any]]) -> list[tuple[str, bool, str | None]]:
    answers: list[tuple[str, bool, str | None]] = []
    for entry in resume:
        status, payload = entry.get("status"), entry.get("payload")
        if status == "cancelled":
            answers.append((entry["interruptId"], False, None))
            continue
        if (
            status != "resolved"
            or not isinstance(payload, dict)
            or not isinstance(payload.get("approved"), bool)
        ):
            raise _bad(
                f"resume entry {entry['interruptId']!r}: answer a tool approval with status 'resolved' and "
                "payload {approved: true | false, reason?: string}, or status 'cancelled'"
            )
        reason = payload.get("reason")
        answers.append(
            (
                entry["interruptId"],
                payload["approved"],
                reason if isinstance(reason, str) and reason else None,
            )
        )
    return answers


def ag_ui_app(
    agent: Agent[Any],
    *,
    runs: PausedRuns | None = None,
    memory_id: PerRequest | None = None,
    context: PerRequest | None = None,
    on_error: Callable[[BaseException], str] | None = None,
    if_busy: Literal["wait", "steer", "interrupt", "reject"] = "wait",
) -> UIApp:
    """An ASGI app serving `agent` to AG-UI clients (`HttpAgent`, CopilotKit): POST a `RunAgentInput`, get
    the run's events as SSE. The options are `vercel_ai_app`'s: `runs` where paused runs wait,
    `memory_id(request)` whose conversation it is (required when the agent has a memory; else the client's
    messages are the history), `context(request)` the invocation's context, `on_error(error) -> text`,
    `if_busy` what a run does while another runs on the same memory id (409 `MemoryBusy` for "reject").
    """
    check_options(agent, memory_id, context)
    busy = check_if_busy("ag_ui_app", if_busy)
    paused: PausedRuns = runs if runs is not None else InMemoryPausedRuns()

    async def handle(scope: Scope, receive: Receive, send: Send, body: Any) -> None:
        thread_id, run_id, messages, resume = read_run_input(body)
        info = ui_request(scope, body, "threadId")
        extra: Mapping[str, Any] | None = context(info) if context is not None else None
        if resume:
            owner = memory_id(info) if memory_id is not None else ANYONE
            token, record, decisions = await resolve_decisions(paused, _answers(resume), owner)
            try:
                stream = resume_stream(agent, record.pending, decisions, context=extra)
            except ApprovalError as error:
                raise HTTPError(422, "ApprovalError", str(error)) from None
            if await paused.take(token) is None:
                raise HTTPError(409, "RunNotWaiting", "This run was answered already; nothing ran again")
            state = AgUiEvents.resuming(thread_id, run_id, record.round, record.ui_ids)
            events = ag_ui_events(
                stream, thread_id=thread_id, run_id=run_id, runs=paused, on_error=on_error, _state=state
            )
        else:
            question = None
            if messages and messages[-1].get("role") == "user":
                question = _user(messages[-1], f"messages[{len(messages) - 1}]")
            if question is None:
                raise _bad(
                    "The last message must be the user's, with text (or answer interrupts in `resume`)"
                )
            key = memory_id(info) if memory_id is not None else None
            await refuse_if_busy(agent, key, busy)
            stream = stream_with_history(
                agent, question, to_messages(messages[:-1]), memory_id=key, context=extra, if_busy=busy
            )
            events = ag_ui_events(stream, thread_id=thread_id, run_id=run_id, runs=paused, on_error=on_error)
        await stream_sse(receive, send, AG_UI_HEADERS, events)

    return UIApp("ag_ui_app", handle, paused)
