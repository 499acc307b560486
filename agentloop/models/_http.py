"""What every HTTP chat provider shares: the client, timeouts, retries, failures turned into `ModelError`s.

A provider module builds a JSON payload, hands it to a `ProviderClient`, and maps what comes back; everything
about HTTP lives here. The API below is stable (the OpenAI and Anthropic providers both use it):

`ProviderClient(*, provider, base_url, headers=None, query=None, timeouts=None, retry=None, client=None,
secrets=())`
    One per model. Owns a pooled `httpx2.AsyncClient` created on first use, or uses `client` (an
    `httpx2.AsyncClient` or `httpx.AsyncClient`), which it never closes. `headers` go on every request;
    values of auth headers (authorization, api-key, x-api-key) are treated as secrets, like `secrets`.
    `timeouts` is a `Timeouts`, a number of seconds (connect/read/write/pool), or None for the defaults
    (with a user client, None keeps that client's own timeouts).
- `await request_json(path, payload, decoder, *, method="POST", headers=None, tools=False) -> T`:
    sends `payload` (encoded with msgspec unless already bytes), retries what is retryable, raises the
    mapped `ModelError` on failure, and returns the 2xx body decoded with `decoder` (a msgspec JSON decoder
    or a type; undecodable bodies, and bodies over `MAX_BODY_BYTES` (16 MiB), raise `BadResponseError`).
- `open_sse(path, payload, *, method="POST", headers=None, tools=False) -> async context manager of
    SSEStream`: opens an event stream, retrying until the first event has arrived (status errors, connect
    errors, connections dropped before any event). After that nothing is retried: once a provider has
    given its consumer an event, a retry would repeat it. Leaving the `async with` closes the response.
- `open_stream(...)`: the same, giving the open `httpx2.Response` (2xx checked, nothing read), for
    providers whose stream is not SSE.
- `error_from_payload(payload, *, request_id=None) -> ModelError`: an error the provider sent inside a
    2xx body or an event stream (`{"error": {...}}`, Anthropic's `event: error`).
- `scrub(text) -> str` (secrets masked), `owns_client`, `client`, `aclose()`; `repr` shows provider and
    base URL only.
`tools=True` tells the error mapping the request offered tools, so a "model does not support tools" answer
becomes `ToolsNotSupportedError`.

`SSEStream`: `async for event in stream` (`ServerSentEvent`s), `.response`, `.request_id`, `aclose()`, and
    `drain()`: call it once the provider's end marker arrived, before the last event goes to the consumer, so
    the connection returns to the pool instead of being dropped.
`Timeouts(connect=10, read=600, write=60, pool=60, total=None)`: `total` bounds a whole call, retries and
    the reading of a stream included; exceeding any of them raises `ModelTimeoutError`.
`RetryPolicy(max_retries=2, initial_delay=0.5, max_delay=8, jitter=0.25, max_retry_after=60,
    retry_statuses={408, 409, 429, 500, 502, 503, 504})`: capped exponential backoff with jitter; a
    `Retry-After` / `retry-after-ms` header replaces the backoff, and one above `max_retry_after` is not
    waited for (the error is raised at once, its `retry_after` set). `x-should-retry: true|false` wins.
Functions: `error_from_response(status, headers, body, *, provider, secrets=(), tools=False, url=None) ->
    ModelError`,
    `extract_provider_error(body) -> ProviderError(message, type, code)`, `parse_retry_after(headers,
    now=None) -> float | None`, `request_id_of(headers)`, `mask_secret(secret) -> str`,
    `scrub(text, secrets) -> str`, `model_error_from_exception(exc, *, provider, secrets=(), url=None) ->
    ModelError`, `describe_server(provider, url) -> str` ("OpenAI-compatible server at http://...").
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar, cast
from urllib.parse import parse_qsl

import anyio
import httpx2
import msgspec
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

from agentloop._errors import (
    AgentLoopError,
    AuthenticationError,
    BadRequestError,
    BadResponseError,
    IllegalConfigurationError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelTimeoutError,
    NotFoundError,
    RateLimitError,
    ServerError,
    ToolsNotSupportedError,
)
from agentloop._observe import retry_listener
from agentloop._text import encode_json

from ._secrets import check_header_values, mask_secret, scrub, scrub_exception, secret_forms, watch_http_logs
from ._sse import ServerSentEvent, SSEDecoder

__all__ = [
    "ProviderClient",
    "ProviderError",
    "RetryPolicy",
    "SSEStream",
    "Timeouts",
    "error_from_response",
    "error_payload",
    "extract_provider_error",
    "mask_secret",
    "model_error_from_exception",
    "parse_retry_after",
    "request_id_of",
    "scrub",
]

logger = logging.getLogger("agentloop.models")

T = TypeVar("T")
_encode = msgspec.json.Encoder().encode

_USER_AGENT = "agentloop/0.1.0"
_AUTH_HEADERS = frozenset({"authorization", "api-key", "x-api-key", "proxy-authorization", "x-goog-api-key"})
_SECRET_QUERY = frozenset({"key", "api-key", "api_key", "apikey", "token", "access_token", "sig"})
_MAX_ERROR_TEXT = 500
MAX_BODY_BYTES = 16 * 1024 * 1024
"""The largest response body read whole (a 2xx JSON answer; one event of a stream has the same limit): a
bigger one is a `BadResponseError`, so a broken or hostile server cannot make the client buffer gigabytes."""
_MAX_ERROR_BODY = 64 * 1024  # of an error answer only the start is read: its message is all that is used
_MAX_CACHED_URLS = 256  # parsed request URLs kept per client

# -- configuration ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds allowed for each phase of a call (None: no limit).

    `connect`: opening the connection; `read`: the longest wait for the next bytes (for a stream, between two
    pieces of it); `write`: sending the request; `pool`: waiting for a free pooled connection; `total`: the
    whole call, retries and the reading of a stream included.
    """

    connect: float | None = 10.0
    read: float | None = 600.0
    write: float | None = 60.0
    pool: float | None = 60.0
    total: float | None = None

    @classmethod
    def of(cls, value: Timeouts | float | None) -> Timeouts:
        """`value` as `Timeouts`: a number sets connect, read, write and pool alike; None: the defaults."""
        if value is None:
            return cls()
        if isinstance(value, Timeouts):
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"timeout must be a positive number of seconds or a Timeouts, got {value!r}")
        seconds = float(value)
        return cls(connect=seconds, read=seconds, write=seconds, pool=seconds)

    def as_tuple(self) -> tuple[float | None, float | None, float | None, float | None]:
        """(connect, read, write, pool): the form both httpx and httpx2 accept per request."""
        return (self.connect, self.read, self.write, self.pool)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When and how long to wait before trying a failed call again.

    Retried: connection failures before any response, and the statuses in `retry_statuses`. The wait is the
    server's `Retry-After` when it sends one, else `initial_delay * 2**(attempt-1)` capped at `max_delay`,
    minus up to `jitter` of it at random. A `Retry-After` longer than `max_retry_after` is not waited for.
    """

    max_retries: int = 2
    initial_delay: float = 0.5
    max_delay: float = 8.0
    jitter: float = 0.25
    max_retry_after: float = 60.0
    retry_statuses: frozenset[int] = field(default=frozenset({408, 409, 429, 500, 502, 503, 504}))

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must be between 0 and 1, got {self.jitter}")

    def backoff(self, attempt: int) -> float:
        """The wait after failed attempt number `attempt` (1-based) when the server gave no Retry-After."""
        delay = min(self.max_delay, self.initial_delay * 2.0 ** max(0, attempt - 1))
        return delay * (1.0 - self.jitter * random.random())


# -- reading error answers ----------------------------------------------------------------------------------


class ProviderError(msgspec.Struct, frozen=True):
    """What a provider's error body said: its message, error type and code (each None when absent)."""

    message: str | None = None
    type: str | None = None
    code: str | None = None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return msgspec.json.encode(value).decode()


def extract_provider_error(body: bytes | str | Any) -> ProviderError:
    """Reads the error out of a provider's error body, whatever its dialect.

    Understands OpenAI `{"error": {"message", "type", "code"}}`, Anthropic
    `{"type": "error", "error": {"type", "message"}}`, Ollama `{"error": "text"}`, vLLM / FastAPI
    `{"message": ...}` / `{"detail": ...}`; any other body gives its text (shortened) as the message.
    """
    if isinstance(body, (bytes, str)):
        raw = body.encode() if isinstance(body, str) else body
        try:
            parsed: Any = msgspec.json.decode(raw)
        except (msgspec.DecodeError, RecursionError):  # msgspec raises RecursionError for deep nesting
            framed = error_payload(raw)  # an error sent as an event stream
            if framed is not None:
                return extract_provider_error(framed)
            text = raw.decode("utf-8", "replace").strip()
            if len(text) > _MAX_ERROR_TEXT:
                text = text[:_MAX_ERROR_TEXT] + "..."
            return ProviderError(message=text or None)
    else:
        parsed = body
    if not isinstance(parsed, dict):
        return ProviderError(message=_text(parsed))
    error = parsed.get("error")
    if isinstance(error, dict):
        return ProviderError(
            message=_text(error.get("message")),
            type=_text(error.get("type") or error.get("status")),  # Google APIs: "status": "NOT_FOUND"
            code=_text(error.get("code")),
        )
    if isinstance(error, str):
        return ProviderError(message=error, type=_text(parsed.get("type")), code=_text(parsed.get("code")))
    if "message" in parsed:
        kind = parsed.get("type")
        return ProviderError(
            message=_text(parsed["message"]),
            type=_text(kind) if kind != "error" else None,
            code=_text(parsed.get("code")),
        )
    if "detail" in parsed:
        return ProviderError(message=_text(parsed["detail"]))
    return ProviderError(message=_text(parsed))


def error_payload(body: bytes) -> Any | None:
    """The error a response body carries, as JSON or as event-stream `data:` lines, whatever its content type
    said (`{"error": ...}`, or Anthropic's `{"type": "error", ...}`); None when it carries none."""
    if b'"error"' not in body:  # cheap: every error payload names its error so, quoted
        return None
    stripped = body.strip()
    if stripped.startswith(b"{"):
        candidates = [stripped]
    else:
        candidates = [line[5:].strip() for line in stripped.splitlines() if line.startswith(b"data:")]
    for raw in candidates:
        try:
            parsed = msgspec.json.decode(raw)
        except (msgspec.DecodeError, RecursionError):
            continue
        if isinstance(parsed, dict) and (parsed.get("error") or parsed.get("type") == "error"):
            return parsed
    return None


def request_id_of(headers: Mapping[str, str] | Any) -> str | None:
    """The provider's id for a request (`x-request-id`, Anthropic's `request-id`, AWS's `x-amzn-requestid`),
    for support tickets."""
    value = headers.get("x-request-id") or headers.get("request-id") or headers.get("x-amzn-requestid")
    return str(value) if value else None


def parse_retry_after(headers: Mapping[str, str] | Any, now: float | None = None) -> float | None:
    """Seconds the server asked us to wait: `retry-after-ms`, or `Retry-After` in seconds or an HTTP date."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            value = float(millis) / 1000.0
        except ValueError:
            pass
        else:
            if value >= 0.0 and value == value and value != float("inf"):
                return value
    header = headers.get("retry-after")
    if not header:
        return None
    header = header.strip()
    try:
        seconds = float(header)
    except ValueError:
        try:
            date = email.utils.parsedate_to_datetime(header)
        except (TypeError, ValueError, IndexError):
            return None
        if date.tzinfo is None:
            return None
        return max(0.0, date.timestamp() - (time.time() if now is None else now))
    if seconds != seconds or seconds < 0.0 or seconds == float("inf"):
        return None
    return seconds


_TOOLS_UNSUPPORTED = (
    "does not support tools",  # Ollama
    "does not support tool",
    "tool use is not supported",
    "tools are not supported",
    "tool calling is not supported",
    "function calling is not supported",
    "enable-auto-tool-choice",  # vLLM started without --enable-auto-tool-choice
    "tools param requires --jinja",  # llama.cpp server started without --jinja
)

_STATUS_CLASSES: dict[int, type[ModelHTTPError]] = {
    400: BadRequestError,
    413: BadRequestError,
    422: BadRequestError,
    401: AuthenticationError,
    403: AuthenticationError,
    404: NotFoundError,
    429: RateLimitError,
}

_HINTS: dict[type[ModelError], str] = {
    AuthenticationError: "check the API key and that it may use this model",
    NotFoundError: "check the model name and the base URL",
    RateLimitError: "slow down, or raise max_retries to wait longer",
}


def _reason(status: int) -> str:
    return httpx2.codes.get_reason_phrase(status)


def error_from_response(
    status: int,
    headers: Mapping[str, str] | Any,
    body: bytes,
    *,
    provider: str,
    secrets: Iterable[str] = (),
    tools: bool = False,
    url: str | None = None,
) -> ModelError:
    """The `ModelError` for a non-2xx answer: class by status; the provider's message, type and request id.
    With `url` (where the request went), a 404 names it: a wrong base URL is the usual cause.

    400/413/422 `BadRequestError` (`ToolsNotSupportedError` when the request offered tools and the provider
    says the model cannot take them), 401/403 `AuthenticationError`, 404 `NotFoundError`, 429
    `RateLimitError`, 5xx `ServerError`, anything else `ModelHTTPError`.
    """
    secrets = tuple(secrets)
    details = extract_provider_error(body)
    provider_message = scrub(details.message, secrets) if details.message else None
    cls = _class_for_status(status)
    lowered = (provider_message or "").lower()
    hint = _HINTS.get(cls)
    if tools and 400 <= status < 500 and any(pattern in lowered for pattern in _TOOLS_UNSUPPORTED):
        cls = ToolsNotSupportedError
        hint = (
            "this model cannot take tools: use a model with tool support, or "
            "agentloop.models.LocalChatModel (tool calling through constrained JSON), or call without tools"
        )
    request_id = request_id_of(headers)
    # AWS names the error in a header: "x-amzn-ErrorType: ThrottlingException:http://internal.amazon.com/..."
    aws_type = (headers.get("x-amzn-errortype") or "").partition(":")[0] or None
    error_type = details.type or aws_type or details.code
    text = f"{provider}: HTTP {status} {_reason(status)}".rstrip()
    if provider_message:
        text += f": {provider_message}"
    text += _details(error_type, request_id)
    if hint:
        text += f"; {hint}"
    if url and cls is NotFoundError:
        text += f" (the request went to {url})"
    return cls(
        scrub(text, secrets),
        provider=provider,
        status_code=status,
        error_type=error_type,
        provider_message=provider_message,
        request_id=request_id,
        retry_after=parse_retry_after(headers) or _retry_info_delay(body),
    )


def _retry_info_delay(body: bytes) -> float | None:
    """The delay a Google API error asks for in its `google.rpc.RetryInfo` detail (`"retryDelay": "30s"`);
    Google sends no Retry-After header."""
    if b"RetryInfo" not in body:
        return None
    try:
        error = msgspec.json.decode(body).get("error") or {}
        for detail in error.get("details") or ():
            if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("google.rpc.RetryInfo"):
                delay = str(detail.get("retryDelay", "")).removesuffix("s")
                seconds = float(delay)
                return seconds if 0.0 <= seconds < float("inf") else None
    except (msgspec.DecodeError, RecursionError, AttributeError, ValueError):
        return None
    return None


def _class_for_status(status: int) -> type[ModelError]:
    return _STATUS_CLASSES.get(status) or (ServerError if status >= 500 else ModelHTTPError)


def _details(error_type: str | None, request_id: str | None) -> str:
    """The " (type: ..., request id: ...)" suffix of an error message; empty when there is neither."""
    extra = [f"type: {error_type}"] if error_type else []
    if request_id:
        extra.append(f"request id: {request_id}")
    return f" ({', '.join(extra)})" if extra else ""


_TYPE_CLASSES: tuple[tuple[str, type[ModelError]], ...] = (
    ("rate_limit", RateLimitError),
    ("overloaded", ServerError),
    ("server_error", ServerError),
    ("api_error", ServerError),
    ("internal", ServerError),
    ("invalid_request", BadRequestError),
    ("authentication", AuthenticationError),
    ("permission", AuthenticationError),
    ("not_found", NotFoundError),
)


def _payload_error(
    payload: bytes | str | Any, *, provider: str, secrets: Iterable[str], request_id: str | None
) -> ModelError:
    secrets = tuple(secrets)
    details = extract_provider_error(payload)
    error_type = details.type or details.code
    cls: type[ModelError] = ModelError
    status: int | None = None
    if details.code and details.code.isdigit():
        status = int(details.code)
        cls = _class_for_status(status)
    elif error_type:
        lowered = error_type.lower()
        cls = next((c for key, c in _TYPE_CLASSES if key in lowered), ModelError)
    message = scrub(details.message, secrets) if details.message else None
    text = f"{provider}: error in response: {message or 'no message'}"
    text += _details(error_type, request_id)
    return cls(
        scrub(text, secrets),
        provider=provider,
        status_code=status,
        error_type=error_type,
        provider_message=message,
        request_id=request_id,
    )


def _httpx_names(exc: BaseException) -> set[str]:
    """Class names of `exc`'s httpx / httpx2 exception ancestry (for both libraries, httpx never imported)."""
    return {
        cls.__name__
        for cls in type(exc).__mro__
        if cls.__module__.split(".", 1)[0] in ("httpx", "httpx2", "httpcore", "httpcore2")
    }


_OFFICIAL_HOSTS = {"api.openai.com": "the OpenAI API", "api.anthropic.com": "the Anthropic API"}
_SERVER_KINDS = {
    "openai": "OpenAI-compatible server",
    "ollama": "Ollama server (OpenAI-compatible)",
    "anthropic": "Anthropic-compatible server",
}


def describe_server(provider: str, url: str) -> str:
    """Who a failed request was for, in words: "the OpenAI API at https://api.openai.com/v1",
    "OpenAI-compatible server at http://localhost:8000/v1" (a custom base URL is not OpenAI itself)."""
    scheme, _, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    _userinfo, at, hostport = netloc.rpartition("@")
    host = hostport.rsplit(":", 1)[0].lower() if not hostport.startswith("[") else hostport
    kind = _OFFICIAL_HOSTS.get(host) or _SERVER_KINDS.get(provider, f"{provider} server")
    shown = f"{scheme}://{'***@' if at else ''}{hostport}{slash}{path}"  # never a password
    return f"{kind} at {shown}"


def _connect_hint(provider: str, url: str) -> str:
    """What to check when nothing answered at `url`."""
    if provider == "ollama":
        return "is Ollama running (`ollama serve`)? Set OLLAMA_BASE_URL if it listens elsewhere"
    if any(host in url for host in _OFFICIAL_HOSTS):
        return "check the network connection and any proxy settings (HTTPS_PROXY)"
    return "check that the server is running and listening there, and that base_url is right"


def model_error_from_exception(
    exc: BaseException, *, provider: str, secrets: Iterable[str] = (), url: str | None = None
) -> ModelError:
    """The `ModelError` for a transport failure raised by httpx or httpx2 (timeouts, refused connections).

    With `url` (the base URL the request went to) the message names the server and what to check. Secrets
    are masked in `exc` itself too (and in its causes): it becomes the error's `__cause__`.
    """
    secrets = tuple(secrets)
    scrub_exception(exc, secrets)
    names = _httpx_names(exc)
    detail = scrub(str(exc) or type(exc).__name__, secrets)
    where = f" {describe_server(provider, url)}" if url else ""
    if "TimeoutException" in names:
        phase = {
            "ConnectTimeout": f"connecting to{where or ' the server'}",
            "ReadTimeout": "waiting for the response",
            "WriteTimeout": "sending the request",
            "PoolTimeout": "waiting for a free connection in the pool",
        }
        what = next((text for name, text in phase.items() if name in names), "talking to the server")
        hint = f"; {_connect_hint(provider, url)}" if url and "ConnectTimeout" in names else ""
        return ModelTimeoutError(f"{provider}: timed out {what} ({detail}){hint}", provider=provider)
    if "DecodingError" in names:
        return BadResponseError(
            f"{provider}: could not decode the response body: {detail}", provider=provider
        )
    if names & {"UnsupportedProtocol", "InvalidURL", "LocalProtocolError"}:
        return ModelConnectionError(
            f"{provider}: cannot send the request to{where or ' the server'} ({detail}); check base_url",
            provider=provider,
        )
    if names & {"ConnectError", "ProxyError"}:
        hint = f"; {_connect_hint(provider, url)}" if url else ""
        return ModelConnectionError(
            f"{provider}: could not connect to{where or ' the server'} ({detail}){hint}", provider=provider
        )
    return ModelConnectionError(
        f"{provider}: connection to{where or ' the server'} failed ({detail})", provider=provider
    )


def _is_transport_error(exc: BaseException) -> bool:
    return "TransportError" in _httpx_names(exc) or "DecodingError" in _httpx_names(exc)


# -- retries ------------------------------------------------------------------------------------------------


class _Retryable(Exception):
    """Carries a `ModelError` that may be retried (internal to the retry loop, never escapes it)."""

    def __init__(self, error: ModelError) -> None:
        super().__init__(error.message)
        self.error = error


# -- the client ---------------------------------------------------------------------------------------------


SHARD_CONNECTIONS = 64
"""Connections one pooled `AsyncClient` holds. More requests in flight open another client: httpcore scans
its whole pool on every request, so a single pool of thousands of connections costs O(n) per request."""


class _Shard:
    """One pooled client and how many of our responses it has open."""

    __slots__ = ("client", "in_flight")

    def __init__(self, client: Any) -> None:
        self.client = client
        self.in_flight = 0


class ProviderClient:
    """The HTTP side of one provider model: pooled clients, headers, timeouts, retries, error mapping.

    Its own connections live in shards of `SHARD_CONNECTIONS` (kept alive for reuse), one shard opened per
    that many concurrent requests, all sharing one SSL context; a user-supplied client is used as is.
    """

    def __init__(
        self,
        *,
        provider: str,
        base_url: str,
        headers: Mapping[str, str] | None = None,
        query: Mapping[str, str] | None = None,
        timeouts: Timeouts | float | None = None,
        retry: RetryPolicy | None = None,
        client: httpx2.AsyncClient | Any | None = None,
        secrets: Iterable[str | None] = (),
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http:// or https:// URL, got {base_url!r}")
        if client is not None and not (hasattr(client, "send") and hasattr(client, "build_request")):
            raise TypeError(
                f"client must be an httpx2.AsyncClient or httpx.AsyncClient, got {type(client).__name__}"
            )
        base, _, query_string = base_url.partition("?")
        self.provider = provider
        self.base_url = base.rstrip("/")
        self._query: dict[str, str] = dict(parse_qsl(query_string, keep_blank_values=True))
        self._query.update(query or {})
        # Our user agent only on our own client: a user-supplied client keeps its own.
        self._headers: dict[str, str] = {"user-agent": _USER_AGENT} if client is None else {}
        self._headers.update({k.lower(): v for k, v in (headers or {}).items()})
        check_header_values(self._headers, owner=provider)
        self._urls: dict[str, httpx2.URL] = {}
        self._merged_headers: dict[str, dict[str, str]] = {}
        found = [s for s in secrets if s]
        found.extend(v for k, v in self._query.items() if v and k.lower() in _SECRET_QUERY)
        for name, value in self._headers.items():
            if name in _AUTH_HEADERS and value:
                found.append(value)
                scheme, _, token = value.partition(" ")
                if token and scheme.lower() in ("bearer", "basic", "token"):
                    found.append(token)
        forms = {form for secret in found for form in secret_forms(secret)}
        self._secrets: tuple[str, ...] = tuple(sorted(forms, key=len, reverse=True))
        if forms:
            watch_http_logs(forms)
        self.timeouts = Timeouts.of(timeouts)
        # A user-supplied client keeps its own timeouts unless the caller set some explicitly.
        self._request_timeout = self.timeouts.as_tuple() if client is None or timeouts is not None else None
        self.retry = retry or RetryPolicy()
        self.owns_client = client is None
        self._shards: list[_Shard] = [] if client is None else [_Shard(client)]
        self._ssl_context: Any = None
        self._closed = False

    def __repr__(self) -> str:
        return f"ProviderClient(provider={self.provider!r}, base_url={self.base_url!r})"

    @property
    def client(self) -> Any:
        """The `AsyncClient` in use: the user's, or the first of ours (created on first use)."""
        if not self._shards:
            self._shards.append(self._new_shard())
        return self._shards[0].client

    @property
    def clients(self) -> list[Any]:
        """Every `AsyncClient` this object sends through (one per `SHARD_CONNECTIONS` in flight at most)."""
        return [shard.client for shard in self._shards]

    def _new_shard(self) -> _Shard:
        if self._closed:
            raise IllegalConfigurationError(
                f"this {self.provider} model was closed (aclose()); create a new one"
            )
        if self._ssl_context is None:
            self._ssl_context = httpx2.create_ssl_context()
        client = httpx2.AsyncClient(
            timeout=httpx2.Timeout(
                connect=self.timeouts.connect,
                read=self.timeouts.read,
                write=self.timeouts.write,
                pool=self.timeouts.pool,
            ),
            limits=httpx2.Limits(
                max_connections=SHARD_CONNECTIONS,
                max_keepalive_connections=SHARD_CONNECTIONS,
                keepalive_expiry=30.0,
            ),
            verify=self._ssl_context,
            follow_redirects=False,
        )
        return _Shard(client)

    def _acquire(self) -> _Shard:
        """The shard the next request goes through: the first with room, else a new one."""
        shards = self._shards
        if not self.owns_client:
            return shards[0]
        for shard in shards:
            if shard.in_flight < SHARD_CONNECTIONS:
                return shard
        shard = self._new_shard()
        shards.append(shard)
        return shard

    async def aclose(self) -> None:
        """Closes the pooled clients if this object created them (a user-supplied client stays open)."""
        self._closed = True
        if self.owns_client:
            shards, self._shards = self._shards, []
            for shard in shards:
                await shard.client.aclose()

    def add_secrets(self, *secrets: str | None) -> None:
        """Masks `secrets` too from now on (credentials learned after construction: AWS session tokens)."""
        forms = {form for secret in secrets if secret for form in secret_forms(secret)} - set(self._secrets)
        if forms:
            self._secrets = tuple(sorted({*self._secrets, *forms}, key=len, reverse=True))
            watch_http_logs(forms)

    def scrub(self, text: str) -> str:
        """`text` with this provider's secrets masked."""
        return scrub(text, self._secrets)

    def url(self, path: str) -> str:
        """The absolute URL of `path` (relative to `base_url`)."""
        return f"{self.base_url}/{path.lstrip('/')}"

    def error_from_payload(self, payload: bytes | str | Any, *, request_id: str | None = None) -> ModelError:
        """The `ModelError` for an error the provider reported inside a 2xx body or an event stream."""
        return _payload_error(payload, provider=self.provider, secrets=self._secrets, request_id=request_id)

    def encode(self, payload: Any) -> bytes:
        """`payload` as a JSON body: lone surrogates in its strings repaired (see `agentloop._text`), values
        JSON cannot carry reported as an `IllegalConfigurationError`."""
        try:
            return encode_json(payload, _encode)
        except (TypeError, ValueError, OverflowError) as exc:  # msgspec.EncodeError is a ValueError
            raise IllegalConfigurationError(
                self.scrub(
                    f"{self.provider}: the request cannot be sent as JSON ({exc}); ChatRequest.parameters, "
                    "model parameters and tool schemas must hold JSON values only"
                )
            ) from None

    def unexpected(self, exc: Exception) -> AgentLoopError:
        """`exc` if an `AgentLoopError`, else a `ModelError` wrapping it: nothing else leaves a provider."""
        if isinstance(exc, AgentLoopError):
            return exc
        scrub_exception(exc, self._secrets)
        detail = self.scrub(str(exc)) or "no message"
        return ModelError(
            f"{self.provider}: unexpected {type(exc).__name__} while calling the model: {detail}",
            provider=self.provider,
        )

    def bad_response(self, what: str, *, request_id: str | None = None) -> BadResponseError:
        """A `BadResponseError` saying `what` was wrong with the provider's answer."""
        suffix = f" (request id: {request_id})" if request_id else ""
        return BadResponseError(
            self.scrub(f"{self.provider}: {what}{suffix}"), provider=self.provider, request_id=request_id
        )

    # -- calls --------------------------------------------------------------------------------------------

    async def request_json(
        self,
        path: str,
        payload: Any,
        decoder: msgspec.json.Decoder[T] | type[T],
        *,
        method: str = "POST",
        headers: Mapping[str, str] | None = None,
        tools: bool = False,
    ) -> T:
        """Sends one request (retrying what may be retried) and returns its 2xx JSON body, decoded."""
        request = self._build(method, path, payload, headers, accept="application/json")

        async def attempt() -> tuple[bytes, str | None]:
            response = await self._send(request)
            try:
                await self._check_status(response, tools)
                try:
                    body, whole = await _read_body(response, MAX_BODY_BYTES)
                except Exception as exc:
                    if _is_transport_error(exc):
                        # A dropped connection may be retried; a read timeout may not (see `_send`).
                        timeout = "TimeoutException" in _httpx_names(exc)
                        raise self._transport_error(exc, retryable=not timeout) from exc
                    raise
                if not whole:
                    raise self.bad_response(
                        f"the response body is larger than {MAX_BODY_BYTES:,} bytes; refusing to read it",
                        request_id=request_id_of(response.headers),
                    )
                error = error_payload(body)  # a 2xx that carries an error, in any content type
                if error is not None:
                    raise self.error_from_payload(error, request_id=request_id_of(response.headers))
                return body, request_id_of(response.headers)
            finally:
                await _close(response)

        body, request_id = await self._within_total(lambda: self._with_retries(attempt))
        try:
            if isinstance(decoder, msgspec.json.Decoder):
                return decoder.decode(body)
            return msgspec.json.decode(body, type=decoder)
        except (msgspec.DecodeError, RecursionError) as exc:  # RecursionError: nesting too deep
            snippet = body[:200].decode("utf-8", "replace")
            raise self.bad_response(
                f"unreadable response body ({exc}): {snippet!r}", request_id=request_id
            ) from None

    @asynccontextmanager
    async def open_stream(
        self,
        path: str,
        payload: Any,
        *,
        method: str = "POST",
        headers: Mapping[str, str] | None = None,
        tools: bool = False,
        accept: str = "text/event-stream",
    ) -> AsyncIterator[httpx2.Response]:
        """An open 2xx streaming response (status errors and connect failures retried); closed on exit."""
        request = self._build(method, path, payload, headers, accept=accept)

        async def attempt() -> httpx2.Response:
            response = await self._send(request)
            try:
                await self._check_status(response, tools)
            except BaseException:
                await _close(response)
                raise
            return response

        response = await self._within_total(lambda: self._with_retries(attempt))
        try:
            yield response
        finally:
            await _close(response)

    @asynccontextmanager
    async def open_sse(
        self,
        path: str,
        payload: Any,
        *,
        method: str = "POST",
        headers: Mapping[str, str] | None = None,
        tools: bool = False,
    ) -> AsyncIterator[SSEStream]:
        """An open event stream whose first event arrived; retried until then, never after; closed on exit."""
        request = self._build(method, path, payload, headers, accept="text/event-stream")
        deadline = None if self.timeouts.total is None else time.monotonic() + self.timeouts.total

        async def attempt() -> SSEStream:
            response = await self._send(request)
            try:
                await self._check_status(response, tools)
                content_type = response.headers.get("content-type", "")
                if content_type.startswith("text/html"):  # a proxy's or portal's page, never an event stream
                    body, _ = await _read_body(response, _MAX_ERROR_BODY)
                    page = body[:200].decode("utf-8", "replace")
                    raise self.bad_response(
                        f"expected an event stream, got an HTML page: {page!r}",
                        request_id=request_id_of(response.headers),
                    )
                if content_type.startswith("application/json"):
                    # Some servers answer a streaming request with one JSON body (often an error).
                    body, _ = await _read_body(response, MAX_BODY_BYTES)
                    error = error_payload(body)
                    if error is not None:
                        raise self.error_from_payload(error, request_id=request_id_of(response.headers))
                    raise self.bad_response(
                        f"expected an event stream, got JSON: {body[:200].decode('utf-8', 'replace')!r}",
                        request_id=request_id_of(response.headers),
                    )
                stream = SSEStream(self, response, deadline)
                head = await stream._prefetch()
                if head is not None:  # not one event in the whole body: an error body whatever its type said?
                    error = error_payload(head)
                    if error is not None:
                        raise self.error_from_payload(error, request_id=request_id_of(response.headers))
            except BaseException:
                await _close(response)
                raise
            return stream

        stream = await self._within_total(lambda: self._with_retries(attempt))
        try:
            yield stream
        finally:
            await stream.aclose()

    # -- internals ----------------------------------------------------------------------------------------

    def _build(
        self, method: str, path: str, payload: Any, headers: Mapping[str, str] | None, *, accept: str
    ) -> Any:
        content = payload if isinstance(payload, bytes) else self.encode(payload)
        if headers:
            merged = {**self._request_headers(accept), **{k.lower(): v for k, v in headers.items()}}
        else:
            merged = self._request_headers(accept)
        extra: dict[str, Any] = {}
        if self._request_timeout is not None:
            extra["timeout"] = self._request_timeout
        url: Any = self._url(path)
        if not self.owns_client:  # the user's client may be another httpx flavour, with its own URL type
            url = str(url)
        return self.client.build_request(method, url, content=content, headers=merged, **extra)

    def _url(self, path: str) -> httpx2.URL:
        """The parsed URL of `path`, query included (parsed once: parsing costs more than the rest of a
        request's building)."""
        url = self._urls.get(path)
        if url is None:
            url = httpx2.URL(self.url(path))
            if self._query:  # merged into a query the path may carry, as build_request(params=) does
                url = url.copy_merge_params(self._query)
            if len(self._urls) >= _MAX_CACHED_URLS:  # paths with ids in them: keep the cache bounded
                self._urls.clear()
            self._urls[path] = url
        return url

    def _request_headers(self, accept: str) -> dict[str, str]:
        merged = self._merged_headers.get(accept)
        if merged is None:
            merged = {"accept": accept, **self._headers, "content-type": "application/json"}
            self._merged_headers[accept] = merged
        return merged

    async def _send(self, request: Any) -> httpx2.Response:
        shard = self._acquire()
        shard.in_flight += 1
        try:
            response = cast(httpx2.Response, await shard.client.send(request, stream=True))
        except BaseException as exc:
            shard.in_flight -= 1
            if not isinstance(exc, Exception) or not _is_transport_error(exc):
                raise
            names = _httpx_names(exc)
            # Nothing reached the server, or it dropped the connection without answering: safe to retry.
            # Read/write/pool timeouts are not retried: the server may be working on it, or is swamped.
            retryable = "TimeoutException" not in names or "ConnectTimeout" in names
            raise self._transport_error(exc, retryable=retryable) from exc
        response.extensions["agentloop.shard"] = shard  # released when the response is closed
        return response

    def _transport_error(self, exc: BaseException, *, retryable: bool) -> Exception:
        error = model_error_from_exception(
            exc, provider=self.provider, secrets=self._secrets, url=self.base_url
        )
        error.__cause__ = exc  # kept through the retry loop, which re-raises the error itself
        if retryable and not isinstance(error, BadResponseError):
            return _Retryable(error)
        return error

    async def _check_status(self, response: httpx2.Response, tools: bool) -> None:
        status = response.status_code
        if status < 400:
            if status >= 300:
                location = response.headers.get("location", "?")
                raise self.bad_response(f"unexpected redirect {status} to {location}; check base_url")
            return
        try:
            body, _ = await _read_body(response, _MAX_ERROR_BODY)
        except Exception as exc:
            if not _is_transport_error(exc):
                raise
            body = b""
        error = error_from_response(
            status,
            response.headers,
            body,
            provider=self.provider,
            secrets=self._secrets,
            tools=tools,
            url=str(response.request.url).partition("?")[0],
        )
        should_retry = response.headers.get("x-should-retry", "").lower()
        retryable = status in self.retry.retry_statuses and not isinstance(error, ToolsNotSupportedError)
        if should_retry in ("true", "false"):
            retryable = should_retry == "true"
        if retryable and error.retry_after is not None and error.retry_after > self.retry.max_retry_after:
            retryable = False
        raise _Retryable(error) if retryable else error

    def _wait(self, state: RetryCallState) -> float:
        outcome = state.outcome
        exc = outcome.exception() if outcome is not None else None
        if isinstance(exc, _Retryable) and exc.error.retry_after is not None:
            return exc.error.retry_after
        return self.retry.backoff(state.attempt_number)

    def _before_sleep(self, state: RetryCallState) -> None:
        outcome = state.outcome
        exc = outcome.exception() if outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        logger.info(
            "%s: retrying in %.2fs (attempt %d of %d failed): %s",
            self.provider,
            wait,
            state.attempt_number,
            self.retry.max_retries + 1,
            exc.error.message if isinstance(exc, _Retryable) else exc,
        )
        listener = retry_listener.get()
        if listener is not None and exc is not None:
            listener(state.attempt_number, wait, exc.error if isinstance(exc, _Retryable) else exc)

    async def _with_retries(self, attempt: Callable[[], Awaitable[T]]) -> T:
        try:  # the first try needs no retry machinery (most requests succeed at once)
            return await attempt()
        except _Retryable as exc:
            if self.retry.max_retries < 1:
                raise exc.error from exc.error.__cause__
            first: list[_Retryable] = [exc]

        async def again() -> T:
            if first:  # tenacity's attempt 1 is the one that already failed: its outcome decides the wait
                raise first.pop()
            return await attempt()

        retrying = AsyncRetrying(
            sleep=anyio.sleep,
            stop=stop_after_attempt(self.retry.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception_type(_Retryable),
            before_sleep=self._before_sleep,
            reraise=True,
        )
        try:
            async for try_ in retrying:
                with try_:
                    return await again()
        except _Retryable as exc:
            raise exc.error from exc.error.__cause__
        raise AssertionError("unreachable: the retry loop either returns or raises")  # pragma: no cover

    async def _within_total(self, call: Callable[[], Awaitable[T]]) -> T:
        total = self.timeouts.total
        if total is None:
            return await call()
        with anyio.move_on_after(total) as scope:
            return await call()
        assert scope.cancelled_caught
        raise ModelTimeoutError(
            f"{self.provider}: no response within the total timeout of {total:g}s", provider=self.provider
        )


async def _read_body(response: Any, limit: int) -> tuple[bytes, bool]:
    """At most `limit` bytes of `response`'s body, and whether that was all of it."""
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            return b"".join(parts)[:limit], False
    return b"".join(parts), True


async def _close(response: Any) -> None:
    """Closes `response` even inside a cancelled scope (the connection must not leak)."""
    _release(response)
    with anyio.CancelScope(shield=True):
        await response.aclose()


def _release(response: Any) -> None:
    """Counts `response` out of its shard (once, however often it is closed)."""
    shard = response.extensions.pop("agentloop.shard", None)
    if shard is not None:
        shard.in_flight -= 1


class SSEStream:
    """An open event stream: iterate it for `ServerSentEvent`s; failures surface as `ModelError`s."""

    __slots__ = (
        "_bytes",
        "_client",
        "_closed",
        "_deadline",
        "_decoder",
        "_done",
        "_next_chunk",
        "_pending",
        "_position",
        "response",
    )

    def __init__(self, client: ProviderClient, response: httpx2.Response, deadline: float | None) -> None:
        self._client = client
        self.response = response
        self._deadline = deadline
        self._decoder = SSEDecoder(provider=client.provider)
        self._bytes: Any = response.aiter_bytes()
        self._next_chunk: Any = self._bytes.__anext__
        self._pending: list[ServerSentEvent] = []
        self._position = 0
        self._done = False
        self._closed = False

    @property
    def request_id(self) -> str | None:
        """The provider's id for this request, from the response headers."""
        return request_id_of(self.response.headers)

    def __aiter__(self) -> SSEStream:
        return self

    async def __anext__(self) -> ServerSentEvent:
        if self._position >= len(self._pending):
            self._pending, self._position = await self.batch(), 0
            if not self._pending:
                raise StopAsyncIteration
        event = self._pending[self._position]
        self._position += 1
        return event

    async def batch(self) -> list[ServerSentEvent]:
        """The events completed by the next network read(s): never empty until the stream ended, then [].

        The hot path of every streaming provider: one call per read instead of one per event.
        """
        if self._position < len(self._pending):  # left by the first read (`_prefetch`) or by `__anext__`
            events = self._pending[self._position :]
            self._pending, self._position = [], 0
            return events
        feed = self._decoder.feed
        while not self._done:
            if self._deadline is None:
                try:
                    chunk = await self._next_chunk()
                except StopAsyncIteration:
                    chunk = None
                except Exception as exc:
                    self._raise_failure(exc, retryable=False)
            else:
                chunk = await self._read(False)
            if chunk is None:
                self._decoder.close()
                self._done = True
                break
            events = feed(chunk)
            if events:
                return events
        return []

    async def aclose(self) -> None:
        """Closes the response (idempotent; safe in a cancelled scope)."""
        if self._closed:
            return
        self._closed = True
        self._done = True
        _release(self.response)
        if self.response.is_closed:  # read to its end: httpx2 closed it and gave the connection back
            return
        with anyio.CancelScope(shield=True):
            try:
                await self._bytes.aclose()
            finally:
                await self.response.aclose()

    async def drain(self, *, timeout: float = 0.1, limit: int = 65536) -> None:
        """Reads what is left of the response (normally nothing but the end of the body), then closes it.

        Call it when the provider's end-of-stream marker has arrived: a fully read response hands its
        connection back to the pool, where closing a half-read one would drop the connection. The end of
        the body normally comes with the marker, so `timeout` is short: a server that keeps the body open
        after its marker costs one dropped connection, not a stalled answer.
        """
        if self._closed:
            return
        left = limit
        with anyio.move_on_after(timeout):
            try:
                while left >= 0 and not self._done:
                    chunk = await self._read(False)
                    if chunk is None:
                        self._done = True
                    else:
                        left -= len(chunk)
            except ModelError:
                pass
        await self.aclose()

    async def _prefetch(self) -> bytes | None:
        """Reads until the first event arrived (or the stream ended); transport failures here may retry.

        Returns None once an event arrived; the start of the body when it ended without any (a server that
        sent an error body with an event-stream content type), for the caller to look at.
        """
        head: list[bytes] = []
        size = 0
        while not self._pending and not self._done:
            chunk = await self._read(True)
            if chunk is None:
                self._decoder.close()
                self._done = True
            else:
                self._pending = self._decoder.feed(chunk)
                if size < _MAX_ERROR_BODY:
                    head.append(chunk)
                    size += len(chunk)
        return None if self._pending else b"".join(head)[:_MAX_ERROR_BODY]

    async def _read(self, retryable: bool) -> bytes | None:
        try:
            if self._deadline is None:
                return cast(bytes, await self._next_chunk())
            with anyio.move_on_after(max(0.0, self._deadline - time.monotonic())):
                return cast(bytes, await self._next_chunk())
        except StopAsyncIteration:
            return None
        except Exception as exc:
            self._raise_failure(exc, retryable=retryable)
        total = self._client.timeouts.total
        raise ModelTimeoutError(
            f"{self._client.provider}: the stream did not finish within the total timeout of {total:g}s",
            provider=self._client.provider,
            request_id=self.request_id,
        )

    def _raise_failure(self, exc: Exception, *, retryable: bool) -> NoReturn:
        """Raises what a failed read means: a `ModelError` for a transport failure (wrapped when it may be
        retried, before the first event), `exc` itself for anything else."""
        if not _is_transport_error(exc):
            raise exc
        provider = self._client.provider
        error = model_error_from_exception(
            exc, provider=provider, secrets=self._client._secrets, url=self._client.base_url
        )
        if isinstance(error, ModelConnectionError):
            error = ModelConnectionError(
                f"{error.message} (the stream broke before it was complete)",
                provider=provider,
                request_id=self.request_id,
            )
            if retryable:
                raise _Retryable(error) from exc
        raise error from exc
