"""The hand-written floor with memory in SQLite only (`floor_features.py` with tracing off): for
`breakdown.py`, beside `agentloop_sqlite.py` (not in `run.py`'s table)."""

from __future__ import annotations

from contenders.floor_features import PACKAGES
from contenders.floor_features import Contender as _Features

LABEL = "floor (memory in SQLite only, hand-written)"
__all__ = ["LABEL", "PACKAGES", "Contender"]


class Contender(_Features):
    tracing = False
