"""`vercel_ai_app(agent)`: an ASGI app answering `useChat` requests with the UI message stream."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from .. import Agent, ApprovalError, Denied, IllegalConfigurationError, PendingApproval
from ._asgi import HTTPError, Receive, Scope, Send, UIApp, UIRequest, headers_of, stream_sse
from ._history import check_if_busy, refuse_if_busy, resume_stream, stream_with_history
from ._record import PausedRecord, decode_record, split_approval_id
from ._runs import InMemoryPausedRuns, PausedRuns
from ._vercel import VERCEL_AI_HEADERS, VercelChunks, vercel_ai_events
from ._vercel_request import Answer, BadRequest, read_chat_request

__all__ = ["resolve_decisions", "vercel_ai_app"]

PerRequest = Callable[[UIRequest], Any]
ANYONE = object()


def check_options(agent: Agent[Any], memory_id: PerRequest | None, context: PerRequest | None) -> None:
    if not isinstance(agent, Agent):
        raise IllegalConfigurationError(f"Serve an agentloop Agent, got {type(agent).__name__}")
    if agent.memory is not None and memory_id is None:
        raise IllegalConfigurationError(
            "This agent has a memory, so the app must know whose conversation a request continues: give "
            "memory_id=lambda request: ... (e.g. the signed-in user's id from request.headers). A page's own "
            "chat id is not proof of who is asking."
        )
    if agent.memory is None and memory_id is not None:
        raise IllegalConfigurationError(
            "memory_id= says whose memory a request continues, but this agent has no memory: the page's "
            "messages are its history. Give the agent a memory, or leave memory_id out."
        )
    for name, value in (("memory_id", memory_id), ("context", context)):
        if value is not None and not callable(value):
            raise IllegalConfigurationError(f"{name} must be a function (request: UIRequest) -> value")


def ui_request(scope: Scope, body: Any, thread_key: str) -> UIRequest:
    thread = body.get(thread_key) if isinstance(body, dict) else None
    return UIRequest(
        headers_of(scope),
        body if isinstance(body, dict) else {},
        thread if isinstance(thread, str) else None,
        scope,
    )


async def resolve_decisions(
    runs: PausedRuns, answers: list[tuple[str, bool, str | None]], owner: Any = ANYONE
) -> tuple[str, PausedRecord, dict[str, bool | Denied]]:
    """The paused run the answers are for (its token and record) and the decisions by call id. `owner`: the
    memory id of the request, when the app knows whose conversation it is; another's run is refused.

    Raises `HTTPError`: 400 for answers that are not about one run of this server, 409 when the run waits no
    more (answered already, or unknown), 403 when it belongs to another conversation."""
    tokens: dict[str, list[tuple[int, bool, str | None]]] = {}
    for approval, approved, reason in answers:
        parts = split_approval_id(approval)
        if parts is None:
            raise HTTPError(400, "BadRequest", f"{approval!r} is not an approval id this server gave")
        tokens.setdefault(parts[0], []).append((parts[1], approved, reason))
    if len(tokens) != 1:
        raise HTTPError(400, "BadRequest", "The answers must all be about one paused run")
    [(token, positions)] = tokens.items()
    stored = await runs.get(token)
    if stored is None:
        raise HTTPError(
            409,
            "RunNotWaiting",
            "No run waits for these decisions (answered already, unknown or forgotten); nothing ran",
        )
    record = decode_record(stored)
    if owner is not ANYONE and PendingApproval.from_json(record.pending).memory_id != owner:
        raise HTTPError(403, "Forbidden", "This paused run belongs to another conversation; nothing ran")
    decisions: dict[str, bool | Denied] = {}
    for position, approved, reason in positions:
        if position >= len(record.calls):
            raise HTTPError(400, "BadRequest", f"The paused run has no waiting call number {position}")
        call = record.calls[position]
        decisions[call.call_id] = True if approved else (Denied(reason) if reason else False)
    return token, record, decisions


def vercel_ai_app(
    agent: Agent[Any],
    *,
    runs: PausedRuns | None = None,
    memory_id: PerRequest | None = None,
    context: PerRequest | None = None,
    on_error: Callable[[BaseException], str] | None = None,
    if_busy: Literal["wait", "steer", "interrupt", "reject"] = "wait",
) -> UIApp:
    """An ASGI app serving `agent` to the Vercel AI SDK's `useChat` (`DefaultChatTransport`): POST the chat's
    request body (its UI messages), get the UI message stream.

    Without a memory, the agent answers over the conversation the page sends (system messages dropped; see
    docs/web.md). With one, `memory_id(request)` says whose conversation it is, and only the page's last
    user message is read. Tool calls that wait for approval become `tool-approval-request` parts; the page's
    answer (`addToolApprovalResponse`, then the next request) resumes the run once, from the paused state
    kept in `runs` (in this process by default; share one across workers). `context(request)` gives the
    invocation's context (e.g. the user, for the tools); `on_error(error) -> text` what the page is told of
    a failure. `if_busy`: what a message does while an answer for the same memory id is still running
    (another tab, another worker): "wait" (default), "steer" (hand it to that run), "interrupt" (stop that
    run, answer this one) or "reject" (HTTP 409 `MemoryBusy`); see docs/runtime.md.
    """
    check_options(agent, memory_id, context)
    busy = check_if_busy("vercel_ai_app", if_busy)
    paused: PausedRuns = runs if runs is not None else InMemoryPausedRuns()

    async def handle(scope: Scope, receive: Receive, send: Send, body: Any) -> None:
        try:
            request = read_chat_request(body)
        except BadRequest as error:
            raise HTTPError(400, "BadRequest", str(error)) from None
        info = ui_request(scope, body, "id")
        extra: Mapping[str, Any] | None = context(info) if context is not None else None
        if isinstance(request, Answer):
            owner = memory_id(info) if memory_id is not None else ANYONE
            token, record, decisions = await resolve_decisions(paused, request.decisions, owner)
            try:
                # Checks the state and that every waiting call has a decision; runs nothing yet.
                stream = resume_stream(agent, record.pending, decisions, context=extra)
            except ApprovalError as error:
                raise HTTPError(422, "ApprovalError", str(error)) from None
            if await paused.take(token) is None:  # another request took the run since `get`
                raise HTTPError(409, "RunNotWaiting", "This run was answered already; nothing ran again")
            asked = frozenset(c.ui_id for c in record.calls)
            chunks = VercelChunks.resuming(record.round, record.ui_ids, asked)
            events = vercel_ai_events(stream, runs=paused, on_error=on_error, _chunks=chunks)
        else:
            key = memory_id(info) if memory_id is not None else None
            await refuse_if_busy(agent, key, busy)
            stream = stream_with_history(
                agent, request.question, request.history, memory_id=key, context=extra, if_busy=busy
            )
            events = vercel_ai_events(stream, runs=paused, on_error=on_error)
        await stream_sse(receive, send, VERCEL_AI_HEADERS, events)

    return UIApp("vercel_ai_app", handle, paused)
