"""The hand-written floor with OpenTelemetry only (`floor_features.py` with the store off): for
`breakdown.py`, beside `agentloop_otel.py` (not in `run.py`'s table)."""

from __future__ import annotations

from contenders.floor_features import PACKAGES
from contenders.floor_features import Contender as _Features

LABEL = "floor (OpenTelemetry SDK only, hand-written)"
__all__ = ["LABEL", "PACKAGES", "Contender"]


class Contender(_Features):
    store = False
