"""What OpenAI's two APIs (Chat Completions, Responses) share at construction: base URL, key, headers."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from agentloop._values._errors import IllegalConfigurationError

from .._http._client import AsyncHTTPClient
from .._secrets import clean_api_key

OPENAI_BASE_URL = "https://api.openai.com/v1"


def openai_connection(
    owner: str,
    model: str,
    http_client: Any,
    api_key: str | None,
    base_url: str | None,
    organization: str | None,
    project: str | None,
    headers: Mapping[str, str] | None,
) -> tuple[str, str | None, str, dict[str, str]]:
    """What OpenAI's two APIs (chat completions, Responses) share at construction: the arguments checked,
    the base URL and key resolved (`OPENAI_API_KEY` only with the default base URL), and the headers.

    Returns the base URL, the key (None without one), where the key came from, and the headers."""
    if not isinstance(model, str) or not model:
        raise IllegalConfigurationError(f"{owner} needs a model name, got {model!r}")
    if http_client is not None and not isinstance(http_client, AsyncHTTPClient):
        raise IllegalConfigurationError(
            "http_client must be an httpx2.AsyncClient or httpx.AsyncClient, "
            f"got {type(http_client).__name__}"
        )
    source = "api_key="
    if base_url is None:
        base_url = os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL
        if api_key is None:
            api_key, source = os.environ.get("OPENAI_API_KEY") or None, "OPENAI_API_KEY"
    api_key = clean_api_key(api_key, owner=owner, source=source)
    all_headers: dict[str, str] = {}
    if api_key:
        all_headers["authorization"] = f"Bearer {api_key}"
    if organization:
        all_headers["openai-organization"] = organization
    if project:
        all_headers["openai-project"] = project
    all_headers.update({k.lower(): v for k, v in (headers or {}).items()})
    return base_url, api_key, source, all_headers
