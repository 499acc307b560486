"""Runs one contender through one benchmark phase, in a fresh process, and writes its measurements as JSON.

    python benchmarks/_driver.py CONTENDER PHASE --port N --out FILE [--config JSON]

Phases: `versions` (import only), `main` (import time, streaming probe, CPU per session and per token,
sequential and 50-in-flight throughput, parallel-tools latency, peak RSS), `hold` (N idle streaming
sessions held open at once, RSS per session) and `interleaved` (sequential sessions in blocks on command:
each line `N` on stdin runs N sessions and answers one JSON line on stdout with their CPU, so `run.py` can
alternate several contenders' blocks within the same second). Standard library only, so it runs in the
peers' virtualenvs. Every session is checked (exact text, one delta per token, K tool executions, usage);
a failed check is counted and reported, never silently dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import gc
import importlib
import json
import os
import resource
import sys
import time
import traceback
from collections.abc import Callable, Coroutine
from importlib import metadata
from typing import Any

from _workload import QUESTION, Scenario, expected_output_tokens, text_tokens, tool_result

_calls: contextvars.ContextVar[list[str]] = contextvars.ContextVar("calls")
_tool_delay = 0.0


async def get_value(key: str) -> str:
    """Returns the value stored under a key."""
    _calls.get().append(key)
    if _tool_delay:
        await asyncio.sleep(_tool_delay)
    return tool_result(key)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rss_kb() -> int:
    """Current resident set size (not the peak), from /proc."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


class Checker:
    """Checks each session against the workload; keeps counts and the first few failures."""

    def __init__(self) -> None:
        self.sessions = 0
        self.failures = 0
        self.messages: list[str] = []
        self.usage_reported = False

    def fail(self, message: str) -> None:
        self.failures += 1
        if len(self.messages) < 5:
            self.messages.append(message)

    def check(self, scenario: Scenario, outcome: Any, deltas: list[str], calls: list[str]) -> bool:
        self.sessions += 1
        problems = []
        expected = text_tokens(scenario.tokens)
        if deltas != expected:
            joined_ok = "".join(deltas) == "".join(expected)
            problems.append(
                f"{len(deltas)} deltas for {len(expected)} tokens"
                + (" (text right, deltas merged or split: buffered?)" if joined_ok else " (text differs)")
            )
        if sorted(calls) != [f"k{i}" for i in range(scenario.tools)]:
            problems.append(f"tool ran with keys {sorted(calls)}, expected {scenario.tools} distinct calls")
        if outcome.tool_executions != scenario.tools:
            problems.append(
                f"framework reports {outcome.tool_executions} tool executions, not {scenario.tools}"
            )
        if outcome.output_tokens is not None:
            self.usage_reported = True
            if outcome.output_tokens != expected_output_tokens(scenario.tokens):
                problems.append(
                    f"usage: {outcome.output_tokens} output tokens, "
                    f"expected {expected_output_tokens(scenario.tokens)}"
                )
        if problems:
            self.fail("; ".join(problems))
            return False
        return True


def _more(budget: dict[str, float], done: int, since: float) -> bool:
    if done < budget["min"]:
        return True
    return done < budget["max"] and time.perf_counter() - since < budget["seconds"]


def _summary(latencies: list[float], wall: float, cpu: float) -> dict[str, Any]:
    count = len(latencies)
    return {
        "sessions": count,
        "wall_s": wall,
        "cpu_s": cpu,
        "cpu_per_session_ms": cpu / count * 1000,
        "sessions_per_s": count / wall,
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
    }


class Bench:
    def __init__(self, module: Any, port: int) -> None:
        self.module = module
        self.port = port
        self.checker = Checker()

    def contender(self, scenario: Scenario) -> Any:
        return self.module.Contender(scenario.base_url(self.port), get_value)

    async def session(
        self, contender: Any, scenario: Scenario, on_delta: Callable[[str], None] | None = None
    ) -> tuple[float, bool]:
        """Runs and checks one session; returns (latency seconds, passed)."""
        deltas: list[str] = []
        append = deltas.append
        if on_delta is not None:
            extra = on_delta

            def both(text: str) -> None:
                append(text)
                extra(text)

            callback: Callable[[str], None] = both
        else:
            callback = append
        calls: list[str] = []
        token = _calls.set(calls)
        start = time.perf_counter()
        try:
            outcome = await contender.session(QUESTION, callback)
        except Exception as exc:
            self.checker.sessions += 1
            self.checker.fail(f"{type(exc).__name__}: {exc}"[:400])
            return time.perf_counter() - start, False
        finally:
            _calls.reset(token)
        latency = time.perf_counter() - start
        return latency, self.checker.check(scenario, outcome, deltas, calls)

    async def sequential(
        self, contender: Any, scenario: Scenario, budget: dict[str, float]
    ) -> dict[str, Any]:
        """Sessions one after another: at least `min`, then more until `seconds` passed (at most `max`)."""
        gc.collect()
        latencies: list[float] = []
        cpu0, wall0 = cpu_seconds(), time.perf_counter()
        while _more(budget, len(latencies), wall0):
            latencies.append((await self.session(contender, scenario))[0])
        wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
        return _summary(latencies, wall, cpu)

    async def concurrent(
        self, contender: Any, scenario: Scenario, budget: dict[str, float]
    ) -> dict[str, Any]:
        """`in_flight` sessions at all times (each worker starts the next as soon as one finishes)."""
        gc.collect()
        latencies: list[float] = []
        started = 0
        cpu0, wall0 = cpu_seconds(), time.perf_counter()

        async def worker() -> None:
            nonlocal started
            while _more(budget, started, wall0):
                started += 1
                latencies.append((await self.session(contender, scenario))[0])

        await asyncio.gather(*(worker() for _ in range(int(budget["in_flight"]))))
        wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
        return {"in_flight": int(budget["in_flight"]), **_summary(latencies, wall, cpu)}

    async def streaming_probe(self, pause_ms: int = 150) -> dict[str, Any]:
        """One session whose server pauses after its first token: deltas must arrive before the pause ends."""
        scenario = Scenario(pause_ms=pause_ms)
        contender = self.contender(scenario)
        try:
            await self.session(contender, scenario)  # warm-up (connection, lazy imports)
            stamps: list[float] = []
            _, ok = await self.session(contender, scenario, lambda _text: stamps.append(time.perf_counter()))
        finally:
            await contender.aclose()
        gap = (stamps[1] - stamps[0]) * 1000 if len(stamps) > 1 else 0.0
        incremental = ok and gap >= pause_ms * 0.5
        if ok and not incremental:
            self.checker.fail(
                f"streaming probe: first two deltas {gap:.1f} ms apart although the server paused "
                f"{pause_ms} ms between them: deltas are buffered, not delivered as they arrive"
            )
        return {"pause_ms": pause_ms, "gap_ms": gap, "incremental": incremental}


async def phase_main(bench: Bench, config: dict[str, Any]) -> dict[str, Any]:
    global _tool_delay
    result: dict[str, Any] = {"streaming": await bench.streaming_probe()}

    main = Scenario(tools=3, tokens=config["tokens"])
    contender = bench.contender(main)
    try:
        for _ in range(config["warmup"]):
            await bench.session(contender, main)
        result["sequential"] = await bench.sequential(contender, main, config["sequential"])
        result["concurrent"] = await bench.concurrent(contender, main, config["concurrent"])
    finally:
        await contender.aclose()

    long = Scenario(tools=3, tokens=config["long_tokens"])
    contender = bench.contender(long)
    try:
        for _ in range(max(2, config["warmup"] // 5)):
            await bench.session(contender, long)
        result["long"] = await bench.sequential(contender, long, config["long"])
    finally:
        await contender.aclose()
    extra_tokens = long.tokens - main.tokens
    result["cpu_per_token_us"] = (
        (result["long"]["cpu_per_session_ms"] - result["sequential"]["cpu_per_session_ms"])
        / extra_tokens
        * 1000
    )

    tools = Scenario(tools=4, tokens=config["tokens"])
    _tool_delay = 0.1
    contender = bench.contender(tools)
    try:
        await bench.session(contender, tools)
        result["parallel_tools"] = await bench.sequential(contender, tools, config["parallel_tools"])
    finally:
        await contender.aclose()
        _tool_delay = 0.0
    return result


async def phase_interleaved(bench: Bench, config: dict[str, Any]) -> dict[str, Any]:
    """Sequential sessions in blocks `run.py` asks for one at a time (a line `N` on stdin; `end` stops),
    each answered with its CPU and wall time as one JSON line on stdout. Between blocks the process blocks
    on stdin, its event loop with it (nothing of the contender runs) while the others run theirs."""
    scenario = Scenario(tools=3, tokens=config["tokens"])
    blocks: list[dict[str, float]] = []
    contender = bench.contender(scenario)
    try:
        for _ in range(config["warmup"]):
            await bench.session(contender, scenario)
        gc.collect()
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            if line.strip() == "end":
                break
            count = int(line)
            cpu0, wall0 = cpu_seconds(), time.perf_counter()
            for _ in range(count):
                await bench.session(contender, scenario)
            block = {"sessions": count, "cpu_s": cpu_seconds() - cpu0, "wall_s": time.perf_counter() - wall0}
            blocks.append(block)
            print(json.dumps(block), flush=True)
    finally:
        await contender.aclose()
    return {"blocks": blocks}


async def _control(port: int, method: str, path: str) -> dict[str, Any]:
    """One request to the fake server's control endpoints, over a plain socket."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"{method} {path} HTTP/1.1\r\nhost: bench\r\ncontent-length: 0\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        return json.loads(await reader.readexactly(length))  # type: ignore[no-any-return]
    finally:
        writer.close()


async def phase_hold(bench: Bench, config: dict[str, Any]) -> dict[str, Any]:
    """N sessions streaming at once, every one held by the server after its first tokens; RSS per session."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    count = config["sessions"]
    scenario = Scenario(tools=3, tokens=config["tokens"], hold=config["hold_tokens"])
    contender = bench.contender(scenario)
    result: dict[str, Any] = {
        "sessions": count,
        "open_files_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
    }
    held = 0
    all_held = asyncio.Event()
    ramp = asyncio.Semaphore(config["ramp"])
    target = 0

    async def one() -> bool:
        nonlocal held
        reached = False

        def on_delta(_text: str) -> None:
            nonlocal held, reached
            if not reached:
                reached = True
                held += 1
                ramp.release()
                if held >= target:
                    all_held.set()

        await ramp.acquire()
        try:
            return (await bench.session(contender, scenario, on_delta))[1]
        finally:
            if not reached:
                ramp.release()

    async def hold_and_release(n: int, timeout: float) -> tuple[list[asyncio.Task[bool]], bool]:
        nonlocal held, target
        held, target = 0, n
        all_held.clear()
        tasks = [asyncio.create_task(one()) for _ in range(n)]
        deadline = time.perf_counter() + timeout
        progress, progress_at = -1, time.perf_counter()
        while not all_held.is_set() and time.perf_counter() < deadline and not all(t.done() for t in tasks):
            if held != progress:
                progress, progress_at = held, time.perf_counter()
            elif time.perf_counter() - progress_at > config["stall_s"]:
                break  # no session reached the hold for a while: the contender cannot hold more
            try:
                await asyncio.wait_for(all_held.wait(), 0.25)
            except asyncio.TimeoutError:
                pass
        return tasks, held >= n

    try:
        # Warm-up: a few held-and-released sessions load everything lazily loaded and open the pool.
        tasks, _ = await hold_and_release(config["warmup"], 60)
        await _control(bench.port, "POST", "/_release")
        await asyncio.wait(tasks, timeout=60)
        gc.collect()
        await asyncio.sleep(0.2)
        rss_before = rss_kb()
        cpu0, wall0 = cpu_seconds(), time.perf_counter()
        tasks, ok = await hold_and_release(count, config["timeout"])
        setup = time.perf_counter() - wall0
        result["setup_cpu_s"] = cpu_seconds() - cpu0
        gc.collect()
        rss_held = rss_kb()
        server = await _control(bench.port, "GET", "/_stats")
        result.update(
            held=held,
            all_held=ok,
            server_held=server["held"],
            setup_s=setup,
            rss_before_kb=rss_before,
            rss_held_kb=rss_held,
            rss_per_session_kb=(rss_held - rss_before) / max(held, 1),
            rss_per_1000_mb=(rss_held - rss_before) / max(held, 1) * 1000 / 1024,
            open_fds=len(os.listdir("/proc/self/fd")),
        )
        wall0 = time.perf_counter()
        released = await _control(bench.port, "POST", "/_release")
        result["released"] = released["released"]
        finished, unfinished = await asyncio.wait(
            tasks, timeout=config["timeout"] if ok else config["stall_s"]
        )
        for task in unfinished:
            task.cancel()
        if unfinished:
            await asyncio.wait(unfinished, timeout=10)
            bench.checker.fail(f"{len(unfinished)} sessions had not finished after the release; cancelled")
        result["drain_s"] = time.perf_counter() - wall0
        result["completed_ok"] = sum(
            1 for t in finished if not t.cancelled() and t.exception() is None and t.result()
        )
        result["peak_rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    finally:
        await contender.aclose()
    return result


def versions(module: Any) -> dict[str, str]:
    found = {"python": sys.version.split()[0]}
    for name in module.PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "?"
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("contender")
    parser.add_argument("phase", choices=["versions", "main", "hold", "interleaved"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--config", default="{}")
    args = parser.parse_args()
    config = json.loads(args.config)

    report: dict[str, Any] = {"contender": args.contender, "phase": args.phase}
    try:
        cpu0, wall0 = cpu_seconds(), time.perf_counter()
        module = importlib.import_module(f"contenders.{args.contender}")
        report["import_s"] = time.perf_counter() - wall0
        report["import_cpu_s"] = cpu_seconds() - cpu0
        report["label"] = module.LABEL
        report["versions"] = versions(module)
        if args.phase != "versions":
            bench = Bench(module, args.port)
            phase: Callable[[Bench, dict[str, Any]], Coroutine[Any, Any, dict[str, Any]]] = {
                "main": phase_main,
                "hold": phase_hold,
                "interleaved": phase_interleaved,
            }[args.phase]
            report.update(asyncio.run(phase(bench, config)))
            report["peak_rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            report["checks"] = {
                "sessions": bench.checker.sessions,
                "failures": bench.checker.failures,
                "messages": bench.checker.messages,
                "usage_reported": bench.checker.usage_reported,
            }
        report["ok"] = True
    except Exception as exc:
        report["ok"] = False
        report["error"] = f"{type(exc).__name__}: {exc}"
        report["traceback"] = traceback.format_exc()[-4000:]
    with open(args.out, "w") as out:
        json.dump(report, out)


if __name__ == "__main__":
    main()
