"""What every HTTP chat provider shares: the client, timeouts, retries, failures turned into `ModelError`s.

Modules: `_config` (Timeouts, RetryPolicy, limits), `_errors` (error mapping), `_client` (ProviderClient:
pools, retries), `_stream` (SSEStream), `_sse` (the SSE decoder), `_provider` (HTTPChatModel, the base
class of the HTTP providers).

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
- `open_stream(..., first=None)`: the same, giving the open `httpx2.Response` (2xx checked), for
    providers whose stream is not SSE; `first(response)` reads up to the first whole message within the
    attempt, and an error it raises as `retryable(error)` (the connection broke before that) is retried.
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
    ModelError`, `describe_server(provider, url) -> str` ("OpenAI-compatible server at http://..."),
    `reclassified(error, cls, message)` (a provider's refinement of the class a status gave).
This module (`_errors.py`) is the one error funnel of all five providers: providers pass data (names,
    status strings), never build a `ModelError` for a wire failure themselves.
"""

from .._secrets import mask_secret, scrub
from ._client import SHARD_CONNECTIONS, ProviderClient
from ._config import MAX_BODY_BYTES, RetryPolicy, Timeouts
from ._errors import (
    ProviderError,
    describe_server,
    error_from_response,
    error_payload,
    extract_provider_error,
    model_error_from_exception,
    parse_retry_after,
    reclassified,
    request_id_of,
    retryable,
)
from ._sse import ServerSentEvent, SSEDecoder
from ._stream import SSEStream

__all__ = [
    "MAX_BODY_BYTES",
    "SHARD_CONNECTIONS",
    "ProviderClient",
    "ProviderError",
    "RetryPolicy",
    "SSEDecoder",
    "SSEStream",
    "ServerSentEvent",
    "Timeouts",
    "describe_server",
    "error_from_response",
    "error_payload",
    "extract_provider_error",
    "mask_secret",
    "model_error_from_exception",
    "parse_retry_after",
    "reclassified",
    "request_id_of",
    "retryable",
    "scrub",
]
