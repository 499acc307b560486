"""Profiles one contender on the benchmark workload (cProfile), to find where its CPU per session goes.

    python benchmarks/profile_contender.py agentloop [--sessions 300] [--tokens 200] [--in-flight 1]

Starts its own fake server, warms up, profiles only the measured sessions, prints the top functions and
saves the raw profile (<tmp>/agentloop-bench-<contender>.prof) for snakeviz / pstats.
A peer runs with its venv's python:
    benchmarks/.venvs/langchain/bin/python benchmarks/profile_contender.py langchain
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib
import io
import pstats
import tempfile
import time
from pathlib import Path

from _driver import Bench, cpu_seconds
from _workload import Scenario
from run import FakeServer

HERE = Path(__file__).resolve().parent


async def run(
    bench: Bench, scenario: Scenario, sessions: int, in_flight: int, profiler: cProfile.Profile
) -> None:
    contender = bench.contender(scenario)
    try:
        for _ in range(20):
            await bench.session(contender, scenario)
        remaining = iter(range(sessions))

        async def worker() -> None:
            for _ in remaining:
                await bench.session(contender, scenario)

        cpu0, wall0 = cpu_seconds(), time.perf_counter()
        profiler.enable()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        profiler.disable()
        cpu, wall = cpu_seconds() - cpu0, time.perf_counter() - wall0
    finally:
        await contender.aclose()
    print(
        f"{sessions} sessions, {in_flight} in flight: {cpu / sessions * 1000:.2f} ms CPU/session under the "
        f"profiler ({wall:.1f} s wall); checks: {bench.checker.failures} failed of {bench.checker.sessions}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("contender")
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--tools", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=1)
    parser.add_argument("--sort", default="tottime", help="pstats sort key (tottime, cumulative, ...)")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()

    server = FakeServer()
    try:
        port = server.port
        module = importlib.import_module(f"contenders.{args.contender}")
        bench = Bench(module, port)
        profiler = cProfile.Profile()
        scenario = Scenario(tools=args.tools, tokens=args.tokens)
        asyncio.run(run(bench, scenario, args.sessions, args.in_flight, profiler))
    finally:
        server.close()
    path = Path(tempfile.gettempdir()) / f"agentloop-bench-{args.contender}.prof"
    profiler.dump_stats(str(path))
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).strip_dirs().sort_stats(args.sort).print_stats(args.top)
    print(text.getvalue())
    print(f"raw profile: {path}")


if __name__ == "__main__":
    main()
