"""API keys: checked and cleaned when a model is made, and masked in every form they can be printed in.

A key read from a file or a secret mount often ends with a newline; one pasted from a web page may carry a
non-ASCII character. Either makes HTTP libraries fail with the key quoted in their error
(`b'Bearer sk-...\\n'`) and in their DEBUG logs. So keys are stripped and checked at construction (the error
never shows them), and every text that may hold one (our errors, their causes, the HTTP libraries' log
records) is masked, whether the key appears raw, escaped (repr, bytes repr, JSON) or percent-encoded.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

from agentloop._values._errors import IllegalConfigurationError

__all__ = [
    "check_header_values",
    "clean_api_key",
    "mask_secret",
    "scrub",
    "scrub_exception",
    "secret_forms",
    "watch_http_logs",
]

_MIN_SECRET = 4  # shorter values are not masked: they would mask half of every text


def mask_secret(secret: str | None) -> str:
    """A form of `secret` safe to print: its last four characters at most."""
    if not secret:
        return "<none>"
    if len(secret) < 16:
        return "****"
    return f"****{secret[-4:]}"


def secret_forms(secret: str) -> set[str]:
    """Every way `secret` may be printed: raw, repr, bytes repr, JSON and unicode escapes, percent-encoded."""
    forms = {secret, repr(secret)[1:-1], quote(secret, safe=""), quote_plus(secret)}
    try:
        forms.add(repr(secret.encode())[2:-1])
    except UnicodeEncodeError:
        pass
    forms.add(secret.encode("unicode_escape").decode("ascii"))
    forms.add(secret.encode("ascii", "backslashreplace").decode("ascii"))
    forms.add(json.dumps(secret)[1:-1])
    return {form for form in forms if len(form) >= _MIN_SECRET}


def scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` with every occurrence of each secret replaced by its masked form (longest first)."""
    for secret in secrets:
        if len(secret) >= _MIN_SECRET and secret in text:
            text = text.replace(secret, mask_secret(secret))
    return text


def scrub_exception(exc: BaseException | None, secrets: Iterable[str]) -> None:
    """Masks secrets in the string arguments of `exc` and of its causes and contexts (in place), so a
    traceback printed later shows none."""
    secrets = tuple(secrets)
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        args = tuple(scrub(a, secrets) if isinstance(a, str) else a for a in exc.args)
        if args != exc.args:
            exc.args = args
        exc = exc.__cause__ or exc.__context__


def clean_api_key(key: str | None, *, owner: str, source: str) -> str | None:
    """`key` without surrounding whitespace (None when nothing is left), checked to be printable ASCII.

    `owner` names the model, `source` where the key came from (`api_key=`, an environment variable); the
    error says what is wrong and where, never the key.
    """
    if key is None:
        return None
    if not isinstance(key, str):
        raise IllegalConfigurationError(
            f"{owner}: the API key ({source}) must be a str, got {type(key).__name__}"
        )
    stripped = key.strip()
    if not stripped:
        return None
    for position, char in enumerate(stripped):
        if not "!" <= char <= "~":
            what = "a non-ASCII character" if ord(char) > 127 else "a space or control character"
            raise IllegalConfigurationError(
                f"{owner}: the API key ({source}) contains {what} at position {position} of "
                f"{len(stripped)}; API keys are printable ASCII: check that it was copied whole and "
                "unchanged (the key is not shown here)"
            )
    return stripped


def check_header_values(headers: dict[str, str], *, owner: str) -> None:
    """Raises for a header value HTTP cannot carry (non-ASCII, control characters), naming the header only."""
    for name, value in headers.items():
        if not isinstance(value, str):
            raise IllegalConfigurationError(
                f"{owner}: header {name!r} must be a str, got {type(value).__name__}"
            )
        bad = next((i for i, char in enumerate(value) if not " " <= char <= "~" and char != "\t"), None)
        if bad is not None:
            raise IllegalConfigurationError(
                f"{owner}: the value of header {name!r} has a character HTTP headers cannot carry at "
                f"position {bad} (non-ASCII, or a control character such as a newline); value not shown"
            )


# -- the HTTP libraries' logs -------------------------------------------------------------------------------

_HTTP_LOGGERS = (
    "httpx2",
    "httpx",
    *(
        f"{lib}.{part}"
        for lib in ("httpcore2", "httpcore")
        for part in ("connection", "http11", "http2", "proxy", "socks")
    ),
    "hpack.hpack",
    "hpack.table",
    # botocore logs the canonical request it signs (session token included) at DEBUG
    *(f"botocore.{part}" for part in ("auth", "credentials", "endpoint", "parsers", "httpsession", "utils")),
)
_lock = threading.Lock()
_registered: dict[str, None] = {}  # every form of every key of a live or past model, longest first
_filter: _SecretFilter | None = None


class _SecretFilter(logging.Filter):
    """Masks registered secrets in the records of the HTTP libraries' loggers (only those that are emitted:
    a disabled level costs nothing)."""

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = tuple(_registered)
        try:
            message = record.getMessage()
        except Exception:  # a broken record is the logging module's to report
            return True
        scrubbed = scrub(message, secrets)
        if scrubbed != message:
            record.msg, record.args = scrubbed, None
        if record.exc_info and record.exc_info[1] is not None:
            scrub_exception(record.exc_info[1], secrets)
            record.exc_text = None
        return True


def watch_http_logs(secrets: Iterable[str]) -> None:
    """Masks `secrets` (all their forms given) in the log records of httpx, httpcore, hpack and botocore from
    now on."""
    global _filter
    with _lock:
        new = set(secrets) - set(_registered)
        if new:
            merged = set(_registered) | new
            _registered.clear()
            _registered.update(dict.fromkeys(sorted(merged, key=len, reverse=True)))
        if _filter is None:
            _filter = _SecretFilter()
            for name in _HTTP_LOGGERS:
                logging.getLogger(name).addFilter(_filter)
