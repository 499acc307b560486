"""The backends of keyed limits: the `Limiter` protocol and `LocalLimiter`, the one-process default.

A limiter knows nothing of agents: it holds concurrency slots per key (handed out first come, first served
within a key; keys never wait for each other) and counts requests and tokens per key over a sliding minute.
`RedisLimiter` (`_redis_limiter.py`) does the same across processes.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import anyio

__all__ = ["WINDOW", "Limiter", "LocalLimiter", "RateState"]

WINDOW = 60.0
"""The sliding window of `requests_per_minute` and `tokens_per_minute`, in seconds."""


@runtime_checkable
class Limiter(Protocol):
    """Where keyed limits are kept: `LocalLimiter` (one process) or `RedisLimiter` (many)."""

    def slot(self, key: str, limit: int, *, timeout: float | None) -> AbstractAsyncContextManager[None]:
        """Waits for one of `limit` slots of `key` and holds it for the block; `TimeoutError` (from entering
        it) when none came within `timeout` seconds. Cancelled or timed out while waiting, it holds nothing
        afterwards."""
        ...

    async def admit(
        self, key: str, *, requests_per_minute: int | None, tokens_per_minute: int | None
    ) -> None:
        """Waits until `key` may send a request (under both budgets and past any pause), and counts it."""
        ...

    async def record_tokens(self, key: str, tokens: int) -> None:
        """Counts `tokens` a request of `key` used against its `tokens_per_minute`."""
        ...

    async def pause(self, key: str, seconds: float) -> None:
        """No request of `key` is admitted for `seconds` (a provider's 429 with Retry-After)."""
        ...


@dataclass
class _Slots:
    held: int = 0
    waiters: deque[anyio.Event] = field(default_factory=deque)


@dataclass
class RateState:
    """One key's sliding minute: when its requests were sent, and (when, how many) tokens they used."""

    requests: deque[float] = field(default_factory=deque)
    tokens: deque[tuple[float, int]] = field(default_factory=deque)
    paused_until: float = 0.0

    def wait(self, now: float, requests_per_minute: int | None, tokens_per_minute: int | None) -> float:
        """Seconds until a request may go (0: now), after forgetting what left the window."""
        while self.requests and self.requests[0] <= now - WINDOW:
            self.requests.popleft()
        while self.tokens and self.tokens[0][0] <= now - WINDOW:
            self.tokens.popleft()
        wait = max(0.0, self.paused_until - now)
        if requests_per_minute is not None and len(self.requests) >= requests_per_minute:
            wait = max(wait, self.requests[len(self.requests) - requests_per_minute] + WINDOW - now)
        if tokens_per_minute is not None:
            used = sum(tokens for _, tokens in self.tokens)
            for at, tokens in self.tokens:
                if used < tokens_per_minute:
                    break
                used -= tokens
                wait = max(wait, at + WINDOW - now)
        return wait


class LocalLimiter:
    """Keyed limits in this process (the default backend): slots are handed over first come, first served
    within a key, and a key never waits for another. Use one instance within one event loop."""

    def __init__(self) -> None:
        self._slots: dict[str, _Slots] = {}
        self._rates: dict[str, RateState] = {}

    def __repr__(self) -> str:
        return "LocalLimiter()"

    @asynccontextmanager
    async def slot(self, key: str, limit: int, *, timeout: float | None) -> AsyncIterator[None]:
        with anyio.fail_after(timeout):
            await self._acquire(key, limit)
        try:
            yield
        finally:
            self._release(key)

    async def _acquire(self, key: str, limit: int) -> None:
        slots = self._slots.setdefault(key, _Slots())
        if slots.held < limit and not slots.waiters:
            slots.held += 1
            return
        handed = anyio.Event()
        slots.waiters.append(handed)
        try:
            await handed.wait()
        except BaseException:
            if handed.is_set():  # the slot was handed over as we were cancelled: pass it on
                self._release(key)
            else:
                slots.waiters.remove(handed)
                self._forget(key, slots)
            raise

    def _release(self, key: str) -> None:
        """Hands the slot to the first waiter (it stays held), or frees it."""
        slots = self._slots[key]
        if slots.waiters:
            slots.waiters.popleft().set()
            return
        slots.held -= 1
        self._forget(key, slots)

    def _forget(self, key: str, slots: _Slots) -> None:
        if slots.held == 0 and not slots.waiters:
            del self._slots[key]

    async def admit(
        self, key: str, *, requests_per_minute: int | None, tokens_per_minute: int | None
    ) -> None:
        while True:
            state = self._rates.setdefault(key, RateState())
            now = time.monotonic()
            wait = state.wait(now, requests_per_minute, tokens_per_minute)
            if wait <= 0:
                state.requests.append(now)
                return
            await anyio.sleep(wait)

    async def record_tokens(self, key: str, tokens: int) -> None:
        if tokens > 0:
            self._rates.setdefault(key, RateState()).tokens.append((time.monotonic(), tokens))

    async def pause(self, key: str, seconds: float) -> None:
        if seconds > 0 and math.isfinite(seconds):
            state = self._rates.setdefault(key, RateState())
            state.paused_until = max(state.paused_until, time.monotonic() + seconds)
