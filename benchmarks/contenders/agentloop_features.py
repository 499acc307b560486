"""agentloop, features on: the `agentloop` contender with what a production deployment turns on.

- memory in a `SQLiteChatMemoryStore` (a file in a temp directory), each session its own memory id, so every
  session takes a lease with the window read, writes its tool round, and writes its answer as it gives the
  lease back: three transactions per session;
- OpenTelemetry with the SDK recording every span (a `BatchSpanProcessor`, the production setting, to an
  exporter that drops them) and every metric (aggregated for an `InMemoryMetricReader`);
- one user middleware that wraps every model call, tool call and invocation and passes each through.

`aclose()` reads every session's memory back and checks it holds the whole conversation (the question, the
K tool calls, their results and the streamed answer): a store that drops or mixes rounds fails the run.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from agentloop import (
    Agent,
    AiMessage,
    InMemoryChatMemoryStore,
    MessageWindowChatMemory,
    ToolExecutionResultMessage,
    UserMessage,
    tool,
)
from agentloop.models import OpenAIChatModel
from agentloop.otel import Instrumentation
from agentloop.stores import SQLiteChatMemoryStore
from contenders import Outcome
from contenders.agentloop import _tools
from contenders.agentloop_passthrough import Passthrough
from contenders.dropped_spans import DroppedSpans

LABEL = "agentloop, features on"
PACKAGES = ("agentloop-runtime", "httpx2", "msgspec", "pydantic", "anyio", "opentelemetry-sdk")


class Contender:
    # Which features are on (cpu_ab.py's breakdown turns them on one at a time: agentloop_sqlite.py, ...).
    store = True
    tracing = True
    middleware = True
    in_process = False  # memory in agentloop's in-memory store instead of SQLite (agentloop_memory.py)

    def __init__(self, base_url: str, get_value: Callable[[str], Awaitable[str]]) -> None:
        if get_value not in _tools:
            _tools[get_value] = tool(get_value)
        self._directory = tempfile.mkdtemp(prefix="agentloop-bench-")
        self._store: Any = (
            InMemoryChatMemoryStore()
            if self.in_process
            else SQLiteChatMemoryStore(Path(self._directory) / "memory.db")
        )
        self._exporter = DroppedSpans()
        self._tracer_provider = TracerProvider()
        self._tracer_provider.add_span_processor(BatchSpanProcessor(self._exporter))
        self._metrics = InMemoryMetricReader()
        self._meter_provider = MeterProvider(metric_readers=[self._metrics])
        self._model = OpenAIChatModel(model="gpt-4o-mini", base_url=base_url, api_key="bench")
        self._agent = Agent(
            self._model,
            tools=[_tools[get_value]],
            memory=MessageWindowChatMemory.provider(50, store=self._store) if self.store else None,
            instrument=Instrumentation(self._tracer_provider, self._meter_provider) if self.tracing else None,
            middleware=[Passthrough()] if self.middleware else None,
        )
        self._sessions = 0
        self._answers: dict[str, str] = {}

    async def session(self, question: str, on_delta: Callable[[str], None]) -> Outcome:
        self._sessions += 1
        memory_id = f"s{self._sessions}"
        stream = self._agent.stream(question, memory_id=memory_id)
        async for token in stream:
            on_delta(token)
        result = stream.result
        self._answers[memory_id] = result.content or ""
        usage = result.token_usage
        return Outcome(len(result.tool_executions), usage.output_tokens if usage is not None else None)

    async def aclose(self) -> None:
        try:
            await self._check_memory()
        finally:
            await self._model.aclose()
            if not self.in_process:
                await self._store.aclose()
            self._tracer_provider.shutdown()
            self._meter_provider.shutdown()
            shutil.rmtree(self._directory, ignore_errors=True)
        if self.tracing and self._answers and not self._exporter.spans:
            raise AssertionError("features on: no span reached the exporter")

    async def _check_memory(self) -> None:
        """Every session's memory holds its whole conversation, in order."""
        if not self.store:
            return
        for memory_id, answer in self._answers.items():
            messages = await self._store.get_messages(memory_id)
            kinds = [type(message) for message in messages]
            calls = messages[1].tool_execution_requests if len(messages) > 1 else []  # type: ignore[union-attr]
            if (
                kinds[:2] != [UserMessage, AiMessage]
                or kinds[2:-1] != [ToolExecutionResultMessage] * len(calls)
                or kinds[-1:] != [AiMessage]
                or not calls
                or messages[-1].text != answer  # type: ignore[union-attr]
            ):
                raise AssertionError(
                    f"features on: memory {memory_id!r} holds {kinds} (answer {answer[:40]!r})"
                )
