"""`RedisRunControl`: run control shared by processes on any machine through one Redis.

A running invocation holds a key with a lease (renewed by its inbox while it reads; a crashed process's
key lapses) and a list, its inbox. Sending is one Lua script: it pushes the command onto the inbox of each
live invocation it names and returns how many there were, so "delivered" and "running" cannot disagree.
On asyncio the inbox waits with `BLPOP` on `redis.asyncio`; on trio (which `redis.asyncio` does not
support) it polls with `LPOP` every `poll_interval` seconds through the sync client in worker threads.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio

from .._backend import running_on_asyncio
from .._values._errors import RunControlError
from ._base import Inbox, check_target
from ._command import RunCommand, decode_command, encode_command

__all__ = ["RedisRunControl"]

T = TypeVar("T")

# keys: the run's key, its memory id's set (or the run key again when it has none); args: ttl ms, memory key
_REGISTER = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[1])
if KEYS[2] ~= KEYS[1] then
  redis.call('SADD', KEYS[2], ARGV[3])
  redis.call('PEXPIRE', KEYS[2], ARGV[1])
end
return 1
"""

# keys: the run's key, its inbox, its memory id's set (or the run key again); args: the invocation id
_UNREGISTER = """
redis.call('DEL', KEYS[1], KEYS[2])
if KEYS[3] ~= KEYS[1] then redis.call('SREM', KEYS[3], ARGV[1]) end
return 1
"""

# keys: the run's key, its inbox, its memory id's set (or the run key again); args: ttl ms
_RENEW = """
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
if KEYS[3] ~= KEYS[1] then redis.call('PEXPIRE', KEYS[3], ARGV[1]) end
return 1
"""

# keys: none; args: key prefix, 'inv' or 'mem', the target, the command, ttl ms
_SEND = """
local prefix, kind, target, body, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local ids
if kind == 'inv' then ids = {target} else ids = redis.call('SMEMBERS', prefix .. 'mem:' .. target) end
local delivered = 0
for _, id in ipairs(ids) do
  if redis.call('EXISTS', prefix .. 'inv:' .. id) == 1 then
    redis.call('RPUSH', prefix .. 'inbox:' .. id, body)
    redis.call('PEXPIRE', prefix .. 'inbox:' .. id, ttl)
    delivered = delivered + 1
  elseif kind == 'mem' then
    redis.call('SREM', prefix .. 'mem:' .. target, id)
  end
end
return delivered
"""

# keys: the memory id's set; args: key prefix. How many of its invocations are alive (dead ones pruned).
_BUSY = """
local alive = 0
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('EXISTS', ARGV[1] .. 'inv:' .. id) == 1 then alive = alive + 1
  else redis.call('SREM', KEYS[1], id) end
end
return alive
"""


class RedisRunControl:
    """Reaches the invocations running in any process connected to the same Redis (extra `redis`).

    `lease_ttl`: seconds a registration lives without renewal; `poll_interval`: how often an inbox looks for
    commands on trio (on asyncio it waits on the server); `prefix`: the keys' prefix.
    """

    def __init__(
        self,
        url: str,
        *,
        lease_ttl: float = 10.0,
        poll_interval: float = 0.05,
        prefix: str = "agentloop:run:",
    ) -> None:
        try:
            import redis
        except ImportError:  # pragma: no cover - the extra is missing
            raise ImportError(
                "RedisRunControl needs the redis client: pip install 'agentloop-runtime[redis]'"
            ) from None
        if lease_ttl <= 0 or poll_interval <= 0:
            raise ValueError("RedisRunControl: lease_ttl and poll_interval must be > 0 seconds")
        self.lease_ttl = lease_ttl
        self.poll_interval = poll_interval
        self._prefix = prefix
        self._url = url
        self._client = redis.Redis.from_url(url, socket_connect_timeout=5)
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError,)
        self._scripts = {
            name: self._client.register_script(code)
            for name, code in (
                ("register", _REGISTER),
                ("unregister", _UNREGISTER),
                ("renew", _RENEW),
                ("send", _SEND),
                ("busy", _BUSY),
            )
        }
        self._native: tuple[object, Any] | None = None  # (event loop, redis.asyncio client)
        self._limiter = anyio.CapacityLimiter(8)

    def _keys(self, invocation_id: str, memory_id: Any) -> tuple[str, str, str]:
        run = f"{self._prefix}inv:{invocation_id}"
        memory = run if memory_id is None else f"{self._prefix}mem:{memory_id}"
        return run, f"{self._prefix}inbox:{invocation_id}", memory

    @asynccontextmanager
    async def running(self, invocation_id: str, memory_id: Any = None) -> AsyncIterator[Inbox]:
        run, inbox, memory = self._keys(invocation_id, memory_id)
        ttl = int(self.lease_ttl * 1000)
        key = "" if memory_id is None else str(memory_id)
        registered = await self._call(self._scripts["register"], [run, memory], [ttl, key, invocation_id])
        if not registered:
            raise ValueError(
                f"RedisRunControl: invocation {invocation_id!r} is already registered as running"
            )
        try:
            yield _RedisInbox(self, run, inbox, memory)
        finally:
            with anyio.CancelScope(shield=True):
                await self._call(self._scripts["unregister"], [run, inbox, memory], [invocation_id])

    async def send(
        self, command: RunCommand, *, invocation_id: str | None = None, memory_id: Any = None
    ) -> bool:
        check_target("RedisRunControl", invocation_id, memory_id)
        kind, target = ("inv", invocation_id) if invocation_id is not None else ("mem", str(memory_id))
        body = encode_command(command)
        args = [self._prefix, kind, target, body, int(self.lease_ttl * 1000)]
        return bool(await self._call(self._scripts["send"], [], args))

    async def busy(self, memory_id: Any) -> bool:
        memory = f"{self._prefix}mem:{memory_id}"
        return bool(await self._call(self._scripts["busy"], [memory], [self._prefix]))

    async def renew(self, run: str, inbox: str, memory: str) -> None:
        """Renews a registration (its key, inbox and memory id's set)."""
        await self._call(self._scripts["renew"], [run, inbox, memory], [int(self.lease_ttl * 1000)])

    async def pop(self, inbox: str, wait: float) -> RunCommand | None:
        """The oldest command of `inbox`, removed: waiting up to `wait` s on asyncio, not at all on trio."""
        if running_on_asyncio():
            try:
                popped = await self._native_client().blpop([inbox], timeout=wait)
            except self._errors as error:
                raise self._error(error) from None
            body = None if popped is None else popped[1]
        else:
            body = await self._thread(lambda: self._client.lpop(inbox))
        return None if body is None else decode_command(body)

    async def take(self, inbox: str) -> RunCommand | None:
        """The oldest command of `inbox`, removed, or None at once when there is none."""
        body: Any = await self._thread(lambda: self._client.lpop(inbox))
        return None if body is None else decode_command(body)

    async def _call(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        return await self._thread(lambda: script(keys=keys, args=args))

    async def _thread(self, step: Callable[[], T]) -> T:
        def guarded() -> T:
            try:
                return step()
            except self._errors as error:
                raise self._error(error) from None

        return await anyio.to_thread.run_sync(guarded, limiter=self._limiter)

    def _native_client(self) -> Any:
        """The `redis.asyncio` client of the running event loop (made on first use in each loop)."""
        import asyncio

        import redis.asyncio

        loop = asyncio.get_running_loop()
        if self._native is None or self._native[0] is not loop:
            self._native = (loop, redis.asyncio.Redis.from_url(self._url, socket_connect_timeout=5))
        return self._native[1]

    def _error(self, error: BaseException) -> RunControlError:
        return RunControlError(f"RedisRunControl: the Redis server failed: {type(error).__name__}: {error}")

    def close(self) -> None:
        """Closes the sync client's connections (the asyncio client's are dropped with its event loop)."""
        self._client.close()

    def __repr__(self) -> str:
        return f"RedisRunControl(prefix={self._prefix!r})"


class _RedisInbox:
    """An inbox on a Redis list; each wait also renews the registration every third of its lease."""

    __slots__ = ("_control", "_inbox", "_memory", "_renewed", "_run")

    def __init__(self, control: RedisRunControl, run: str, inbox: str, memory: str) -> None:
        self._control = control
        self._run, self._inbox, self._memory = run, inbox, memory
        self._renewed = anyio.current_time()

    async def poll(self) -> RunCommand | None:
        return await self._control.take(self._inbox)

    async def receive(self) -> RunCommand:
        control = self._control
        period = control.lease_ttl / 3
        while True:
            if anyio.current_time() - self._renewed >= period:
                await control.renew(self._run, self._inbox, self._memory)
                self._renewed = anyio.current_time()
            wait = max(0.01, period - (anyio.current_time() - self._renewed))
            command = await control.pop(self._inbox, wait)
            if command is not None:
                return command
            if not running_on_asyncio():
                await anyio.sleep(control.poll_interval)
