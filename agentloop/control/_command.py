"""A `RunCommand` as it crosses processes (the shared backends write and read it as JSON)."""

from __future__ import annotations

from typing import Any

import msgspec

from .._runtime._control import RunCommand
from .._values._errors import AgentLoopError, RunControlError
from .._values._messages import UserMessage
from ..stores import decode, encode

__all__ = ["decode_command", "encode_command"]


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
