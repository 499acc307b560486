"""A quick A/B of CPU per session, agentloop against the floor, for trying an optimisation in a minute.

    python benchmarks/cpu_ab.py [--trials 5] [--sessions 400] [--tokens 200] [--only floor,agentloop]

Starts the fake server, then for each trial runs every contender in a fresh process: 50 warm-up sessions,
then `--sessions` sequential sessions (each checked), CPU measured with getrusage. Prints each trial and the
median of the per-trial ratios to the first contender. Only sequential CPU: `run.py` measures the rest.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from run import FakeServer

HERE = Path(__file__).resolve().parent

_CHILD = """
import asyncio, importlib, sys
sys.path.insert(0, {here!r})
from _driver import Bench, cpu_seconds
from _workload import Scenario

async def main(port: int, name: str, sessions: int, tokens: int) -> None:
    bench = Bench(importlib.import_module("contenders." + name), port)
    scenario = Scenario(tools=3, tokens=tokens)
    contender = bench.contender(scenario)
    for _ in range(50):
        await bench.session(contender, scenario)
    start = cpu_seconds()
    for _ in range(sessions):
        await bench.session(contender, scenario)
    cpu = cpu_seconds() - start
    await contender.aclose()
    if bench.checker.failures:
        sys.exit(f"{{name}}: {{bench.checker.failures}} sessions failed their checks")
    print(cpu / sessions * 1000)

asyncio.run(main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=400)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--only", default="floor,agentloop", help="contenders; ratios are to the first")
    args = parser.parse_args()
    names = args.only.split(",")
    child = _CHILD.format(here=str(HERE))

    server = FakeServer()
    try:
        port = str(server.port)
        per_name: dict[str, list[float]] = {name: [] for name in names}
        ratios: dict[str, list[float]] = {name: [] for name in names[1:]}
        for trial in range(args.trials):
            row = {}
            for name in names:
                done = subprocess.run(
                    [sys.executable, "-c", child, port, name, str(args.sessions), str(args.tokens)],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if done.returncode:
                    sys.exit(done.stderr.strip().splitlines()[-1] if done.stderr else f"{name} failed")
                row[name] = float(done.stdout.split()[-1])
                per_name[name].append(row[name])
            for name in names[1:]:
                ratios[name].append(row[name] / row[names[0]])
            shown = ", ".join(f"{name} {row[name]:.2f} ms" for name in names)
            print(f"trial {trial + 1}: {shown}", flush=True)
        medians = ", ".join(f"{name} {statistics.median(per_name[name]):.2f} ms" for name in names)
        print(f"median CPU/session: {medians}")
        for name, values in ratios.items():
            print(
                f"{name} / {names[0]}: median {statistics.median(values):.3f}x "
                f"(trials {min(values):.3f}-{max(values):.3f})"
            )
    finally:
        server.close()


if __name__ == "__main__":
    main()
