"""`Cassette`: record a provider's real HTTP exchanges once into a YAML file, then replay them offline.

It sits at the httpx2 transport, so it works for every provider client that takes `http_client=` (the
OpenAI, Anthropic, Gemini and Bedrock models, the official SDKs). A streamed answer is kept as the chunks
the server sent and replayed chunk by chunk, so a test sees the same boundaries as the real stream.
Secrets never reach the file: auth headers, cookies and keys in query strings are replaced by `REDACTED`,
and a secret the server echoes in a body is too.
"""

from __future__ import annotations

import base64
import importlib
import threading
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx2
import msgspec

from .. import AgentLoopError, IllegalConfigurationError

__all__ = ["Cassette", "CassetteError"]

REDACTED = "REDACTED"

_SECRET_HEADERS = frozenset(
    {
        "authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key", "cookie",
        "set-cookie", "x-amz-security-token",
    }
)  # fmt: skip
"""Replaced by REDACTED when recorded (AWS SigV4's credential and signature are in `authorization`).
Headers are not compared on replay, so the redaction changes nothing there."""
_SCHEMES = frozenset({"bearer", "basic", "aws4-hmac-sha256"})

_SECRET_QUERY = frozenset(
    {
        "key", "api_key", "apikey", "api-key", "access_token", "token", "sig", "signature",
        "x-amz-signature", "x-amz-credential", "x-amz-security-token",
    }
)  # fmt: skip
_DROPPED_RESPONSE_HEADERS = frozenset({"content-encoding", "transfer-encoding", "content-length"})

Mode = Literal["once", "record", "replay"]


class CassetteError(AgentLoopError):
    """A cassette cannot answer a request: the request differs from the recording (the message says which
    request and how), every recorded exchange was played, or the file is missing or not a cassette."""


def _redact_url(url: str, secrets: list[str]) -> str:
    parts = urlsplit(url)
    query = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name.lower() in _SECRET_QUERY and value:
            secrets.append(value)
            value = REDACTED
        query.append((name, value))
    return urlunsplit(parts._replace(query=urlencode(query)))


def _redact_headers(headers: httpx2.Headers, secrets: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in headers.multi_items():
        name = name.lower()
        if name in _SECRET_HEADERS:
            for word in value.replace(",", " ").split():  # the key in "Bearer <key>", SigV4's parts
                label, _, given = word.rpartition("=")
                if word.lower() not in _SCHEMES and label.lower() != "signedheaders":
                    secrets.append(given)
            value = REDACTED
        out[name] = value if name not in out else f"{out[name]}, {value}"
    return out


def _scrub(data: bytes, secrets: list[str]) -> bytes:
    for secret in secrets:
        if len(secret) >= 8:
            data = data.replace(secret.encode(), REDACTED.encode())
    return data


def _text(data: bytes) -> str | dict[str, str]:
    """Bytes as YAML keeps them readable: text when they are UTF-8, else `{base64: ...}`."""
    try:
        return data.decode()
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def _bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, dict) and isinstance(value.get("base64"), str):
        return base64.b64decode(value["base64"])
    raise CassetteError(f"A cassette body is text or {{base64: ...}}, got {type(value).__name__}")


def _target(url: str) -> str:
    """What a request is matched on besides its method and body: the path and (redacted) query. The host
    and port are not compared: a local server's port changes between recording and replay."""
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def _difference(recorded: Any, sent: Any, where: str = "$") -> str | None:
    """Where two decoded JSON bodies first differ, as `$.path: recorded X, now Y`."""
    if isinstance(recorded, dict) and isinstance(sent, dict):
        for key in [*recorded, *(k for k in sent if k not in recorded)]:
            if key not in sent or key not in recorded:
                side = "now missing" if key not in sent else "not recorded"
                return f"{where}.{key}: {side}"
            found = _difference(recorded[key], sent[key], f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(recorded, list) and isinstance(sent, list):
        for n, (a, b) in enumerate(zip(recorded, sent, strict=False)):
            found = _difference(a, b, f"{where}[{n}]")
            if found:
                return found
        if len(recorded) != len(sent):
            return f"{where}: {len(recorded)} items recorded, {len(sent)} now"
        return None
    if recorded != sent or type(recorded) is not type(sent):
        return f"{where}: recorded {_short(recorded)}, now {_short(sent)}"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _decoded(body: bytes) -> Any:
    try:
        return msgspec.json.decode(body) if body else None
    except (msgspec.DecodeError, RecursionError):
        return _NOT_JSON


_NOT_JSON = object()


class Cassette:
    """Records a provider's HTTP exchanges to the YAML file at `path`, or replays them from it.

    `mode="once"` (default): replay when the file exists, else record it. `"record"`: always call the
    real server and write the file anew. `"replay"`: never touch the network; the file must exist.
    Give `cassette.http_client()` to a model (`OpenAIChatModel(..., http_client=cassette.http_client())`)
    or an SDK. Each request gets the first unplayed recorded exchange that matches it on method, path, query
    and JSON body (not host or port); none matching raises `CassetteError` saying how it differs. PyYAML
    is needed (the `testing` extra).
    """

    def __init__(self, path: str | Path, *, mode: Mode = "once") -> None:
        if mode not in ("once", "record", "replay"):
            raise IllegalConfigurationError(f"Cassette(mode=...): 'once', 'record' or 'replay', got {mode!r}")
        self.path = Path(path)
        if mode == "once":
            mode = "replay" if self.path.exists() else "record"
        self.mode: Literal["record", "replay"] = mode
        self._lock = threading.Lock()
        self._exchanges: list[dict[str, Any]] = []
        self._played: set[int] = set()
        self._requests = 0
        if self.mode == "replay":
            self._exchanges = _load(self.path)

    @property
    def recording(self) -> bool:
        """True when this cassette calls the real server and writes the file."""
        return self.mode == "record"

    @property
    def exchanges(self) -> list[dict[str, Any]]:
        """The exchanges recorded so far or read from the file (as written in the YAML)."""
        return list(self._exchanges)

    @property
    def all_played(self) -> bool:
        """True once every recorded exchange was replayed (a test can assert that nothing was skipped)."""
        return len(self._played) == len(self._exchanges)

    def http_client(self, **options: Any) -> httpx2.AsyncClient:
        """An `httpx2.AsyncClient` whose requests go through the cassette (`options` are the client's own;
        the default `timeout` is a model call's, 10 minutes to read and 10 s to connect)."""
        options.setdefault("timeout", httpx2.Timeout(600.0, connect=10.0))
        inner = httpx2.AsyncHTTPTransport() if self.recording else None
        return httpx2.AsyncClient(transport=_Transport(self, inner), **options)

    def __repr__(self) -> str:
        return f"Cassette({str(self.path)!r}, mode={self.mode!r}, exchanges={len(self._exchanges)})"

    # -- recording -----------------------------------------------------------------------------------------

    def _keep(self, exchange: dict[str, Any]) -> None:
        with self._lock:
            self._exchanges.append(exchange)
            _save(self.path, self._exchanges)

    # -- replay ----------------------------------------------------------------------------------------

    def _answer(self, method: str, url: str, body: bytes) -> dict[str, Any]:
        """The first unplayed exchange whose request matches (concurrent requests may arrive in another
        order than recorded); else `CassetteError` with how the request differs from the next unplayed."""
        url = _redact_url(url, [])  # compared as recorded; never a key in a message
        with self._lock:
            self._requests += 1
            what = f"request #{self._requests} ({method} {_target(url)})"
            waiting = [n for n in range(len(self._exchanges)) if n not in self._played]
            if not waiting:
                raise CassetteError(
                    f"{what}: the cassette {self.path} holds {len(self._exchanges)} exchanges, all played. "
                    "Re-record it (mode='record') if the test now makes more requests."
                )
            for n in waiting:
                if _mismatch(self._exchanges[n]["request"], method, url, body) is None:
                    self._played.add(n)
                    return self._exchanges[n]
            difference = _mismatch(self._exchanges[waiting[0]]["request"], method, url, body)
            raise CassetteError(
                f"{what} does not match recorded exchange #{waiting[0] + 1} of {self.path}: {difference}. "
                "Re-record the cassette (mode='record') if the change is intended."
            )


def _mismatch(recorded: Mapping[str, Any], method: str, url: str, body: bytes) -> str | None:
    if recorded.get("method") != method:
        return f"method: recorded {recorded.get('method')}, now {method}"
    if _target(recorded.get("url", "")) != _target(url):
        return f"path and query: recorded {_target(recorded.get('url', ''))}, now {_target(url)}"
    then = _bytes(recorded.get("body", ""))
    old, new = _decoded(then), _decoded(body)
    if old is _NOT_JSON or new is _NOT_JSON:
        return None if then == body else f"body: recorded {_short(then)}, now {_short(body)}"
    return _difference(old, new)


class _Transport(httpx2.AsyncBaseTransport):
    def __init__(self, cassette: Cassette, inner: httpx2.AsyncBaseTransport | None) -> None:
        self._cassette = cassette
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        if self._inner is None:
            return _replayed(request, self._cassette._answer(request.method, str(request.url), body))
        secrets: list[str] = []
        recorded_request = {
            "method": request.method,
            "url": _redact_url(str(request.url), secrets),
            "headers": _redact_headers(request.headers, secrets),
        }
        recorded_request["body"] = _text(_scrub(body, secrets))
        request.headers["accept-encoding"] = "identity"  # keep the recorded chunks readable
        response = await self._inner.handle_async_request(request)
        headers = _redact_headers(response.headers, secrets)
        exchange = {
            "request": recorded_request,
            "response": {
                "status": response.status_code,
                "headers": {k: v for k, v in headers.items() if k not in _DROPPED_RESPONSE_HEADERS},
                "chunks": [],
            },
        }
        stream = _Recording(response, exchange, secrets, self._cassette)
        return httpx2.Response(
            response.status_code, headers=response.headers, stream=stream, extensions=response.extensions
        )

    async def aclose(self) -> None:
        if self._inner is not None:
            await self._inner.aclose()


class _Recording(httpx2.AsyncByteStream):
    """The real response's body, passed on chunk by chunk and kept; the exchange is saved at its end."""

    def __init__(
        self, response: httpx2.Response, exchange: dict[str, Any], secrets: list[str], cassette: Cassette
    ) -> None:
        self._response, self._exchange, self._secrets, self._cassette = response, exchange, secrets, cassette
        self._saved = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks: list[Any] = self._exchange["response"]["chunks"]
        async for chunk in self._response.aiter_raw():
            if chunk:
                chunks.append(_text(_scrub(chunk, self._secrets)))
                yield chunk
        self._save()

    def _save(self) -> None:
        if not self._saved:
            self._saved = True
            self._cassette._keep(self._exchange)

    async def aclose(self) -> None:
        self._save()  # a body the client stopped reading is kept as far as it was read
        await self._response.aclose()


class _Replay(httpx2.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


def _replayed(request: httpx2.Request, exchange: dict[str, Any]) -> httpx2.Response:
    answer = exchange["response"]
    chunks = [_bytes(c) for c in answer.get("chunks", [])]
    headers = dict(answer.get("headers", {}))
    return httpx2.Response(int(answer["status"]), headers=headers, stream=_Replay(chunks), request=request)


def _yaml() -> Any:
    try:
        return importlib.import_module("yaml")
    except ImportError:
        raise IllegalConfigurationError(
            'Cassette reads and writes YAML: pip install "agentloop-runtime[testing]" (PyYAML)'
        ) from None


def _load(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        raise CassetteError(
            f"No cassette at {path} to replay: record it first (Cassette(path, mode='record') or 'once')"
        )
    yaml = _yaml()
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    exchanges = data.get("exchanges") if isinstance(data, dict) else None
    if not isinstance(exchanges, list) or not all(
        isinstance(e, dict) and isinstance(e.get("request"), dict) and isinstance(e.get("response"), dict)
        for e in exchanges
    ):
        raise CassetteError(
            f"{path} is not a cassette: expected {{version: 1, exchanges: [{{request, response}}]}}"
        )
    return exchanges


def _save(path: Path, exchanges: list[dict[str, Any]]) -> None:
    yaml = _yaml()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(
        {"version": 1, "exchanges": exchanges}, sort_keys=False, allow_unicode=True, width=1_000_000
    )
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)
