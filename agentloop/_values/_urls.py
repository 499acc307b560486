"""URLs as they may be shown (errors, reprs, logs): a password in one never leaves the process."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

__all__ = ["without_password"]


def without_password(url: str) -> str:
    """The URL as shown in errors and reprs: any password replaced by ***."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
