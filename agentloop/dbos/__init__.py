"""Durable execution on DBOS (extra `agentloop-runtime[dbos]`): `DBOSAgent` runs an agent's invocations
as DBOS workflows, with model calls, tool calls and memory commits as steps. See docs/durable.md."""

from __future__ import annotations

from typing import TYPE_CHECKING

try:
    import dbos as _dbos  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "agentloop.dbos needs the DBOS package: pip install 'agentloop-runtime[dbos]'"
    ) from error

from ._agent import (
    APPROVAL_TOPIC,
    PENDING_EVENT,
    DBOSAgent,
    decode_result,
    encode_decisions,
    encode_result,
)

__all__ = [
    "APPROVAL_TOPIC",
    "PENDING_EVENT",
    "DBOSAgent",
    "decode_result",
    "encode_decisions",
    "encode_result",
]

if not TYPE_CHECKING:  # at run time only: to mypy, this module's names stay exactly the ones above

    def __getattr__(name: str) -> object:
        """A name this module does not have: the error says which public module has it."""
        from .._hints import missing_name

        raise missing_name(__name__, name)
