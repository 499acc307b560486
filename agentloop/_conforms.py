"""`conforms(value, protocol)`: `isinstance` against a runtime-checkable Protocol, answered once per class.

`isinstance` with a Protocol walks the protocol's members on every call (tens of microseconds); the loop
asks the same few questions of every invocation's memory, store and tool runner. The answer is kept per
(class, protocol), which assumes what every class agentloop checks this way does: its instances all have
the protocol's members or none do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from typing_extensions import TypeIs

__all__ = ["conforms"]

T = TypeVar("T")

_KEEP = 4096
"""Answers kept at most (classes made on the fly, e.g. in a loop, would otherwise grow the cache forever)."""

_answers: dict[tuple[type, Any], bool] = {}


def conforms(value: object, protocol: Callable[..., T]) -> TypeIs[T]:
    """`isinstance(value, protocol)`, remembered for `type(value)`."""
    key = (type(value), protocol)
    answer = _answers.get(key)
    if answer is None:
        if len(_answers) >= _KEEP:
            _answers.clear()
        answer = _answers[key] = isinstance(value, protocol)  # type: ignore[arg-type]
    return answer
