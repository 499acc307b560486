"""`RedisChatMemoryStore`: conversations in Redis, shared by every worker on every machine.

Each step is one Lua script, so it is atomic on the server: an append checks the lease and the version,
pushes the round and bumps the version together. On asyncio the steps go through `redis.asyncio`; on trio
(which `redis.asyncio` does not support) through the sync client in anyio worker threads. Handing each
step to a thread costs more than the loopback round trip itself when the machine is busy (measured in
benchmarks/RESULTS.md), so the native client is used where it exists.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import anyio
import anyio.lowlevel

from .. import ChatMemoryConflictError, ChatMemoryStoreError, ChatMessage, UserMessage
from .._backend import running_on_asyncio
from .._memory._chat import StoredMemory, split_round
from .._values._codec import FORMAT, encode_messages
from .._values._urls import without_password
from ._lease import LastRound, hold_lease
from ._rows import Damaged, damaged, memory_key, messages_of, stored_int

__all__ = ["RedisChatMemoryStore"]

T = TypeVar("T")

# Rows are "<format> <size> <starts with user 0|1> <json>"; the system message is "<format> <json>".
# Every script starts with these functions; a step that takes or gives back the lease may also read the
# window or append a round, in the same script (one round trip).
_DAMAGED = "AGENTLOOP_DAMAGED "
"""How a script's error reply starts when a key of the memory id holds what the store never writes."""

_FUNCTIONS = """
local function damaged(what) error({err = 'AGENTLOOP_DAMAGED ' .. what}) end

local function shown(value)
  if #value > 40 then return string.format('%q...', string.sub(value, 1, 40)) end
  return string.format('%q', value)
end

local function version_of(meta)
  local value = redis.call('HGET', meta, 'version')
  if not value then return 0 end
  if #value > 15 or not string.match(value, '^%d+$') then
    damaged('its version is ' .. shown(value) .. ', not a whole number >= 0')
  end
  return tonumber(value)
end

local function window(log, meta, max)
  local out = {version_of(meta), redis.call('HGET', meta, 'system') or ''}
  local i = redis.call('LLEN', log)
  local count, saw_user = 0, false
  while i > 0 and (max == nil or count < max or not saw_user) do
    local low = math.max(0, i - 32)
    local part = redis.call('LRANGE', log, low, i - 1)
    for j = #part, 1, -1 do
      if max ~= nil and count >= max and saw_user then break end
      local size, user = string.match(part[j], '^%d+ (%d+) ([01]) ')
      if not size then
        damaged('a round reads ' .. shown(part[j]) .. ', not "<format> <size> <0|1> <messages>"')
      end
      count = count + tonumber(size)
      saw_user = saw_user or user == '1'
      out[#out + 1] = part[j]
      i = i - 1
    end
    if low == 0 then break end
  end
  return out
end

-- keys: log, meta, lease, next in line; then expected version, lease token, ttl ms, system row, round row,
-- write id (a retried append counts once)
local function append(log, meta, lease, next, expected, token, ttl, system, row, write_id)
  local version = version_of(meta)
  if write_id ~= '' and redis.call('HGET', meta, 'last_write') == write_id then return {2, version} end
  if token ~= '' then
    local holder = redis.call('GET', lease)
    -- a lease that expired while nobody took it nor waits for it is still ours (as in renew) when the
    -- write names the version it read: anyone who took and gave back the lease meanwhile bumped it
    if holder ~= token and (holder or expected == '' or redis.call('GET', next)) then
      return {-1, version}
    end
  end
  if expected ~= '' and tonumber(expected) ~= version then return {-2, version} end
  if row ~= '' then redis.call('RPUSH', log, row) end
  if system ~= '' then redis.call('HSET', meta, 'system', system) end
  version = version + 1
  redis.call('HSET', meta, 'version', version, 'last_write', write_id)
  ttl = tonumber(ttl)
  if ttl > 0 then
    redis.call('PEXPIRE', log, ttl)
    redis.call('PEXPIRE', meta, ttl)
  end
  return {1, version}
end

local function release(lease, next, token)
  if redis.call('GET', lease) == token then redis.call('DEL', lease) end
  if redis.call('GET', next) == token then redis.call('DEL', next) end
end
"""

_LOAD = _FUNCTIONS + "return window(KEYS[1], KEYS[2], tonumber(ARGV[1]))"

_APPEND = _FUNCTIONS + "return append(KEYS[1], KEYS[2], KEYS[3], KEYS[4], unpack(ARGV))"

# KEYS: lease, next, log, meta. ARGV: token, ttl ms, read (1 or empty), max messages. 0: not taken (queued
# first in line unless someone else is); 1: taken; with read, the window instead of 1.
_ACQUIRE = (
    _FUNCTIONS
    + """
local holder = redis.call('GET', KEYS[1])
local first = redis.call('GET', KEYS[2])
if (holder and holder ~= ARGV[1]) or (first and first ~= ARGV[1]) then
  if not first or first == ARGV[1] then redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2]) end
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if first then redis.call('DEL', KEYS[2]) end
if ARGV[3] == '1' then return window(KEYS[3], KEYS[4], tonumber(ARGV[4])) end
return 1
"""
)

_RENEW = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if not holder and not redis.call('GET', KEYS[2]) then
  -- expired while nobody took it nor waits for it: no one else wrote meanwhile, so it is still ours
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""

# KEYS: lease, next, log, meta. ARGV: token, then (when a last round comes with it) the append's arguments
# after the token. The round is appended first (checked against the lease), then the lease given back.
_RELEASE = (
    _FUNCTIONS
    + """
local result = 1
if #ARGV > 1 then
  result = append(KEYS[3], KEYS[4], KEYS[1], KEYS[2], ARGV[2], ARGV[1], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
end
release(KEYS[1], KEYS[2], ARGV[1])
return result
"""
)

_DELETE = "return redis.call('DEL', unpack(KEYS))"

_SAVE_PENDING = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local ttl = tonumber(ARGV[3])
if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
"""

_TAKE_PENDING = """
local record = redis.call('HGET', KEYS[1], ARGV[1])
if record == ARGV[2] then redis.call('HDEL', KEYS[1], ARGV[1]) end
return record
"""

_SCRIPTS = {
    "load": _LOAD,
    "append": _APPEND,
    "acquire": _ACQUIRE,
    "renew": _RENEW,
    "release": _RELEASE,
    "delete": _DELETE,
    "save_pending": _SAVE_PENDING,
    "take_pending": _TAKE_PENDING,
}


class RedisChatMemoryStore:
    """Chat memory in Redis (`pip install 'agentloop-runtime[redis]'`): one conversation, many workers.

    `url` is a redis URL (`redis://host:6379/0`, `rediss://...`, `unix://...`); `ttl` (seconds) makes every
    key the store writes expire that long after its last write; keys are named `{prefix}:{memory id}:...`.
    `lease_ttl` is how long a crashed worker keeps a memory id blocked (renewed every third of it while
    held). Close it with `close()` / `async with` when done.

    Connections are pooled and bounded: at most `max_connections` per event loop (and as many worker
    threads on trio). A step that finds them all busy waits for one, up to `pool_timeout` seconds, then
    fails with a `ChatMemoryStoreError` naming the pool size; thousands of concurrent invocations share the
    pool instead of opening a connection each.
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        ttl: float | None = None,
        prefix: str = "agentloop",
        lease_ttl: float = 10.0,
        timeout: float = 5.0,
        max_connections: int = 50,
        pool_timeout: float = 30.0,
    ) -> None:
        try:
            import redis
            from redis.backoff import ExponentialBackoff
            from redis.retry import Retry
        except ImportError:
            raise ImportError(
                "RedisChatMemoryStore needs the redis client: pip install 'agentloop-runtime[redis]'"
            ) from None
        if ttl is not None and ttl <= 0:
            raise ValueError(f"ttl must be a positive number of seconds or None, got {ttl!r}")
        if lease_ttl <= 0 or timeout <= 0 or pool_timeout <= 0:
            raise ValueError("lease_ttl, timeout and pool_timeout must be positive numbers of seconds")
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections!r}")
        self.max_connections = max_connections
        self.pool_timeout = pool_timeout
        self.url = without_password(url)
        self.ttl = ttl
        self.prefix = prefix
        self.lease_ttl = lease_ttl
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError,)
        self._connection_errors: tuple[type[BaseException], ...] = (
            redis.ConnectionError,
            redis.TimeoutError,
        )
        options: dict[str, Any] = {
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "retry": Retry(ExponentialBackoff(cap=0.25, base=0.02), 3),
            "health_check_interval": 30,
        }
        self._url = url
        self._options = options
        pool = redis.BlockingConnectionPool.from_url(
            url, max_connections=max_connections, timeout=pool_timeout, **options
        )
        self._client = redis.Redis(connection_pool=pool)
        # On trio each step runs the sync client in a worker thread: at most one thread per connection, and
        # the wait for one is bounded like the wait for a connection (limiters of the running event loop).
        self._slots: tuple[object, anyio.CapacityLimiter, anyio.CapacityLimiter] | None = None
        self._scripts = {name: self._client.register_script(code) for name, code in _SCRIPTS.items()}
        self._native: tuple[object, Any, dict[str, Any]] | None = None  # (event loop, client, scripts)

    def _key(self, memory_id: Any, part: str) -> str:
        # The braces make every key of one memory id hash to one Redis Cluster slot (scripts need that).
        return f"{self.prefix}:{{{memory_key(self, memory_id)}}}:{part}"

    # -- the versioned store protocol ---------------------------------------------------------------------

    async def load(self, memory_id: Any, *, max_messages: int | None = None) -> StoredMemory:
        keys = [self._key(memory_id, "log"), self._key(memory_id, "meta")]
        reply = await self._run(memory_id, "load", keys, ["" if max_messages is None else max_messages])
        return self._window(memory_id, reply)

    def _window(self, memory_id: Any, reply: list[Any]) -> StoredMemory:
        """What the `window` function of the scripts read: version, system message, rounds newest first
        (the script checked each row's head; the messages are checked here)."""
        version, system, *rows = reply
        try:
            messages: list[ChatMessage] = []
            if system:
                format, _, body = system.partition(b" ")
                messages += messages_of(body, format, "the system message")
            for age, row in reversed(list(enumerate(rows))):
                format, size, _user, body = row.split(b" ", 3)
                name = "the newest round" if age == 0 else f"the round {age} before the newest"
                messages += messages_of(body, format, name, size)
            return StoredMemory(messages, stored_int(version, "its version"))
        except Damaged as error:
            raise damaged(repr(self), str(memory_id), error.what) from None

    async def append(
        self,
        memory_id: Any,
        messages: Sequence[ChatMessage],
        *,
        expected_version: int | None = None,
        lease: str | None = None,
    ) -> int:
        keys = [self._key(memory_id, "log"), self._key(memory_id, "meta"), *self._lease_keys(memory_id)]
        reply = await self._run(
            memory_id, "append", keys, self._append_args(messages, expected_version, lease)
        )
        return self._appended(memory_id, reply, expected_version)

    def _append_args(
        self, messages: Sequence[ChatMessage], expected_version: int | None, lease: str | None
    ) -> list[Any]:
        """The `append` function's arguments after the keys: one encoding of the round."""
        system, rest = split_round(messages)
        row = b""
        if rest:
            user = int(isinstance(rest[0], UserMessage))
            row = b"%d %d %d " % (FORMAT, len(rest), user) + encode_messages(rest)
        return [
            "" if expected_version is None else expected_version,
            lease or "",
            0 if self.ttl is None else int(self.ttl * 1000),
            b"" if system is None else b"%d " % FORMAT + encode_messages([system]),
            row,
            uuid.uuid4().hex,  # makes a retried append (reply lost on the way back) count once
        ]

    def _appended(self, memory_id: Any, reply: list[Any], expected_version: int | None) -> int:
        status, version = reply
        if status == -1:
            raise ChatMemoryConflictError(
                f"{self!r}: the lease on memory {memory_id!r} was lost (it expired and another worker took "
                "it); this round was not stored",
                store=repr(self),
            )
        if status == -2:
            raise ChatMemoryConflictError(
                f"{self!r}: memory {memory_id!r} is at version {version}, not {expected_version}: another "
                "writer appended since it was read; this round was not stored",
                store=repr(self),
            )
        return int(version)

    async def get_messages(self, memory_id: Any) -> list[ChatMessage]:
        """Every stored message of `memory_id` (system message first)."""
        return (await self.load(memory_id)).messages

    async def delete_messages(self, memory_id: Any) -> None:
        keys = [self._key(memory_id, "log"), self._key(memory_id, "meta"), self._key(memory_id, "pending")]
        await self._run(memory_id, "delete", keys, [])

    # -- rounds waiting for approval (docs/approval.md) ------------------------------------------------------

    async def save_pending_approval(self, memory_id: Any, pending_id: str, record: str) -> None:
        """Records a paused round's check record, for a resume in any worker (`ttl` applies)."""
        ttl = 0 if self.ttl is None else int(self.ttl * 1000)
        await self._run(
            memory_id, "save_pending", [self._key(memory_id, "pending")], [pending_id, record, ttl]
        )

    async def take_pending_approval(self, memory_id: Any, pending_id: str, record: str) -> str | None:
        """The recorded check record (None if none), deleted atomically when it equals `record`: of several
        workers resuming one paused round, exactly one gets it."""
        found = await self._run(
            memory_id, "take_pending", [self._key(memory_id, "pending")], [pending_id, record]
        )
        try:
            return None if found is None else (found.decode() if isinstance(found, bytes) else str(found))
        except UnicodeDecodeError:
            what = f"the record of paused round {pending_id!r} is not UTF-8 text"
            raise damaged(repr(self), str(memory_id), what) from None

    def lease(self, memory_id: Any, *, read: bool = False, max_messages: int | None = None) -> Any:
        """Async context manager: holds the lease on `memory_id` for this worker (see docs/memory.md),
        yielding a `MemoryLease`; with `read`, the window of `max_messages` is read in the step that takes
        it."""
        return hold_lease(self, memory_id, self.lease_ttl, repr(self), read=read, max_messages=max_messages)

    # -- lease steps ----------------------------------------------------------------------------------------

    def _lease_keys(self, memory_id: Any) -> list[str]:
        return [self._key(memory_id, "lease"), self._key(memory_id, "next")]

    async def try_acquire(
        self, memory_id: Any, token: str, ttl: float, *, read: bool = False, max_messages: int | None = None
    ) -> StoredMemory | bool:
        keys = [*self._lease_keys(memory_id), self._key(memory_id, "log"), self._key(memory_id, "meta")]
        window = "" if max_messages is None else max_messages
        reply = await self._run(
            memory_id, "acquire", keys, [token, int(ttl * 1000), "1" if read else "", window]
        )
        return self._window(memory_id, reply) if isinstance(reply, list) else bool(reply)

    async def renew(self, memory_id: Any, token: str, ttl: float) -> bool:
        return bool(
            await self._run(memory_id, "renew", self._lease_keys(memory_id), [token, int(ttl * 1000)])
        )

    async def release(self, memory_id: Any, token: str, *, last: LastRound | None = None) -> int | None:
        keys = [*self._lease_keys(memory_id), self._key(memory_id, "log"), self._key(memory_id, "meta")]
        if last is None:
            await self._run(memory_id, "release", keys, [token])
            return None
        messages, expected_version = last
        expected, _, *rest = self._append_args(messages, expected_version, token)
        reply = await self._run(memory_id, "release", keys, [token, expected, *rest])  # the token goes first
        return self._appended(memory_id, reply, expected_version)

    # -- plumbing -----------------------------------------------------------------------------------------

    async def _run(self, memory_id: Any, script: str, keys: list[str], args: list[Any]) -> Any:
        """Runs one of the store's scripts on `memory_id`'s keys: natively on asyncio, through a worker
        thread elsewhere."""
        if running_on_asyncio():
            scripts = self._native_scripts()
            try:
                return await scripts[script](keys=keys, args=args)
            except self._errors as error:
                raise self._error(error, memory_id) from None
        sync = self._scripts[script]
        slots, threads = self._thread_slots()
        with anyio.move_on_after(self.pool_timeout) as waiting:
            await slots.acquire()
        if waiting.cancelled_caught:
            raise self._pool_exhausted()
        try:
            return await anyio.to_thread.run_sync(
                self._translated, lambda: sync(keys=keys, args=args), memory_id, limiter=threads
            )
        finally:
            slots.release()

    def _native_scripts(self) -> dict[str, Any]:
        """The `redis.asyncio` client of the running event loop (made on first use in each loop)."""
        import asyncio

        import redis.asyncio

        loop = asyncio.get_running_loop()
        if self._native is None or self._native[0] is not loop:
            pool = redis.asyncio.BlockingConnectionPool.from_url(
                self._url, max_connections=self.max_connections, timeout=self.pool_timeout, **self._options
            )
            client = redis.asyncio.Redis(connection_pool=pool)
            scripts = {name: client.register_script(code) for name, code in _SCRIPTS.items()}
            self._native = (loop, client, scripts)
        return self._native[2]

    def _translated(self, step: Callable[[], T], memory_id: Any) -> T:
        try:
            return step()
        except self._errors as error:
            raise self._error(error, memory_id) from None

    def _error(self, error: BaseException, memory_id: Any) -> ChatMemoryStoreError:
        text = str(error)
        if text.startswith(_DAMAGED):
            return damaged(repr(self), str(memory_id), text[len(_DAMAGED) :].split(" script: ", 1)[0])
        if text.startswith("WRONGTYPE"):
            what = f"one of its keys ({self._key(memory_id, '*')}) holds the wrong kind of Redis value"
            remedy = (
                "delete that key: `log` is a list, `meta` and `pending` hashes, `lease` and `next` strings"
            )
            return damaged(repr(self), str(memory_id), what, remedy)
        if text == "No connection available.":
            return self._pool_exhausted()
        if isinstance(error, self._connection_errors):
            return ChatMemoryStoreError(
                f"{self!r}: cannot reach Redis ({type(error).__name__}: {_safe(error)}): check that the "
                "server is running and reachable from here, and the URL",
                store=repr(self),
            )
        return ChatMemoryStoreError(
            f"{self!r}: Redis refused the request ({type(error).__name__}: {_safe(error)}): check the "
            "URL's credentials and database, and that the server allows Lua scripts",
            store=repr(self),
        )

    def _pool_exhausted(self) -> ChatMemoryStoreError:
        return ChatMemoryStoreError(
            f"{self!r}: no Redis connection became free within {self.pool_timeout:g} s: all "
            f"max_connections={self.max_connections} were in use. Raise max_connections (Redis accepts "
            "10,000 clients by default) or pool_timeout, or run fewer invocations at once",
            store=repr(self),
        )

    def _thread_slots(self) -> tuple[anyio.CapacityLimiter, anyio.CapacityLimiter]:
        """The running event loop's limiters: a slot (waited for with `pool_timeout`), then a worker thread
        (a limiter as large, so never full while a step holds a slot)."""
        loop = anyio.lowlevel.current_token()
        if self._slots is None or self._slots[0] != loop:
            self._slots = (
                loop,
                anyio.CapacityLimiter(self.max_connections),
                anyio.CapacityLimiter(self.max_connections),
            )
        return self._slots[1], self._slots[2]

    def close(self) -> None:
        """Closes the connections (those of `redis.asyncio` are dropped; `aclose()` closes them too)."""
        self._client.close()
        self._client.connection_pool.disconnect()
        self._native = None

    async def aclose(self) -> None:
        """Closes every connection."""
        native, self._native = self._native, None
        if native is not None:
            await native[1].aclose(close_connection_pool=True)
        await anyio.to_thread.run_sync(self.close)

    async def __aenter__(self) -> RedisChatMemoryStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"RedisChatMemoryStore({self.url!r})"


def _safe(error: BaseException) -> str:
    """An error's text without anything that looks like a credential (redis echoes AUTH arguments rarely)."""
    return str(error).split(" AUTH ", 1)[0][:300]
