"""How many threads the embedded model runs llama.cpp with when `n_threads=None`: the physical cores this
process may use, less those other processes (or other models in this process) keep busy.

A job of its own, apart from `LocalChatModel`'s request handling (`_local.py`): it reads the load average and
the CPU counters of /proc/stat, and the rule that turns them into a thread count (`threads_for`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

import msgspec

__all__ = ["CpuSample", "busy_elsewhere", "cpu_sample", "default_threads", "threads_for"]

# How long `default_threads` watches the CPUs (at least) to see how many of them other processes keep busy.
_SAMPLE_SECONDS = 0.2
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def default_threads(since: CpuSample | None = None) -> int:
    """The thread count for `n_threads=None`: the physical cores this process may use, less those other
    processes keep busy, and at least 1 (`threads_for`).

    "Busy" comes from two figures (`threads_for` weighs them): the 1-minute load average, and the CPU time
    used on this process's CPUs from `since` (a `cpu_sample()` taken on the calling thread) until now by
    everything but the calling thread, watched for at least `_SAMPLE_SECONDS` (Linux's /proc/stat): another
    model generating in this process counts, as another process does. The load average alone lags: it still
    reads 0.8 a minute after a job ended, which picked 1 thread on an idle 2-core machine.

    llama.cpp's threads meet at a barrier after every operation, so one thread descheduled by a competing
    process stalls them all: on a busy 2-core machine 2 threads generated 0.3 tokens/s where 1 thread made
    3.3 (docs/local-model.md has the measurements). On an idle machine every physical core is used.
    """
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        allowed = list(range(os.cpu_count() or 1))
    cores = _physical_cores(allowed)
    try:
        load: float | None = os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows
        load = None
    before = since if since is not None else cpu_sample(allowed)
    busy: float | None = None
    if before is not None:
        wait = _SAMPLE_SECONDS - (time.monotonic() - before.at)
        if wait > 0:
            time.sleep(wait)
        after = cpu_sample(allowed)
        busy = None if after is None else busy_elsewhere(before, after)
    return threads_for(cores, len(allowed), load, busy)


def threads_for(cores: int, cpus: int, load: float | None, busy: float | None) -> int:
    """`cores` less the cores other processes keep busy (rounded), at least 1; every core when no figure is
    known. `cpus` counts logical CPUs (what `load`, the 1-minute load average, and `busy`, the cores measured
    busy just now, are in).

    The measurement is current and the load average lags both ways (0.8 to 1.2 for a minute after a job
    ended, near 0 for a job that just started), so the measurement decides while the load average says the
    machine was not saturated; from a load of `cpus` on, the busier figure decides, since a short lull in a
    saturated machine measures idle too (and there one thread too many costs 10x, one too few 20%).
    """
    if busy is not None and (load is None or load < cpus):
        others = busy
    elif busy is not None or load is not None:
        others = max(figure for figure in (load, busy) if figure is not None)
    else:
        return cores
    return max(1, min(cores, int(cpus - others + 0.5)))


class CpuSample(msgspec.Struct, frozen=True):
    """CPU time counters at one moment: all processes' busy and total time on some CPUs (/proc/stat, in
    clock ticks), the CPU time of the thread that took the sample (seconds), and when (`time.monotonic()`).

    Only that thread's time is left out of "busy": it is the one loading the model. Other threads of this
    process compete for the cores like any process (another model generating, the application's work).
    """

    busy: int
    total: int
    own: float
    at: float


def cpu_sample(cpus: Sequence[int] | None = None) -> CpuSample | None:
    """The counters now for `cpus` (default: those this process may use), or None without /proc/stat."""
    if cpus is None:
        try:
            cpus = sorted(os.sched_getaffinity(0))
        except AttributeError:
            return None
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    wanted = {f"cpu{cpu}" for cpu in cpus}
    busy = total = 0
    for line in lines:
        name, _, rest = line.partition(" ")
        if name in wanted:
            # user nice system idle iowait irq softirq steal (guest time is already in user and nice)
            ticks = [int(value) for value in rest.split()[:8]]
            total += sum(ticks)
            busy += sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)
    if not total:
        return None
    return CpuSample(busy, total, time.thread_time(), time.monotonic())


def busy_elsewhere(before: CpuSample, after: CpuSample) -> float | None:
    """Cores kept busy by others between two samples taken on one thread: all busy time less that thread's
    own, over the wall time; None when no time passed."""
    elapsed = after.at - before.at
    ticks = after.total - before.total
    if elapsed <= 0 or ticks <= 0:
        return None
    cpus = ticks / (elapsed * _CLOCK_TICKS)  # how many CPUs the counters cover
    busy = (after.busy - before.busy) / ticks * cpus
    return max(0.0, busy - (after.own - before.own) / elapsed)


def _physical_cores(cpus: list[int]) -> int:
    """Distinct (package, core) pairs among `cpus` (hyperthreads share a core), else the number of cpus."""
    pairs = set()
    for cpu in cpus:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            package = (topology / "physical_package_id").read_text().strip()
            core = (topology / "core_id").read_text().strip()
        except OSError:
            return len(cpus)
        pairs.add((package, core))
    return len(pairs) or len(cpus)
