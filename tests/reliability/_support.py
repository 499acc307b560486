"""What every reliability test shares: the planted key, the ledger the report is made from, and the checks
that nothing leaked (tasks, connections) and that memory stays valid for a provider.

Each test declares the fault it injects through the `fault` fixture (`fault.declare(...)`) and runs the
checks through it (`fault.check_tasks(...)`, `await fault.check_connections(...)`, `fault.check_memory(...)`),
so the counts in `docs/reliability.md` are what the checks found, not what someone typed.
"""

from __future__ import annotations

import asyncio
import traceback
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from agentloop import AiMessage, PartialResponse, Result, ToolExecutionResultMessage, UserMessage
from agentloop._values._messages import ChatMessage

PLANTED_KEY = "sk-PLANTED-7f3c9a1e5b2d4f60a8c1e9d7b3a5f2c4"
"""An API key planted in the providers' environment variables and passed to every provider model of the
suite; it must never show in an error, a repr, a log record or a request body."""

CHECKS = (
    "tasks_checked",
    "tasks_leaked",
    "connections_checked",
    "connections_leaked",
    "memories_checked",
    "memories_invalid",
)


@dataclass
class FaultRecord:
    """One injected fault, as one test case saw it."""

    nodeid: str
    category: str
    fault: str
    expected: str
    provider: str = "-"
    mode: str = "-"
    backend: str = "-"
    passed: bool | None = None
    counts: Counter[str] = field(default_factory=Counter)

    def as_json(self) -> dict[str, Any]:
        return {
            "nodeid": self.nodeid,
            "category": self.category,
            "fault": self.fault,
            "expected": self.expected,
            "provider": self.provider,
            "mode": self.mode,
            "backend": self.backend,
            "passed": self.passed,
            **{name: self.counts[name] for name in CHECKS},
            **{name: n for name, n in self.counts.items() if name not in CHECKS},
        }


class Ledger:
    """Everything the suite tried and checked, and every text it must scan for the planted key."""

    def __init__(self) -> None:
        self.records: dict[str, FaultRecord] = {}
        self.texts: list[tuple[str, str]] = []  # (where it came from, text)

    def scan(self, source: str, *items: Any) -> None:
        """Keeps the text forms of `items` (errors with their causes and tracebacks, reprs) for the final
        check that the planted key appears in none of them."""
        for item in items:
            for text in _texts_of(item):
                self.texts.append((source, text))

    def leaks(self) -> list[str]:
        return [source for source, text in self.texts if PLANTED_KEY in text]

    def totals(self) -> dict[str, int]:
        """Every count of every record, summed (each check's name always present)."""
        totals: Counter[str] = Counter({name: 0 for name in CHECKS})
        for record in self.records.values():
            totals.update(record.counts)
        return dict(totals)


LEDGER = Ledger()


def _texts_of(item: Any) -> Iterable[str]:
    if isinstance(item, str):
        yield item
        return
    if isinstance(item, BaseException):
        seen: set[int] = set()
        error: BaseException | None = item
        while error is not None and id(error) not in seen:
            seen.add(id(error))
            yield str(error)
            yield repr(error)
            for name in ("message", "provider_message"):
                value = getattr(error, name, None)
                if isinstance(value, str):
                    yield value
            error = error.__cause__ or error.__context__
        yield "".join(traceback.format_exception(type(item), item, item.__traceback__))
        return
    yield repr(item)


class Fault:
    """The `fault` fixture: declares what a test injects and runs the leak and memory checks."""

    def __init__(self, nodeid: str, backend: str) -> None:
        self.nodeid = nodeid
        self.backend = backend
        self.record: FaultRecord | None = None

    def declare(
        self, category: str, fault: str, expected: str, *, provider: str = "-", mode: str = "-"
    ) -> None:
        self.record = FaultRecord(self.nodeid, category, fault, expected, provider, mode, self.backend)
        LEDGER.records[self.nodeid] = self.record

    def _count(self, name: str, n: int = 1) -> None:
        assert self.record is not None, "declare the fault first"
        self.record.counts[name] += n

    def scan(self, *items: Any) -> None:
        LEDGER.scan(self.nodeid, *items)

    # -- tasks ----------------------------------------------------------------------------------------------

    def check_tasks(self, before: set[Any]) -> None:
        """No task runs now that did not run at `before` (a `running_tasks()` snapshot)."""
        leaked = running_tasks() - before
        self._count("tasks_checked")
        self._count("tasks_leaked", len(leaked))
        assert not leaked, f"tasks still running: {leaked}"

    # -- connections -----------------------------------------------------------------------------------------

    async def check_connections(self, model: Any, server: Any) -> None:
        """No request holds a pooled connection; once the model is closed, the server sees no connection."""
        active = checked_out(model)
        await model.aclose()
        left = await server_connections_after_close(server)
        self._count("connections_checked")
        self._count("connections_leaked", active + left)
        assert active == 0, f"{active} connections still checked out of the pool"
        assert left == 0, f"the server still has {left} open connections after model.aclose()"

    # -- memory ----------------------------------------------------------------------------------------------

    def check_memory(self, messages: Sequence[ChatMessage]) -> None:
        """`messages` are valid for a provider: every tool call answered by exactly its results."""
        problem = memory_problem(messages)
        self._count("memories_checked")
        if problem is not None:
            self._count("memories_invalid")
        assert problem is None, problem


def running_tasks() -> set[Any]:
    """Every task of the running event loop (asyncio), or of trio's whole task tree."""
    try:
        return set(asyncio.all_tasks())
    except RuntimeError:  # no asyncio loop running: trio
        import trio

    tasks: set[Any] = set()
    pending = [trio.lowlevel.current_root_task()]
    while pending:
        task = pending.pop()
        if task is None or task in tasks:
            continue
        tasks.add(task)
        for nursery in task.child_nurseries:
            pending.extend(nursery.child_tasks)
    return tasks


def checked_out(model: Any) -> int:
    """How many requests hold a connection of `model`'s pool right now (0 when no client was made)."""
    total = 0
    for client in model._http.clients:  # the pools' bookkeeping is the only place this can be read
        pool = client._transport._pool
        busy = sum(1 for c in pool.connections if not (c.is_idle() or c.is_closed()))
        total += len(pool._requests) + busy
    return total + sum(shard.in_flight for shard in model._http._shards)


async def server_connections_after_close(server: Any, *, within: float = 5.0) -> int:
    """The server's open connections once it noticed the client closed them (its threads poll)."""
    with anyio.move_on_after(within):
        while server.open_connections:
            await anyio.sleep(0.01)
    return int(server.open_connections)


def memory_problem(messages: Sequence[ChatMessage]) -> str | None:
    """What makes `messages` invalid for a provider, or None."""
    pending: list[str | None] = []
    for n, message in enumerate(messages):
        if isinstance(message, ToolExecutionResultMessage):
            if message.id not in pending:
                return f"message {n}: a result without its call: {message!r}"
            pending.remove(message.id)
            continue
        if pending:
            return f"message {n}: tool calls {pending} have no result before {message!r}"
        if isinstance(message, AiMessage):
            ids = [r.id for r in message.tool_execution_requests]
            if len(set(ids)) != len(ids) or None in ids:
                return f"message {n}: tool call ids missing or repeated: {ids}"
            pending = list(ids)
    if pending:
        return f"tool calls {pending} have no result"
    return None


def seed_messages() -> list[ChatMessage]:
    """An earlier, completed exchange every memory of the suite starts with."""
    return [UserMessage("What is agentloop?"), AiMessage("An agent runtime for Python.")]


@dataclass
class ToolProbe:
    """What the tools of one test did: which calls started, finished, or observed cancellation."""

    seconds: float = 0.01  # how long each call works
    started: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)

    def still_running(self) -> list[str]:
        done = self.finished + self.cancelled
        return [name for name in self.started if name not in done]

    async def run(self, name: str, seconds: float | None = None) -> None:
        """Works for `seconds` (default `self.seconds`; an await the whole time), recording what happened."""
        self.started.append(name)
        try:
            await anyio.sleep(self.seconds if seconds is None else seconds)
        except anyio.get_cancelled_exc_class():
            self.cancelled.append(name)
            raise
        self.finished.append(name)


@dataclass
class Outcome:
    """What one invocation gave: its result or its error, the text streamed before, how long it took."""

    result: Result[str] | None
    error: BaseException | None
    tokens: list[str] = field(default_factory=list)
    elapsed: float = 0.0


async def invoke(agent: Any, mode: str, message: str, **options: Any) -> Outcome:
    """One invocation with `agent.chat()` ("chat") or `async with agent.stream()` ("stream"); an error is
    returned in the outcome (and handed to the ledger's secret scan), not raised."""
    tokens: list[str] = []
    started = anyio.current_time()
    try:
        if mode == "chat":
            result = await agent.chat(message, **options)
        else:
            async with agent.stream(message, **options) as stream:
                async for event in stream.events():
                    if isinstance(event, PartialResponse):
                        tokens.append(event.text)
            result = stream.result
    except Exception as error:
        LEDGER.scan("invocation error", error)
        return Outcome(None, error, tokens, anyio.current_time() - started)
    return Outcome(result, None, tokens, anyio.current_time() - started)
