"""`HTTPChatModel`: the base class every HTTP chat provider builds on.

A provider subclasses it, builds its `ProviderClient` with `self._connect(...)` in `__init__`, and writes only
what is its own: the request body, the response mapping, the stream's event mapping. The base gives every
provider the same behaviour for what users configure the same way:

- `max_retries` / `retry`: `retry_policy(retry, max_retries, extra_statuses)` decides, for all providers
  alike: no `retry` -> `RetryPolicy(max_retries=2 if max_retries is None else max_retries)`; a `retry` is
  used as given, except that an explicit `max_retries` wins over its count. `extra_statuses` (Anthropic's
  529 "overloaded") join the retried statuses unless the caller chose their own set.
- `base_url`, `provider`, `repr`, `aclose()`, `async with`.
- `_refine(error)`: a 401 without an API key says which argument or variable supplies one (`_KEY_HINT`).
- `with self._errors():` around the body of `chat()` / `stream()`: only `AgentLoopError`s leave a provider,
  its `ModelError`s refined by `_refine`, anything else wrapped by `ProviderClient.unexpected`.

Writing a new provider (OpenAI Responses, Gemini, Bedrock...): subclass `HTTPChatModel`, set
`_KEY_HINT = "pass api_key= or set GEMINI_API_KEY"`, call `self._connect(provider=..., base_url=...,
headers=..., timeout=timeout, retry=retry_policy(retry, max_retries), http_client=http_client,
secrets=(api_key,), has_key=bool(api_key))`, then implement `chat()` and `stream()` with `self._http`
(`request_json`, `open_sse`, `open_stream`, `error_from_payload`, `bad_response`, `unexpected`): see the
API in `agentloop.models._http`'s docstring and `_openai.py` / `_anthropic.py` as worked examples.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Collection, Iterator, Mapping
from typing import Any, ClassVar, TypeVar

from agentloop._values._errors import AgentLoopError, IllegalConfigurationError, ModelError

from ._client import ProviderClient
from ._config import RetryPolicy, Timeouts

__all__ = ["HTTPChatModel", "retry_policy"]

_M = TypeVar("_M", bound="HTTPChatModel")

DEFAULT_MAX_RETRIES = 2


def retry_policy(
    retry: RetryPolicy | None, max_retries: int | None, extra_statuses: Collection[int] = ()
) -> RetryPolicy:
    """The policy a provider uses, from its `retry` and `max_retries` arguments (same rule everywhere)."""
    if retry is None:
        policy = RetryPolicy(max_retries=DEFAULT_MAX_RETRIES if max_retries is None else max_retries)
    elif max_retries is None:
        policy = retry
    else:
        policy = dataclasses.replace(retry, max_retries=max_retries)
    if extra_statuses and policy.retry_statuses == RetryPolicy().retry_statuses:
        policy = dataclasses.replace(policy, retry_statuses=policy.retry_statuses | frozenset(extra_statuses))
    return policy


class HTTPChatModel:
    """What every HTTP chat provider shares; subclasses add the wire mapping (`chat`, `stream`)."""

    _KEY_HINT: ClassVar[str] = "pass api_key="
    """How a user supplies a key, said when a server answers 401 to a request sent without one."""

    _http: ProviderClient
    _has_key: bool

    def _connect(
        self,
        *,
        owner: str,
        provider: str,
        base_url: str,
        headers: Mapping[str, str],
        timeout: Timeouts | float | None,
        retry: RetryPolicy,
        http_client: Any,
        secrets: tuple[str | None, ...],
        has_key: bool,
        query: Mapping[str, str] | None = None,
    ) -> None:
        """Builds the provider's `ProviderClient`; bad settings become `IllegalConfigurationError`s."""
        self._has_key = has_key
        try:
            self._http = ProviderClient(
                provider=provider,
                base_url=base_url,
                headers=headers,
                query=query,
                timeouts=timeout,
                retry=retry,
                client=http_client,
                secrets=secrets,
            )
        except (ValueError, TypeError) as exc:
            raise IllegalConfigurationError(f"{owner}: {exc}") from None

    @property
    def base_url(self) -> str:
        """The API root the requests go to."""
        return self._http.base_url

    @property
    def provider(self) -> str:
        """The provider name used in errors, traces and prices."""
        return self._http.provider

    def _refine(self, error: ModelError) -> ModelError:
        if error.status_code == 401 and not self._has_key:
            error.message += f"; no API key was given ({self._KEY_HINT})"
            error.args = (error.message,)
        return error

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """Only `AgentLoopError`s leave a provider: `ModelError`s refined (`_refine`), others as they are,
        any other exception wrapped in a `ModelError`. Cancellation and generator exits pass untouched."""
        try:
            yield
        except ModelError as error:
            raise self._refine(error) from error.__cause__
        except AgentLoopError:
            raise
        except Exception as exc:
            raise self._http.unexpected(exc) from exc

    async def aclose(self) -> None:
        """Closes the connection pool (a user-supplied `http_client` stays open)."""
        await self._http.aclose()

    async def __aenter__(self: _M) -> _M:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
