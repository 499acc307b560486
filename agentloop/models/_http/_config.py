"""HTTP provider configuration: `Timeouts`, `RetryPolicy`, and the limits every client shares."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from typing import TypeVar

import msgspec

logger = logging.getLogger("agentloop.models")

T = TypeVar("T")
encode_json_bytes = msgspec.json.Encoder().encode

USER_AGENT = "agentloop/0.1.0"
AUTH_HEADERS = frozenset({"authorization", "api-key", "x-api-key", "proxy-authorization", "x-goog-api-key"})
SECRET_QUERY = frozenset({"key", "api-key", "api_key", "apikey", "token", "access_token", "sig"})
MAX_ERROR_TEXT = 500
MAX_BODY_BYTES = 16 * 1024 * 1024
"""The largest response body read whole (a 2xx JSON answer; one event of a stream has the same limit): a
bigger one is a `BadResponseError`, so a broken or hostile server cannot make the client buffer gigabytes."""
MAX_ERROR_BODY = 64 * 1024  # of an error answer only the start is read: its message is all that is used
MAX_CACHED_URLS = 256  # parsed request URLs kept per client

# -- configuration ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds allowed for each phase of a call (None: no limit).

    `connect`: opening the connection; `read`: the longest wait for the next bytes (for a stream, between two
    pieces of it); `write`: sending the request; `pool`: waiting for a free pooled connection; `total`: the
    whole call, retries and the reading of a stream included.
    """

    connect: float | None = 10.0
    read: float | None = 600.0
    write: float | None = 60.0
    pool: float | None = 60.0
    total: float | None = None

    @classmethod
    def of(cls, value: Timeouts | float | None) -> Timeouts:
        """`value` as `Timeouts`: a number sets connect, read, write and pool alike; None: the defaults."""
        if value is None:
            return cls()
        if isinstance(value, Timeouts):
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"timeout must be a positive number of seconds or a Timeouts, got {value!r}")
        seconds = float(value)
        return cls(connect=seconds, read=seconds, write=seconds, pool=seconds)

    def as_tuple(self) -> tuple[float | None, float | None, float | None, float | None]:
        """(connect, read, write, pool): the form both httpx and httpx2 accept per request."""
        return (self.connect, self.read, self.write, self.pool)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When and how long to wait before trying a failed call again.

    Retried: connection failures before any response, and the statuses in `retry_statuses`. The wait is the
    server's `Retry-After` when it sends one, else `initial_delay * 2**(attempt-1)` capped at `max_delay`,
    minus up to `jitter` of it at random. A `Retry-After` longer than `max_retry_after` is not waited for.
    """

    max_retries: int = 2
    initial_delay: float = 0.5
    max_delay: float = 8.0
    jitter: float = 0.25
    max_retry_after: float = 60.0
    retry_statuses: frozenset[int] = field(default=frozenset({408, 409, 429, 500, 502, 503, 504}))

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must be between 0 and 1, got {self.jitter}")

    def backoff(self, attempt: int) -> float:
        """The wait after failed attempt number `attempt` (1-based) when the server gave no Retry-After."""
        delay = min(self.max_delay, self.initial_delay * 2.0 ** max(0, attempt - 1))
        return delay * (1.0 - self.jitter * random.random())
