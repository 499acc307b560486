"""Span attributes of the GenAI semantic conventions: provider and server, request parameters, usage,
response, errors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.trace import Span, Status, StatusCode

from agentloop._values._messages import ChatResponse, TokenUsage
from agentloop.models._base import provider_of

from . import _content
from ._safety import describe

# Request parameters recorded as `gen_ai.request.*` (the provider's name on the left).
PARAMETERS = {
    "temperature": "gen_ai.request.temperature",
    "max_tokens": "gen_ai.request.max_tokens",
    "max_completion_tokens": "gen_ai.request.max_tokens",
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
    "seed": "gen_ai.request.seed",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "presence_penalty": "gen_ai.request.presence_penalty",
    "stop": "gen_ai.request.stop_sequences",
    "stop_sequences": "gen_ai.request.stop_sequences",
}


def provider_name(model: Any) -> str:
    """`gen_ai.provider.name`: the model's `provider` ("openai", "anthropic", ...), else its class's name."""
    return provider_of(model) or type(model).__name__


def server_attributes(base_url: str) -> dict[str, Any]:
    """`server.address` / `server.port` of a base URL (host and port only: never its user info or query)."""
    parts = urlsplit(base_url)
    found: dict[str, Any] = {}
    if parts.hostname:
        found["server.address"] = parts.hostname
        try:
            port = parts.port
        except ValueError:
            port = None
        found["server.port"] = port or (443 if parts.scheme == "https" else 80)
    return found


def usage_names(prefix: str) -> tuple[str, ...]:
    return tuple(
        prefix + name
        for name in (
            "input_tokens",
            "output_tokens",
            "cache_read.input_tokens",
            "cache_write.input_tokens",
            "reasoning.output_tokens",
        )
    )


CALL_USAGE = usage_names("gen_ai.usage.")  # a `chat` span's own usage
SUM_USAGE = usage_names("agentloop.usage.")  # the invocation's sum, on `invoke_agent`


def add_usage(attributes: dict[str, Any], usage: TokenUsage, names: tuple[str, ...]) -> None:
    attributes[names[0]] = usage.input_tokens
    attributes[names[1]] = usage.output_tokens
    if usage.cache_read_tokens is not None:
        attributes[names[2]] = usage.cache_read_tokens
    if usage.cache_write_tokens is not None:
        attributes[names[3]] = usage.cache_write_tokens
        if names is CALL_USAGE:  # 1.44's name for the same count
            attributes["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
    if usage.reasoning_tokens is not None:
        attributes[names[4]] = usage.reasoning_tokens


def parameter_attributes(attributes: dict[str, Any], parameters: Mapping[str, Any]) -> dict[str, Any]:
    """Adds the request parameters the conventions name (`gen_ai.request.*`) to `attributes`."""
    for key, value in parameters.items():
        name = PARAMETERS.get(key)
        if name is not None and value is not None:
            attributes[name] = [value] if isinstance(value, str) and key.startswith("stop") else value
    return attributes


def response_attributes(response: ChatResponse, capture: bool) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.response.finish_reasons": (_content.finish_reason(response.finish_reason),)
    }
    if response.model:
        attributes["gen_ai.response.model"] = response.model
    if response.id:
        attributes["gen_ai.response.id"] = response.id
    if response.token_usage is not None:
        add_usage(attributes, response.token_usage, CALL_USAGE)
    if capture:
        attributes["gen_ai.output.messages"] = _content.output_messages(response)
    return attributes


def error_type(error: BaseException) -> str:
    return type(error).__qualname__


def set_error(span: Span, error: BaseException, capture_content: bool) -> None:
    """Marks `span` failed. The description is the error's message only when it cannot quote a tool's
    arguments or results (or content is captured): see `_safety.describe`."""
    span.set_status(Status(StatusCode.ERROR, describe(error, capture_content)))
    span.set_attribute("error.type", error_type(error))
