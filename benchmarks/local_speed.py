"""Speed of the embedded model: agentloop's in-process path against llama.cpp's own HTTP server, and thread
counts against each other, on the same GGUF file, side by side.

    python benchmarks/local_speed.py                       # embedded vs server, default threads, 6 rounds
    python benchmarks/local_speed.py --threads 1,2         # embedded only: thread counts against each other
    python benchmarks/local_speed.py --threads 1 --server  # embedded vs server at n_threads=1
    python benchmarks/local_speed.py --model qwen2.5-coder-1.5b --threads 2 --server  # the opt-in 1.5B

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

from agentloop import ChatRequest, UserMessage
from agentloop.models import LocalChatModel, ResponseComplete, TextDelta

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
    args = parser.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(anyio.run(main))
