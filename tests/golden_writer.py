"""The documents today's writer produces, built from fixed values (no clock, no random ids), so that
tests/values/test_golden_records.py can check them byte for byte against tests/golden/*/*-current.json.

A deliberate change of a stored format: bump the format number, keep the old files (they must still load),
and write the new ones with `python -m tests.golden_writer` (from the repository root).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import msgspec

from agentloop import (
    AiMessage,
    ChatRequest,
    ChatResponse,
    Denied,
    FinishReason,
    HallucinatedToolError,
    ImageContent,
    MCPServerError,
    MCPToolError,
    RecordedToolError,
    Result,
    ReturnBehavior,
    SystemMessage,
    TokenUsage,
    ToolApprovalRequest,
    ToolArgumentsError,
    ToolDeniedError,
    ToolExecution,
    ToolExecutionError,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolSpecification,
    UserMessage,
)
from agentloop.abc import Middleware
from agentloop.stores import encode

GOLDEN = Path(__file__).parent / "golden"
T0 = datetime(2026, 11, 28, 12, 0, 0, tzinfo=timezone.utc)
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg=="
)


class AppError(Exception):
    """An application's own exception class: stored by module path and name."""


class Audit(Middleware):
    """A call's own middleware, named in a paused round's options (format 2)."""


@dataclass(frozen=True)
class Answer:
    """A call's own output type, named in a paused round's options (format 2)."""

    text: str


@dataclass(frozen=True)
class _Whose:
    invocation_id: str
    memory_id: Any


@dataclass(frozen=True)
class _HeldRound:
    """What approval's stored form reads of a held round (the seam's `HeldRound` has these fields)."""

    response: ChatResponse
    round: int
    finished: tuple[ToolExecution, ...]
    messages: tuple[Any, ...]
    user_message: UserMessage
    context: _Whose
    call_options: Any


def _execution(
    index: int, name: str, error: BaseException | None, result_object: Any = None
) -> ToolExecution:
    result = str(error) if error is not None else str(result_object)
    return ToolExecution(
        request=ToolExecutionRequest(f"c{index}", name, '{"x":1}'),
        result=result,
        result_object=None if error is not None else result_object,
        error=error,
        index=index,
        round=1,
        started_at=T0 + timedelta(seconds=index),
        finished_at=T0 + timedelta(seconds=index, milliseconds=250),
        duration=0.25,
        return_behavior=ReturnBehavior.IMMEDIATE_IF_LAST if index == 1 else ReturnBehavior.TO_LLM,
        is_error=error is not None,
    )


def executions() -> list[ToolExecution]:
    """One successful call per result kind, and one failed call per kind of tool error."""
    return [
        _execution(0, "lookup", None, "bob is a friend"),
        _execution(1, "stats", None, {"count": 3, "names": ["a", "b"], "ratio": 0.5}),
        _execution(2, "nothing", None, None),
        _execution(3, "parse", ValueError("not a number: x")),
        _execution(4, "delete_file", ToolDeniedError("not that file", call_id="c4", tool_name="delete_file")),
        _execution(5, "pay", ToolArgumentsError("amount: Input should be a valid integer", tool_name="pay")),
        _execution(6, "fetch", ToolExecutionError("fetch timed out after 2.0 s")),
        _execution(7, "nope", HallucinatedToolError("no tool named 'nope'", tool_name="nope")),
        _execution(8, "search", MCPToolError("index offline", server="docs", tool_name="search")),
        _execution(9, "search", MCPServerError("connection closed", server="docs")),
        _execution(10, "legacy", RecordedToolError("read back", error_type="someapp.errors.Boom")),
        _execution(11, "app", AppError("the app failed")),
    ]


def messages() -> list[Any]:
    """A conversation with every kind of message: system, user (text and a picture), a tool round, answer."""
    calls = [
        ToolExecutionRequest("c0", "lookup", '{"name":"bob"}'),
        ToolExecutionRequest("c3", "parse", "{}"),
    ]
    return [
        SystemMessage("You help."),
        UserMessage("Who is bob? Also this:", [ImageContent(data=PIXEL)]),
        AiMessage("Looking.", calls),
        ToolExecutionResultMessage("c0", "lookup", "bob is a friend"),
        ToolExecutionResultMessage("c3", "parse", "not a number: x", True),
        AiMessage("Bob is a friend."),
    ]


def response() -> ChatResponse:
    return ChatResponse(
        AiMessage("Bob is a friend."),
        TokenUsage(input_tokens=120, output_tokens=8, total_tokens=128, cache_read_tokens=100),
        FinishReason.STOP,
        model="golden-model",
        id="resp-1",
    )


def documents() -> dict[str, bytes]:
    """What today's writer produces, by path under tests/golden/."""
    from agentloop._values._codec import encode_messages
    from agentloop._values._options import CallOptions
    from agentloop._values._pending import paused_round_record
    from agentloop.dbos import encode_decisions, encode_result

    spec = ToolSpecification(
        "lookup", "Looks someone up", {"type": "object", "properties": {"name": {"type": "string"}}}
    )
    request = ChatRequest(messages(), [spec])
    asked = UserMessage("pay bob, look up bob, delete /tmp/x")
    calls = [
        ToolExecutionRequest("c_pay", "pay", '{"to":"bob","amount":5}'),
        ToolExecutionRequest("c_look", "lookup", '{"name":"bob"}'),
        ToolExecutionRequest("c_del", "delete_file", '{"path":"/tmp/x"}'),
    ]
    calling = ChatResponse(AiMessage(None, calls), TokenUsage(84, 30, 114), FinishReason.TOOL_EXECUTION)
    denied = ToolDeniedError("not that file", call_id="c_del", tool_name="delete_file")
    finished = [
        msgspec.structs.replace(_execution(1, "lookup", None, "bob is a friend"), request=calls[1]),
        msgspec.structs.replace(_execution(2, "delete_file", denied), request=calls[2]),
    ]
    options = CallOptions(Answer, (Audit(),))
    held = _HeldRound(calling, 1, tuple(finished), (asked,), asked, _Whose("inv-golden", "ann"), options)
    waiting = [ToolApprovalRequest("c_pay", "pay", calls[0].arguments, 0, 1, "ann")]
    pending = paused_round_record(held, waiting)
    result = Result(
        content="done",
        tool_executions=executions(),
        token_usage=TokenUsage(204, 38, 242),
        finish_reason=FinishReason.STOP,
        intermediate_responses=[calling],
        final_response=response(),
        messages=messages()[1:],
        memory_id="ann",
        invocation_id="inv-golden",
    )
    return {
        "codec/messages-current.json": encode(messages(), "messages"),
        "codec/chat_request-current.json": encode(request),
        "codec/chat_response-current.json": encode(response()),
        "codec/tool_executions-current.json": encode(executions(), "tool_executions"),
        "stores/round_body-current.json": encode_messages(messages()[1:]),
        "approval/pending_approval-current.json": pending.to_json(),
        "dbos/result-current.json": encode_result(result),
        "dbos/decisions-current.json": encode_decisions(
            {"c_pay": True, "c_del": Denied("not today")}, pending.id
        ),
    }


if __name__ == "__main__":
    from tests.golden_writer import (
        documents as written,  # the classes above as tests.golden_writer names them
    )

    for path, data in written().items():
        (GOLDEN / path).write_bytes(data)
        print("wrote", GOLDEN / path)
