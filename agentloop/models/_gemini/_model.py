"""`GeminiChatModel`: its configuration, and the `generateContent` / `streamGenerateContent` calls.

What goes out is built by `._request` with the key from `._auth`; what comes back is read by `._response`
(and, for a stream, `._stream`). HTTP, retries and error mapping come from `.._http`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from agentloop._values._errors import IllegalConfigurationError, ModelError
from agentloop._values._messages import ChatRequest, ChatResponse

from .._base import ModelEvent, ResponseComplete
from .._http import RetryPolicy, Timeouts
from .._http._provider import HTTPChatModel, retry_policy
from ._auth import key_error, resolve_key
from ._request import build_body, generation_defaults, place
from ._response import Assembler
from ._shapes import PROVIDER, chunk_decoder
from ._stream import read_chunk

__all__ = ["GeminiChatModel"]


class GeminiChatModel(HTTPChatModel):
    """Gemini models through the Gemini API (`{base_url}/{api_version}/models/{model}:generateContent`).

    `api_key`: sent as the `x-goog-api-key` header (never in the URL); when omitted and `base_url` is omitted
    too, `GEMINI_API_KEY` (else `GOOGLE_API_KEY`) is read (a key from the environment is never sent to a base
    URL you chose yourself). `base_url`: the API root (default `GOOGLE_GEMINI_BASE_URL` or
    https://generativelanguage.googleapis.com). `api_version`: "v1beta" (function call ids, thinking and JSON
    Schema output need it).

    `max_output_tokens`, `temperature`, `top_p`, `top_k`, `stop_sequences`, `thinking` (a token budget, a
    level such as "low"/"high", or the API's own `thinkingConfig` object; thought summaries are asked for),
    `safety_settings` and `parameters` (any other `generationConfig` field, or a body field such as
    `cachedContent`) are defaults that `ChatRequest.parameters` overrides per call (None there removes one).

    Retries connection failures and 408/409/429/5xx answers (`max_retries` or `retry`; a 429's `RetryInfo`
    delay is honoured) until the first event of a stream arrived, never after. `http_client`: an
    `httpx2.AsyncClient` or `httpx.AsyncClient` to use (never closed by this model).

    A `ChatRequest.response_format` goes out as `responseMimeType: application/json` with
    `responseJsonSchema` (Gemini's native structured output, JSON Schema with `$ref` allowed). Pictures a tool
    returned go inside its `functionResponse` (`parts`) when `media_in_tool_results` (default: for Gemini 3
    models), otherwise right after the function responses.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        api_version: str = "v1beta",
        max_output_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        stop_sequences: Sequence[str] | None = None,
        thinking: int | str | Mapping[str, Any] | None = None,
        safety_settings: Sequence[Mapping[str, Any]] | None = None,
        parameters: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: Timeouts | float | None = None,
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        http_client: Any = None,
        structured_output: bool = True,
        media_in_tool_results: bool | None = None,
    ) -> None:
        self.supports_response_format = structured_output
        if not isinstance(model, str) or not model.strip():
            raise IllegalConfigurationError(
                f"GeminiChatModel needs a model name such as 'gemini-2.5-flash', got {model!r}"
            )
        model = model.strip().removeprefix("models/")
        api_key, base_url, source = resolve_key(api_key, base_url)
        self._key_source = source
        if max_output_tokens is not None and (
            isinstance(max_output_tokens, bool)
            or not isinstance(max_output_tokens, int)
            or max_output_tokens < 1
        ):
            raise IllegalConfigurationError(
                f"max_output_tokens must be a positive int, got {max_output_tokens!r}"
            )
        self.model = model
        # Gemini 3 takes pictures inside a function response ("multimodal function responses"); older
        # models get them right after the responses.
        self.media_in_tool_results = (
            model.startswith("gemini-3") if media_in_tool_results is None else media_in_tool_results
        )
        self.api_version = api_version.strip("/")
        generation = generation_defaults(
            max_output_tokens, temperature, top_p, top_k, stop_sequences, thinking
        )
        top: dict[str, Any] = {}
        if safety_settings is not None:
            top["safetySettings"] = [dict(s) for s in safety_settings]
        for name, value in (parameters or {}).items():
            place(name, value, generation, top)
        self.generation_config: Mapping[str, Any] = generation
        self.body_defaults: Mapping[str, Any] = top
        all_headers = {k.lower(): v for k, v in (headers or {}).items()}
        if api_key:
            all_headers["x-goog-api-key"] = api_key
        self._has_key = bool(api_key)
        self._connect(
            owner="GeminiChatModel",
            provider=PROVIDER,
            base_url=base_url,
            headers=all_headers,
            timeout=timeout,
            retry=retry_policy(retry, max_retries),
            http_client=http_client,
            secrets=(api_key,),
            has_key=bool(api_key),
        )

    def __repr__(self) -> str:
        return f"GeminiChatModel(model={self.model!r}, base_url={self._http.base_url!r})"

    def _path(self, stream: bool) -> str:
        method = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return f"/{self.api_version}/models/{self.model}:{method}"

    def _refine(self, error: ModelError) -> ModelError:
        return key_error(error, key_source=self._key_source, has_key=self._has_key, model=self.model)

    def build_body(self, request: ChatRequest) -> dict[str, Any]:
        """The JSON body sent for `request` (public for inspection and debugging)."""
        return build_body(
            request,
            generation_config=self.generation_config,
            body_defaults=self.body_defaults,
            media_in_tool_results=self.media_in_tool_results,
        )

    async def chat(self, request: ChatRequest) -> ChatResponse:
        """Sends `request` and returns the whole response."""
        with self._errors():
            body = self._http.encode(self.build_body(request))
            chunk = await self._http.request_json(
                self._path(False), body, chunk_decoder, tools=bool(request.tool_specifications)
            )
            state = Assembler()
            state.feed(chunk)
            return state.response(None)

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        """Sends `request` and yields its events as they arrive (`ResponseComplete` last); closing the
        iterator closes the response."""
        with self._errors():
            body = self._http.encode(self.build_body(request))
            async with self._http.open_sse(
                self._path(True), body, tools=bool(request.tool_specifications)
            ) as events:
                state = Assembler()
                while batch := await events.batch():
                    for sse in batch:
                        chunk = read_chunk(self._http, sse, events.request_id)
                        for event in state.feed(chunk):
                            yield event
                    if state.finish_reason is not None or state.blocked is not None:
                        # The last chunk: read the end of the body, so the connection goes back to the pool.
                        await events.drain()
                        break
                if state.finish_reason is None and state.blocked is None:
                    raise self._http.bad_response(
                        "the event stream ended before a finishReason (the response is incomplete)",
                        request_id=events.request_id,
                    )
                response = state.response(events.request_id)
                for event in state.completed_calls():
                    yield event
                yield ResponseComplete(response)
