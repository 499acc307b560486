"""`RunCommand`: what one process asks of an invocation running anywhere (cancel it, steer it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from .._values._codec import decode, encode
from .._values._errors import AgentLoopError, RunControlError
from .._values._messages import UserMessage

__all__ = ["RunCommand", "decode_command", "encode_command"]


@dataclass(frozen=True, slots=True)
class RunCommand:
    """One command for a running invocation.

    `kind="cancel"` ends it: at once (the round in flight is not committed) or, with `after_round=True`,
    once the round in flight has committed; `reason` is kept in `Result.cancel_reason`. `kind="steer"`
    hands it `message`, a user message delivered before its next model call.
    """

    kind: Literal["cancel", "steer"]
    after_round: bool = False
    reason: str | None = None
    message: UserMessage | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("cancel", "steer"):
            raise ValueError(f"RunCommand kind must be 'cancel' or 'steer', not {self.kind!r}")
        if self.kind == "steer" and not isinstance(self.message, UserMessage):
            raise ValueError(
                "RunCommand(kind='steer') needs message=UserMessage(...): the message to hand to the running "
                f"invocation (got {type(self.message).__name__})"
            )
        if self.kind == "cancel" and self.message is not None:
            raise ValueError("RunCommand(kind='cancel') takes no message; use kind='steer' to send one")

    @classmethod
    def cancel(cls, *, after_round: bool = False, reason: str | None = None) -> RunCommand:
        """A command that cancels the invocation (at once, or after the round in flight commits)."""
        return cls("cancel", after_round=after_round, reason=reason)

    @classmethod
    def steer(cls, message: UserMessage | str) -> RunCommand:
        """A command that hands the invocation a user message before its next model call."""
        return cls("steer", message=UserMessage(message) if isinstance(message, str) else message)


def _one(messages: Any) -> UserMessage:
    if len(messages) != 1 or not isinstance(messages[0], UserMessage):
        raise ValueError("a steering command holds one user message")
    return messages[0]


class _Wire(msgspec.Struct, frozen=True, omit_defaults=True):
    """A command as it crosses processes: one JSON object, the message in agentloop's stored format."""

    kind: str
    after_round: bool = False
    reason: str | None = None
    message: str | None = None


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(_Wire)


def encode_command(command: RunCommand) -> bytes:
    """The command as bytes for a shared backend (Redis, SQLite)."""
    message = None if command.message is None else encode([command.message]).decode()
    return _encoder.encode(_Wire(command.kind, command.after_round, command.reason, message))


def decode_command(data: bytes | str) -> RunCommand:
    """A command read back from a shared backend; `RunControlError` if it is not one this version writes."""
    try:
        wire = _decoder.decode(data)
        message: Any = None if wire.message is None else _one(decode(wire.message, "messages"))
        return RunCommand(wire.kind, wire.after_round, wire.reason, message)  # type: ignore[arg-type]
    except (msgspec.DecodeError, ValueError, AgentLoopError) as error:
        shown = bytes(data[:60]) if isinstance(data, bytes) else data[:60]
        raise RunControlError(
            f"a run-control command could not be read ({error}); it reads {shown!r}"
        ) from None
