"""Scenarios of the composition suite: an agent built from a set of features, and what its run must show.

Shared by tests/runtime/test_composition.py and its worker process (`python -m tests.composition`), which
resumes
paused rounds "in another process" (tests/composition_worker.py): one worker per test module. A scenario
with a run-control feature (`CONTROL`) always has a memory (in this process without a store feature), a
`Gate` holding its first tool call, and one more scripted answer for the invocation after it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
from pydantic import BaseModel

from agentloop import (
    NO_ANSWER,
    Agent,
    AiMessage,
    Answer,
    CallContext,
    ChatRequest,
    ChatResponse,
    Defer,
    HeldRound,
    InvocationCall,
    MessageWindowChatMemory,
    Middleware,
    ModelCall,
    ModelConnectionError,
    PendingApproval,
    RoundEnd,
    StreamCall,
    ToolCall,
    ToolExecution,
    ToolExecutionRequest,
    ToolRound,
    ToolSearch,
    tool,
)
from agentloop.middleware import ClearToolResults, Compaction
from agentloop.models import FallbackChatModel, ModelEvent
from agentloop.testing import FunctionChatModel, ScriptedChatModel

FEATURES = (
    "output_tool",
    "output_native",
    "output_prompted",
    "approval_inline",
    "approval_paused",
    "sqlite",
    "redis",
    "dbos",
    "tracing",
    "fallback",
    "mcp",
    "middleware",
    "compaction",
    "clear_results",
    "tool_search",
    "limits",
)
CONTROL = ("cancel", "cancel_after_round", "steer")
"""Run control, acting once the first tool round is under way (tests/runtime/test_composition.py pairs each
with
every feature above and with each other)."""
OUTPUTS = {"output_tool": "tool", "output_native": "native", "output_prompted": "prompted"}
SUM = 5
STEERED = "And what is 5 + 5?"


class Sum(BaseModel):
    total: int


@tool(requires_approval=True)
def add(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b


@tool
def add_freely(a: int, b: int) -> int:
    """Adds two numbers (needs nobody's approval)."""
    return a + b


class Recorder(Middleware):
    """The user middleware of the suite: records each hook it passes."""

    def __init__(self) -> None:
        self.log: list[str] = []

    async def wrap_invocation(self, call: InvocationCall, call_next: Any) -> Any:
        self.log.append("invocation")
        return await call_next(call)

    async def wrap_model_call(self, call: ModelCall, call_next: Any) -> ChatResponse:
        self.log.append("model")
        return await call_next(call)

    async def wrap_tool_call(self, call: ToolCall, call_next: Any) -> ToolExecution:
        self.log.append(f"tool:{call.request.name}")
        return await call_next(call)

    async def on_answer(self, answer: Answer) -> Any:
        self.log.append(f"answer:{type(answer.output).__name__}")
        return answer.output

    async def on_resume(self, context: CallContext) -> None:
        self.log.append("resume")  # nothing of its own to go on from

    def wrap_stream(self, events: AsyncIterator[ModelEvent], call: StreamCall) -> AsyncIterator[ModelEvent]:
        self.log.append(f"stream:{call.round}")
        return events

    async def on_tool_round(self, round: ToolRound) -> Any:
        self.log.append(f"tool_round:{round.round}")  # structured output (outside) found any output first
        return NO_ANSWER

    async def on_hold(self, held: HeldRound) -> None:
        self.log.append("hold")  # approval (a feature, outside) saves the rounds it holds first

    async def after_round(self, end: RoundEnd) -> None:
        self.log.append(f"round:{end.round}{' final' if end.final else ''}")  # adds nothing, stops nothing

    def before_tool_call(self, call: ToolCall) -> None:
        self.log.append(f"before:{call.request.name}")  # taken on, in call order, before its task starts

    def halt(self, context: CallContext) -> None:
        self.log.append("halt")  # asked once per run of the loop (no scope of its own to cancel)

    def on_result(self, result: Any) -> Any:
        self.log.append(f"result:{result.finish_reason.value}")  # the Result, before anyone sees it
        return result

    @property
    def hooks(self) -> list[str]:
        """The log without the round boundaries and the plain (not async) hooks."""
        plain = ("round:", "before:", "halt", "result:")
        return [entry for entry in self.log if not entry.startswith(plain)]

    def check_plain_hooks(self, result: Any, tool_name: str | None) -> None:
        """`halt` was asked before the first model call, `before_tool_call` saw the tool call before its
        `wrap_tool_call` did (when it ran), and `on_result` saw the Result last, as the caller got it."""
        log = self.log
        assert "halt" in log and log.index("halt") < log.index("model"), log
        if tool_name is not None:
            assert log.index(f"before:{tool_name}") < log.index(f"tool:{tool_name}"), log
        assert log[-1] == f"result:{result.finish_reason.value}", log


class Gate(Middleware):
    """The moment run control acts: holds the run's first tool call until the test releases it, having said
    it reached it (`reached`); records what each model call was sent, and that the held call's cleanup ran.
    Armed in the test (its events belong to the test's event loop)."""

    def __init__(self) -> None:
        self.reached: anyio.Event | None = None
        self.release: anyio.Event | None = None
        self.cleaned: list[str] = []
        self.requests: list[list[Any]] = []

    def arm(self) -> None:
        self.reached, self.release = anyio.Event(), anyio.Event()

    async def wrap_model_call(self, call: ModelCall, call_next: Any) -> ChatResponse:
        self.requests.append(list(call.request.messages))
        return await call_next(call)

    async def wrap_tool_call(self, call: ToolCall, call_next: Any) -> ToolExecution:
        if self.reached is None or self.release is None or self.reached.is_set():
            return await call_next(call)
        self.reached.set()
        try:
            await self.release.wait()
        finally:
            self.cleaned.append(call.request.name)
        return await call_next(call)


def limits() -> list[Middleware]:
    """The keyed limits of the suite, on each kind of call: one tenant's invocations, its tools one at a
    time, and a rate it stays well under (they must change nothing of what the run shows)."""
    from agentloop.middleware import ConcurrencyLimit, RateLimit

    def tenant(call: Any) -> str:
        return "tenant-a"

    return [
        ConcurrencyLimit(2, key=tenant, timeout=30),
        ConcurrencyLimit(1, key=tenant, on="tool"),
        ConcurrencyLimit(1, on="model"),
        RateLimit(requests_per_minute=1000, tokens_per_minute=1_000_000, key=tenant),
    ]


class Down:
    """A primary model whose every call fails to connect: the fallback answers."""

    provider = "down"
    supports_response_format = True  # as the OpenAI and Anthropic providers declare

    async def chat(self, request: ChatRequest) -> ChatResponse:
        raise ModelConnectionError("primary is down", provider="down")

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        raise ModelConnectionError("primary is down", provider="down")
        yield  # pragma: no cover


@dataclass
class Scenario:
    """One pair (or single) of features, built into an agent with a script that exercises each."""

    features: frozenset[str]
    sqlite_path: str | None = None
    redis_url: str | None = None
    redis_prefix: str = "composition"
    mcp_url: str | None = None
    telemetry: Any = None  # the test's Telemetry for "tracing"
    recorder: Recorder = field(default_factory=Recorder)
    gate: Gate = field(default_factory=Gate)
    _store: Any = None

    @property
    def output_mode(self) -> str | None:
        return next((OUTPUTS[f] for f in self.features if f in OUTPUTS), None)

    @property
    def tool_name(self) -> str:
        return "add" if "mcp" in self.features else "add_freely" if not self.gated else "add"

    @property
    def gated(self) -> bool:
        return bool({"approval_inline", "approval_paused"} & self.features)

    @property
    def controlled(self) -> bool:
        """Run control acts on the run: cancels it (`cancel`, `cancel_after_round`), steers it (`steer`)."""
        return bool(set(CONTROL) & self.features)

    @property
    def pauses(self) -> bool:
        return "approval_paused" in self.features

    def answers(self, *, resumed: bool = False) -> list[Any]:
        """The model's script: one tool call, then the answer as the output mode wants it."""
        call = AiMessage(None, [ToolExecutionRequest("call_1", self.tool_name, '{"a": 2, "b": 3}')])
        final = self.final("call_2")
        # Under run control, one more answer for the invocation after the controlled one (a cancelled run
        # leaves its later answers unused, in order, for it).
        more = [self.final("call_3")] if self.controlled else []
        if resumed:
            return [final, *more]
        if "tool_search" in self.features:  # the tool is found first
            search = ToolExecutionRequest("call_0", "search_tools", '{"query": "add two numbers"}')
            return [AiMessage(None, [search]), call, final, *more]
        return [call, final, *more]

    def final(self, call_id: str) -> Any:
        """The model's answer as the output mode wants it."""
        mode = self.output_mode
        if mode == "tool":
            return AiMessage(None, [ToolExecutionRequest(call_id, "final_result", '{"total": 5}')])
        if mode in ("native", "prompted"):
            return '{"total": 5}'
        return "The sum is 5."

    def model(self, *, resumed: bool = False) -> Any:
        scripted = ScriptedChatModel(self.answers(resumed=resumed))
        if "fallback" in self.features:
            return FallbackChatModel(Down(), scripted)
        return scripted

    def store(self) -> Any:
        """The memory's store (one per scenario), None without a store feature."""
        if self._store is None:
            self._store = self._new_store()
        return self._store

    def _new_store(self) -> Any:
        # A round resumed in another process is vouched for by a store both processes share (a process
        # refuses a paused round it did not issue): a paused scenario without a store feature gets SQLite.
        if "sqlite" in self.features or (self.pauses and "redis" not in self.features):
            from agentloop.stores import SQLiteChatMemoryStore

            assert self.sqlite_path is not None
            return SQLiteChatMemoryStore(self.sqlite_path)
        if "redis" in self.features:
            from agentloop.stores import RedisChatMemoryStore

            assert self.redis_url is not None
            return RedisChatMemoryStore(self.redis_url, prefix=self.redis_prefix)
        return None

    def agent(self, *, resumed: bool = False, name: str = "composition", tools: Any = None) -> Agent:
        options: dict[str, Any] = {}
        store = self.store()
        if store is not None:
            options["memory"] = MessageWindowChatMemory.provider(50, store=store)
        elif self.controlled:  # what a stopped or steered run leaves in memory is what run control promises
            options["memory"] = MessageWindowChatMemory.provider(50)
        if "approval_inline" in self.features:
            if self.pauses:  # both: the handler leaves the call to a person
                options["approval_handler"] = lambda request: Defer
            else:
                options["approval_handler"] = lambda request: True
        if "mcp" in self.features and self.gated:
            options["requires_approval"] = ["add"]
        if "tracing" in self.features and self.telemetry is not None:
            options["instrument"] = self.telemetry.instrumentation()
        mode = self.output_mode
        if mode is not None:
            options["output_mode"] = mode
        middleware: list[Middleware] = []
        if "middleware" in self.features:
            middleware.append(self.recorder)
        if "compaction" in self.features:  # a budget of 1 token: every call that can compact does
            summarizer = FunctionChatModel(lambda messages, tools: "The user asked for 2 + 3.")
            middleware.append(Compaction(1, keep_last=1, summarizer=summarizer))
        if "clear_results" in self.features:
            middleware.append(ClearToolResults(keep_last=0, min_tokens=0))
        if "limits" in self.features:
            middleware += limits()
        if self.controlled:  # innermost: the tool call it holds is the next thing to run
            middleware.append(self.gate)
        if middleware:
            options["middleware"] = middleware
        if tools is None:
            tools = [] if "mcp" in self.features else [add if self.gated else add_freely]
        if "tool_search" in self.features:
            tools = [ToolSearch(tools)]
        return Agent(self.model(resumed=resumed), name=name, tools=tools, **options)

    def call_options(self) -> dict[str, Any]:
        """The call's own options: the output type is given per call, so it must travel with a pause."""
        return {"output_type": Sum} if self.output_mode is not None else {}

    @property
    def answer_logged(self) -> str:
        """What the recorder's `on_answer` logs of the final output (the value structured output made)."""
        return "answer:Sum" if self.output_mode is not None else "answer:str"

    def check_result(self, result: Any) -> None:
        if self.output_mode is not None:
            assert result.output == Sum(total=SUM), result
        else:
            assert result.content == "The sum is 5.", result
        ran = [e for e in result.tool_executions if e.request.name == self.tool_name]
        assert [e.result for e in ran] == ["5"], result.tool_executions


def describe(result: Any) -> dict[str, Any]:
    return {
        "content": result.content,
        "output": result.output.model_dump() if isinstance(result.output, BaseModel) else result.output,
        "tools": [[e.request.name, e.result] for e in result.tool_executions],
        "finish": result.finish_reason.value if result.finish_reason is not None else None,
    }


async def resume_here(spec: dict[str, Any]) -> dict[str, Any]:
    """The worker's side: an agent built the same way resumes the paused round from its JSON."""
    scenario = Scenario(
        frozenset(spec["features"]),
        sqlite_path=spec.get("sqlite_path"),
        redis_url=spec.get("redis_url"),
        redis_prefix=spec.get("redis_prefix", "composition"),
        mcp_url=spec.get("mcp_url"),
    )
    pending = PendingApproval.from_json(spec["pending"])
    decisions = {r.call_id: True for r in pending.requests}
    options: dict[str, Any] = dict(scenario.call_options())
    tools = None
    if "mcp" in scenario.features:
        from agentloop.mcp import MCPToolset

        assert scenario.mcp_url is not None
        async with MCPToolset(scenario.mcp_url, call_timeout=10) as toolset:
            agent = scenario.agent(resumed=True, tools=[toolset])
            result = await agent.resume(pending, decisions, **options)
            return describe(result)
    agent = scenario.agent(resumed=True, tools=tools)
    if spec.get("streaming"):
        async with agent.resume_stream(pending, decisions, **options) as stream:
            async for _ in stream:
                pass
            return describe(stream.result)
    return describe(await agent.resume(pending, decisions, **options))
