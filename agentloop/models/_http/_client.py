"""`ProviderClient`: pooled connections, headers, timeouts and retries of one provider model."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable
from urllib.parse import parse_qsl

import anyio
import httpx2
import msgspec

if TYPE_CHECKING:
    from tenacity import RetryCallState

from agentloop._values._errors import (
    AgentLoopError,
    BadResponseError,
    IllegalConfigurationError,
    ModelError,
    ModelTimeoutError,
    ToolsNotSupportedError,
)
from agentloop._values._text import encode_json
from agentloop.models._retries import retry_listener

from .._secrets import check_header_values, scrub, scrub_exception, secret_forms, watch_http_logs
from ._config import (
    AUTH_HEADERS,
    MAX_BODY_BYTES,
    MAX_CACHED_URLS,
    MAX_ERROR_BODY,
    SECRET_QUERY,
    USER_AGENT,
    RetryPolicy,
    T,
    Timeouts,
    encode_json_bytes,
    logger,
)
from ._errors import (
    Retryable,
    broken_stream_error,
    error_from_response,
    error_payload,
    httpx_names,
    is_transport_error,
    model_error_from_exception,
    named_stream_error,
    payload_error,
    request_id_of,
)
from ._stream import SSEStream, close_response, read_body

# -- retries ------------------------------------------------------------------------------------------------


# -- the client ---------------------------------------------------------------------------------------------


@runtime_checkable
class AsyncHTTPClient(Protocol):
    """What a user-supplied `http_client=` must offer: an `httpx2.AsyncClient` or an `httpx.AsyncClient`
    (httpx is optional, so neither class is imported to check it). Requests are built and sent with these."""

    def build_request(self, method: str, url: Any, **kwargs: Any) -> Any: ...

    async def send(self, request: Any, **kwargs: Any) -> Any: ...


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
        if client is not None and not isinstance(client, AsyncHTTPClient):
            raise TypeError(
                f"client must be an httpx2.AsyncClient or httpx.AsyncClient, got {type(client).__name__}"
            )
        base, _, query_string = base_url.partition("?")
        self.provider = provider
        self.base_url = base.rstrip("/")
        self._query: dict[str, str] = dict(parse_qsl(query_string, keep_blank_values=True))
        self._query.update(query or {})
        # Our user agent only on our own client: a user-supplied client keeps its own.
        self._headers: dict[str, str] = {"user-agent": USER_AGENT} if client is None else {}
        self._headers.update({k.lower(): v for k, v in (headers or {}).items()})
        check_header_values(self._headers, owner=provider)
        self._urls: dict[str, httpx2.URL] = {}
        self._merged_headers: dict[str, dict[str, str]] = {}
        found = [s for s in secrets if s]
        found.extend(v for k, v in self._query.items() if v and k.lower() in SECRET_QUERY)
        for name, value in self._headers.items():
            if name in AUTH_HEADERS and value:
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
        limits = httpx2.Limits(
            max_connections=SHARD_CONNECTIONS,
            max_keepalive_connections=SHARD_CONNECTIONS,
            keepalive_expiry=30.0,
        )
        client = httpx2.AsyncClient(
            timeout=httpx2.Timeout(
                connect=self.timeouts.connect,
                read=self.timeouts.read,
                write=self.timeouts.write,
                pool=self.timeouts.pool,
            ),
            limits=limits,
            verify=self._ssl_context,
            follow_redirects=False,
        )
        # Socket-check only the connection handed out, not every idle one per request (issue 36). Imported
        # here: httpcore2 (which the pool subclasses) loads trio, and httpx2 itself loads it only now.
        from ._pool import use_probe_on_use_pool

        use_probe_on_use_pool(client, ssl_context=self._ssl_context, limits=limits)
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
        return payload_error(payload, provider=self.provider, secrets=self._secrets, request_id=request_id)

    def error_from_stream_exception(
        self,
        name: str,
        detail: str | None,
        classes: Mapping[str, tuple[type[ModelError], int | None]],
        *,
        request_id: str | None = None,
    ) -> ModelError:
        """The `ModelError` for an error a stream reported by name; `classes` maps the provider's names."""
        return named_stream_error(
            name, detail, classes, provider=self.provider, secrets=self._secrets, request_id=request_id
        )

    def broken_stream(self, exc: BaseException, *, request_id: str | None = None) -> ModelError:
        """The `ModelError` for a transport failure while a stream's body was being read."""
        return broken_stream_error(
            exc, provider=self.provider, secrets=self._secrets, url=self.base_url, request_id=request_id
        )

    def encode(self, payload: Any) -> bytes:
        """`payload` as a JSON body: lone surrogates in its strings repaired (see `agentloop._values._text`),
        values JSON cannot carry reported as an `IllegalConfigurationError`."""
        try:
            return encode_json(payload, encode_json_bytes)
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
                    body, whole = await read_body(response, MAX_BODY_BYTES)
                except Exception as exc:
                    if is_transport_error(exc):
                        # A dropped connection may be retried; a read timeout may not (see `_send`).
                        timeout = "TimeoutException" in httpx_names(exc)
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
                await close_response(response)

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
        first: Callable[[httpx2.Response], Awaitable[None]] | None = None,
    ) -> AsyncIterator[httpx2.Response]:
        """An open 2xx streaming response (status errors and connect failures retried); closed on exit.

        `first(response)`, when given, reads the start of the body within the attempt (up to the first whole
        message, as `open_sse` does): an error it raises wrapped in `retryable(...)` (a connection dropped
        before anything reached the consumer) is retried like a failed connect."""
        request = self._build(method, path, payload, headers, accept=accept)

        async def attempt() -> httpx2.Response:
            response = await self._send(request)
            try:
                await self._check_status(response, tools)
                if first is not None:
                    await first(response)
            except BaseException:
                await close_response(response)
                raise
            return response

        response = await self._within_total(lambda: self._with_retries(attempt))
        try:
            yield response
        finally:
            await close_response(response)

    def open_sse(
        self,
        path: str,
        payload: Any,
        *,
        method: str = "POST",
        headers: Mapping[str, str] | None = None,
        tools: bool = False,
    ) -> AbstractAsyncContextManager[SSEStream]:
        """An open event stream whose first event arrived; retried until then, never after; closed on exit."""
        return _OpenSSE(self, self._build(method, path, payload, headers, accept="text/event-stream"), tools)

    async def _connect_sse(self, request: Any, tools: bool) -> SSEStream:
        """`open_sse`'s opening: the request sent (retried) until its stream's first event arrived."""
        deadline = None if self.timeouts.total is None else time.monotonic() + self.timeouts.total

        async def attempt() -> SSEStream:
            response = await self._send(request)
            try:
                await self._check_status(response, tools)
                content_type = response.headers.get("content-type", "")
                if content_type.startswith("text/html"):  # a proxy's or portal's page, never an event stream
                    body, _ = await read_body(response, MAX_ERROR_BODY)
                    page = body[:200].decode("utf-8", "replace")
                    raise self.bad_response(
                        f"expected an event stream, got an HTML page: {page!r}",
                        request_id=request_id_of(response.headers),
                    )
                if content_type.startswith("application/json"):
                    # Some servers answer a streaming request with one JSON body (often an error).
                    body, _ = await read_body(response, MAX_BODY_BYTES)
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
                await close_response(response)
                raise
            return stream

        return await self._within_total(lambda: self._with_retries(attempt))

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
            if len(self._urls) >= MAX_CACHED_URLS:  # paths with ids in them: keep the cache bounded
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
            if not isinstance(exc, Exception) or not is_transport_error(exc):
                raise
            names = httpx_names(exc)
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
            return Retryable(error)
        return error

    async def _check_status(self, response: httpx2.Response, tools: bool) -> None:
        status = response.status_code
        if status < 400:
            if status >= 300:
                location = response.headers.get("location", "?")
                raise self.bad_response(f"unexpected redirect {status} to {location}; check base_url")
            return
        try:
            body, _ = await read_body(response, MAX_ERROR_BODY)
        except Exception as exc:
            if not is_transport_error(exc):
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
        raise Retryable(error) if retryable else error

    def _wait(self, state: RetryCallState) -> float:
        outcome = state.outcome
        exc = outcome.exception() if outcome is not None else None
        if isinstance(exc, Retryable) and exc.error.retry_after is not None:
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
            exc.error.message if isinstance(exc, Retryable) else exc,
        )
        listener = retry_listener.get()
        if listener is not None and exc is not None:
            listener(state.attempt_number, wait, exc.error if isinstance(exc, Retryable) else exc)

    async def _with_retries(self, attempt: Callable[[], Awaitable[T]]) -> T:
        try:  # the first try needs no retry machinery (most requests succeed at once)
            return await attempt()
        except Retryable as exc:
            if self.retry.max_retries < 1:
                raise exc.error from exc.error.__cause__
            first: list[Retryable] = [exc]

        async def again() -> T:
            if first:  # tenacity's attempt 1 is the one that already failed: its outcome decides the wait
                raise first.pop()
            return await attempt()

        # tenacity loads on the first retry only (most processes never retry; it is ~4 ms of import).
        from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt

        retrying = AsyncRetrying(
            sleep=anyio.sleep,
            stop=stop_after_attempt(self.retry.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception_type(Retryable),
            before_sleep=self._before_sleep,
            reraise=True,
        )
        try:
            async for try_ in retrying:
                with try_:
                    return await again()
        except Retryable as exc:
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


class _OpenSSE:
    """`open_sse`'s context manager: opens the stream on entry, closes it on exit. A plain object, not a
    generator: a stream held open for minutes keeps no suspended frame for it."""

    __slots__ = ("_client", "_request", "_stream", "_tools")

    def __init__(self, client: ProviderClient, request: Any, tools: bool) -> None:
        self._client = client
        self._request = request
        self._tools = tools
        self._stream: SSEStream | None = None

    async def __aenter__(self) -> SSEStream:
        self._stream = await self._client._connect_sse(self._request, self._tools)
        return self._stream

    async def __aexit__(self, *exc_info: object) -> None:
        if self._stream is not None:
            await self._stream.aclose()
