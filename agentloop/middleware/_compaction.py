"""`Compaction`: a conversation past a token budget is sent as a summary of its older part plus its recent
messages.

The summary rides on the response of the model call that needed it, in its `AiMessage.provider_state`
under "agentloop.compaction" (`{"summary": text, "kept": n}`: the `n` messages before that message are
sent as they are, everything older is covered by the summary). Memory stores that message like any other,
so every store keeps the summary in its existing format and a later invocation, in any process, reads it
instead of summarising again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from .._runtime._seam import Middleware, ModelCall, NextModelCall
from .._values._errors import IllegalConfigurationError
from .._values._messages import (
    AiMessage,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    SystemMessage,
    ToolExecutionResultMessage,
    UserMessage,
)
from ..models._counting import count_tokens
from ._checks import check_count

__all__ = ["STATE_KEY", "SUMMARY_HEADER", "Compaction"]

STATE_KEY = "agentloop.compaction"
"""Where the summary is kept: the key of `AiMessage.provider_state` of the message that carries it."""

SUMMARY_HEADER = "Summary of the earlier conversation (its older messages were condensed into it):"
"""How the summary message sent to the model begins."""

DEFAULT_INSTRUCTIONS = (
    "You condense a conversation between a user and an assistant that uses tools, so the assistant can "
    "continue it without the full transcript. Keep the user's goals and preferences, decisions made, facts "
    "learned from tools (names, numbers, ids, paths), what was promised and what is still open. Drop "
    "pleasantries and repetition. Write terse notes, not a narrative; never invent anything."
)


class Compaction(Middleware):
    """When a request would take more than `max_tokens` input tokens (`count_tokens`), its older messages
    are summarised by `summarizer` (a model or model string; None: the model the call goes to) and the
    request, and every later one, carries the system prompt, the summary, then the recent messages.

    `keep_last`: at least this many of the newest messages are sent as they are (more when the cut would
    split a tool call from its results: a tool round is never split). `instructions`: the summarizer's
    system prompt. The system prompt and the summary lead each request, so the provider's prompt cache keeps
    that prefix from one compaction to the next. Memory keeps the summary (see the module docstring); a
    request whose recent messages alone exceed the budget is sent as it is (`UsageLimits(
    max_request_tokens=...)` is the hard stop).
    """

    allows_eager_tools = True  # it shapes the request; the response keeps its calls (the summary rides along)

    def __init__(
        self,
        max_tokens: int,
        *,
        keep_last: int = 8,
        summarizer: Any = None,
        instructions: str | None = None,
    ) -> None:
        if instructions is not None and (not isinstance(instructions, str) or not instructions.strip()):
            raise IllegalConfigurationError("Compaction(instructions=...) must be a non-empty string")
        if isinstance(summarizer, str):
            from ..models._infer import infer_model

            summarizer = infer_model(summarizer)
        self.max_tokens = check_count("Compaction", "max_tokens", max_tokens, 1)
        self.keep_last = check_count("Compaction", "keep_last", keep_last, 1)
        self.summarizer = summarizer
        self.instructions = instructions or DEFAULT_INSTRUCTIONS

    def __repr__(self) -> str:
        return f"Compaction(max_tokens={self.max_tokens}, keep_last={self.keep_last})"

    async def wrap_model_call(self, call: ModelCall, call_next: NextModelCall) -> ChatResponse:
        request = call.request
        system = [m for m in request.messages if isinstance(m, SystemMessage)]
        conversation: list[ChatMessage] = [m for m in request.messages if not isinstance(m, SystemMessage)]
        summary, base = latest_summary(conversation)
        recent = conversation[base:]
        compacted = _with(request, system, summary, recent)
        model = call.model if call.model is not None else call.context.agent.model
        counted = await count_tokens(model, compacted)
        cut = self._cut(recent) if counted.tokens > self.max_tokens else 0
        if cut == 0:  # within budget, or nothing old enough to summarise
            return await call_next(call if compacted is request else call.replace(request=compacted))
        summarizer = self.summarizer if self.summarizer is not None else model
        summary = await self._summarise(summarizer, summary, recent[:cut])
        kept = recent[cut:]
        response = await call_next(call.replace(request=_with(request, system, summary, kept)))
        ai = response.ai_message
        state = {**ai.provider_state, STATE_KEY: {"summary": summary, "kept": len(kept)}}
        return msgspec.structs.replace(response, ai_message=msgspec.structs.replace(ai, provider_state=state))

    def _cut(self, recent: list[ChatMessage]) -> int:
        """How many of `recent` to summarise: all but the newest `keep_last`, moved back so a tool round's
        results stay with the call that asked for them (0: nothing to summarise)."""
        cut = len(recent) - self.keep_last
        while cut > 0 and isinstance(recent[cut], ToolExecutionResultMessage):
            cut -= 1
        return max(cut, 0)

    async def _summarise(self, model: Any, previous: str | None, messages: Sequence[ChatMessage]) -> str:
        transcript = render_transcript(messages)
        if previous:
            transcript = f"Summary so far:\n{previous}\n\nThen:\n{transcript}"
        request = ChatRequest([SystemMessage(self.instructions), UserMessage(transcript)])
        response = await model.chat(request)
        text = (response.ai_message.text or "").strip()
        if not text:
            raise IllegalConfigurationError(
                f"Compaction: the summarizer ({type(model).__name__}) answered with no text; give "
                "Compaction(summarizer=...) a model that answers in text"
            )
        return text


def latest_summary(conversation: Sequence[ChatMessage]) -> tuple[str | None, int]:
    """The newest summary a message of `conversation` carries and the index of the first message sent as
    it is after it (None, 0: no summary)."""
    for index in range(len(conversation) - 1, -1, -1):
        message = conversation[index]
        if isinstance(message, AiMessage):
            state = message.provider_state.get(STATE_KEY)
            if isinstance(state, dict) and isinstance(state.get("summary"), str):
                kept = state.get("kept")
                kept = kept if isinstance(kept, int) and kept >= 0 else 0
                return state["summary"], max(index - kept, 0)
    return None, 0


def _with(
    request: ChatRequest, system: list[SystemMessage], summary: str | None, recent: list[ChatMessage]
) -> ChatRequest:
    """`request` carrying the system prompt, the summary (if any), then `recent`; `request` itself when
    that is what it already holds."""
    if summary is None and len(system) + len(recent) == len(request.messages):
        return request
    lead: list[ChatMessage] = [UserMessage(f"{SUMMARY_HEADER}\n{summary}")] if summary is not None else []
    return msgspec.structs.replace(request, messages=[*system, *lead, *recent])


def render_transcript(messages: Sequence[ChatMessage]) -> str:
    """`messages` as plain text for a summarizer: who said what, which tools were called with what, and
    what they returned."""
    lines: list[str] = []
    for message in messages:
        if isinstance(message, UserMessage):
            attached = len(message.contents) - sum(1 for c in message.contents if hasattr(c, "text"))
            extra = f" [{attached} attachment(s)]" if attached else ""
            lines.append(f"User: {message.text}{extra}")
        elif isinstance(message, AiMessage):
            if message.text:
                lines.append(f"Assistant: {message.text}")
            for request in message.tool_execution_requests:
                lines.append(f"Assistant called {request.name}({request.arguments})")
        elif isinstance(message, ToolExecutionResultMessage):
            verb = "failed" if message.is_error else "returned"
            lines.append(f"Tool {message.tool_name} {verb}: {message.text}")
    return "\n".join(lines)
