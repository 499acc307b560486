"""The Gemini API key: where it comes from, and what a failure caused by it says.

The key is sent in the `x-goog-api-key` header (never in the URL). A key from the environment
(`GEMINI_API_KEY`, else `GOOGLE_API_KEY`) is read only when no base URL was chosen, so it is never sent to a
server you named yourself.
"""

from __future__ import annotations

import os

from agentloop._values._errors import AuthenticationError, IllegalConfigurationError, ModelError

from .._http import reclassified
from .._secrets import clean_api_key

__all__ = ["GEMINI_BASE_URL", "key_error", "resolve_key"]

GEMINI_BASE_URL = "https://generativelanguage.googleapis.com"


def resolve_key(api_key: str | None, base_url: str | None) -> tuple[str | None, str, str]:
    """(the key, cleaned; the base URL; where the key came from: "api_key=" or the variable's name).

    `base_url` None means `GOOGLE_GEMINI_BASE_URL` or Google's API, and the key may come from the
    environment; Google's API without a key is refused at once."""
    source = "api_key="
    if base_url is None:
        base_url = os.environ.get("GOOGLE_GEMINI_BASE_URL") or GEMINI_BASE_URL
        if api_key is None:
            for variable in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
                if os.environ.get(variable):
                    api_key, source = os.environ[variable], variable
                    break
        api_key = clean_api_key(api_key, owner="GeminiChatModel", source=source)
        if not api_key and base_url.rstrip("/") == GEMINI_BASE_URL:
            raise IllegalConfigurationError(
                "GeminiChatModel needs an API key: pass api_key=... or set GEMINI_API_KEY"
            )
    api_key = clean_api_key(api_key, owner="GeminiChatModel", source=source)
    return api_key, base_url, source


def key_error(error: ModelError, *, key_source: str, has_key: bool, model: str) -> ModelError:
    """`error`, saying which key to check when the key is what failed. Gemini answers a wrong key with 400
    INVALID_ARGUMENT ("API key not valid"): that becomes an `AuthenticationError`."""
    message = (error.provider_message or "").lower()
    if error.status_code in (400, 401, 403) and ("api key" in message or "api_key" in message):
        where = "GEMINI_API_KEY" if key_source == "api_key=" else key_source
        hint = "no API key was given" if not has_key else f"check the key ({where})"
        fix = f"{hint}: pass api_key= or set GEMINI_API_KEY"
        return reclassified(error, AuthenticationError, f"{error.message}; {fix}")
    if error.status_code in (401, 403):
        where = "GEMINI_API_KEY" if key_source == "api_key=" else key_source
        error.message += f"; check the API key ({where}) and that it may use {model}"
        error.args = (error.message,)
    return error
