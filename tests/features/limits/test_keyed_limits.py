"""Keyed limits: `ConcurrencyLimit` and `RateLimit` on both backends (`LocalLimiter`, and `RedisLimiter` on a
real redis-server), both anyio backends. The load test across 5 processes is
tests/features/limits/test_limits_load.py."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis

from agentloop import (
    Agent,
    ChatMessage,
    IllegalConfigurationError,
    LimiterError,
    LimitExceededError,
    RateLimitError,
    TokenUsage,
    tool,
)
from agentloop.middleware import ConcurrencyLimit, Limiter, LocalLimiter, RateLimit, RedisLimiter
from agentloop.testing import FunctionChatModel, ScriptedChatModel
from tests.runtime_helpers import calls
from tests.store_servers import redis_server

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(params=["local", "redis"])
async def limiter(request: pytest.FixtureRequest) -> AsyncIterator[Limiter]:
    if request.param == "local":
        yield LocalLimiter()
        return
    url = request.getfixturevalue("redis_url")
    backend = RedisLimiter(url, prefix=f"test-{uuid.uuid4().hex}", poll=0.02)
    try:
        yield backend
    finally:
        await backend.aclose()


class Gauge:
    """How many calls are inside at once, and the most ever seen, per key."""

    def __init__(self) -> None:
        self.now: dict[str, int] = {}
        self.most: dict[str, int] = {}

    async def reached(self, key: str, count: int) -> None:
        """Returns once `count` calls of `key` are inside (fails after 10 s: one too many never leaves)."""
        with anyio.fail_after(10):
            while self.now.get(key, 0) < count:
                await anyio.sleep(0.005)
        assert self.now[key] == count

    async def inside(self, key: str, gate: anyio.Event | None = None) -> None:
        self.now[key] = self.now.get(key, 0) + 1
        self.most[key] = max(self.most.get(key, 0), self.now[key])
        try:
            if gate is not None:
                await gate.wait()
            for _ in range(5):
                await anyio.sleep(0.002)  # a model at work: the others get to run meanwhile
        finally:
            self.now[key] -= 1


def tenant(call: Any) -> str:
    return str(call.context.context["tenant"])


def gauged_agent(gauge: Gauge, middleware: Any, gates: dict[str, anyio.Event] | None = None) -> Agent:
    async def answer(messages: list[ChatMessage], tools: Any) -> str:
        key = str(messages[-1].text).split(":")[0]
        await gauge.inside(key, (gates or {}).get(key))
        return "done"

    return Agent(FunctionChatModel(answer), middleware=middleware)


async def test_concurrent_invocations_of_one_key_never_exceed_the_limit(limiter: Limiter) -> None:
    gauge = Gauge()
    agent = gauged_agent(gauge, [ConcurrencyLimit(2, backend=limiter)])
    async with anyio.create_task_group() as group:
        for n in range(12):
            group.start_soon(agent.chat, f"all:{n}")
    assert gauge.most == {"all": 2}
    assert gauge.now == {"all": 0}


async def test_each_key_has_its_own_slots_and_a_busy_key_does_not_hold_up_another(limiter: Limiter) -> None:
    gauge = Gauge()
    gates = {"a": anyio.Event()}
    agent = gauged_agent(gauge, [ConcurrencyLimit(1, key=tenant, backend=limiter)], gates)
    async with anyio.create_task_group() as group:
        for n in range(3):
            group.start_soon(lambda n=n: agent.chat(f"a:{n}", context={"tenant": "a"}))
        # tenant a's first invocation holds its only slot until the gate opens; b's run meanwhile
        await gauge.reached("a", 1)
        for n in range(3):
            result = await agent.chat(f"b:{n}", context={"tenant": "b"})
            assert result.content == "done"
        assert gauge.now["a"] == 1
        gates["a"].set()
    assert gauge.most == {"a": 1, "b": 1}


async def test_waiting_past_the_timeout_raises_naming_the_key_and_the_limit(limiter: Limiter) -> None:
    gauge = Gauge()
    gates = {"a": anyio.Event()}
    limit = ConcurrencyLimit(1, key=tenant, timeout=0.2, backend=limiter)
    agent = gauged_agent(gauge, [limit], gates)
    async with anyio.create_task_group() as group:
        group.start_soon(lambda: agent.chat("a:holder", context={"tenant": "a"}))
        await gauge.reached("a", 1)
        with pytest.raises(LimitExceededError) as raised:
            await agent.chat("a:late", context={"tenant": "a"})
        gates["a"].set()
    assert raised.value.key == "a"
    assert raised.value.limit == 1
    assert raised.value.timeout == 0.2
    assert "'a'" in str(raised.value) and "1 invocation slot" in str(raised.value)
    assert isinstance(raised.value, TimeoutError)
    # nothing leaked: the slot is free again
    result = await agent.chat("a:after", context={"tenant": "a"})
    assert result.content == "done"


async def test_cancelled_while_waiting_takes_nothing_and_leaks_no_slot(limiter: Limiter) -> None:
    gauge = Gauge()
    gates = {"a": anyio.Event()}
    agent = gauged_agent(gauge, [ConcurrencyLimit(1, backend=limiter)], gates)
    async with anyio.create_task_group() as group:
        group.start_soon(lambda: agent.chat("a:holder"))
        await gauge.reached("a", 1)
        with anyio.CancelScope() as waiting:

            async def wait_then_cancel() -> None:
                await anyio.sleep(0.05)
                waiting.cancel()

            group.start_soon(wait_then_cancel)
            await agent.chat("a:cancelled")
        assert waiting.cancelled_caught
        assert gauge.most["a"] == 1  # the cancelled one never ran next to the holder
        gates["a"].set()
    assert gauge.now == {"a": 0}
    for n in range(3):  # one slot, handed on each time: none is lost to the cancelled waiter
        with anyio.fail_after(10):
            await agent.chat(f"a:{n}")
    if isinstance(limiter, RedisLimiter):
        client = redis.Redis.from_url(limiter._url)
        assert all(client.zcard(key) == 0 for key in client.keys(f"{limiter.prefix}:limit:*:holders"))
        assert all(client.zcard(key) == 0 for key in client.keys(f"{limiter.prefix}:limit:*:waiters"))
        client.close()


async def test_on_tool_limits_the_tool_calls_of_one_response(limiter: Limiter) -> None:
    gauge = Gauge()

    @tool
    async def work(n: int) -> int:
        """Works on n."""
        await gauge.inside("tool")
        return n

    model = ScriptedChatModel([calls(*[("work", {"n": n}) for n in range(5)]), "all done"])
    agent = Agent(model, tools=[work], middleware=[ConcurrencyLimit(2, on="tool", backend=limiter)])
    result = await agent.chat("go")
    assert result.content == "all done"
    assert gauge.most == {"tool": 2}


async def test_on_model_limits_model_calls_not_invocations(limiter: Limiter) -> None:
    gauge = Gauge()
    agent = gauged_agent(gauge, [ConcurrencyLimit(1, on="model", backend=limiter)])
    async with anyio.create_task_group() as group:
        for n in range(4):
            group.start_soon(agent.chat, f"m:{n}")
    assert gauge.most == {"m": 1}


async def test_requests_per_minute_holds_back_the_request_past_the_budget(limiter: Limiter) -> None:
    model = ScriptedChatModel(["one", "two", "three", "other"])
    agent = Agent(model, middleware=[RateLimit(requests_per_minute=2, key=lambda call: "k", backend=limiter)])
    assert (await agent.chat("1")).content == "one"
    assert (await agent.chat("2")).content == "two"
    with anyio.move_on_after(0.3) as waiting:  # the third would go a minute after the first
        await agent.chat("3")
    assert waiting.cancelled_caught
    assert len(model.requests) == 2


async def test_tokens_per_minute_counts_what_the_calls_used(limiter: Limiter) -> None:
    used = TokenUsage(input_tokens=60, output_tokens=40)
    model = ScriptedChatModel(["a", "b", "c"], token_usage=used)
    agent = Agent(model, middleware=[RateLimit(tokens_per_minute=150, backend=limiter)])
    await agent.chat("1")  # 0 used before: goes
    await agent.chat("2")  # 100 used: still under 150, goes
    with anyio.move_on_after(0.3) as waiting:  # 200 used: waits for the minute
        await agent.chat("3")
    assert waiting.cancelled_caught
    assert len(model.requests) == 2


async def test_a_429_with_retry_after_pauses_the_key_for_everyone_sharing_the_backend(
    limiter: Limiter, redis_url: str
) -> None:
    refused = RateLimitError("slow down", status_code=429, retry_after=30.0, provider="openai")
    model = ScriptedChatModel([refused, "other tenant", "never"])
    limit = RateLimit(requests_per_minute=100, key=tenant, backend=limiter)
    agent = Agent(model, middleware=[limit])
    with pytest.raises(RateLimitError):
        await agent.chat("1", context={"tenant": "a"})
    assert (await agent.chat("2", context={"tenant": "b"})).content == "other tenant"
    # another worker sharing the backend (a second RedisLimiter on the same Redis, or this process's one)
    other = limiter
    if isinstance(limiter, RedisLimiter):
        other = RedisLimiter(redis_url, prefix=limiter.prefix)
    try:
        elsewhere = Agent(model, middleware=[RateLimit(requests_per_minute=100, key=tenant, backend=other)])
        with anyio.move_on_after(0.3) as waiting:
            await elsewhere.chat("3", context={"tenant": "a"})
        assert waiting.cancelled_caught
    finally:
        if isinstance(other, RedisLimiter) and other is not limiter:
            await other.aclose()
    assert len(model.requests) == 2


_CRASHING_WORKER = """
import sys, anyio
from agentloop.middleware import RedisLimiter

async def main():
    limiter = RedisLimiter(sys.argv[1], prefix=sys.argv[2], lease_ttl=0.5)
    async with limiter.slot("concurrency:invocation:global", 1, timeout=10):
        print("held", flush=True)
        await anyio.sleep(3600)

anyio.run(main)
"""


async def test_a_crashed_workers_slot_comes_free_when_its_lease_expires(redis_url: str) -> None:
    prefix = f"test-{uuid.uuid4().hex}"
    worker = subprocess.Popen(
        [sys.executable, "-c", _CRASHING_WORKER, redis_url, prefix],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[3],
    )
    try:
        assert worker.stdout is not None
        line = await anyio.to_thread.run_sync(worker.stdout.readline)
        assert line.strip() == "held"
        limiter = RedisLimiter(redis_url, prefix=prefix, lease_ttl=0.5)
        agent = Agent(
            ScriptedChatModel(["after", "again"]), middleware=[ConcurrencyLimit(1, backend=limiter)]
        )
        with pytest.raises(LimitExceededError):  # the live worker holds the one slot (renewing its lease)
            await ConcurrencyLimit(1, timeout=0.8, backend=limiter).wrap_invocation(_call(), _never)
        worker.kill()  # no release: only the lease's expiry frees the slot
        worker.wait()
        with anyio.fail_after(10):
            assert (await agent.chat("x")).content == "after"
        await limiter.aclose()
    finally:
        worker.kill()
        worker.wait()


def _call() -> Any:
    from agentloop import UserMessage
    from agentloop.middleware import CallContext, InvocationCall

    return InvocationCall(UserMessage("x"), CallContext(None, "inv", None, {}))


async def _never(call: Any) -> Any:
    raise AssertionError("the call must not start without a slot")


def test_bad_settings_are_refused_with_what_to_pass() -> None:
    with pytest.raises(IllegalConfigurationError, match=r"ConcurrencyLimit\(limit\) must be an int >= 1"):
        ConcurrencyLimit(0)
    with pytest.raises(IllegalConfigurationError, match=r"on=...\) must be one of"):
        ConcurrencyLimit(1, on="everything")  # type: ignore[arg-type]
    with pytest.raises(IllegalConfigurationError, match=r"timeout=...\) must be seconds > 0"):
        ConcurrencyLimit(1, timeout=0)
    with pytest.raises(IllegalConfigurationError, match=r"backend=...\) must be a limiter"):
        ConcurrencyLimit(1, backend="redis://x")  # type: ignore[arg-type]
    with pytest.raises(IllegalConfigurationError, match=r"key=...\) must be a function"):
        RateLimit(requests_per_minute=1, key="tenant")  # type: ignore[arg-type]
    with pytest.raises(IllegalConfigurationError, match=r"needs requests_per_minute"):
        RateLimit()
    with pytest.raises(IllegalConfigurationError, match=r"tokens_per_minute=...\) must be an int >= 1"):
        RateLimit(tokens_per_minute=-5)


async def test_a_key_function_returning_no_str_is_named() -> None:
    agent = Agent(ScriptedChatModel(["x"]), middleware=[ConcurrencyLimit(1, key=lambda call: None)])  # type: ignore[arg-type,return-value]
    with pytest.raises(IllegalConfigurationError, match=r"key\(call\) must return a non-empty str"):
        await agent.chat("x")


def test_the_redis_url_password_stays_out_of_the_repr(redis_url: str) -> None:
    limiter = RedisLimiter(redis_url.replace("redis://", "redis://user:s3cret@"))
    assert "s3cret" not in repr(limiter)
    assert "s3cret" not in repr(ConcurrencyLimit(1, backend=limiter))


def test_imports_stay_lazy_and_a_missing_extra_says_what_to_install() -> None:
    """`agentloop` and `agentloop.middleware` load neither redis nor a2a-sdk; without the extras, the error
    names the extra to install."""
    code = (
        "import sys, agentloop, agentloop.middleware\n"
        "assert 'redis' not in sys.modules and 'a2a' not in sys.modules\n"
        "agentloop.middleware.RedisLimiter\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    without = (
        "import sys; sys.modules['redis'] = None; sys.modules['a2a'] = None\n"
        "from agentloop.middleware import RedisLimiter\n"
        "try:\n"
        "    RedisLimiter('redis://127.0.0.1:1/0')\n"
        "except ImportError as error:\n"
        "    assert \"pip install 'agentloop-runtime[redis]'\" in str(error), error\n"
        "else:\n"
        "    raise AssertionError('no ImportError')\n"
        "try:\n"
        "    import agentloop.a2a\n"
        "except ImportError as error:\n"
        "    assert \"pip install 'agentloop-runtime[a2a]'\" in str(error), error\n"
        "else:\n"
        "    raise AssertionError('no ImportError')\n"
    )
    subprocess.run([sys.executable, "-c", without], check=True)


async def test_an_unreachable_redis_is_named_without_its_password() -> None:
    limiter = RedisLimiter("redis://user:s3cret@127.0.0.1:1/0", timeout=0.5)
    agent = Agent(ScriptedChatModel(["never"]), middleware=[ConcurrencyLimit(1, backend=limiter)])
    with pytest.raises(LimiterError) as raised:
        await agent.chat("x")
    assert "redis://user:***@127.0.0.1:1/0" in str(raised.value)
    assert "s3cret" not in str(raised.value) and "s3cret" not in raised.value.backend
    assert "check that the server is running" in str(raised.value)
    await limiter.aclose()


async def test_a_providers_429_over_http_pauses_the_key_through_its_retry_after(redis_url: str) -> None:
    """The whole path: the OpenAI client reads the fake server's 429 and its Retry-After header
    (`ModelError.retry_after`), `RateLimit` pauses the key in Redis, and another worker's call waits."""
    from agentloop.models import OpenAIChatModel
    from agentloop.testing import FakeOpenAIServer

    prefix = f"test-{uuid.uuid4().hex}"
    here, there = RedisLimiter(redis_url, prefix=prefix), RedisLimiter(redis_url, prefix=prefix)
    script = [FakeOpenAIServer.error(429, "slow down", headers=[("retry-after", "30")]), "never sent"]
    async with FakeOpenAIServer(script) as server:
        model = OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key="sk-test", max_retries=0)
        by_model = RateLimit(requests_per_minute=1000, key=lambda call: "gpt-4o-mini", backend=here)
        with pytest.raises(RateLimitError) as raised:
            await Agent(model, middleware=[by_model]).chat("hi")
        assert raised.value.retry_after == 30.0
        elsewhere = RateLimit(requests_per_minute=1000, key=lambda call: "gpt-4o-mini", backend=there)
        with anyio.move_on_after(0.5) as waiting:
            await Agent(model, middleware=[elsewhere]).chat("hi")
        assert waiting.cancelled_caught
        assert len(server.requests) == 1  # the paused key sent nothing more
    await here.aclose()
    await there.aclose()
