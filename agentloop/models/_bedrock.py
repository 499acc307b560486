"""`BedrockChatModel`: models on Amazon Bedrock through the Converse and ConverseStream APIs.

Requests go out on httpx2 (through `._http`, like every provider), signed with SigV4 by botocore, whose
standard credential chain finds the credentials (explicit keys, environment, shared files and profiles, SSO,
assumed roles, container and instance roles). botocore is imported when a model is made, never by
`import agentloop` (extra `bedrock`). ConverseStream's answer is the AWS binary event stream, decoded here
incrementally (`._eventstream`).

Bedrock specifics handled here:
- tool calls are `toolUse` blocks and results `toolResult` blocks, matched by `toolUseId`; streamed tool
  input arrives as JSON fragments per `contentBlockIndex`, joined and announced at `contentBlockStop`
  (empty input is `{}`);
- reasoning (`reasoningContent`, with its signature, or redacted) is streamed as thinking and sent back
  verbatim before the tool calls it preceded, as Claude on Bedrock demands;
- usage: `inputTokens` plus cache reads and writes is the input (Bedrock reports them apart);
- exceptions inside the stream (`throttlingException`, `modelStreamErrorException`...) become `ModelError`s.
"""

from __future__ import annotations

import mimetypes
import os
import re
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, cast
from urllib.parse import quote

import anyio
import anyio.to_thread
import msgspec

from agentloop._content import IMAGE_MEDIA_TYPES, Content, DocumentContent, ImageContent, TextContent
from agentloop._errors import (
    AgentLoopError,
    AuthenticationError,
    BadRequestError,
    BadResponseError,
    IllegalConfigurationError,
    ModelConnectionError,
    ModelError,
    ModelTimeoutError,
    RateLimitError,
    ServerError,
)
from agentloop._messages import (
    AiMessage,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    FinishReason,
    SystemMessage,
    TokenUsage,
    ToolChoice,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from agentloop._spec import ToolSpecification

from ._base import ModelEvent, ResponseComplete, TextDelta, ThinkingDelta, ToolCallComplete, ToolCallDelta
from ._eventstream import EventStreamDecoder, EventStreamError, EventStreamMessage
from ._http import RetryPolicy, Timeouts, model_error_from_exception
from ._http._provider import HTTPChatModel, retry_policy
from ._media import media_of_results_note
from ._secrets import clean_api_key, mask_secret
from ._strict import strict_schema
from ._wire import arguments_object, check_tool_offered

__all__ = ["BedrockChatModel"]

_PROVIDER = "bedrock"
_SERVICE = "bedrock"  # the SigV4 signing name of bedrock-runtime
_EVENT_STREAM = "application/vnd.amazon.eventstream"
_RESERVED = frozenset({"messages", "system", "toolConfig", "modelId"})
_INFERENCE = {
    "max_tokens": "maxTokens",
    "max_completion_tokens": "maxTokens",
    "maxTokens": "maxTokens",
    "temperature": "temperature",
    "top_p": "topP",
    "topP": "topP",
    "stop": "stopSequences",
    "stop_sequences": "stopSequences",
    "stopSequences": "stopSequences",
}
_FINISH_REASONS = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "tool_use": FinishReason.TOOL_EXECUTION,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "guardrail_intervened": FinishReason.CONTENT_FILTER,
    "content_filtered": FinishReason.CONTENT_FILTER,
}
_STREAM_EXCEPTIONS: dict[str, tuple[type[ModelError], int | None]] = {
    "throttlingException": (RateLimitError, 429),
    "serviceUnavailableException": (ServerError, 503),
    "internalServerException": (ServerError, 500),
    "modelStreamErrorException": (ServerError, 424),
    "validationException": (BadRequestError, 400),
}


# -- wire shapes (decoding only what is used; unknown fields are ignored) ------------------------------------


class _Usage(msgspec.Struct, rename="camel", gc=False):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_write_input_tokens: int | None = None


class _ToolUse(msgspec.Struct, rename="camel"):
    tool_use_id: str | None = None
    name: str = ""
    input: Any = None


class _ReasoningText(msgspec.Struct):
    text: str = ""
    signature: str | None = None


class _Reasoning(msgspec.Struct, rename="camel"):
    reasoning_text: _ReasoningText | None = None
    redacted_content: str | None = None


class _Block(msgspec.Struct, rename="camel"):
    text: str | None = None
    tool_use: _ToolUse | None = None
    reasoning_content: _Reasoning | None = None


class _Message(msgspec.Struct):
    content: list[_Block] = []


class _Output(msgspec.Struct):
    message: _Message | None = None


class _Converse(msgspec.Struct, rename="camel"):
    output: _Output | None = None
    stop_reason: str | None = None
    usage: _Usage | None = None


class _ToolInput(msgspec.Struct):
    input: str = ""


class _ReasoningDelta(msgspec.Struct, rename="camel"):
    text: str | None = None
    signature: str | None = None
    redacted_content: str | None = None


class _Delta(msgspec.Struct, rename="camel"):
    text: str | None = None
    tool_use: _ToolInput | None = None
    reasoning_content: _ReasoningDelta | None = None


class _BlockDelta(msgspec.Struct, rename="camel"):
    delta: _Delta
    content_block_index: int = 0


class _Start(msgspec.Struct, rename="camel"):
    tool_use: _ToolUse | None = None


class _BlockStart(msgspec.Struct, rename="camel"):
    start: _Start
    content_block_index: int = 0


class _BlockStop(msgspec.Struct, rename="camel"):
    content_block_index: int = 0


class _MessageStop(msgspec.Struct, rename="camel"):
    stop_reason: str | None = None


class _Metadata(msgspec.Struct):
    usage: _Usage | None = None


class _Exception(msgspec.Struct):
    message: str | None = None
    Message: str | None = None  # some AWS errors capitalise it


_converse_decoder = msgspec.json.Decoder(_Converse)
_delta_decoder = msgspec.json.Decoder(_BlockDelta)
_start_decoder = msgspec.json.Decoder(_BlockStart)
_stop_decoder = msgspec.json.Decoder(_BlockStop)
_message_stop_decoder = msgspec.json.Decoder(_MessageStop)
_metadata_decoder = msgspec.json.Decoder(_Metadata)
_exception_decoder = msgspec.json.Decoder(_Exception)
_encode = msgspec.json.Encoder().encode


def _botocore() -> Any:
    """The botocore modules used for signing and credentials, with a clear error when it is missing."""
    try:
        import botocore.auth
        import botocore.awsrequest
        import botocore.credentials
        import botocore.session
    except ImportError:
        raise IllegalConfigurationError(
            "BedrockChatModel signs its requests with botocore, which is not installed: "
            "pip install 'agentloop-runtime[bedrock]'"
        ) from None
    return botocore


# -- the model -----------------------------------------------------------------------------------------------


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
        botocore = _botocore()
        self.model_id = model_id.strip()
        if (aws_access_key_id is None) != (aws_secret_access_key is None):
            raise IllegalConfigurationError(
                "BedrockChatModel: pass aws_access_key_id and aws_secret_access_key together (or neither, "
                "to use the standard AWS credential chain)"
            )
        if botocore_session is None:
            try:
                botocore_session = botocore.session.Session(profile=profile)
            except Exception as exc:  # botocore.exceptions.ProfileNotFound and its kin
                raise IllegalConfigurationError(f"BedrockChatModel: {exc}") from None
        self._session = botocore_session
        region = (
            region
            or os.environ.get("AWS_REGION")
            or os.environ.get("AWS_DEFAULT_REGION")
            or self._profile_region()
        )
        if not region:
            raise IllegalConfigurationError(
                "BedrockChatModel needs an AWS region: pass region='us-east-1' (or another), or set "
                "AWS_REGION"
            )
        self.region = region.strip()
        endpoint = (
            endpoint_url
            or os.environ.get("AWS_ENDPOINT_URL_BEDROCK_RUNTIME")
            or f"https://bedrock-runtime.{self.region}.amazonaws.com"
        )
        self._credentials: Any = None
        self._credential_source = "the AWS credential chain"
        if aws_access_key_id is not None and aws_secret_access_key is not None:
            self._credentials = botocore.credentials.Credentials(
                aws_access_key_id.strip(), aws_secret_access_key.strip(), aws_session_token
            )
            self._credential_source = "aws_access_key_id= / aws_secret_access_key="
        # A Bedrock API key (a bearer token) replaces SigV4, as in the AWS SDKs: api_key=, else
        # AWS_BEARER_TOKEN_BEDROCK unless keys were passed.
        key_source = "api_key="
        if api_key is None and self._credentials is None and os.environ.get("AWS_BEARER_TOKEN_BEDROCK"):
            api_key, key_source = os.environ["AWS_BEARER_TOKEN_BEDROCK"], "AWS_BEARER_TOKEN_BEDROCK"
        api_key = clean_api_key(api_key, owner="BedrockChatModel", source=key_source)
        self._bearer = api_key is not None
        all_headers = {k.lower(): v for k, v in (headers or {}).items()}
        if api_key is not None:
            all_headers["authorization"] = f"Bearer {api_key}"
            self._credential_source = f"the Bedrock API key from {key_source}"
        inference: dict[str, Any] = {}
        for name, value in (
            ("maxTokens", max_tokens),
            ("temperature", temperature),
            ("topP", top_p),
            ("stopSequences", list(stop_sequences) if stop_sequences is not None else None),
        ):
            if value is not None:
                inference[name] = value
        top: dict[str, Any] = {}
        extra = dict(additional_model_request_fields or {})
        if thinking is not None:
            extra["thinking"] = _thinking(thinking)
        if extra:
            top["additionalModelRequestFields"] = extra
        for name, value in (parameters or {}).items():
            _place(name, value, inference, top)
        self.inference_config: Mapping[str, Any] = inference
        self.body_defaults: Mapping[str, Any] = top
        secrets = (aws_secret_access_key, aws_session_token, api_key)
        self._connect(
            owner="BedrockChatModel",
            provider=_PROVIDER,
            base_url=endpoint,
            headers=all_headers,
            timeout=timeout,
            retry=retry_policy(retry, max_retries),
            http_client=http_client,
            secrets=secrets,
            has_key=True,
        )
        self._signer = botocore.auth.SigV4Auth
        self._aws_request = botocore.awsrequest.AWSRequest
        model_path = quote(self.model_id, safe="")
        self._paths = (f"/model/{model_path}/converse", f"/model/{model_path}/converse-stream")
        # Claude and Nova take pictures and documents inside a tool result; other models get them after it.
        lowered = self.model_id.lower()
        self.media_in_tool_results = "anthropic" in lowered or "nova" in lowered

    def _profile_region(self) -> str | None:
        try:
            region = self._session.get_config_variable("region")
        except Exception:  # a broken config file: the error below says what to set instead
            return None
        return str(region) if region else None

    @property
    def model(self) -> str:
        """The model id (the name other providers call `model`)."""
        return self.model_id

    def __repr__(self) -> str:
        return f"BedrockChatModel(model_id={self.model_id!r}, region={self.region!r})"

    # -- signing ---------------------------------------------------------------------------------------------

    async def _frozen_credentials(self) -> Any:
        """The credentials to sign with now, found (and refreshed) in a worker thread: botocore may read
        files, run a process or call STS or the instance metadata service to get them."""
        credentials = self._credentials
        if credentials is None:
            credentials = await anyio.to_thread.run_sync(self._session.get_credentials)
            if credentials is None:
                raise AuthenticationError(
                    "bedrock: no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                    "or AWS_PROFILE (a profile in ~/.aws/config), or run where a role provides them; or "
                    "pass aws_access_key_id= and aws_secret_access_key=",
                    provider=_PROVIDER,
                )
            self._credentials = credentials
            method = getattr(credentials, "method", None)
            self._credential_source = f"AWS credentials from {method}" if method else self._credential_source
        refresh = getattr(credentials, "refresh_needed", None)
        if refresh is not None and refresh():
            frozen = await anyio.to_thread.run_sync(credentials.get_frozen_credentials)
        else:
            frozen = credentials.get_frozen_credentials()
        self._http.add_secrets(frozen.secret_key, frozen.token)
        return frozen

    async def _signed_headers(self, path: str, body: bytes) -> dict[str, str] | None:
        """The SigV4 headers of this request (None with an API key: its bearer header is sent instead)."""
        if self._bearer:
            return None
        credentials = await self._frozen_credentials()
        request = self._aws_request(
            method="POST",
            url=self._http.url(path),
            data=body,
            headers={"content-type": "application/json"},
        )
        self._signer(credentials, _SERVICE, self.region).add_auth(request)
        signed = {
            "authorization": request.headers["Authorization"],
            "x-amz-date": request.headers["X-Amz-Date"],
        }
        token = request.headers.get("X-Amz-Security-Token")
        if token:
            signed["x-amz-security-token"] = token
        return signed

    # -- calls -----------------------------------------------------------------------------------------------

    def _refine(self, error: ModelError) -> ModelError:
        if error.status_code in (401, 403):
            key_id = None if self._bearer else getattr(self._credentials, "access_key", None)
            shown = f", access key {mask_secret(key_id)}" if key_id else ""
            error.message += (
                f"; check the AWS credentials ({self._credential_source}{shown}): that they are valid and "
                f"may call bedrock:InvokeModel and bedrock:InvokeModelWithResponseStream on {self.model_id} "
                f"in {self.region}, and that access to the model is enabled in the Bedrock console"
            )
            error.args = (error.message,)
        return error

    async def chat(self, request: ChatRequest) -> ChatResponse:
        """Sends `request` (Converse) and returns the whole response."""
        try:
            body = self._http.encode(self.build_body(request))
            path = self._paths[0]
            headers = await self._signed_headers(path, body)
            answer = await self._http.request_json(
                path, body, _converse_decoder, headers=headers, tools=bool(request.tool_specifications)
            )
            message = answer.output.message if answer.output is not None else None
            if message is None:
                raise self._http.bad_response("the Converse response has no output message")
            return self._response(message.content, answer.stop_reason, answer.usage, None)
        except ModelError as error:
            raise self._refine(error) from error.__cause__
        except AgentLoopError:
            raise
        except Exception as exc:  # only AgentLoopErrors leave a provider
            raise self._http.unexpected(exc) from exc

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        """Sends `request` (ConverseStream) and yields its events as they arrive (`ResponseComplete` last);
        closing the iterator closes the response."""
        try:
            body = self._http.encode(self.build_body(request))
            path = self._paths[1]
            total = self._http.timeouts.total
            deadline = None if total is None else time.monotonic() + total
            headers = await self._signed_headers(path, body)
            async with self._http.open_stream(
                path,
                body,
                headers=headers,
                tools=bool(request.tool_specifications),
                accept=_EVENT_STREAM,
            ) as response:
                request_id = response.headers.get("x-amzn-requestid")
                decoder = EventStreamDecoder()
                state = _Assembler()
                chunks = response.aiter_bytes()
                try:
                    while (chunk := await self._next_chunk(chunks, deadline, request_id)) is not None:
                        try:
                            messages = decoder.feed(chunk)
                        except EventStreamError as exc:
                            raise self._http.bad_response(str(exc), request_id=request_id) from None
                        for message in messages:
                            for event in self._event(state, message, request_id):
                                yield event
                finally:
                    with anyio.CancelScope(shield=True):
                        await chunks.aclose()
                if decoder.pending or state.stop_reason is None:
                    raise self._http.bad_response(
                        "the event stream ended before messageStop (the response is incomplete)",
                        request_id=request_id,
                    )
                yield ResponseComplete(
                    self._response(state.blocks(), state.stop_reason, state.usage, request_id)
                )
        except ModelError as error:
            raise self._refine(error) from error.__cause__
        except AgentLoopError:
            raise
        except Exception as exc:  # only AgentLoopErrors leave a provider
            raise self._http.unexpected(exc) from exc

    async def _next_chunk(self, chunks: Any, deadline: float | None, request_id: str | None) -> bytes | None:
        """The next piece of the body (None at its end), within the total timeout when one is set."""
        try:
            if deadline is None:
                return cast(bytes, await chunks.__anext__())
            with anyio.move_on_after(max(0.0, deadline - time.monotonic())):
                return cast(bytes, await chunks.__anext__())
        except StopAsyncIteration:
            return None
        except Exception as exc:
            raise self._broken(exc, request_id) from exc
        total = self._http.timeouts.total or 0.0
        raise ModelTimeoutError(
            f"bedrock: the stream did not finish within the total timeout of {total:g}s",
            provider=_PROVIDER,
            request_id=request_id,
        )

    def _broken(self, exc: Exception, request_id: str | None) -> ModelError:
        error = model_error_from_exception(exc, provider=_PROVIDER, url=self._http.base_url)
        if isinstance(error, ModelConnectionError):
            return ModelConnectionError(
                f"{error.message} (the stream broke before it was complete)",
                provider=_PROVIDER,
                request_id=request_id,
            )
        return error

    def _event(
        self, state: _Assembler, message: EventStreamMessage, request_id: str | None
    ) -> list[ModelEvent]:
        headers = message.headers
        kind = headers.get(":message-type", "event")
        if kind == "exception":
            name = str(headers.get(":exception-type", "exception"))
            raise self._stream_error(name, message.payload, request_id)
        if kind == "error":
            raise self._stream_error(
                str(headers.get(":error-code", "error")),
                _encode({"message": headers.get(":error-message")}),
                request_id,
            )
        event_type = str(headers.get(":event-type"))
        try:
            return state.feed(event_type, message.payload)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise self._http.bad_response(
                f"unreadable {event_type} event ({exc}): {message.payload[:200]!r}", request_id=request_id
            ) from None

    def _stream_error(self, name: str, payload: bytes, request_id: str | None) -> ModelError:
        try:
            decoded = _exception_decoder.decode(payload)
            detail = decoded.message or decoded.Message
        except (msgspec.DecodeError, RecursionError):
            detail = payload[:200].decode("utf-8", "replace")
        cls, status = _STREAM_EXCEPTIONS.get(name, (ModelError, None))
        text = self._http.scrub(f"bedrock: {name} in the response stream: {detail or 'no message'}")
        if request_id:
            text += f" (request id: {request_id})"
        return cls(
            text,
            provider=_PROVIDER,
            status_code=status,
            error_type=name,
            provider_message=self._http.scrub(detail) if detail else None,
            request_id=request_id,
        )

    # -- request ---------------------------------------------------------------------------------------------

    def build_body(self, request: ChatRequest) -> dict[str, Any]:
        """The JSON body sent for `request` (public for inspection and debugging)."""
        system, messages, uses_tools = self._messages(request.messages)
        body: dict[str, Any] = {"messages": messages}
        if system:
            body["system"] = [{"text": text} for text in system]
        inference = dict(self.inference_config)
        top = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in self.body_defaults.items()}
        for name, value in (request.parameters or {}).items():
            if value is None:
                key = _INFERENCE.get(name, name)
                inference.pop(key, None)
                top.pop(key, None)
                continue
            if name == "thinking":
                extra = dict(top.get("additionalModelRequestFields") or {})
                extra["thinking"] = _thinking(value)
                top["additionalModelRequestFields"] = extra
                continue
            _place(name, value, inference, top)
        if inference:
            body["inferenceConfig"] = inference
        body.update(top)
        if request.response_format is not None:
            format = request.response_format
            schema = strict_schema(format.schema, provider="anthropic") if format.strict else format.schema
            definition: dict[str, Any] = {"schema": _encode(schema).decode(), "name": format.name}
            if format.description:
                definition["description"] = format.description
            body["outputConfig"] = {
                "textFormat": {"type": "json_schema", "structure": {"jsonSchema": definition}}
            }
        specs = request.tool_specifications
        choice = request.tool_choice
        if specs and (choice is None or choice.mode != "none" or uses_tools):
            config: dict[str, Any] = {"tools": [_tool(spec) for spec in specs]}
            wire = _tool_choice(choice, specs)
            if wire is not None:
                config["toolChoice"] = wire
            body["toolConfig"] = config
        elif not specs and choice is not None and choice.mode in ("required", "tool"):
            raise IllegalConfigurationError(
                f"tool choice {choice.mode!r} needs at least one tool specification in the request"
            )
        return body

    def _messages(self, history: Sequence[ChatMessage]) -> tuple[list[str], list[dict[str, Any]], bool]:
        """System texts, the `messages` array (consecutive same-role messages merged, as Bedrock demands
        alternating roles), and whether any tool blocks are in it."""
        system: list[str] = []
        messages: list[dict[str, Any]] = []
        unnamed: list[tuple[str, str]] = []
        uses_tools = False
        names: dict[str, int] = {}  # document names used so far: Bedrock wants them unique
        deferred: list[dict[str, Any]] = []  # pictures of tool results, for models that take none there
        with_media: list[ToolExecutionResultMessage] = []  # the results they came with

        def flush() -> None:
            if deferred:
                add("user", [{"text": media_of_results_note(with_media)}, *deferred])
                deferred.clear()
                with_media.clear()

        def add(role: str, blocks: list[dict[str, Any]]) -> None:
            if not blocks:
                return
            if messages and messages[-1]["role"] == role:
                messages[-1]["content"].extend(blocks)
            else:
                messages.append({"role": role, "content": blocks})

        for n, message in enumerate(history):
            if isinstance(message, UserMessage):
                flush()
                if message.has_media:
                    add("user", [self._block(c, names) for c in message.contents if _wanted(c)])
                    continue
                if not message.text.strip():
                    raise BadRequestError(
                        f"bedrock: message {n} is a user message with no text (empty or only whitespace); "
                        "Converse rejects blank text: send some text",
                        provider=_PROVIDER,
                    )
                add("user", [{"text": message.text}])
            elif isinstance(message, ToolExecutionResultMessage):
                uses_tools = True
                tool_use_id = message.id
                if tool_use_id is None:
                    match = next((u for u in unnamed if u[1] == message.tool_name), None)
                    if match is None:
                        raise IllegalConfigurationError(
                            f"the result of tool {message.tool_name!r} has no id and answers no tool call "
                            "before it; give ToolExecutionResultMessage the id of the call it answers"
                        )
                    unnamed.remove(match)
                    tool_use_id = match[0]
                result: dict[str, Any] = {
                    "toolUseId": tool_use_id,
                    "content": [{"text": message.text}] if message.text else [],
                }
                media = [self._block(c, names) for c in message.contents if not isinstance(c, TextContent)]
                if media and self.media_in_tool_results:
                    result["content"].extend(media)
                elif media:  # after all the results, in the same user turn, saying where they came from
                    with_media.append(message)
                    deferred.extend(media)
                if message.is_error:
                    result["status"] = "error"
                add("user", [{"toolResult": result}])
            elif isinstance(message, AiMessage):
                flush()
                blocks: list[dict[str, Any]] = []
                calls = message.tool_execution_requests
                if calls:  # the reasoning that led to the calls goes back with them, verbatim
                    state = message.provider_state.get(_PROVIDER) or {}
                    blocks.extend(state.get("reasoning") or ())
                if message.text and not message.text.isspace():
                    blocks.append({"text": message.text})
                unnamed = []
                for i, call in enumerate(calls):
                    uses_tools = True
                    call_id = call.id
                    if call_id is None:
                        call_id = f"tooluse_agentloop_{n}_{i}"
                        unnamed.append((call_id, call.name))
                    blocks.append(
                        {"toolUse": {"toolUseId": call_id, "name": call.name, "input": _input(call)}}
                    )
                add("assistant", blocks)
            elif isinstance(message, SystemMessage):
                if message.text and message.text.strip():
                    system.append(message.text)
            else:
                raise IllegalConfigurationError(
                    f"BedrockChatModel cannot send a {type(message).__name__}: not a chat message (use "
                    "SystemMessage, UserMessage, AiMessage or ToolExecutionResultMessage)"
                )
        flush()
        return system, messages, uses_tools

    def _block(self, content: Content, names: dict[str, int]) -> dict[str, Any]:
        """One content block: text, an image or a document, as bytes or an S3 location."""
        if isinstance(content, TextContent):
            return {"text": content.text}
        kind = "image" if isinstance(content, ImageContent) else "document"
        if content.data is not None:
            source: dict[str, Any] = {"bytes": content.base64}
        elif content.url is not None and content.url.lower().startswith("s3://"):
            source = {"s3Location": {"uri": content.url}}
        else:
            raise IllegalConfigurationError(
                f"bedrock: a {kind} at {content.url!r} cannot be sent: Converse takes {kind}s as bytes or "
                f"as s3:// locations only; download it and pass data= (e.g. {type(content).__name__}"
                "(data=...)) or put it in S3"
            )
        media_type = content.media_type or mimetypes.guess_type(content.url or "")[0]
        if kind == "image":
            if media_type not in IMAGE_MEDIA_TYPES:
                raise IllegalConfigurationError(
                    f"bedrock: cannot tell the format of the image at {content.url!r}: give media_type="
                )
            return {"image": {"format": media_type.split("/", 1)[1], "source": source}}
        assert isinstance(content, DocumentContent)
        return {
            "document": {"format": "pdf", "name": _document_name(content.filename, names), "source": source}
        }

    # -- response --------------------------------------------------------------------------------------------

    def _response(
        self, content: Sequence[_Block], stop_reason: str | None, usage: _Usage | None, request_id: str | None
    ) -> ChatResponse:
        texts: list[str] = []
        thoughts: list[str] = []
        calls: list[ToolExecutionRequest] = []
        reasoning: list[dict[str, Any]] = []
        for block in content:
            if block.text is not None:
                texts.append(block.text)
            elif block.tool_use is not None:
                use = block.tool_use
                if isinstance(use.input, msgspec.Raw):  # streamed: the text as it came
                    arguments = bytes(use.input).decode()
                else:
                    arguments = _encode(use.input).decode() if isinstance(use.input, dict) else "{}"
                calls.append(ToolExecutionRequest(use.tool_use_id, use.name, arguments))
            elif block.reasoning_content is not None:
                found = block.reasoning_content
                if found.reasoning_text is not None:
                    thoughts.append(found.reasoning_text.text)
                    if found.reasoning_text.signature:
                        reasoning.append(
                            {
                                "reasoningContent": {
                                    "reasoningText": {
                                        "text": found.reasoning_text.text,
                                        "signature": found.reasoning_text.signature,
                                    }
                                }
                            }
                        )
                elif found.redacted_content:
                    reasoning.append({"reasoningContent": {"redactedContent": found.redacted_content}})
        if stop_reason in ("malformed_tool_use", "malformed_model_output"):
            raise BadResponseError(
                f"bedrock: the model's answer ended with {stop_reason}: it produced output Converse could "
                "not parse (retrying often helps; simpler tool schemas help more)",
                provider=_PROVIDER,
                error_type=stop_reason,
                request_id=request_id,
            )
        message = AiMessage(
            "".join(texts) if texts else None,
            tuple(calls),
            "".join(thoughts) if thoughts else None,
            {_PROVIDER: {"reasoning": reasoning}} if reasoning else {},
        )
        finish = _FINISH_REASONS.get(stop_reason, FinishReason.OTHER) if stop_reason else None
        return ChatResponse(message, _token_usage(usage), finish, self.model_id, request_id)


# -- streaming -----------------------------------------------------------------------------------------------


class _Open:
    """One content block while it streams."""

    __slots__ = ("call", "id", "kind", "name", "parts", "redacted", "signature")

    def __init__(self, kind: str, call: int = -1, id: str | None = None, name: str = "") -> None:
        self.kind = kind
        self.call = call
        self.id = id
        self.name = name
        self.parts: list[str] = []
        self.signature: str | None = None
        self.redacted: str | None = None


class _Assembler:
    """Turns ConverseStream events into agentloop events and, at the end, into the blocks a Converse call
    would have returned. Blocks are keyed by `contentBlockIndex`, never by arrival order."""

    __slots__ = ("_calls", "_open", "stop_reason", "usage")

    def __init__(self) -> None:
        self._open: dict[int, _Open] = {}
        self._calls = 0
        self.stop_reason: str | None = None
        self.usage: _Usage | None = None

    def _call(self, index: int, use: _ToolUse | None) -> _Open:
        block = _Open("tool", self._calls, use.tool_use_id if use else None, (use.name if use else "") or "")
        self._calls += 1
        self._open[index] = block
        return block

    def feed(self, name: str, payload: bytes) -> list[ModelEvent]:
        if name == "contentBlockDelta":
            event = _delta_decoder.decode(payload)
            index = event.content_block_index
            delta = event.delta
            block = self._open.get(index)
            if delta.text is not None:
                if block is None:  # text blocks start with their first delta
                    block = self._open[index] = _Open("text")
                if delta.text:
                    block.parts.append(delta.text)
                    return [TextDelta(delta.text)]
                return []
            if delta.tool_use is not None:
                events: list[ModelEvent] = []
                if block is None:
                    block = self._call(index, None)
                    events.append(ToolCallDelta(block.call, None, None, ""))
                if delta.tool_use.input:
                    block.parts.append(delta.tool_use.input)
                    events.append(ToolCallDelta(block.call, None, None, delta.tool_use.input))
                return events
            reasoning = delta.reasoning_content
            if reasoning is not None:
                if block is None:
                    block = self._open[index] = _Open("reasoning")
                if reasoning.signature:
                    block.signature = (block.signature or "") + reasoning.signature
                if reasoning.redacted_content:
                    block.redacted = (block.redacted or "") + reasoning.redacted_content
                if reasoning.text:
                    block.parts.append(reasoning.text)
                    return [ThinkingDelta(reasoning.text)]
            return []
        if name == "contentBlockStart":
            start = _start_decoder.decode(payload)
            if start.start.tool_use is None:
                return []
            block = self._call(start.content_block_index, start.start.tool_use)
            return [ToolCallDelta(block.call, block.id, block.name, "")]
        if name == "contentBlockStop":
            block = self._open.get(_stop_decoder.decode(payload).content_block_index)
            if block is None or block.kind != "tool":
                return []
            return [ToolCallComplete(block.call, ToolExecutionRequest(block.id, block.name, _joined(block)))]
        if name == "messageStop":
            self.stop_reason = _message_stop_decoder.decode(payload).stop_reason or "end_turn"
            return []
        if name == "metadata":
            self.usage = _metadata_decoder.decode(payload).usage
            return []
        return []  # messageStart, and event types added after this was written

    def blocks(self) -> list[_Block]:
        """The content blocks received, in index order, as Converse would have returned them."""
        result: list[_Block] = []
        for _, block in sorted(self._open.items()):
            if block.kind == "text":
                result.append(_Block(text="".join(block.parts)))
            elif block.kind == "tool":
                raw = msgspec.Raw(_joined(block).encode())
                result.append(_Block(tool_use=_ToolUse(block.id, block.name, raw)))
            else:
                text = _ReasoningText("".join(block.parts), block.signature) if block.parts else None
                reasoning = _Reasoning(text, block.redacted)
                if text is None and block.redacted is None:
                    continue
                result.append(_Block(reasoning_content=reasoning))
        return result


def _joined(block: _Open) -> str:
    """A toolUse block's input: its fragments joined ({} when none came, as for a tool without
    parameters)."""
    return "".join(block.parts).strip() or "{}"


# -- helpers -------------------------------------------------------------------------------------------------


def _wanted(content: Content) -> bool:
    """Whether a part goes out (Converse refuses blank text blocks, and they say nothing)."""
    return not isinstance(content, TextContent) or bool(content.text.strip())


def _document_name(filename: str, used: dict[str, int]) -> str:
    """A document name Bedrock accepts (letters, digits, single spaces, hyphens, parentheses, brackets; no
    dots, so no extension), unique within the request."""
    stem = filename.rsplit(".", 1)[0] if "." in filename else filename
    cleaned = re.sub(r"[^A-Za-z0-9\s\-()\[\]]", "-", stem)
    cleaned = re.sub(r"\s+", " ", cleaned).strip() or "document"
    cleaned = cleaned[:200]
    count = used.get(cleaned, 0) + 1
    used[cleaned] = count
    return cleaned if count == 1 else f"{cleaned} ({count})"


def _place(name: str, value: Any, inference: dict[str, Any], top: dict[str, Any]) -> None:
    if name in _RESERVED:
        raise IllegalConfigurationError(
            f"parameter {name!r} cannot be set through parameters: it comes from the ChatRequest (messages, "
            "system messages, tool_specifications, tool_choice) or from the model"
        )
    key = _INFERENCE.get(name)
    if key is not None:
        if key == "stopSequences" and isinstance(value, str):
            value = [value]
        inference[key] = value
    else:
        top[name] = value


def _thinking(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise IllegalConfigurationError(
            f"thinking must be a token budget (int) or a thinking object for the model, got {value!r}"
        )
    return {"type": "enabled", "budget_tokens": value}


def _tool(spec: ToolSpecification) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": spec.name}
    if spec.description:
        tool["description"] = spec.description
    tool["inputSchema"] = {"json": spec.parameters}
    return {"toolSpec": tool}


def _tool_choice(choice: ToolChoice | None, specs: Sequence[ToolSpecification]) -> dict[str, Any] | None:
    if choice is None or choice.mode in ("auto", "none"):
        return None  # Converse has no "none": the tools are left out instead, unless the history uses them
    if choice.mode == "required":
        return {"any": {}}
    check_tool_offered(choice, specs)
    return {"tool": {"name": choice.tool_name}}


def _input(call: ToolExecutionRequest) -> Any:
    """A call's arguments as the JSON object `toolUse.input` must be ({} when they are not one)."""
    return arguments_object(call.arguments)


def _token_usage(usage: _Usage | None) -> TokenUsage | None:
    """Usage with `input_tokens` counting cache reads and writes too (Bedrock reports those apart)."""
    if usage is None or (usage.input_tokens is None and usage.output_tokens is None):
        return None
    read, written = usage.cache_read_input_tokens, usage.cache_write_input_tokens
    prompt = (usage.input_tokens or 0) + (read or 0) + (written or 0)
    return TokenUsage(prompt, usage.output_tokens or 0, cache_read_tokens=read, cache_write_tokens=written)
