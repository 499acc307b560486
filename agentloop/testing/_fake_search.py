"""The providers' own tool search as the fake servers play it: which tools a request defers, which of them
earlier searches in its history found, and what a new search finds (the deferred tools whose name holds the
query, case-insensitively)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["deferred_names", "find", "unloaded_calls"]


def deferred_names(tools: Any) -> list[str]:
    """The names of the tools sent with `"defer_loading": true`, in order."""
    listed = tools if isinstance(tools, list) else []
    return [
        t["name"]
        for t in listed
        if isinstance(t, dict) and t.get("defer_loading") is True and isinstance(t.get("name"), str)
    ]


def find(query: str, deferred: Sequence[str]) -> list[str]:
    """The deferred tools a search for `query` finds: those whose name holds it (the fake model searches
    with the name of the tool it is about to call)."""
    wanted = query.lower()
    return [name for name in deferred if wanted in name.lower()]


def unloaded_calls(names: Iterable[str], deferred: Sequence[str], loaded: set[str]) -> list[str]:
    """The tools among `names` (a scripted answer's calls) that are deferred and not found yet: the fake
    model searches for each before calling it."""
    result: list[str] = []
    for name in names:
        if name in deferred and name not in loaded and name not in result:
            result.append(name)
    return result
