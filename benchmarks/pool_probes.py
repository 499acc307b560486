"""Socket checks and CPU per session of the provider pool at N in flight: httpx2's stock pool against
agentloop's `ProbeOnUsePool` (issue 36, item 3).

    python benchmarks/pool_probes.py [--in-flight 50,500] [--trials 3] [--sessions 1000]

Starts the fake server, then per trial, per in-flight count and per pool runs a fresh process: warm-up
sessions at that concurrency, then `--sessions` sessions at it (the benchmark's workload: 3 tool calls,
200 streamed tokens), CPU from getrusage. Socket checks are httpcore2 HTTP/1.1 `has_expired()` calls on an
idle connection (that is when it asks the socket), counted by wrapping the method in the child.
Prints each run and the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from run import FakeServer

HERE = Path(__file__).resolve().parent

_CHILD = """
import asyncio, importlib, json, sys
sys.path.insert(0, {here!r})
import httpcore2
from _driver import Bench
from _workload import Scenario

checks = [0]
_type = httpcore2._async.http11.AsyncHTTP11Connection
_original = _type.has_expired
def _counted(self):
    if self.is_idle():
        checks[0] += 1
    return _original(self)
_type.has_expired = _counted

if sys.argv[3] == "stock":
    import agentloop.models._http._pool as pool_module
    pool_module.use_probe_on_use_pool = lambda client, **kwargs: False

async def main(port: int, in_flight: int, sessions: int) -> None:
    bench = Bench(importlib.import_module("contenders.agentloop"), port)
    scenario = Scenario(tools=3, tokens=200)
    contender = bench.contender(scenario)
    await bench.concurrent(contender, scenario, {{"in_flight": in_flight, "min": in_flight, "max": in_flight,
                                                  "seconds": 0}})
    checks[0] = 0
    result = await bench.concurrent(contender, scenario, {{"in_flight": in_flight, "min": sessions,
                                                           "max": sessions, "seconds": 0}})
    await contender.aclose()
    if bench.checker.failures:
        sys.exit(f"{{bench.checker.failures}} sessions failed their checks")
    print(json.dumps({{"cpu_ms": result["cpu_per_session_ms"], "checks": checks[0] / result["sessions"],
                      "p99_ms": result["p99_ms"]}}))

asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[4])))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-flight", default="50,500")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=1000)
    args = parser.parse_args()
    code = _CHILD.format(here=str(HERE))
    server = FakeServer()
    runs: dict[tuple[int, str], list[dict[str, float]]] = {}
    try:
        for trial in range(args.trials):
            for in_flight in (int(n) for n in args.in_flight.split(",")):
                for pool in ("stock", "probe-on-use"):
                    sessions = max(args.sessions, in_flight)
                    out = subprocess.run(
                        [sys.executable, "-c", code, str(server.port), str(in_flight), pool, str(sessions)],
                        capture_output=True,
                        text=True,
                        check=True,
                    ).stdout
                    run = json.loads(out.strip().splitlines()[-1])
                    runs.setdefault((in_flight, pool), []).append(run)
                    print(
                        f"trial {trial + 1} in_flight={in_flight:4} {pool:13}"
                        f" cpu/session={run['cpu_ms']:.3f} ms"
                        f"  socket checks/session={run['checks']:.1f}  p99={run['p99_ms']:.0f} ms",
                        flush=True,
                    )
    finally:
        server.close()
    print("medians:")
    for (in_flight, pool), results in runs.items():
        cpu = statistics.median(r["cpu_ms"] for r in results)
        checks = statistics.median(r["checks"] for r in results)
        print(f"  in_flight={in_flight:4} {pool:13} cpu/session={cpu:.3f} ms  checks/session={checks:.1f}")


if __name__ == "__main__":
    main()
