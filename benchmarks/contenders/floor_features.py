"""The floor with the features on: the hand-written client of `floor.py` doing the same observable work as
`agentloop_features.py`, with the least code a careful hand would write for it.

- OpenTelemetry through the SDK with the same setup (a `BatchSpanProcessor` to an exporter that drops the
  spans, an `InMemoryMetricReader`): per session an `invoke_agent` span, a `chat` span per model call and an
  `execute_tool` span per tool call, with the GenAI semantic conventions' attributes, and per model call a
  duration sample and an input and an output token sample (agentloop's own extra attributes left out);
- every session's conversation in SQLite (WAL, `synchronous = NORMAL`, on the event loop's thread): the
  history read in a transaction before the first request, the tool round and the answer each appended in
  a transaction of their own as they complete (no lease: one process, so none is needed here);
- no middleware (a hand-written loop has none to pass through).

It is not a target: it says how much of "features on" is the libraries' own work, which no runtime over
them avoids. `aclose()` checks every session's rows as `agentloop_features.py` checks its memory.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx2
import msgspec
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind

from contenders import Outcome
from contenders.dropped_spans import DroppedSpans
from contenders.floor import _HEADERS, _TOOLS, _decode_arguments, _decode_chunk, _encode, _Session
from contenders.floor import Contender as _Floor

LABEL = "floor with the features (hand-written)"
PACKAGES = ("httpx2", "msgspec", "opentelemetry-sdk")

_MODEL = "gpt-4o-mini"
_DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
_TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS conversation_round (conversation TEXT NOT NULL, seq INTEGER NOT NULL, "
    "body BLOB NOT NULL, PRIMARY KEY (conversation, seq)) WITHOUT ROWID"
)


class Contender(_Floor):
    # Which features are on (off: the API's no-op tracer and meter; no SQL), for a breakdown.
    tracing = True
    store = True

    def __init__(self, base_url: str, tool: Callable[[str], Awaitable[str]]) -> None:
        super().__init__(base_url, tool)
        self._exporter = DroppedSpans()
        self._tracer_provider = TracerProvider()
        self._tracer_provider.add_span_processor(BatchSpanProcessor(self._exporter))
        self._metrics = InMemoryMetricReader()
        self._meter_provider = MeterProvider(metric_readers=[self._metrics])
        self._tracer = self._tracer_provider.get_tracer("floor") if self.tracing else trace.NoOpTracer()
        meter = self._meter_provider.get_meter("floor") if self.tracing else metrics.NoOpMeter("floor")
        self._duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self._tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS
        )
        host, _, port = base_url.split("//", 1)[1].split("/", 1)[0].partition(":")
        base = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": _MODEL,
        }
        self._chat_start = {
            **base,
            "server.address": host,
            "server.port": int(port),
            "gen_ai.request.stream": True,
        }
        duration = {**base, "server.address": host, "server.port": int(port), "gen_ai.response.model": _MODEL}
        self._samples = (
            duration,
            {**duration, "gen_ai.token.type": "input"},
            {**duration, "gen_ai.token.type": "output"},
        )
        self._directory = tempfile.mkdtemp(prefix="floor-bench-")
        self._db = sqlite3.connect(Path(self._directory) / "memory.db", isolation_level=None)
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._db.execute(_SCHEMA)
        self._sessions = 0
        self._answers: dict[str, str] = {}

    async def session(self, question: str, on_delta: Callable[[str], None]) -> Outcome:
        self._sessions += 1
        conversation = f"s{self._sessions}"
        state = _Traced()
        span = self._tracer.start_span(
            "invoke_agent",
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": _MODEL,
                "gen_ai.conversation.id": conversation,
            },
        )
        context = trace.set_span_in_context(span)
        answer: list[str] = []
        shard = self._shards.acquire()
        try:
            async for token in self._traced(
                self._shards.clients[shard], question, state, context, conversation
            ):
                answer.append(token)
                on_delta(token)
        finally:
            self._shards.release(shard)
            span.set_attributes(
                {
                    "gen_ai.response.finish_reasons": ("stop",),
                    "gen_ai.usage.input_tokens": state.input_tokens,
                    "gen_ai.usage.output_tokens": state.output_tokens,
                }
            )
            span.end()
        self._answers[conversation] = "".join(answer)
        return Outcome(state.executions, state.output_tokens)

    async def _traced(  # floor.py's loop with the features' work woven in (copied: the floor stays minimal)
        self, client: httpx2.AsyncClient, question: str, state: _Traced, context: object, conversation: str
    ) -> AsyncIterator[str]:
        db = self._db
        history: list[bytes] = []
        if self.store:
            db.execute("BEGIN")
            history = [
                row[0]
                for row in db.execute(
                    "SELECT body FROM conversation_round WHERE conversation = ? ORDER BY seq", (conversation,)
                )
            ]
            db.execute("COMMIT")
        messages: list[object] = [msgspec.json.decode(body) for body in history]
        messages.append({"role": "user", "content": question})
        seq = len(history)
        stored = len(messages) - 1
        while True:
            body = _encode(
                {
                    "model": _MODEL,
                    "messages": messages,
                    "tools": _TOOLS,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
            )
            text: list[str] = []
            calls: dict[int, list[str]] = {}
            chat = self._tracer.start_span(
                f"chat {_MODEL}",
                context,
                SpanKind.CLIENT,
                attributes=self._chat_start,  # type: ignore[arg-type]
            )
            chat_context = trace.set_span_in_context(chat)
            started = time.perf_counter()
            first: float | None = None
            input_tokens = output_tokens = 0
            finish = "stop"
            async with client.stream("POST", self._url, content=body, headers=_HEADERS) as response:
                if response.status_code != 200:
                    await response.aread()
                    raise RuntimeError(f"HTTP {response.status_code}: {response.text}")
                pending = b""
                async for data in response.aiter_bytes():
                    if first is None:
                        first = time.perf_counter() - started
                    events = (pending + data).split(b"\n\n")
                    pending = events.pop()
                    for event in events:
                        if not event.startswith(b"data: ") or event == b"data: [DONE]":
                            continue
                        chunk = _decode_chunk(event[6:])
                        if chunk.usage is not None:
                            input_tokens += chunk.usage.prompt_tokens
                            output_tokens += chunk.usage.completion_tokens
                        for choice in chunk.choices:
                            if choice.finish_reason:
                                finish = choice.finish_reason
                            delta = choice.delta
                            if delta.content:
                                text.append(delta.content)
                                yield delta.content
                            if delta.tool_calls:
                                for call in delta.tool_calls:
                                    parts = calls.get(call.index)
                                    if parts is None:
                                        parts = calls[call.index] = [call.id or "", ""]
                                    if call.function is not None:
                                        if call.function.name:
                                            parts[1] = call.function.name
                                        parts.append(call.function.arguments)
            state.input_tokens += input_tokens
            state.output_tokens += output_tokens
            chat.set_attributes(
                {
                    "gen_ai.response.model": _MODEL,
                    "gen_ai.response.finish_reasons": (finish,),
                    "gen_ai.usage.input_tokens": input_tokens,
                    "gen_ai.usage.output_tokens": output_tokens,
                    "gen_ai.response.time_to_first_chunk": first or 0.0,
                }
            )
            timing, input_sample, output_sample = self._samples
            self._duration.record(time.perf_counter() - started, timing, chat_context)
            self._tokens.record(input_tokens, input_sample, chat_context)
            self._tokens.record(output_tokens, output_sample, chat_context)
            chat.end()
            if not calls:
                messages.append({"role": "assistant", "content": "".join(text)})
                self._append(conversation, seq, messages[stored:])
                return
            ordered = [calls[index] for index in sorted(calls)]
            arguments = ["".join(parts[2:]) for parts in ordered]
            results = await _gather(
                [self._tool_span(p, a, context) for p, a in zip(ordered, arguments, strict=True)]
            )
            state.executions += len(results)
            messages.append(
                {
                    "role": "assistant",
                    "content": "".join(text) or None,
                    "tool_calls": [
                        {"id": p[0], "type": "function", "function": {"name": p[1], "arguments": a}}
                        for p, a in zip(ordered, arguments, strict=True)
                    ],
                }
            )
            messages += [
                {"role": "tool", "tool_call_id": p[0], "content": result}
                for p, result in zip(ordered, results, strict=True)
            ]
            self._append(conversation, seq, messages[stored:])
            seq += len(messages) - stored
            stored = len(messages)

    async def _tool_span(self, parts: list[str], arguments: str, context: object) -> str:
        span = self._tracer.start_span(
            f"execute_tool {parts[1]}",
            context,  # type: ignore[arg-type]
            SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": parts[1],
                "gen_ai.tool.type": "function",
                "gen_ai.tool.call.id": parts[0],
            },
        )
        try:
            return await self._tool(_decode_arguments(arguments).key)
        finally:
            span.end()

    def _append(self, conversation: str, seq: int, messages: list[object]) -> None:
        if not self.store:
            return
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        db.executemany(
            "INSERT INTO conversation_round VALUES (?, ?, ?)",
            [(conversation, seq + i, _encode(message)) for i, message in enumerate(messages)],
        )
        db.execute("COMMIT")

    async def aclose(self) -> None:
        try:
            for conversation, answer in self._answers.items() if self.store else ():
                rows = self._db.execute(
                    "SELECT body FROM conversation_round WHERE conversation = ? ORDER BY seq", (conversation,)
                ).fetchall()
                roles = [msgspec.json.decode(row[0])["role"] for row in rows]
                last = msgspec.json.decode(rows[-1][0]) if rows else {}
                if (
                    roles[:2] != ["user", "assistant"]
                    or roles[-1] != "assistant"
                    or last["content"] != answer
                ):
                    raise AssertionError(
                        f"floor with the features: conversation {conversation} stored {roles}"
                    )
        finally:
            await super().aclose()
            self._db.close()
            self._tracer_provider.shutdown()
            self._meter_provider.shutdown()
            shutil.rmtree(self._directory, ignore_errors=True)
        if self.tracing and self._answers and not self._exporter.spans:
            raise AssertionError("floor with the features: no span reached the exporter")


class _Traced(_Session):
    __slots__ = ("input_tokens",)

    def __init__(self) -> None:
        super().__init__()
        self.input_tokens = 0


async def _gather(calls: list[Awaitable[str]]) -> list[str]:
    return list(await asyncio.gather(*calls))
