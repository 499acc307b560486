"""Failures turned into `ModelError`s: error bodies, statuses, `Retry-After`, transport errors."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Iterable, Mapping
from typing import Any

import httpx2
import msgspec

from agentloop._values._errors import (
    AuthenticationError,
    BadRequestError,
    BadResponseError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelTimeoutError,
    NotFoundError,
    RateLimitError,
    ServerError,
    ToolsNotSupportedError,
)
from agentloop._values._text import whole_number

from .._secrets import scrub, scrub_exception
from ._config import MAX_ERROR_TEXT

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
            if len(text) > MAX_ERROR_TEXT:
                text = text[:MAX_ERROR_TEXT] + "..."
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
    """Seconds the server asked us to wait: `retry-after-ms`, or `Retry-After` in seconds or an HTTP date.
    An infinite wait (`inf`) is kept as such, so it is beyond any `max_retry_after` and raised at once; a
    negative or NaN one is no answer (None)."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            value = float(millis) / 1000.0
        except ValueError:
            pass
        else:
            if value >= 0.0:  # False for NaN
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
    if not seconds >= 0.0:  # negative, or NaN
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


def payload_error(
    payload: bytes | str | Any, *, provider: str, secrets: Iterable[str], request_id: str | None
) -> ModelError:
    secrets = tuple(secrets)
    details = extract_provider_error(payload)
    error_type = details.type or details.code
    cls: type[ModelError] = ModelError
    status: int | None = None
    coded = whole_number(details.code, 3) if details.code else None
    if coded is not None:
        status = coded
        cls = _class_for_status(status)
    elif error_type:
        lowered = error_type.lower()
        cls = next((c for key, c in _TYPE_CLASSES if key in lowered), ModelError)
    return _reported(
        cls,
        "error in response",
        details.message,
        status=status,
        error_type=error_type,
        shown_type=error_type,
        provider=provider,
        secrets=secrets,
        request_id=request_id,
    )


def _reported(
    cls: type[ModelError],
    what: str,
    detail: str | None,
    *,
    status: int | None,
    error_type: str | None,
    shown_type: str | None,
    provider: str,
    secrets: tuple[str, ...],
    request_id: str | None,
) -> ModelError:
    """The `ModelError` for an error reported inside an answer: "<provider>: <what>: <message> (type: ...,
    request id: ...)", the key scrubbed out of the message and the text."""
    message = scrub(detail, secrets) if detail else None
    text = f"{provider}: {what}: {message or 'no message'}{_details(shown_type, request_id)}"
    return cls(
        scrub(text, secrets),
        provider=provider,
        status_code=status,
        error_type=error_type,
        provider_message=message,
        request_id=request_id,
    )


def named_stream_error(
    name: str,
    detail: str | None,
    classes: Mapping[str, tuple[type[ModelError], int | None]],
    *,
    provider: str,
    secrets: Iterable[str],
    request_id: str | None,
) -> ModelError:
    """The `ModelError` for an error a stream reported by name (Bedrock's `:exception-type` header): the
    provider's names are data (`classes`: name -> error class and the status it stands for)."""
    cls, status = classes.get(name, (ModelError, None))
    return _reported(
        cls,
        f"{name} in the response stream",
        detail,
        status=status,
        error_type=name,
        shown_type=None,  # the name is in the text already
        provider=provider,
        secrets=tuple(secrets),
        request_id=request_id,
    )


_DETAILS = ("provider", "status_code", "error_type", "provider_message", "request_id", "retry_after")
"""What a `ModelError` carries besides its message."""


def reclassified(error: ModelError, cls: type[ModelError], message: str) -> ModelError:
    """`error` as a `cls` saying `message`, every other detail (status, type, request id, retry-after,
    cause) kept: for a provider whose status alone names the wrong class (Gemini's 400 for a bad key)."""
    refined = cls(message, **{name: getattr(error, name) for name in _DETAILS})
    refined.__cause__ = error.__cause__
    return refined


def broken_stream_error(
    exc: BaseException,
    *,
    provider: str,
    secrets: Iterable[str] = (),
    url: str | None = None,
    request_id: str | None = None,
) -> ModelError:
    """The `ModelError` for a transport failure while a stream's body was being read: a broken connection
    says the stream broke before it was complete (what is left: a timeout, an undecodable body)."""
    error = model_error_from_exception(exc, provider=provider, secrets=secrets, url=url)
    if isinstance(error, ModelConnectionError):
        return ModelConnectionError(
            f"{error.message} (the stream broke before it was complete)",
            provider=provider,
            request_id=request_id,
        )
    return error


def httpx_names(exc: BaseException) -> set[str]:
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
    names = httpx_names(exc)
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


def is_transport_error(exc: BaseException) -> bool:
    return "TransportError" in httpx_names(exc) or "DecodingError" in httpx_names(exc)


class Retryable(Exception):
    """Carries a `ModelError` that may be retried (internal to the retry loop, never escapes it)."""

    def __init__(self, error: ModelError) -> None:
        super().__init__(error.message)
        self.error = error


def retryable(error: ModelError) -> Exception:
    """`error` marked as one the retry loop may retry: what a `ProviderClient.open_stream(first=...)`
    callback raises for a connection that broke before the stream gave anything to its consumer."""
    return Retryable(error)
