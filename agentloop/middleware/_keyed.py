"""`ConcurrencyLimit` and `RateLimit`: limits shared by every invocation with the same key (a tenant, a user,
a model), in one process (`LocalLimiter`) or across workers (`RedisLimiter`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import anyio

from .._runtime._seam import (
    InvocationCall,
    Middleware,
    ModelCall,
    NextInvocation,
    NextModelCall,
    NextToolCall,
    ToolCall,
)
from .._tools._execution import ToolExecution
from .._values._errors import IllegalConfigurationError, LimitExceededError, ModelError
from .._values._messages import ChatResponse
from .._values._result import Result
from ._limiter import Limiter, LocalLimiter

__all__ = ["ConcurrencyLimit", "RateLimit"]

GLOBAL_KEY = "global"
"""The key of every call when no `key=` function is given."""

_ON = ("invocation", "model", "tool")


def _positive(what: str, value: Any, *, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise IllegalConfigurationError(f"{what} must be an int >= 1, got {value!r}")


def _backend(backend: Any, what: str) -> Limiter:
    if backend is None:
        return LocalLimiter()
    if not isinstance(backend, Limiter):
        raise IllegalConfigurationError(
            f"{what}(backend=...) must be a limiter (agentloop.middleware.LocalLimiter or RedisLimiter), "
            f"got {type(backend).__name__}"
        )
    return backend


def _key_function(key: Any, what: str) -> Callable[[Any], str] | None:
    if key is not None and not callable(key):
        raise IllegalConfigurationError(
            f"{what}(key=...) must be a function of the call returning a str (e.g. "
            f"lambda call: call.context.context['tenant']), got {type(key).__name__}"
        )
    function: Callable[[Any], str] | None = key
    return function


def _key_of(key: Callable[[Any], str] | None, call: Any, what: str) -> str:
    if key is None:
        return GLOBAL_KEY
    value = key(call)
    if not isinstance(value, str) or not value:
        raise IllegalConfigurationError(f"{what}: key(call) must return a non-empty str, got {value!r}")
    return value


class ConcurrencyLimit(Middleware):
    """At most `limit` invocations, model calls or tool calls (`on=`) run at once per key.

    `key(call) -> str` picks the key from the call (an `InvocationCall`, `ModelCall` or `ToolCall`, after
    `on`; in each, `call.context.context` is the `context=` given to `chat()`, the usual place for a
    tenant); without it every call shares one key. A call waits for a slot, first come first served within its
    key; keys never wait for each other. Waiting longer than `timeout` seconds raises `LimitExceededError`
    naming the key and the limit (the call never started). `backend=RedisLimiter(url)` shares the slots
    with every process using the same Redis; the default `LocalLimiter()` keeps them in this process.
    """

    allows_eager_tools = True  # it only waits before the call; the response passes as it is

    def __init__(
        self,
        limit: int,
        *,
        key: Callable[[Any], str] | None = None,
        on: Literal["invocation", "model", "tool"] = "invocation",
        timeout: float | None = None,
        backend: Limiter | None = None,
    ) -> None:
        _positive("ConcurrencyLimit(limit)", limit, allow_none=False)
        if on not in _ON:
            raise IllegalConfigurationError(f"ConcurrencyLimit(on=...) must be one of {_ON}, got {on!r}")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0
        ):
            raise IllegalConfigurationError(
                f"ConcurrencyLimit(timeout=...) must be seconds > 0, got {timeout!r}"
            )
        self.limit = limit
        self.on = on
        self.timeout = timeout
        self.key = _key_function(key, "ConcurrencyLimit")
        self.backend = _backend(backend, "ConcurrencyLimit")

    def __repr__(self) -> str:
        return (
            f"ConcurrencyLimit({self.limit}, on={self.on!r}, timeout={self.timeout!r}, "
            f"backend={self.backend!r})"
        )

    async def _run(self, call: Any, call_next: Callable[[Any], Any]) -> Any:
        key = _key_of(self.key, call, "ConcurrencyLimit")
        entered = False
        try:
            async with self.backend.slot(f"concurrency:{self.on}:{key}", self.limit, timeout=self.timeout):
                entered = True
                return await call_next(call)
        except TimeoutError:
            if entered:
                raise
        raise LimitExceededError(
            f"ConcurrencyLimit: key {key!r} waited {self.timeout} s for one of its {self.limit} {self.on} "
            "slot(s), all busy; raise the limit or the timeout, or spread the load over more keys",
            key=key,
            limit=self.limit,
            timeout=float(self.timeout or 0),
        )

    async def wrap_invocation(self, call: InvocationCall, call_next: NextInvocation) -> Result[Any]:
        if self.on != "invocation":
            return await call_next(call)
        result: Result[Any] = await self._run(call, call_next)
        return result

    async def wrap_model_call(self, call: ModelCall, call_next: NextModelCall) -> ChatResponse:
        if self.on != "model":
            return await call_next(call)
        response: ChatResponse = await self._run(call, call_next)
        return response

    async def wrap_tool_call(self, call: ToolCall, call_next: NextToolCall) -> ToolExecution:
        if self.on != "tool":
            return await call_next(call)
        execution: ToolExecution = await self._run(call, call_next)
        return execution


class RateLimit(Middleware):
    """Model requests per key under `requests_per_minute` and `tokens_per_minute` (a sliding minute).

    Before each model call the limiter waits until the key is under both budgets, then counts the request;
    when the call returns, its usage (input + output tokens) counts against `tokens_per_minute`, so the
    calls after one that used the budget wait until the minute allows them (a call's tokens are known only
    once it returned: calls already admitted may together go past the budget once). A provider's 429 with
    `Retry-After` pauses the key for that long, for every process sharing the backend; the error itself is
    raised as before (the model's own retries have run). `key(call) -> str` gets the `ModelCall`.
    """

    allows_eager_tools = True  # it only waits before the call; the response passes as it is

    def __init__(
        self,
        *,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        key: Callable[[ModelCall], str] | None = None,
        backend: Limiter | None = None,
    ) -> None:
        _positive("RateLimit(requests_per_minute=...)", requests_per_minute)
        _positive("RateLimit(tokens_per_minute=...)", tokens_per_minute)
        if requests_per_minute is None and tokens_per_minute is None:
            raise IllegalConfigurationError(
                "RateLimit needs requests_per_minute=..., tokens_per_minute=... or both"
            )
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self.key = _key_function(key, "RateLimit")
        self.backend = _backend(backend, "RateLimit")

    def __repr__(self) -> str:
        return (
            f"RateLimit(requests_per_minute={self.requests_per_minute!r}, "
            f"tokens_per_minute={self.tokens_per_minute!r}, backend={self.backend!r})"
        )

    async def wrap_model_call(self, call: ModelCall, call_next: NextModelCall) -> ChatResponse:
        key = f"rate:{_key_of(self.key, call, 'RateLimit')}"
        await self.backend.admit(
            key, requests_per_minute=self.requests_per_minute, tokens_per_minute=self.tokens_per_minute
        )
        try:
            response = await call_next(call)
        except ModelError as error:
            wait = error.retry_after
            if error.status_code == 429 and wait is not None and math.isfinite(wait):
                with anyio.CancelScope(shield=True):
                    await self.backend.pause(key, wait)
            raise
        usage = response.token_usage
        if usage is not None and self.tokens_per_minute is not None:
            await self.backend.record_tokens(
                key, usage.total_tokens or usage.input_tokens + usage.output_tokens
            )
        return response
