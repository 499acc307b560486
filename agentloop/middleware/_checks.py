"""Checks of the built-in middleware's settings, with errors that name the setting and what it takes."""

from __future__ import annotations

from typing import Any

from .._values._errors import IllegalConfigurationError

__all__ = ["check_count"]


def check_count(owner: str, name: str, value: Any, minimum: int) -> int:
    """`value` when it is an int >= `minimum` (not a bool), else an error naming `owner(name=...)`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise IllegalConfigurationError(f"{owner}({name}=...) must be an int >= {minimum}, got {value!r}")
    return value
