"""`CallOptions`: what one call chose for itself, kept by a paused round so that `resume()` goes on under it.

A module of its own, below the seam and the features: the saved form of a paused round names these options
and must not import the loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["NO_OPTIONS", "CallOptions", "type_label"]


@dataclass(frozen=True, slots=True)
class CallOptions:
    """What a call chose for itself (`chat(..., output_type=..., middleware=[...])`): a paused round keeps
    them, so `resume()` goes on under the same options."""

    output_type: Any = None
    """None: the agent's."""
    middleware: tuple[Any, ...] = ()
    """`Middleware` objects, outermost first."""

    def labels(self) -> tuple[str | None, tuple[str, ...]]:
        """How a stored paused round names them: the output type's name, the middleware's class names."""
        output = None if self.output_type is None else type_label(self.output_type)
        return output, tuple(type(m).__qualname__ for m in self.middleware)


def type_label(value: Any) -> str:
    """A stable, readable name of an output type (`module.Qualname`, or a list of them for a union)."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(type_label(v) for v in value) + "]"
    if isinstance(value, type):
        return (
            value.__qualname__
            if value.__module__ == "builtins"
            else f"{value.__module__}.{value.__qualname__}"
        )
    return repr(value)


NO_OPTIONS = CallOptions()
