"""agentloop with memory in SQLite only (`agentloop_features.py` with the other features off): for
`benchmarks/cpu_ab.py`'s breakdown of what each feature costs (not in `run.py`'s table)."""

from __future__ import annotations

from contenders.agentloop_features import PACKAGES
from contenders.agentloop_features import Contender as _Features

LABEL = "agentloop (memory in SQLite only)"
__all__ = ["LABEL", "PACKAGES", "Contender"]


class Contender(_Features):
    tracing = False
    middleware = False
