"""agentloop's benchmark: one streaming tool-calling workload through agentloop, a hand-written floor and the
peers, side by side in one run. See benchmarks/README.md for what is measured and how to read it.

    python benchmarks/run.py [--quick] [--check] [--only floor,agentloop] [--rounds N] [--no-hold]

Prints a Markdown table and the targets (PASS/FAIL with the numbers), writes benchmarks/results.json, and on
full runs benchmarks/RESULTS.md. With --check, exits non-zero when a target fails.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import peers

HERE = Path(__file__).resolve().parent

# name (module in contenders/) -> peer venv name, or None: runs on this interpreter (the project's env).
CONTENDERS: dict[str, str | None] = {
    "floor": None,
    "agentloop": None,
    "agentloop_features": None,
    "floor_features": None,  # a reference, not a target: what the features' libraries cost by themselves
    **{module: peer for peer, module in peers.PEERS.items()},
}

MAIN_TOKENS = 200
PROFILES: dict[str, dict[str, Any]] = {
    "full": {
        "rounds": 5,
        "main": {
            "tokens": MAIN_TOKENS,
            "warmup": 20,
            "sequential": {"min": 30, "max": 500, "seconds": 3.0},
            "concurrent": {"in_flight": 50, "min": 200, "max": 1500, "seconds": 4.0},
            "long_tokens": 1000,
            "long": {"min": 5, "max": 60, "seconds": 2.0},
            "parallel_tools": {"min": 10, "max": 10, "seconds": 0.0},
        },
        "hold": {"floor": 10_000, "agentloop": 10_000, "agentloop_features": 10_000, "peers": 1_000},
        "interleaved": {"tokens": MAIN_TOKENS, "warmup": 50, "block": 10, "cycles": 200},
    },
    "quick": {
        "rounds": 1,
        "main": {
            "tokens": MAIN_TOKENS,
            "warmup": 10,
            "sequential": {"min": 20, "max": 200, "seconds": 1.5},
            "concurrent": {"in_flight": 50, "min": 100, "max": 500, "seconds": 2.0},
            "long_tokens": 1000,
            "long": {"min": 3, "max": 20, "seconds": 1.0},
            "parallel_tools": {"min": 5, "max": 5, "seconds": 0.0},
        },
        "hold": {"floor": 1_000, "agentloop": 1_000, "agentloop_features": 1_000, "peers": 200},
        "interleaved": {"tokens": MAIN_TOKENS, "warmup": 20, "block": 10, "cycles": 8},
    },
}
HOLD = {"tokens": 20, "hold_tokens": 5, "ramp": 256, "warmup": 10, "timeout": 240, "stall_s": 30}
IDLE_TARGET = 10_000

# Targets for agentloop: issue 36's ratios to the floor (CPU sequential and at 50 in flight, p99 at 50 in
# flight, idle memory a held session); issue 6's parallel tools and import bound.
CPU_RATIO_TARGET = 1.1
P99_RATIO_TARGET = 1.1
IDLE_RSS_RATIO_TARGET = 1.2
PARALLEL_TOOLS_TARGET_MS = 115.0
IMPORT_TARGET_S = 0.3


@dataclass
class Contender:
    name: str
    python: Path
    peer: str | None
    label: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    skipped: str | None = None
    rounds: list[dict[str, Any]] = field(default_factory=list)
    hold: dict[str, Any] | None = None
    interleaved: dict[str, Any] | None = None


# -- running things ----------------------------------------------------------------------------------------


class FakeServer:
    """The fake OpenAI server in its own process; it exits when its stdin closes."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "fakeserver.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"fake server did not start (said {line!r})")
        self.port = int(line.split()[1])

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/_stats", timeout=30) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def drive(
    contender: Contender, phase: str, port: int, config: dict[str, Any], timeout: float
) -> dict[str, Any]:
    """Runs `_driver.py` for one phase in a fresh process of the contender's interpreter."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "out.json"
        err = Path(scratch) / "stderr.txt"
        command = _driver_command(contender, phase, port, out, config)
        try:
            with err.open("w") as stderr:
                subprocess.run(
                    command, stdout=stderr, stderr=stderr, timeout=timeout, env=_driver_env(), check=False
                )
        except subprocess.TimeoutExpired:
            return {"ok": False, "error": f"{phase} phase did not finish within {timeout:.0f} s"}
        if not out.exists():
            tail = err.read_text()[-1500:]
            return {"ok": False, "error": f"the driver wrote no result; its output ends with:\n{tail}"}
        return json.loads(out.read_text())  # type: ignore[no-any-return]


def _driver_command(
    contender: Contender, phase: str, port: int, out: Path, config: dict[str, Any]
) -> list[str]:
    """The command that runs `_driver.py` for one phase of `contender`, writing its report to `out`."""
    return [
        *(str(contender.python), str(HERE / "_driver.py"), contender.name, phase),
        *("--port", str(port), "--out", str(out), "--config", json.dumps(config)),
    ]


def _driver_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the measured imports use compiled bytecode, as users' do
    return env


def discover(only: set[str] | None) -> list[Contender]:
    found = []
    for name, peer in CONTENDERS.items():
        if only is not None and name not in only:
            continue
        python = peers.interpreter(peer) if peer is not None else Path(sys.executable)
        contender = Contender(name, python, peer)
        if peer is not None and not python.exists():
            contender.skipped = f"not installed (`nox -s bench` creates benchmarks/.venvs/{peer})"
        else:
            # Import once (also compiles the bytecode, so the measured imports are not first-ever imports).
            report = drive(contender, "versions", 0, {}, timeout=300)
            if report.get("ok"):
                contender.label = report["label"]
                contender.versions = report["versions"]
            else:
                contender.skipped = "cannot import: " + report.get("error", "?").splitlines()[-1][:200]
        found.append(contender)
    return found


PAIRED = ("floor", "agentloop", "agentloop_features", "floor_features")
"""The contenders whose ratios to the floor are targets (or their reference): run back to back in a round."""


def round_order(runnable: list[Contender], index: int) -> list[Contender]:
    """One round's order: the floor and agentloop's contenders back to back (shuffled among themselves),
    before or after the peers (shuffled) in alternate rounds. A ratio pairs two processes of one round; run
    minutes apart, a slow spell of the machine (its rounds of one contender spread by 10-30%) would hit one
    side only."""
    shuffle = random.Random(index).shuffle
    paired = [c for c in runnable if c.name in PAIRED]
    others = [c for c in runnable if c.name not in PAIRED]
    shuffle(paired)
    shuffle(others)
    return paired + others if index % 2 == 0 else others + paired


CONTROL = "floor, a second process"
"""The side-by-side phase runs the floor twice: the second process's ratio to the first (`cpu_ratio_control`)
is what the measure reads for two identical clients, the error bar beside every other ratio."""


@dataclass
class _Blocks:
    """One process of the side-by-side phase: whose it is, and the blocks it answered."""

    contender: Contender
    key: str
    process: subprocess.Popen[str]
    out: Path
    err: Path
    blocks: list[dict[str, Any]] = field(default_factory=list)
    checks: dict[str, Any] | None = None
    error: str | None = None


def interleave(contenders: list[Contender], port: int, config: dict[str, Any]) -> None:
    """Sequential CPU of the paired contenders measured side by side: one process each (the floor twice,
    `CONTROL`), all started, then in each of `cycles` cycles every process runs a block of `block` sessions
    in turn (order shuffled per cycle) while the others wait. Blocks are short (10 sessions, ~0.1 s) and many:
    on a shared VM the machine's speed drifts by 30% and more from one second to the next, within a cycle
    too, so a ratio is only as good as the number of blocks behind it (benchmarks/README.md). Sets each
    contender's `interleaved` (its blocks, its checks, or its error; the floor's also `control`, the second
    process's blocks)."""
    env = _driver_env()
    running: dict[str, _Blocks] = {}
    ended: list[_Blocks] = []
    with tempfile.TemporaryDirectory() as scratch:
        try:
            keys = [(c, c.name) for c in contenders]
            keys += [(c, CONTROL) for c in contenders if c.name == "floor"]
            for contender, key in keys:
                stem = key.replace(",", "").replace(" ", "_")
                out, err = Path(scratch) / f"{stem}.json", Path(scratch) / f"{stem}.err"
                with err.open("w") as stderr:
                    process = subprocess.Popen(
                        _driver_command(contender, "interleaved", port, out, config),
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=stderr,
                        text=True,
                        env=env,
                    )
                running[key] = _Blocks(contender, key, process, out, err)
            for key, one in list(running.items()):
                if not _ask(one.process, None).get("ready"):
                    ended.append(_drop(running, key))
            for cycle in range(config["cycles"]):
                order = sorted(running)
                random.Random(cycle).shuffle(order)
                for key in order:
                    one = running[key]
                    block = _ask(one.process, config["block"])
                    if "cpu_s" not in block:
                        ended.append(_drop(running, key))
                        continue
                    one.blocks.append(block)
            for key, one in list(running.items()):
                assert one.process.stdin is not None
                one.process.stdin.write("end\n")
                one.process.stdin.close()
                one.process.wait(timeout=120)
                report = json.loads(one.out.read_text()) if one.out.exists() else {}
                if not report.get("ok"):
                    ended.append(_drop(running, key))
                    continue
                one.checks = report["checks"]
                ended.append(running.pop(key))
        finally:
            for one in running.values():
                if one.process.poll() is None:
                    one.process.kill()
                    one.process.wait()
    for one in sorted(ended, key=lambda o: o.key == CONTROL):  # the floor's own first, then its control
        if one.key == CONTROL:
            if one.error is None and one.contender.interleaved and one.contender.interleaved.get("ok"):
                one.contender.interleaved["control"] = one.blocks
            continue
        if one.error is not None:
            one.contender.interleaved = {"ok": False, "blocks": [], "error": one.error}
        else:
            one.contender.interleaved = {"ok": True, "blocks": one.blocks, "checks": one.checks}


def _ask(process: subprocess.Popen[str], block: int | None) -> dict[str, Any]:
    """Sends one block's size (None: only reads the ready line) and reads the driver's JSON answer."""
    assert process.stdin is not None and process.stdout is not None
    try:
        if block is not None:
            process.stdin.write(f"{block}\n")
            process.stdin.flush()
        line = process.stdout.readline()
        return json.loads(line) if line else {}
    except (OSError, ValueError):
        return {}


def _drop(running: dict[str, _Blocks], key: str) -> _Blocks:
    """Stops a process that failed (its contender gets no side-by-side figure) and records why."""
    one = running.pop(key)
    if one.process.poll() is None:
        one.process.kill()
    one.process.wait()
    report = json.loads(one.out.read_text()) if one.out.exists() else {}
    one.error = (
        report.get("error") or one.err.read_text()[-1500:] or f"exited with status {one.process.returncode}"
    )
    return one


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- summarising -------------------------------------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _get(report: dict[str, Any], *path: str) -> Any:
    for key in path:
        if not isinstance(report, dict) or key not in report:
            return None
        report = report[key]
    return report


def summarise(contenders: list[Contender]) -> dict[str, dict[str, Any]]:
    floor = next((c for c in contenders if c.name == "floor" and not c.skipped), None)
    summaries: dict[str, dict[str, Any]] = {}
    for contender in contenders:
        if contender.skipped:
            continue
        good = [r for r in contender.rounds if r.get("ok")]
        metric = {
            "import_s": ("import_s",),
            "cpu_per_session_ms": ("sequential", "cpu_per_session_ms"),
            "cpu_per_token_us": ("cpu_per_token_us",),
            "sequential_sessions_per_s": ("sequential", "sessions_per_s"),
            "sequential_p50_ms": ("sequential", "p50_ms"),
            "concurrent_sessions_per_s": ("concurrent", "sessions_per_s"),
            "concurrent_cpu_per_session_ms": ("concurrent", "cpu_per_session_ms"),
            "concurrent_p50_ms": ("concurrent", "p50_ms"),
            "concurrent_p99_ms": ("concurrent", "p99_ms"),
            "parallel_tools_p50_ms": ("parallel_tools", "p50_ms"),
            "peak_rss_mb": ("peak_rss_kb",),
            "server_cpu_per_session_ms": ("server_cpu_per_session_ms",),
            "connections_per_1000_sessions": ("connections_per_1000_sessions",),
        }
        summary: dict[str, Any] = {
            key: _median([_get(r, *path) for r in good]) for key, path in metric.items()
        }
        if summary["peak_rss_mb"] is not None:
            summary["peak_rss_mb"] /= 1024
        # Ratios to the floor, paired within each round, then the median over rounds.
        if floor is not None:
            by_round = {r["round"]: r for r in floor.rounds if r.get("ok")}
            for key, path in (
                ("cpu_ratio", ("sequential", "cpu_per_session_ms")),
                ("p99_ratio", ("concurrent", "p99_ms")),
                ("concurrent_cpu_ratio", ("concurrent", "cpu_per_session_ms")),
                ("throughput_ratio", ("concurrent", "sessions_per_s")),
            ):
                ratios = []
                for report in good:
                    base = by_round.get(report["round"])
                    if base is not None and _get(base, *path):
                        ratios.append(_get(report, *path) / _get(base, *path))
                summary[key] = _median(ratios)
        add_interleaved(summary, contender, floor)
        checked = good + ([contender.interleaved] if contender.interleaved else [])
        sessions = sum(_get(r, "checks", "sessions") or 0 for r in checked)
        failures = sum(_get(r, "checks", "failures") or 0 for r in checked)
        messages = [m for r in checked for m in _get(r, "checks", "messages") or []]
        errors = [r["error"] for r in contender.rounds if not r.get("ok")]
        if contender.interleaved and not contender.interleaved.get("ok"):
            errors.append("interleaved: " + (contender.interleaved.get("error") or "failed"))
        summary["checks"] = {
            "sessions": sessions,
            "failures": failures,
            "streaming_incremental": all(_get(r, "streaming", "incremental") for r in good) if good else None,
            "messages": messages[:5],
            "errors": errors[:5],
            "rounds_ok": len(good),
            "rounds": len(contender.rounds),
        }
        if contender.hold is not None:
            hold = contender.hold
            summary["idle"] = {
                key: hold.get(key)
                for key in (
                    "sessions",
                    "held",
                    "all_held",
                    "completed_ok",
                    "rss_per_session_kb",
                    "rss_per_1000_mb",
                    "setup_s",
                    "setup_cpu_s",
                    "drain_s",
                    "open_files_limit",
                )
            }
            summary["idle"]["error"] = None if hold.get("ok") else hold.get("error", "hold phase failed")
            summary["idle"]["checks"] = hold.get("checks")
        summaries[contender.name] = summary
    return summaries


def add_interleaved(summary: dict[str, Any], contender: Contender, floor: Contender | None) -> None:
    """The sequential CPU measured side by side (`interleave`): per session over all its blocks, and the
    median of its per-cycle ratios to the floor, which becomes `cpu_ratio` (the per-round one stays as
    `cpu_ratio_rounds`)."""
    summary["cpu_ratio_rounds"] = summary.get("cpu_ratio")
    mine = contender.interleaved or {}
    theirs = (floor.interleaved if floor is not None else None) or {}
    if not mine.get("ok") or not mine["blocks"]:
        return
    blocks = mine["blocks"]
    summary["interleaved_cpu_per_session_ms"] = (
        sum(b["cpu_s"] for b in blocks) / sum(b["sessions"] for b in blocks) * 1000
    )
    summary["interleaved_cycles"] = len(blocks)
    ours = _per_session(blocks)
    if theirs.get("ok") and len(theirs["blocks"]) == len(blocks):
        floors = _per_session(theirs["blocks"])
        summary["cpu_ratio"] = _median_ratio(ours, floors)
        # Beside it, for reading: the ratio of the two median blocks (steadier when blocks of one cycle share
        # little of the machine's state; not what the target reads).
        summary["cpu_ratio_of_medians"] = statistics.median(ours) / statistics.median(floors)
    control = mine.get("control")
    if control and len(control) == len(blocks):  # the floor's: its second process against it
        summary["cpu_ratio_control"] = _median_ratio(_per_session(control), ours)


def _per_session(blocks: list[dict[str, Any]]) -> list[float]:
    """Each side-by-side block's CPU seconds a session."""
    return [block["cpu_s"] / block["sessions"] for block in blocks]


def _median_ratio(ours: list[float], theirs: list[float]) -> float:
    """The median of the per-cycle ratios of two processes' blocks (paired by cycle)."""
    return statistics.median([o / t for o, t in zip(ours, theirs, strict=True)])


def _cpu_detail(summary: dict[str, Any], floor: dict[str, Any] | None = None) -> str:
    """How a sequential CPU ratio was measured (side by side when it was, with what the floor's second
    process read against it)."""
    ratio = summary["cpu_ratio"]
    if "cpu_ratio_of_medians" in summary:  # set with the side-by-side ratio, and only then
        control = (floor or {}).get("cpu_ratio_control")
        return (
            f"{ratio:.2f}x (side by side: median of {summary['interleaved_cycles']} per-cycle ratios; ratio "
            f"of the blocks' medians {_fmt(summary.get('cpu_ratio_of_medians'), 2, 'x')}; per-process "
            f"rounds: {_fmt(summary.get('cpu_ratio_rounds'), 2, 'x')}"
            + ("" if control is None else f"; a second floor process read {control:.2f}x the floor")
            + ")"
        )
    return f"{ratio:.2f}x (median of per-round ratios)"


def evaluate_targets(summaries: dict[str, dict[str, Any]], mode: str) -> list[dict[str, Any]]:
    """agentloop's targets, each PASS / FAIL / SKIP with the numbers behind it."""
    agentloop = summaries.get("agentloop")
    floor = summaries.get("floor")

    def target(name: str, status: str, detail: str) -> dict[str, Any]:
        return {"target": name, "status": status, "detail": detail}

    if agentloop is None:
        return [target("agentloop available", "SKIP", "agentloop was not run or could not be imported")]
    results = []
    checks = agentloop["checks"]
    results.append(
        target(
            "every agentloop session correct (text, deltas one by one, K tools, usage)",
            "PASS"
            if checks["failures"] == 0 and checks["sessions"] and checks["streaming_incremental"]
            else "FAIL",
            f"{checks['sessions']} sessions, {checks['failures']} failed"
            + ("" if checks["streaming_incremental"] else "; deltas not delivered as they arrive"),
        )
    )
    ratio = agentloop.get("cpu_ratio")
    if ratio is None or floor is None:
        results.append(
            target(
                f"CPU per session, sequential <= {CPU_RATIO_TARGET}x floor", "SKIP", "no floor measurement"
            )
        )
    else:
        results.append(
            target(
                f"CPU per session, sequential <= {CPU_RATIO_TARGET}x floor",
                "PASS" if ratio <= CPU_RATIO_TARGET else "FAIL",
                f"{agentloop['cpu_per_session_ms']:.2f} ms vs floor {floor['cpu_per_session_ms']:.2f} ms: "
                + _cpu_detail(agentloop, floor),
            )
        )
    ratio = agentloop.get("concurrent_cpu_ratio")
    results.append(
        target(
            f"CPU per session at 50 in flight <= {CPU_RATIO_TARGET}x floor",
            "SKIP" if ratio is None or floor is None else ("PASS" if ratio <= CPU_RATIO_TARGET else "FAIL"),
            "no floor measurement"
            if ratio is None or floor is None
            else f"{ratio:.2f}x (median of per-round ratios)",
        )
    )
    p50 = agentloop.get("parallel_tools_p50_ms")
    results.append(
        target(
            f"K=4 tools x 100 ms, session p50 <= {PARALLEL_TOOLS_TARGET_MS:.0f} ms",
            "SKIP" if p50 is None else ("PASS" if p50 <= PARALLEL_TOOLS_TARGET_MS else "FAIL"),
            "not measured" if p50 is None else f"{p50:.1f} ms (sequential would be >= 400 ms)",
        )
    )
    imported = agentloop.get("import_s")
    results.append(
        target(
            f"import agentloop (Agent, tool, OpenAIChatModel) <= {IMPORT_TARGET_S} s",
            "SKIP" if imported is None else ("PASS" if imported <= IMPORT_TARGET_S else "FAIL"),
            "not measured" if imported is None else f"{imported:.3f} s",
        )
    )
    ratio = agentloop.get("p99_ratio")
    if ratio is None or floor is None:
        results.append(
            target(f"p99 at 50 in flight <= {P99_RATIO_TARGET}x floor", "SKIP", "no floor measurement")
        )
    else:
        results.append(
            target(
                f"p99 at 50 in flight <= {P99_RATIO_TARGET}x floor",
                "PASS" if ratio <= P99_RATIO_TARGET else "FAIL",
                f"{agentloop['concurrent_p99_ms']:.1f} ms vs floor {floor['concurrent_p99_ms']:.1f} ms: "
                f"{ratio:.2f}x",
            )
        )
    idle = agentloop.get("idle")
    name = f"{IDLE_TARGET:,} concurrent idle streaming sessions in one process"
    if idle is None or not idle.get("sessions"):
        results.append(target(name, "SKIP", "idle-sessions test not run"))
    else:
        count, held, completed = idle["sessions"], idle.get("held") or 0, idle.get("completed_ok") or 0
        failures = _get(idle, "checks", "failures") or 0
        ok = held >= count and completed == count and not failures and not idle.get("error")
        per = idle.get("rss_per_session_kb")
        detail = (
            f"{held:,} of {count:,} held at once, {completed:,} completed correctly"
            + (f", {per:.1f} KB RSS per session" if per is not None and held >= count else "")
            + (f"; first failure: {idle['checks']['messages'][0]}" if failures else "")
            + (f"; {idle['error']}" if idle.get("error") else "")
        )
        if not ok:
            results.append(target(name, "FAIL", detail))
        elif count < IDLE_TARGET:
            results.append(target(name, "SKIP", f"{mode} run tried {count:,} only: {detail}"))
        else:
            results.append(target(name, "PASS", detail))
    results.append(_idle_ratio_target(agentloop, floor))
    return results + features_targets(summaries)


def _idle_ratio_target(agentloop: dict[str, Any], floor: dict[str, Any] | None) -> dict[str, Any]:
    """Issue 36: the RSS a held streaming session keeps, at most 1.2x the floor's (all of both held)."""
    name = f"idle RSS per held streaming session <= {IDLE_RSS_RATIO_TARGET}x floor"
    ours = (agentloop.get("idle") or {}).get("rss_per_1000_mb")
    theirs = ((floor or {}).get("idle") or {}).get("rss_per_1000_mb")
    if ours is None or theirs is None:
        return {"target": name, "status": "SKIP", "detail": "idle-sessions test not run for both"}
    ratio = ours / theirs
    return {
        "target": name,
        "status": "PASS" if ratio <= IDLE_RSS_RATIO_TARGET else "FAIL",
        "detail": f"{ours:.1f} vs floor {theirs:.1f} MB per 1,000 sessions: {ratio:.2f}x",
    }


FEATURES_RATIO_TARGET = 1.3
"""Issue 28: agentloop with every feature on (store, tracing, a middleware) at most 1.3x the floor."""


def features_targets(summaries: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The features-on contender against the floor: sequential CPU, CPU at 50 in flight, p99 at 50."""
    features = summaries.get("agentloop_features")
    if features is None or summaries.get("floor") is None:
        return []
    results = []
    checks = features["checks"]
    results.append(
        {
            "target": "every features-on session correct (and its memory, checked at the end)",
            "status": "PASS"
            if checks["failures"] == 0 and checks["sessions"] and not checks["errors"]
            else "FAIL",
            "detail": f"{checks['sessions']} sessions, {checks['failures']} failed"
            + (f"; {checks['errors'][0][:200]}" if checks["errors"] else ""),
        }
    )
    for key, what in (
        ("cpu_ratio", "CPU per session, sequential"),
        ("concurrent_cpu_ratio", "CPU per session at 50 in flight"),
        ("p99_ratio", "p99 at 50 in flight"),
    ):
        ratio = features.get(key)
        results.append(
            {
                "target": f"features on: {what} <= {FEATURES_RATIO_TARGET}x floor",
                "status": "SKIP" if ratio is None else ("PASS" if ratio <= FEATURES_RATIO_TARGET else "FAIL"),
                "detail": "not measured"
                if ratio is None
                else _cpu_detail(features, summaries.get("floor"))
                if key == "cpu_ratio"
                else f"{ratio:.2f}x (median of per-round ratios)",
            }
        )
    reference = summaries.get("floor_features")
    if reference is not None and reference.get("cpu_ratio") and features.get("cpu_ratio"):
        # Not a target: how much of "features on" is the libraries' own work (a hand-written client doing it).
        results.append(
            {
                "target": "features on, for reference: the hand-written client with the same features",
                "status": "INFO",
                "detail": f"{reference['cpu_ratio']:.2f}x floor CPU sequential, "
                f"{_fmt(reference.get('concurrent_cpu_ratio'), 2, 'x')} at 50 in flight "
                f"(agentloop features on: {features['cpu_ratio']:.2f}x and "
                f"{_fmt(features.get('concurrent_cpu_ratio'), 2, 'x')})",
            }
        )
    return results


# -- reporting ---------------------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 1, suffix: str = "") -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}{suffix}"


def table(contenders: list[Contender], summaries: dict[str, dict[str, Any]]) -> str:
    header = [
        "contender",
        "CPU/session ms",
        "× floor",
        "CPU/token µs",
        "seq sess/s",
        "50-in-flight sess/s",
        "p50 / p99 ms",
        "× floor p99",
        "K=4×100 ms p50",
        "import s",
        "peak RSS MB",
        "idle RSS MB per 1k (held/tried)",
        "checks",
    ]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 2) + [":---"]) + "|",
    ]
    for contender in contenders:
        label = contender.label or contender.name
        if contender.skipped:
            lines.append(
                f"| {label} | " + " | ".join(["–"] * (len(header) - 2)) + f" | skipped: {contender.skipped} |"
            )
            continue
        s = summaries[contender.name]
        checks = s["checks"]
        if checks["errors"] and not checks["rounds_ok"]:
            verdict = "✗ error: " + checks["errors"][0].splitlines()[0][:80]
        elif checks["failures"] or not checks["streaming_incremental"] or checks["errors"]:
            verdict = f"✗ {checks['failures']:,}/{checks['sessions']:,} failed"
            if not checks["streaming_incremental"]:
                verdict += ", buffered"
            if checks["errors"]:
                verdict += f", {len(checks['errors'])} phase error(s)"
        else:
            verdict = f"✓ {checks['sessions']:,}"
        idle = s.get("idle") or {}
        if idle.get("sessions"):
            held = idle.get("held") or 0
            idle_ok = held >= idle["sessions"] and idle.get("completed_ok") == idle["sessions"]
            if idle_ok:
                idle_text = f"{_fmt(idle.get('rss_per_1000_mb'))} ({held:,}/{idle['sessions']:,})"
            else:  # RSS over a partial hold would mislead: the rest were queued, not streaming
                idle_text = f"✗ {held:,}/{idle['sessions']:,} held"
        else:
            idle_text = "–"
        row = [
            f"**{label}**" if contender.name == "agentloop" else label,
            _fmt(s["cpu_per_session_ms"], 2),
            _fmt(s.get("cpu_ratio"), 2, "×")
            + (f" (a second process: {s['cpu_ratio_control']:.2f}×)" if "cpu_ratio_control" in s else ""),
            _fmt(s["cpu_per_token_us"], 1),
            _fmt(s["sequential_sessions_per_s"], 0),
            _fmt(s["concurrent_sessions_per_s"], 0),
            f"{_fmt(s['concurrent_p50_ms'], 0)} / {_fmt(s['concurrent_p99_ms'], 0)}",
            _fmt(s.get("p99_ratio"), 2, "×"),
            _fmt(s["parallel_tools_p50_ms"], 1),
            _fmt(s["import_s"], 3),
            _fmt(s["peak_rss_mb"], 0),
            idle_text,
            verdict,
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def targets_text(targets: list[dict[str, Any]]) -> str:
    return "\n".join(f"- **{t['status']}** {t['target']}: {t['detail']}" for t in targets)


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "cpus": os.cpu_count(),
    }
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            info["cpu"] = next(
                line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")
            )
        with open("/proc/meminfo") as meminfo:
            kb = int(next(line.split()[1] for line in meminfo if line.startswith("MemTotal")))
            info["memory_gb"] = round(kb / 1024 / 1024, 1)
    except (OSError, StopIteration):
        pass
    return info


def _load_text(info: dict[str, Any]) -> str:
    load = info.get("load_average_1min_at_start")
    return "" if load is None else f" 1-minute load average at its start: {load:.2f}."


def results_markdown(
    document: dict[str, Any],
    contenders: list[Contender],
    summaries: dict[str, dict[str, Any]],
    targets: list[dict[str, Any]],
) -> str:
    info = document["machine"]
    mode, config, started, elapsed = (
        document["mode"],
        document["config"],
        document["started"],
        document["elapsed_s"],
    )
    versions = []
    for contender in contenders:
        if contender.skipped:
            versions.append(f"- {contender.name}: skipped ({contender.skipped})")
        else:
            pinned = ", ".join(f"{k} {v}" for k, v in contender.versions.items() if k != "python")
            versions.append(f"- {contender.label}: {pinned}")
    server_rows = [
        f"| {c.label} | {_fmt(summaries[c.name].get('server_cpu_per_session_ms'), 3)} | "
        f"{_fmt(summaries[c.name].get('connections_per_1000_sessions'), 0)} |"
        for c in contenders
        if c.name in summaries
    ]
    server_table = "\n".join(
        [
            "| contender | fake-server CPU ms per session | TCP connections opened per 1,000 sessions |",
            "|---|---:|---:|",
            *server_rows,
        ]
    )
    return f"""# Benchmark results

Latest `nox -s bench` ({mode} run: {config["rounds"]} round(s), medians over rounds; ratios paired within a
round, but the sequential CPU ratio of the floor and agentloop's contenders, measured side by side in
{config.get("interleaved", {}).get("cycles", "no")} cycles of sessions in blocks). Generated by
`benchmarks/run.py` on {started} in {elapsed / 60:.1f} min; README.md explains it.

Machine: {info.get("cpu", "?")}, {info.get("cpus")} CPUs, {info.get("memory_gb", "?")} GB, {info["platform"]},
{info["implementation"]} {info["python"]}.{_load_text(info)}

Workload per session: request 1 streams K=3 parallel tool calls, the 3 async tools run (no delay), request 2
streams T={MAIN_TOKENS} text tokens one chunk each plus usage. Every session is checked.

{table(contenders, summaries)}

## agentloop targets

{targets_text(targets)}

## The fake server's side

What the server spent per session (it must stay far below every client), and how many TCP connections
each contender opened per 1,000 sessions over a whole round (all phases; a pool that keeps its connections
opens about one per session in flight).

{server_table}

## Versions

{chr(10).join(versions)}
"""


# -- main --------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short round, small idle test (~3 min)")
    parser.add_argument("--check", action="store_true", help="exit 1 when an agentloop target fails")
    parser.add_argument("--only", help="comma-separated contenders: " + ", ".join(CONTENDERS))
    parser.add_argument("--rounds", type=int, help="rounds of the main phase (default: 5 full, 1 quick)")
    parser.add_argument("--no-hold", action="store_true", help="skip the idle streaming sessions test")
    parser.add_argument("--hold-sessions", type=int, help="idle sessions for every contender (overrides)")
    parser.add_argument("--json", type=Path, default=HERE / "results.json", help="where to write the JSON")
    parser.add_argument(
        "--write-md",
        choices=["auto", "yes", "no"],
        default="auto",
        help="update benchmarks/RESULTS.md (auto: full runs of every contender only)",
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        help="measure nothing: summarise an earlier results.json (with --write-md yes: RESULTS.md too)",
    )
    args = parser.parse_args()
    if args.from_json is not None:
        return summarise_run(json.loads(args.from_json.read_text()), args, write_json=False)
    mode = "quick" if args.quick else "full"
    profile = PROFILES[mode]
    rounds = args.rounds or profile["rounds"]
    only = set(args.only.split(",")) if args.only else None
    if only is not None and not only <= set(CONTENDERS):
        parser.error(f"unknown contender(s) {sorted(only - set(CONTENDERS))}; choose from {list(CONTENDERS)}")

    started_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load_at_start = os.getloadavg()[0]  # what else ran: the reader judges the figures by it
    t0 = time.perf_counter()
    contenders = discover(only)
    for contender in contenders:
        progress(
            f"{contender.name}: "
            + (f"SKIPPED ({contender.skipped})" if contender.skipped else f"{contender.python}")
        )
    runnable = [c for c in contenders if not c.skipped]

    server = FakeServer()
    try:
        for index in range(rounds):
            order = round_order(runnable, index)
            for contender in order:
                before = server.stats()
                wall = time.perf_counter()
                report = drive(contender, "main", server.port, profile["main"], timeout=900)
                after = server.stats()
                report["round"] = index
                served = (after["requests"] - before["requests"]) / 2
                if served:
                    report["server_cpu_per_session_ms"] = (after["cpu"] - before["cpu"]) / served * 1000
                    opened = after["connections"] - before["connections"]
                    report["connections_per_1000_sessions"] = opened / served * 1000
                contender.rounds.append(report)
                cpu = _get(report, "sequential", "cpu_per_session_ms")
                progress(
                    f"round {index + 1}/{rounds} {contender.name}: {time.perf_counter() - wall:.1f} s"
                    + (
                        f", {cpu:.2f} ms CPU/session"
                        if cpu
                        else f", FAILED: {report.get('error', '?')[:300]}"
                    )
                )
        paired = [c for c in runnable if c.name in PAIRED]
        if len(paired) > 1 and any(c.name == "floor" for c in paired):
            wall = time.perf_counter()
            interleave(paired, server.port, profile["interleaved"])
            progress(
                f"side by side, sequential: {time.perf_counter() - wall:.1f} s; "
                + ", ".join(
                    f"{c.name} {'ok' if (c.interleaved or {}).get('ok') else 'FAILED'}" for c in paired
                )
            )
        if not args.no_hold:
            for contender in runnable:
                count = args.hold_sessions or profile["hold"].get(contender.name, profile["hold"]["peers"])
                wall = time.perf_counter()
                contender.hold = drive(
                    contender, "hold", server.port, {**HOLD, "sessions": count}, timeout=900
                )
                held = contender.hold.get("held")
                progress(
                    f"idle sessions {contender.name}: {held}/{count} held, {time.perf_counter() - wall:.1f} s"
                    + (
                        ""
                        if contender.hold.get("ok")
                        else f", FAILED: {contender.hold.get('error', '?')[:300]}"
                    )
                )
    finally:
        server.close()

    document = {
        "mode": mode,
        "started": started_at,
        "elapsed_s": time.perf_counter() - t0,
        "machine": {**machine(), "load_average_1min_at_start": round(load_at_start, 2)},
        "only": sorted(only) if only is not None else None,
        "config": {
            "mode": mode,
            "rounds": rounds,
            "main": profile["main"],
            "hold": {**HOLD, **profile["hold"]},
            "interleaved": profile["interleaved"],
        },
        "contenders": {
            c.name: {
                "label": c.label,
                "python": str(c.python),
                "versions": c.versions,
                "skipped": c.skipped,
                "rounds": c.rounds,
                "hold": c.hold,
                "interleaved": c.interleaved,
            }
            for c in contenders
        },
    }
    return summarise_run(document, args, write_json=True)


def summarise_run(document: dict[str, Any], args: argparse.Namespace, *, write_json: bool) -> int:
    """Summarises a run's raw measurements: table and targets on stdout, JSON, RESULTS.md, exit status."""
    contenders = [
        Contender(
            name,
            Path(raw["python"]),
            None,
            label=raw["label"],
            versions=raw["versions"],
            skipped=raw["skipped"],
            rounds=raw["rounds"],
            hold=raw["hold"],
            interleaved=raw.get("interleaved"),
        )
        for name, raw in document["contenders"].items()
    ]
    mode, only = document["mode"], document.get("only")
    summaries = summarise(contenders)
    targets = evaluate_targets(summaries, mode) if only is None or "agentloop" in only else []
    for name, raw in document["contenders"].items():
        raw["summary"] = summaries.get(name)
    document["targets"] = targets
    rounds, elapsed = document["config"]["rounds"], document["elapsed_s"]

    print()
    print(f"## agentloop benchmark ({mode}, {rounds} round(s), {elapsed / 60:.1f} min)\n")
    print(table(contenders, summaries))
    if targets:
        print("\n### agentloop targets\n")
        print(targets_text(targets))
    if write_json:
        args.json.write_text(json.dumps(document, indent=2))
        print(f"\nJSON: {args.json}")
    write_md = args.write_md == "yes" or (args.write_md == "auto" and mode == "full" and only is None)
    if write_md:
        path = HERE / "RESULTS.md"
        # The hand-written parts (from the first of their headings on) survive regeneration.
        old = path.read_text() if path.exists() else ""
        starts = [old.index(heading) for heading in KEPT_HEADINGS if heading in old]
        kept = old[min(starts) :] if starts else ""
        path.write_text(results_markdown(document, contenders, summaries, targets).rstrip() + "\n\n" + kept)
        print(f"Markdown: {path}")

    if args.check:
        if any(t["status"] == "FAIL" for t in targets):
            return 1
        if "agentloop" not in summaries:
            print("--check: agentloop was not measured", file=sys.stderr)
            return 2
    return 0


OPTIMISATION_LOG = "## What each optimisation bought"
KEPT_HEADINGS = ("## Runs by stop", OPTIMISATION_LOG)
"""Where RESULTS.md's hand-written part begins: the runs each stop wrote down, then the optimisation log."""


if __name__ == "__main__":
    sys.exit(main())
