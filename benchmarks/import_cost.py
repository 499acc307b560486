"""Import cost of agentloop over its floor (issue 36 item 4), CPU seconds in a fresh interpreter.

Each sample is a new `python -c` that times its own import with `time.process_time()` (bytecode compiled
beforehand, as users' is); the median of `--repeat` samples is reported for the floor (`import httpx2,
msgspec, anyio`), for agentloop (`import agentloop`, `Agent`, `tool`, `OpenAIChatModel`) and for agentloop
building an `Agent` with a plain function tool. Run from the tree to measure (`python -c` puts the current
directory first on `sys.path`): `python benchmarks/import_cost.py [--repeat 15]`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

FLOOR = "import httpx2, msgspec, anyio"
AGENTLOOP = (
    "import agentloop; from agentloop import Agent, tool; from agentloop.models import OpenAIChatModel"
)
BUILD = (
    AGENTLOOP + "\n"
    "def add(a: int, b: int) -> int:\n"
    "    return a + b\n"
    "Agent(OpenAIChatModel(model='m', api_key='k', base_url='http://127.0.0.1:1'), tools=[tool(add)])"
)
CASES = {"floor": FLOOR, "agentloop": AGENTLOOP, "agentloop + Agent(tool)": BUILD}


def sample(code: str) -> tuple[float, int]:
    """One fresh interpreter: (CPU seconds of `code`, modules it added)."""
    script = (
        "import sys, time\n"
        "before = len(sys.modules)\n"
        "t0 = time.process_time()\n"
        f"exec(compile({code!r}, '<measured>', 'exec'), {{}})\n"
        "print(time.process_time() - t0, len(sys.modules) - before)\n"
    )
    env = {**os.environ}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env)
    seconds, modules = out.stdout.split()
    return float(seconds), int(modules)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    for code in CASES.values():
        sample(code)  # compile the bytecode once
    results = {}
    for name, code in CASES.items():
        runs = [sample(code) for _ in range(args.repeat)]
        results[name] = (statistics.median(r[0] for r in runs), runs[0][1])
        print(f"{name:26} {results[name][0] * 1000:7.1f} ms CPU  {results[name][1]:4d} modules", flush=True)
    floor = results["floor"][0]
    for name in ("agentloop", "agentloop + Agent(tool)"):
        print(f"{name} over the floor: {(results[name][0] - floor) * 1000:+.1f} ms CPU")
    print(f"load average: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
