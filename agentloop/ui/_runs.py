"""Where paused runs wait for a person's decision while the browser holds only an unguessable run id.

A web UI must never be trusted with a paused run's state (it would be the browser deciding which calls ran
and with what arguments). The server keeps the `PendingApproval` JSON here under a random token; the page
gets the token inside its approval ids; the first request that answers takes the run, once.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from typing import Protocol, runtime_checkable

__all__ = ["InMemoryPausedRuns", "PausedRuns", "new_run_token"]


def new_run_token() -> str:
    """A fresh run id: 32 random URL-safe characters (192 bits), with no '.' (approval ids use it)."""
    return secrets.token_urlsafe(24)


@runtime_checkable
class PausedRuns(Protocol):
    """Storage of paused runs for the web UI apps: `save` a record under a new token, `get` it to check a
    request, `take` it atomically (whoever gets it resumes the run; later takers get None).

    Share one implementation between workers (a database table, Redis `SET` / `GETDEL`) to let a run paused
    on one worker resume on another; the in-process `InMemoryPausedRuns` is the default.
    """

    async def save(self, token: str, record: bytes) -> None:
        """Keeps `record` under `token` (a new token, never reused)."""

    async def get(self, token: str) -> bytes | None:
        """The record under `token`, or None when unknown, expired or already taken."""

    async def take(self, token: str) -> bytes | None:
        """Atomically returns and deletes the record; None when another request took it first."""


class InMemoryPausedRuns:
    """`PausedRuns` in this process: the newest `limit` waiting runs are kept (older ones are forgotten and
    answered as unknown). Enough for one worker; several workers need a shared store."""

    def __init__(self, limit: int = 10_000) -> None:
        if limit < 1:
            raise ValueError(f"InMemoryPausedRuns(limit): must be >= 1, got {limit}")
        self.limit = limit
        self._records: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    async def save(self, token: str, record: bytes) -> None:
        with self._lock:
            self._records[token] = record
            while len(self._records) > self.limit:
                self._records.popitem(last=False)

    async def get(self, token: str) -> bytes | None:
        with self._lock:
            return self._records.get(token)

    async def take(self, token: str) -> bytes | None:
        with self._lock:
            return self._records.pop(token, None)

    def __len__(self) -> int:
        return len(self._records)
