"""`BedrockChatModel`: its configuration, and the Converse / ConverseStream calls.

What goes out is built by `._request`, authenticated by `._auth`; what comes back is read by `._response`
(Converse) and `._stream` (ConverseStream). HTTP, retries and error mapping come from `.._http`.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import anyio
import httpx2

from agentloop._values._errors import IllegalConfigurationError, ModelError
from agentloop._values._messages import ChatRequest, ChatResponse

from .._base import ModelEvent, ResponseComplete
from .._eventstream import EventStreamMessage
from .._http import RetryPolicy, Timeouts
from .._http._provider import HTTPChatModel, retry_policy
from ._auth import AwsAuth
from ._request import build_body, inference_defaults, place, thinking_fields
from ._response import chat_response
from ._shapes import PROVIDER, converse_decoder
from ._stream import ConverseStream, drain, next_chunk

__all__ = ["BedrockChatModel"]

_EVENT_STREAM = "application/vnd.amazon.eventstream"


class BedrockChatModel(HTTPChatModel):
    """Models on Amazon Bedrock (Claude, Nova, Llama, Mistral...) through Converse / ConverseStream.

    `model_id`: a model id, inference profile id or ARN ("anthropic.claude-3-5-haiku-20241022-v1:0",
    "us.amazon.nova-pro-v1:0"). `region`: else `AWS_REGION`, else `AWS_DEFAULT_REGION`, else the profile's
    region. `endpoint_url`: else `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`, else
    https://bedrock-runtime.{region}.amazonaws.com. Credentials: `aws_access_key_id` /
    `aws_secret_access_key` / `aws_session_token` if given, else botocore's chain (environment, `profile` or
    `AWS_PROFILE`, SSO, assumed role, container or instance role), or the `botocore_session` you pass. A
    Bedrock API key (`api_key=`, else `AWS_BEARER_TOKEN_BEDROCK` when no keys were passed) is sent as a bearer
    token instead of signing, as the AWS SDKs do.

    `max_tokens`, `temperature`, `top_p`, `stop_sequences` (`inferenceConfig`), `thinking` (a token budget
    for Claude's extended thinking), `additional_model_request_fields` and `parameters` (any other body
    field, e.g. `guardrailConfig`, `performanceConfig`) are defaults that `ChatRequest.parameters` overrides
    per call (None there removes one).

    Retries connection failures and 408/409/429/5xx answers (ThrottlingException included; `max_retries` or
    `retry`) until the stream started, never after. A `ChatRequest.response_format` goes out as
    `outputConfig.textFormat` (Bedrock's structured output); pass `structured_output=False` for models
    without it (agents then ask for their output through a tool).
    """

    def __init__(
        self,
        model_id: str,
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        profile: str | None = None,
        api_key: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        botocore_session: Any = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        stop_sequences: Sequence[str] | None = None,
        thinking: int | Mapping[str, Any] | None = None,
        additional_model_request_fields: Mapping[str, Any] | None = None,
        parameters: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: Timeouts | float | None = None,
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        http_client: Any = None,
        structured_output: bool = True,
    ) -> None:
        self.supports_response_format = structured_output
        if not isinstance(model_id, str) or not model_id.strip():
            raise IllegalConfigurationError(
                "BedrockChatModel needs a model id such as 'anthropic.claude-3-5-haiku-20241022-v1:0', "
                f"got {model_id!r}"
            )
        self.model_id = model_id.strip()
        self._auth = auth = AwsAuth(
            region=region,
            profile=profile,
            api_key=api_key,
            aws_access_key_id=aws_access_key_id,
            aws_secret_access_key=aws_secret_access_key,
            aws_session_token=aws_session_token,
            botocore_session=botocore_session,
        )
        self.region = auth.region
        endpoint = (
            endpoint_url
            or os.environ.get("AWS_ENDPOINT_URL_BEDROCK_RUNTIME")
            or f"https://bedrock-runtime.{self.region}.amazonaws.com"
        )
        all_headers = {k.lower(): v for k, v in (headers or {}).items()}
        if auth.api_key is not None:
            all_headers["authorization"] = f"Bearer {auth.api_key}"
        inference = inference_defaults(max_tokens, temperature, top_p, stop_sequences)
        top: dict[str, Any] = {}
        extra = dict(additional_model_request_fields or {})
        if thinking is not None:
            extra["thinking"] = thinking_fields(thinking)
        if extra:
            top["additionalModelRequestFields"] = extra
        for name, value in (parameters or {}).items():
            place(name, value, inference, top)
        self.inference_config: Mapping[str, Any] = inference
        self.body_defaults: Mapping[str, Any] = top
        self._connect(
            owner="BedrockChatModel",
            provider=PROVIDER,
            base_url=endpoint,
            headers=all_headers,
            timeout=timeout,
            retry=retry_policy(retry, max_retries),
            http_client=http_client,
            secrets=(aws_secret_access_key, aws_session_token, auth.api_key),
            has_key=True,
        )
        model_path = quote(self.model_id, safe="")
        self._paths = (f"/model/{model_path}/converse", f"/model/{model_path}/converse-stream")
        # Claude and Nova take pictures and documents inside a tool result; other models get them after it.
        lowered = self.model_id.lower()
        self.media_in_tool_results = "anthropic" in lowered or "nova" in lowered

    @property
    def model(self) -> str:
        """The model id (the name other providers call `model`)."""
        return self.model_id

    def __repr__(self) -> str:
        return f"BedrockChatModel(model_id={self.model_id!r}, region={self.region!r})"

    def build_body(self, request: ChatRequest) -> dict[str, Any]:
        """The JSON body sent for `request` (public for inspection and debugging)."""
        return build_body(
            request,
            inference_config=self.inference_config,
            body_defaults=self.body_defaults,
            media_in_tool_results=self.media_in_tool_results,
        )

    def _refine(self, error: ModelError) -> ModelError:
        if error.status_code in (401, 403):
            error.message += (
                f"; check the AWS credentials ({self._auth.describe()}): that they are valid and "
                f"may call bedrock:InvokeModel and bedrock:InvokeModelWithResponseStream on {self.model_id} "
                f"in {self.region}, and that access to the model is enabled in the Bedrock console"
            )
            error.args = (error.message,)
        return error

    async def chat(self, request: ChatRequest) -> ChatResponse:
        """Sends `request` (Converse) and returns the whole response."""
        with self._errors():
            body = self._http.encode(self.build_body(request))
            path = self._paths[0]
            headers = await self._auth.signed_headers(self._http, path, body)
            answer = await self._http.request_json(
                path, body, converse_decoder, headers=headers, tools=bool(request.tool_specifications)
            )
            message = answer.output.message if answer.output is not None else None
            if message is None:
                raise self._http.bad_response("the Converse response has no output message")
            return chat_response(message.content, answer.stop_reason, answer.usage, None, self.model_id)

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        """Sends `request` (ConverseStream) and yields its events as they arrive (`ResponseComplete` last);
        closing the iterator closes the response."""
        with self._errors():
            body = self._http.encode(self.build_body(request))
            path = self._paths[1]
            total = self._http.timeouts.total
            deadline = None if total is None else time.monotonic() + total
            headers = await self._auth.signed_headers(self._http, path, body)
            opened: list[tuple[ConverseStream, Any, list[EventStreamMessage]]] = []

            async def first(response: httpx2.Response) -> None:
                # Up to the first whole message, within the attempt: a connection dropped before it retries.
                reader = ConverseStream(self._http, response.headers.get("x-amzn-requestid"))
                chunks = response.aiter_bytes()
                messages: list[EventStreamMessage] = []
                try:
                    while not messages:
                        chunk = await next_chunk(
                            self._http, chunks, deadline, reader.request_id, may_retry=True
                        )
                        if chunk is None:
                            break
                        messages = reader.messages(chunk)
                except BaseException:
                    with anyio.CancelScope(shield=True):
                        await chunks.aclose()
                    raise
                opened[:] = [(reader, chunks, messages)]

            async with self._http.open_stream(
                path,
                body,
                headers=headers,
                tools=bool(request.tool_specifications),
                accept=_EVENT_STREAM,
                first=first,
            ):
                reader, chunks, messages = opened[0]
                request_id = reader.request_id
                try:
                    while True:
                        for message in messages:
                            for event in reader.events(message):
                                yield event
                        if reader.finished:  # the answer is whole: the rest of the body is not awaited
                            await drain(chunks)
                            break
                        chunk = await next_chunk(self._http, chunks, deadline, request_id)
                        if chunk is None:
                            break
                        messages = reader.messages(chunk)
                finally:
                    with anyio.CancelScope(shield=True):
                        await chunks.aclose()
                yield ResponseComplete(reader.response(self.model_id))
