"""Public objects report their public path as `__module__` (`agentloop.Agent`, not the private module that
defines it), as httpx, anyio and trio do: reprs, `help()`, pickles, docs and stored type names show the
name users import. Each public package calls `publish()` on its `__all__` (and on each lazily loaded name).
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["TOP_LEVEL", "is_private", "publish", "publish_one"]

TOP_LEVEL: set[str] = set()
"""The names `agentloop` itself exports (filled by its `__init__`, which loads before any subpackage): an
object a subpackage re-exports too (`agentloop.middleware.Middleware`) is published as `agentloop.<name>`
whichever package loads it first."""


def is_private(module: str) -> bool:
    """True for a module path with a private part (`agentloop._values._errors`)."""
    return any(part.startswith("_") for part in module.split("."))


def publish_one(value: Any, module: str) -> Any:
    """Gives `value` (a class or function defined in a private agentloop module) the public `module` as its
    `__module__` (`agentloop` for a name it exports); anything else (aliases, constants, objects already
    public) is left as it is."""
    if not isinstance(value, (type, types.FunctionType)):
        return value
    current = value.__module__
    if current.split(".", 1)[0] == "agentloop" and is_private(current):
        if isinstance(value, type):
            _resolve_annotations(value, current)
        value.__module__ = "agentloop" if value.__name__ in TOP_LEVEL else module
    return value


def _resolve_annotations(cls: type, module: str) -> None:
    """Evaluates the class's string annotations (`from __future__ import annotations`) where they were
    written: `typing.get_type_hints`, msgspec and pydantic look names up in `sys.modules[cls.__module__]`,
    which after publishing is the public package. An annotation that does not resolve yet stays a string."""
    own = inspect.get_annotations(cls)
    if not own or not any(isinstance(a, str) for a in own.values()):
        return
    namespace = {**vars(sys.modules[module]), **dict(vars(cls))}
    resolved = dict(own)
    for name, annotation in own.items():
        if isinstance(annotation, str):
            try:
                resolved[name] = eval(annotation, namespace)  # the class's own annotation text
            except Exception:  # a name only imported under TYPE_CHECKING: left for later, as before
                continue
    type.__setattr__(cls, "__annotations__", resolved)


def publish(namespace: Mapping[str, Any], names: Iterable[str], module: str) -> None:
    """`publish_one` for each of `names` found in `namespace` (a package's `globals()`)."""
    for name in names:
        if name in namespace:
            publish_one(namespace[name], module)
