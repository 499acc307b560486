"""Speed of the embedded model: agentloop's in-process path against llama.cpp's own HTTP server, and thread
counts against each other, on the same GGUF file, side by side.

    python benchmarks/local_speed.py                       # embedded vs server, default threads, 6 rounds
    python benchmarks/local_speed.py --threads 1,2         # embedded only: thread counts against each other
    python benchmarks/local_speed.py --threads 1 --server  # embedded vs server at n_threads=1
    python benchmarks/local_speed.py --model qwen2.5-coder-0.5b --threads 2 --server  # the smaller model
    python benchmarks/local_speed.py --demo --threads 1    # the demo's two requests, prompts included

`--demo` times what `python -m agentloop demo` asks the model: its two requests (the tool decision, then,
with the two tools' results, the decision to answer and the answer), each round under a new system prompt
so nothing comes from an earlier round's cache, prompt evaluation included. llama.cpp's server gets the very
payloads agentloop sends (recorded from the embedded run), over HTTP, and stops reading a decision once it
chose to answer, as agentloop does. Reported: the median seconds per demo for each, and their ratio.

Contenders run in alternation (A B A B ...), so a change in the machine's load hits both alike. Each run
sends a prompt with a fresh prefix (so its evaluation is not served from the prompt cache) and generates
exactly `--tokens` tokens (`ignore_eos`). Reported per contender (medians): time to first token, generation
tokens/s measured by the client between its first and last token, and llama.cpp's own `predicted_per_second`.
The server is xllamacpp's `Server` (llama.cpp's server code) in a child process, spoken to over HTTP on
127.0.0.1, with the same threads and the same `poll=0` as the embedded model. Load times are reported too.
Writes `benchmarks/local_speed.json`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio

from agentloop import (
    AiMessage,
    ChatRequest,
    SystemMessage,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
    tool_specification_from,
)
from agentloop._demo import DEFAULT_QUESTION, TOOLS
from agentloop.models import LocalChatModel, ResponseComplete, TextDelta
from agentloop.models._local_tools import ToolCallScanner

HERE = Path(__file__).parent
PROMPT = (
    "Request {n}. Write a long, detailed story about a lighthouse keeper who finds a message in a bottle, "
    "with many characters and places. Keep going for as long as you can."
)

SERVER = textwrap.dedent(
    """
    import sys, time, xllamacpp
    params = xllamacpp.CommonParams()
    params.model.path = sys.argv[1]
    params.n_ctx = 4096
    params.n_parallel = 1
    params.verbosity = 0
    params.warmup = False
    params.ui = False
    params.port = 0
    params.cpuparams.poll = 0
    params.cpuparams_batch.poll = 0
    threads = int(sys.argv[2])
    if threads > 0:
        params.cpuparams.n_threads = threads
        params.cpuparams_batch.n_threads = threads
    started = time.perf_counter()
    server = xllamacpp.Server(params)
    print(server.listening_address, time.perf_counter() - started, flush=True)
    sys.stdin.read()
    """
)


DEMO_SYSTEM = "Request {n}. You are a helpful assistant. Use the tools for arithmetic, time and capitals."


def demo_requests(n: int) -> list[ChatRequest]:
    """The demo's two model requests, under a system prompt of their own (`n`)."""
    specs = [tool_specification_from(function) for function in TOOLS]
    question = [SystemMessage(DEMO_SYSTEM.format(n=n)), UserMessage(DEFAULT_QUESTION)]
    add = ToolExecutionRequest("call_1", "add", '{"a":1234,"b":4321}')
    capital = ToolExecutionRequest("call_2", "capital_of", '{"country":"Japan"}')
    results = [
        ToolExecutionResultMessage.from_request(add, "5555.0"),
        ToolExecutionResultMessage.from_request(capital, "Tokyo"),
    ]
    called = [*question, AiMessage(tool_execution_requests=[add, capital]), *results]
    return [ChatRequest(question, specs), ChatRequest(called, specs)]


class _Recorder:
    """Stands in for the embedded model's llama.cpp server and keeps a copy of every payload it forwards."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.payloads: list[str] = []

    def handle_chat_completions(self, payload: dict[str, Any], callback: Any) -> Any:
        self.payloads.append(json.dumps(payload))
        return self.inner.handle_chat_completions(payload, callback)


class Embedded:
    def __init__(self, threads: int | None, model: str | None = None) -> None:
        self.name = f"embedded n_threads={threads or 'default'}"
        self.model = LocalChatModel(model, n_threads=threads, progress=False)
        self.load_seconds = 0.0

    async def start(self) -> None:
        started = time.perf_counter()
        await self.model.load()
        self.load_seconds = time.perf_counter() - started

    async def run(self, n: int, tokens: int) -> dict[str, float]:
        parameters = {"max_tokens": tokens, "ignore_eos": True}
        request = ChatRequest([UserMessage(PROMPT.format(n=n))], parameters=parameters)
        sent = time.perf_counter()
        stamps: list[float] = []
        count = 0
        async for event in self.model.stream(request):
            if isinstance(event, TextDelta):
                stamps.append(time.perf_counter())
            elif isinstance(event, ResponseComplete):
                usage = event.response.token_usage
                count = usage.output_tokens if usage is not None else len(stamps)
        return _rates(sent, stamps, count, None)

    async def record_demo(self) -> list[str]:
        """The payloads agentloop sends llama.cpp for the demo (system prompt n=-1), recorded on a run."""
        recorder = _Recorder(self.model._server)  # a benchmark may look inside: the payloads are the point
        self.model._server = recorder
        try:
            await self.demo(-1)
        finally:
            self.model._server = recorder.inner
        return recorder.payloads

    async def demo(self, n: int) -> dict[str, float]:
        started = time.perf_counter()
        prompt = cached = 0
        for request in demo_requests(n):
            usage = (await self.model.chat(request)).token_usage
            assert usage is not None
            prompt += usage.input_tokens
            cached += usage.cache_read_tokens or 0
        return {"total": time.perf_counter() - started, "prompt_tokens": prompt, "cached_tokens": cached}

    async def stop(self) -> None:
        await self.model.aclose()


class Server:
    def __init__(self, threads: int | None, path: Path) -> None:
        self.name = f"llama.cpp server n_threads={threads or 'default'}"
        self.threads = threads or 0
        self.path = path
        self.process: subprocess.Popen[str] | None = None
        self.host = ""
        self.port = 0
        self.load_seconds = 0.0

    async def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(self.path), str(self.threads)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = await anyio.to_thread.run_sync(self.process.stdout.readline)
        address, seconds = line.split()
        self.load_seconds = float(seconds)
        address = address.removeprefix("http://")
        self.host, _, port = address.rpartition(":")
        self.port = int(port)

    async def run(self, n: int, tokens: int) -> dict[str, float]:
        return await anyio.to_thread.run_sync(self._run, n, tokens)

    def _run(self, n: int, tokens: int) -> dict[str, float]:
        body = {
            "messages": [{"role": "user", "content": PROMPT.format(n=n)}],
            "max_tokens": tokens,
            "ignore_eos": True,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        connection = http.client.HTTPConnection(self.host, self.port, timeout=600)
        sent = time.perf_counter()
        connection.request(
            "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        stamps: list[float] = []
        count = 0
        server_rate = None
        for raw in response:
            line = raw.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if any(choice.get("delta", {}).get("content") for choice in chunk.get("choices", ())):
                stamps.append(time.perf_counter())
            if chunk.get("usage"):
                count = chunk["usage"]["completion_tokens"]
            if chunk.get("timings"):
                server_rate = chunk["timings"].get("predicted_per_second")
        connection.close()
        return _rates(sent, stamps, count, server_rate)

    async def demo(self, n: int, payloads: list[str]) -> dict[str, float]:
        return await anyio.to_thread.run_sync(self._demo, n, payloads)

    def _demo(self, n: int, payloads: list[str]) -> dict[str, float]:
        started = time.perf_counter()
        for payload in payloads:
            body = json.loads(payload.replace(DEMO_SYSTEM.format(n=-1), DEMO_SYSTEM.format(n=n)))
            decision = "response_format" in body  # a tool decision (the answer pass has none)
            connection = http.client.HTTPConnection(self.host, self.port, timeout=600)
            connection.request(
                "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
            )
            response = connection.getresponse()
            scanner = ToolCallScanner()
            for raw in response:
                line = raw.strip()
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                for choice in chunk.get("choices", ()):
                    content = choice.get("delta", {}).get("content")
                    if decision and content:
                        list(scanner.feed(content))
                if decision and scanner.chose_answer:
                    break  # as agentloop does: the answer comes from the next payload
            connection.close()
        return {"total": time.perf_counter() - started}

    async def stop(self) -> None:
        if self.process is not None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            self.process.wait(timeout=30)


def _rates(sent: float, stamps: list[float], count: int, server_rate: float | None) -> dict[str, float]:
    ttft = stamps[0] - sent
    span = stamps[-1] - stamps[0]
    rate = (count - 1) / span if span > 0 else 0.0
    result = {"ttft": ttft, "tokens_per_s": rate, "tokens": count, "total": stamps[-1] - sent}
    if server_rate is not None:
        result["server_reported_tokens_per_s"] = server_rate
    return result


def _median(rows: list[dict[str, float]], key: str) -> float | None:
    values = [row[key] for row in rows if key in row]
    return round(statistics.median(values), 3) if values else None


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="", help="comma-separated thread counts for the embedded model")
    parser.add_argument(
        "--server", action="store_true", help="also run llama.cpp's server (default if one count)"
    )
    parser.add_argument(
        "--model",
        default=None,
        help="a known model name (qwen2.5-coder-1.5b) or a GGUF path; default: the embedded one",
    )
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--json", default=str(HERE / "local_speed.json"))
    parser.add_argument("--demo", action="store_true", help="the demo's two requests against the server")
    args = parser.parse_args(argv)
    if args.demo:
        return await demo_main(args)
    counts = [int(t) for t in args.threads.split(",") if t] or [0]
    contenders: list[Any] = [Embedded(t or None, args.model) for t in counts]
    if args.server or len(counts) == 1:
        probe = contenders[0]
        await probe.start()
        path = probe.model.loaded_path
        contenders += [Server(t or None, path) for t in counts]
    meta = {
        "when": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(),
        "load_average_start": os.getloadavg(),
        "tokens": args.tokens,
        "rounds": args.rounds,
    }
    rows: dict[str, list[dict[str, float]]] = {c.name: [] for c in contenders}
    try:
        for contender in contenders:
            if not contender.load_seconds:
                await contender.start()
            # A first run warms caches (and pages the weights in); it is not counted.
            await contender.run(-1, 8)
        for round_ in range(args.rounds):
            order = contenders if round_ % 2 == 0 else contenders[::-1]
            for contender in order:
                row = await contender.run(round_ * 10 + contenders.index(contender), args.tokens)
                rows[contender.name].append(row)
                print(
                    f"round {round_}: {contender.name:34} ttft {row['ttft']:6.2f}s  "
                    f"{row['tokens_per_s']:6.1f} tok/s"
                    + (
                        f" (server says {row['server_reported_tokens_per_s']:.1f})"
                        if "server_reported_tokens_per_s" in row
                        else ""
                    ),
                    flush=True,
                )
    finally:
        for contender in contenders:
            await contender.stop()
    meta["load_average_end"] = os.getloadavg()
    summary = {
        c.name: {
            "load_seconds": round(c.load_seconds, 2),
            "median_ttft_s": _median(rows[c.name], "ttft"),
            "median_tokens_per_s": _median(rows[c.name], "tokens_per_s"),
            "min_tokens_per_s": round(min(r["tokens_per_s"] for r in rows[c.name]), 2),
            "max_tokens_per_s": round(max(r["tokens_per_s"] for r in rows[c.name]), 2),
        }
        for c in contenders
    }
    print(f"\nload average {meta['load_average_start']} -> {meta['load_average_end']}")
    for name, row in summary.items():
        print(f"{name:34} {row}")
    Path(args.json).write_text(json.dumps({"meta": meta, "summary": summary, "runs": rows}, indent=1))
    return 0


async def demo_main(args: argparse.Namespace) -> int:
    threads = int(args.threads) if args.threads else None
    embedded = Embedded(threads, args.model)
    await embedded.start()
    assert embedded.model.loaded_path is not None
    server = Server(threads, embedded.model.loaded_path)
    await server.start()
    meta = {
        "when": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "model": embedded.model.model_name,
        "threads": embedded.model.threads_in_use,
        "rounds": args.rounds,
    }
    rows: dict[str, list[dict[str, float]]] = {"embedded": [], "server": []}
    try:
        payloads = await embedded.record_demo()
        for round_ in range(args.rounds):
            order = ["embedded", "server"] if round_ % 2 == 0 else ["server", "embedded"]
            for name in order:
                n = 1000 + round_ * 2 + (name == "server")
                row = await embedded.demo(n) if name == "embedded" else await server.demo(n, payloads)
                row["load_average"] = os.getloadavg()[0]
                rows[name].append(row)
                print(f"round {round_}: {name:8} {row['total']:6.2f} s  (load {row['load_average']:.2f})")
    finally:
        await embedded.stop()
        await server.stop()
    summary = {name: _median(values, "total") for name, values in rows.items()}
    ratios = [s["total"] / e["total"] for e, s in zip(rows["embedded"], rows["server"], strict=True)]
    summary["server_over_embedded"] = round(statistics.median(ratios), 3)
    print(f"\nmedian seconds per demo: {summary}; embedded speed relative to the server (median of rounds)")
    Path(args.json).write_text(json.dumps({"meta": meta, "summary": summary, "runs": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
