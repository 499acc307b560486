"""The record a web UI app keeps for a paused run: the `PendingApproval` JSON and what the page was shown.

The page knows each waiting call by its approval id (`<run token>.<n>`) and its UI tool call id; the record
maps them back to the paused round's calls, so the answer is read against the server's copy only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import msgspec

from .. import AgentLoopError
from ._runs import PausedRuns, new_run_token

if TYPE_CHECKING:
    from .. import PendingApproval

__all__ = [
    "PausedRecord",
    "WaitingCall",
    "approval_id",
    "decode_record",
    "encode_record",
    "error_text",
    "park",
    "split_approval_id",
]

logger = logging.getLogger("agentloop.ui")

_KIND = "agentloop.ui.paused_run"
_FORMAT = 1


class WaitingCall(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One call that waits: the round's call id, the id the page knows it by, its tool's name."""

    call_id: str
    ui_id: str
    tool_name: str


class PausedRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What `PausedRuns` stores per run (JSON, versioned): `pending` is `PendingApproval.to_json()`."""

    format: int
    kind: str
    pending: str
    calls: list[WaitingCall]
    ui_ids: dict[str, str]
    """Every tool call the page was shown in the paused round, `"<round>.<index>"` -> its UI id."""
    round: int
    """The tool round that paused (from 1)."""


def encode_record(pending: str, calls: list[WaitingCall], ui_ids: dict[str, str], round: int) -> bytes:
    return msgspec.json.encode(PausedRecord(_FORMAT, _KIND, pending, calls, ui_ids, round))


def decode_record(data: bytes) -> PausedRecord:
    try:
        record = msgspec.json.decode(data, type=PausedRecord)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise AgentLoopError(f"A stored paused run is not a record this version reads: {error}") from None
    if (record.kind, record.format) != (_KIND, _FORMAT):
        raise AgentLoopError(
            f"A stored paused run has kind {record.kind!r}, format {record.format}; this version reads "
            f"{_KIND!r} format {_FORMAT}"
        )
    return record


def approval_id(token: str, position: int) -> str:
    """The id a page answers a waiting call by: the run's token and the call's position among the waiting."""
    return f"{token}.{position}"


def split_approval_id(value: str) -> tuple[str, int] | None:
    """(run token, position) of an approval id this module made; None for anything else."""
    token, dot, digits = value.rpartition(".")
    if not dot or not token or not (digits.isascii() and digits.isdigit() and len(digits) <= 6):
        return None  # ASCII digits only: `isdigit()` alone also takes "²", which `int()` refuses
    return token, int(digits)


async def park(
    runs: PausedRuns, pending: PendingApproval, ui_ids: dict[str, str]
) -> tuple[str, list[WaitingCall]]:
    """Stores a paused run under a new token; returns the token and its waiting calls in order."""
    token = new_run_token()
    calls = [
        WaitingCall(r.call_id, ui_ids.get(f"{r.round}.{r.index}", r.call_id), r.tool_name)
        for r in pending.requests
    ]
    await runs.save(token, encode_record(pending.to_json().decode(), calls, ui_ids, pending.round))
    return token, calls


def error_text(error: BaseException) -> str:
    """What a page may show of a failure: an agentloop error's message says what failed and what to check
    (and never holds a secret); anything else is a bug whose details stay in the server log."""
    if isinstance(error, AgentLoopError):
        return f"{type(error).__name__}: {error}"
    logger.error("The agent failed", exc_info=error)
    return "Internal error (see the server log)"
