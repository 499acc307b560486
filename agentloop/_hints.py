"""Errors for a name looked up in the wrong public module: `from agentloop import ChatModel` says that it
lives in `agentloop.models`, and a misspelt name gets the closest public ones.

Used by the module `__getattr__` of `agentloop` and of each public subpackage, only after a lookup missed,
so it costs nothing on the way in. The public names are read from each package's `__all__` in its source
(parsed, never imported: a miss must not import an optional integration such as DBOS or MCP).
"""

from __future__ import annotations

import ast
import difflib
import dis
import functools
import importlib.util
import sys
from collections.abc import Mapping
from types import FrameType

PUBLIC_MODULES = (
    "agentloop",
    "agentloop.models",
    "agentloop.middleware",
    "agentloop.stores",
    "agentloop.mcp",
    "agentloop.a2a",
    "agentloop.otel",
    "agentloop.dbos",
    "agentloop.testing",
    "agentloop.ui",
    "agentloop.abc",
    "agentloop.control",
)


class MisplacedNameError(ImportError):
    """A name was looked up in a public module that does not have it; the message names the module that
    does, or the closest names (an ImportError, so that `from agentloop import ChatModel` shows it: Python
    replaces an AttributeError there by its own message)."""


def missing_name(module: str, name: str) -> Exception:
    """The error for `name`, not found in the public module `module`: a `MisplacedNameError` naming where a
    public `name` lives, else an AttributeError that suggests the closest names of `module`."""
    homes = [home for home in _homes().get(name, ()) if home != module]
    if homes and not name.startswith("_"):
        imports = " or ".join(f"`from {home} import {name}`" for home in homes)
        return MisplacedNameError(
            f"{module} has no {name!r}: it lives in {', '.join(homes)}; did you mean {imports}?",
            name=module,
        )
    message = f"module {module!r} has no attribute {name!r}"
    if not name.startswith("__"):
        own = _public(module)
        close = difflib.get_close_matches(name, own, n=3, cutoff=0.75)
        close += [other for other in own if other.lower() == name.lower() and other not in close]
        if close:
            message += "; did you mean " + " or ".join(repr(candidate) for candidate in close) + "?"
            if _importing_from(sys._getframe(2)):  # the module's __getattr__, then the code that asked
                return MisplacedNameError(message, name=module)
    return AttributeError(message)


def _importing_from(frame: FrameType | None) -> bool:
    """Whether `frame` is running `from module import name` (whose AttributeError Python would replace by a
    message of its own, dropping the suggestion)."""
    if frame is None:
        return False
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] == _IMPORT_FROM


_IMPORT_FROM = dis.opmap["IMPORT_FROM"]


@functools.lru_cache(maxsize=1)
def _homes() -> Mapping[str, tuple[str, ...]]:
    """Each public name, with the public modules that export it."""
    homes: dict[str, tuple[str, ...]] = {}
    for module in PUBLIC_MODULES:
        for name in _public(module):
            homes[name] = (*homes.get(name, ()), module)
    return homes


@functools.lru_cache(maxsize=len(PUBLIC_MODULES))
def _public(module: str) -> tuple[str, ...]:
    """The names in `module`'s `__all__`, read from its source; empty when it cannot be read."""
    try:
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            return ()
        with open(spec.origin, encoding="utf-8") as source:
            tree = ast.parse(source.read())
    except (ImportError, OSError, SyntaxError, ValueError):
        return ()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            try:
                return tuple(ast.literal_eval(node.value))
            except ValueError:
                return ()
    return ()
