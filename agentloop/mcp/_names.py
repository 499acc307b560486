"""Tool names: MCP allows names that model providers reject, so each gets a name providers accept."""

from __future__ import annotations

import hashlib
import re

__all__ = ["local_name"]

_VALID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_INVALID_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_HASH_CHARS = 8


def local_name(remote: str, prefix: str | None = None) -> str:
    """The name the model sees for the MCP tool `remote`: `prefix_remote` when that is valid as it is.

    Otherwise the characters providers reject become `_` and the name is cut to 64 characters, ending
    in `_` and 8 hex digits of the full name's sha256 (so two names that clean up alike stay apart).
    The same input always gives the same name.
    """
    full = f"{prefix}_{remote}" if prefix else remote
    if _VALID.match(full):
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:_HASH_CHARS]
    cleaned = _INVALID_CHARS.sub("_", full)[: 64 - _HASH_CHARS - 1]
    return f"{cleaned}_{digest}"


def check_prefix(prefix: str | None) -> str | None:
    """`prefix` when it is None or 1-32 letters, digits, '_' or '-'; raises ValueError otherwise."""
    if prefix is None:
        return None
    if not isinstance(prefix, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", prefix):
        raise ValueError(f"prefix must be 1-32 letters, digits, '_' or '-', got {prefix!r}")
    return prefix
