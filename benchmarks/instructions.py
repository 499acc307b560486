"""Instructions per benchmark session (valgrind's callgrind): a count that does not move with the load.

    python benchmarks/instructions.py [--only floor,agentloop,agentloop_features] [--tokens 200]

Starts the fake server, then runs each contender's client process under `valgrind --tool=callgrind` twice,
with 30 warm-up sessions and then 10 or 60 measured ones; the difference of the two counts over 50 is what
one session costs, start-up and warm-up cancelled out. Every session is checked. The server runs outside
valgrind. About a minute per contender. CPU seconds (`cpu_ab.py`, `run.py`) are what the targets are stated
in; on a noisy machine their rounds spread by 20% or more, while two counts of the same code agree within
about 0.1%, so this says whether a change made the path cheaper.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


async def _sessions(port: int, name: str, measured: int, tokens: int) -> None:
    from _driver import Bench
    from _workload import Scenario

    bench = Bench(importlib.import_module("contenders." + name), port)
    scenario = Scenario(tools=3, tokens=tokens)
    contender = bench.contender(scenario)
    try:
        for _ in range(30 + measured):
            await bench.session(contender, scenario)
    finally:
        await contender.aclose()
    if bench.checker.failures:
        sys.exit(f"{name}: {bench.checker.failures} sessions failed their checks: {bench.checker.messages}")


def _count(port: int, name: str, measured: int, tokens: int) -> int:
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        f"{port},{name},{measured},{tokens}",
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"}, check=False
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        sys.exit(f"{name} under valgrind failed:\n{done.stderr[-3000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="floor,agentloop,agentloop_features")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    if args.child:
        port, name, measured, tokens = args.child.split(",")
        asyncio.run(_sessions(int(port), name, int(measured), int(tokens)))
        return
    from run import FakeServer

    server = FakeServer()
    try:
        first = None
        for name in args.only.split(","):
            per_session = (
                _count(server.port, name, 60, args.tokens) - _count(server.port, name, 10, args.tokens)
            ) / 50
            first = first or per_session
            print(
                f"{name}: {per_session / 1e6:.3f} M instructions a session, {per_session / first:.3f}x",
                flush=True,
            )
    finally:
        server.close()


if __name__ == "__main__":
    main()
