"""What each feature costs, in agentloop and in the hand-written client, measured side by side.

    python benchmarks/breakdown.py [--cycles 200] [--block 10] [--only floor,agentloop,...]

Runs `run.py`'s side-by-side phase (one process per contender plus a second floor process, blocks of
sequential sessions in turn, every session checked) over the features one at a time: memory in SQLite,
OpenTelemetry's SDK, a pass-through middleware, all of them, each in agentloop and (but the middleware) in
the hand-written floor. Prints each contender's CPU a session and its ratio to the floor (the median of the
per-cycle ratios), and each feature's cost over its base (agentloop's over plain agentloop, the floor's
over the floor). About 2.5 minutes with the defaults.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BREAKDOWN = (
    "floor",
    "agentloop",
    "agentloop_sqlite",
    "agentloop_otel",
    "agentloop_middleware",
    "agentloop_features",
    "floor_sqlite",
    "floor_otel",
    "floor_features",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--block", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--only", default=",".join(BREAKDOWN), help="floor first")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    import run

    names = args.only.split(",")
    if names[0] != "floor":
        sys.exit("--only must start with floor: every ratio is to it")
    contenders = [run.Contender(name, Path(sys.executable), None) for name in names]
    config = {"tokens": args.tokens, "warmup": 50, "block": args.block, "cycles": args.cycles}
    server = run.FakeServer()
    try:
        run.interleave(contenders, server.port, config)
    finally:
        server.close()
    floor = contenders[0]
    ratios: dict[str, float] = {}
    failed = False
    for contender in contenders:
        summary: dict[str, Any] = {}
        run.add_interleaved(summary, contender, floor)
        measured = contender.interleaved or {}
        if not measured.get("ok") or "cpu_ratio" not in summary:
            print(f"{contender.name:22s} FAILED: {measured.get('error', 'no blocks')}")
            failed = True
            continue
        ratios[contender.name] = summary["cpu_ratio"]
        control = summary.get("cpu_ratio_control")
        print(
            f"{contender.name:22s} {summary['interleaved_cpu_per_session_ms']:6.2f} ms a session  "
            f"{summary['cpu_ratio']:.3f}x floor"
            + ("" if control is None else f"  (a second floor process: {control:.3f}x)")
        )
    for feature in ("sqlite", "otel", "middleware", "features"):
        parts = [
            f"{who} {ratios[f'{who}_{feature}'] - ratios[who]:+.3f}"
            for who in ("agentloop", "floor")
            if f"{who}_{feature}" in ratios and who in ratios
        ]
        if parts:
            print(f"{feature:10s} over its base (x floor): " + ", ".join(parts))
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
