"""`RedisLimiter`: keyed limits shared by every process using one Redis (extra `agentloop-runtime[redis]`).

Each step is one Lua script, atomic on the server and timed by the server's clock (`TIME`), so workers on
machines whose clocks disagree still agree. A slot is a lease that expires: a holder renews it while its
call runs, and a crashed worker's slots come free after `lease_ttl`. Waiters of a key queue by ticket and
take slots in that order; a waiter that stops asking (crashed) drops out of the queue. On asyncio the
scripts go through `redis.asyncio`; on trio through the sync client in worker threads.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from .._backend import running_on_asyncio
from .._values._errors import LimiterError
from .._values._urls import without_password
from ._limiter import WINDOW

__all__ = ["RedisLimiter"]

logger = logging.getLogger("agentloop.middleware")

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: holders (zset token -> lease end), waiters (zset token -> ticket), seen (zset token -> alive until),
# ticket counter. ARGV: token, limit, lease ms, waiter ttl ms. 1: taken; 0: queued.
_ACQUIRE = (
    _NOW
    + """
local token, limit, lease, alive = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for _, waiter in ipairs(gone) do
  redis.call('ZREM', KEYS[2], waiter)
  redis.call('ZREM', KEYS[3], waiter)
end
if not redis.call('ZSCORE', KEYS[2], token) then
  redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[4]), token)
end
local free = limit - redis.call('ZCARD', KEYS[1])
if redis.call('ZRANK', KEYS[2], token) < free then
  redis.call('ZREM', KEYS[2], token)
  redis.call('ZREM', KEYS[3], token)
  redis.call('ZADD', KEYS[1], now + lease, token)
  for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], lease + alive) end
  return 1
end
redis.call('ZADD', KEYS[3], now + alive, token)
for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], lease + alive) end
return 0
"""
)

# KEYS: holders. ARGV: token, lease ms. 1: still held.
_RENEW = (
    _NOW
    + """
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return 1
"""
)

# KEYS: holders, waiters, seen. ARGV: token. Drops the token wherever it is (nothing if it is nowhere).
_RELEASE = """
for i = 1, 3 do redis.call('ZREM', KEYS[i], ARGV[1]) end
return 1
"""

# KEYS: requests (zset id -> time), tokens (zset "id:n" -> time), paused. ARGV: requests per minute ('' none),
# tokens per minute ('' none), request id, window ms. 0: admitted and counted; else ms to wait.
_ADMIT = (
    _NOW
    + """
local rpm, tpm, window = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[4])
local wait = math.max(0, redis.call('PTTL', KEYS[3]))
if rpm then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
  local count = redis.call('ZCARD', KEYS[1])
  if count >= rpm then
    local at = redis.call('ZRANGE', KEYS[1], count - rpm, count - rpm, 'WITHSCORES')
    wait = math.max(wait, tonumber(at[2]) + window - now)
  end
end
if tpm then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  local entries = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
  local used = 0
  for i = 1, #entries, 2 do used = used + tonumber(string.match(entries[i], ':(%d+)$')) end
  for i = 1, #entries, 2 do
    if used < tpm then break end
    used = used - tonumber(string.match(entries[i], ':(%d+)$'))
    wait = math.max(wait, tonumber(entries[i + 1]) + window - now)
  end
end
if wait > 0 then return wait end
if rpm then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], window)
end
return 0
"""
)

# KEYS: tokens. ARGV: "id:n", window ms.
_TOKENS = (
    _NOW
    + """
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1
"""
)

# KEYS: paused. ARGV: ms. A pause only ever grows.
_PAUSE = """
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], '1', 'PX', ARGV[1]) end
return 1
"""

_SCRIPTS = {
    "acquire": _ACQUIRE,
    "renew": _RENEW,
    "release": _RELEASE,
    "admit": _ADMIT,
    "tokens": _TOKENS,
    "pause": _PAUSE,
}


class RedisLimiter:
    """Keyed limits kept in Redis, shared by every process and machine using it: pass it as `backend=` to
    `ConcurrencyLimit` and `RateLimit`.

    `lease_ttl`: a held slot is a lease renewed every third of it while the call runs; a worker that dies
    frees its slots after at most that long. `poll`: the longest pause between two asks of a waiter (they
    start shorter and back off). `prefix` starts every key. Close it with `aclose()` when done.
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "agentloop",
        lease_ttl: float = 30.0,
        poll: float = 0.05,
        timeout: float = 5.0,
        max_connections: int = 50,
    ) -> None:
        try:
            import redis
        except ImportError:
            raise ImportError(
                "RedisLimiter needs the redis client: pip install 'agentloop-runtime[redis]'"
            ) from None
        if lease_ttl <= 0 or poll <= 0 or timeout <= 0:
            raise ValueError("lease_ttl, poll and timeout must be positive numbers of seconds")
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections!r}")
        self.url = without_password(url)
        self.prefix = prefix
        self.lease_ttl = lease_ttl
        self.poll = poll
        self._url = url
        self._options: dict[str, Any] = {
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "max_connections": max_connections,
        }
        pool = redis.BlockingConnectionPool.from_url(url, **self._options)
        self._client = redis.Redis(connection_pool=pool)
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError,)
        self._scripts = {name: self._client.register_script(code) for name, code in _SCRIPTS.items()}
        self._native: tuple[object, Any, dict[str, Any]] | None = None

    def __repr__(self) -> str:
        return f"RedisLimiter({self.url!r})"

    def _keys(self, key: str, *parts: str) -> list[str]:
        # The braces put every key of one limited key in one Redis Cluster slot (scripts need that).
        return [f"{self.prefix}:limit:{{{key}}}:{part}" for part in parts]

    # -- concurrency --------------------------------------------------------------------------------------

    @asynccontextmanager
    async def slot(self, key: str, limit: int, *, timeout: float | None) -> AsyncIterator[None]:
        token = uuid.uuid4().hex
        keys = self._keys(key, "holders", "waiters", "seen", "ticket")
        lease = int(self.lease_ttl * 1000)
        try:
            with anyio.fail_after(timeout):
                await self._acquire(keys, token, limit, lease)
            async with anyio.create_task_group() as renewing:
                renewing.start_soon(self._renew, key, keys[0], token, lease)
                try:
                    yield
                finally:
                    renewing.cancel_scope.cancel()
        finally:
            # Whatever happened (cancelled while queued, or as the slot was granted), the token goes: a
            # token that holds nothing releases nothing.
            with anyio.CancelScope(shield=True):
                await self._run("release", keys[:3], [token])

    async def _acquire(self, keys: list[str], token: str, limit: int, lease: int) -> None:
        """Asks until the slot is granted: a short pause first, backing off to `poll`; a waiter that has not
        asked for 20 polls (at least a second) is dropped from the queue by the next ask of anyone."""
        alive = int(max(self.poll * 20, 1.0) * 1000)
        delay = self.poll / 8
        while not await self._run("acquire", keys, [token, limit, lease, alive]):
            await anyio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, self.poll)

    async def _renew(self, key: str, holders: str, token: str, lease: int) -> None:
        while True:
            await anyio.sleep(self.lease_ttl / 3)
            if not await self._run("renew", [holders], [token, lease]):
                logger.warning(
                    "RedisLimiter: the slot of key %r expired before its call ended (the worker stalled "
                    "longer than lease_ttl=%gs); another call may have taken it",
                    key,
                    self.lease_ttl,
                )
                return

    # -- rates --------------------------------------------------------------------------------------------

    async def admit(
        self, key: str, *, requests_per_minute: int | None, tokens_per_minute: int | None
    ) -> None:
        keys = self._keys(key, "requests", "tokens", "paused")
        request = uuid.uuid4().hex
        window = int(WINDOW * 1000)
        args = ["" if requests_per_minute is None else requests_per_minute]
        args += ["" if tokens_per_minute is None else tokens_per_minute, request, window]
        # The wait is known (the oldest request or tokens leaving the window, or a pause ending): no event to
        # wait for, so sleep that long and ask again.
        while wait := int(await self._run("admit", keys, args)):  # noqa: ASYNC110
            await anyio.sleep(wait / 1000 + random.uniform(0, self.poll))

    async def record_tokens(self, key: str, tokens: int) -> None:
        if tokens > 0:
            await self._run(
                "tokens", self._keys(key, "tokens"), [f"{uuid.uuid4().hex}:{tokens}", int(WINDOW * 1000)]
            )

    async def pause(self, key: str, seconds: float) -> None:
        if seconds > 0:
            await self._run("pause", self._keys(key, "paused"), [max(1, int(seconds * 1000))])

    # -- plumbing -----------------------------------------------------------------------------------------

    async def _run(self, script: str, keys: list[str], args: list[Any]) -> Any:
        """One of the scripts: natively on asyncio, through a worker thread elsewhere."""
        try:
            if running_on_asyncio():
                return await self._native_scripts()[script](keys=keys, args=args)
            sync = self._scripts[script]
            return await anyio.to_thread.run_sync(lambda: sync(keys=keys, args=args))
        except self._errors as error:
            detail = str(error).split(" AUTH ", 1)[0][:300]  # never an AUTH argument redis may echo
            raise LimiterError(
                f"{self!r}: Redis failed a limiter step ({type(error).__name__}: {detail}): check that the "
                "server is running and reachable from here, the URL and its credentials",
                backend=repr(self),
            ) from None

    def _native_scripts(self) -> dict[str, Any]:
        import asyncio

        import redis.asyncio

        loop = asyncio.get_running_loop()
        if self._native is None or self._native[0] is not loop:
            pool = redis.asyncio.BlockingConnectionPool.from_url(self._url, **self._options)
            client = redis.asyncio.Redis(connection_pool=pool)
            self._native = (
                loop,
                client,
                {name: client.register_script(code) for name, code in _SCRIPTS.items()},
            )
        return self._native[2]

    async def aclose(self) -> None:
        """Closes the connections (the running loop's native client and the sync client's pool)."""
        if self._native is not None and running_on_asyncio():
            import asyncio

            if self._native[0] is asyncio.get_running_loop():
                await self._native[1].aclose()
            self._native = None
        self._client.close()
