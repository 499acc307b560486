"""agentloop with memory in its in-process store only (`agentloop_features.py` with SQLite replaced by
`InMemoryChatMemoryStore`, tracing and middleware off): beside `agentloop_sqlite.py` in
`benchmarks/cpu_ab.py` it splits what memory costs into the memory machinery and the SQLite store (not in
`run.py`'s table)."""

from __future__ import annotations

from contenders.agentloop_features import PACKAGES
from contenders.agentloop_features import Contender as _Features

LABEL = "agentloop (memory in process only)"
__all__ = ["LABEL", "PACKAGES", "Contender"]


class Contender(_Features):
    tracing = False
    middleware = False
    in_process = True
