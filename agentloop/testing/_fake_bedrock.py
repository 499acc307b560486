"""`FakeBedrockServer`: an Amazon Bedrock runtime (Converse and ConverseStream) on 127.0.0.1.

Scripted `AiMessage`s (or strings, or `ChatResponse`s to set usage and stop reason) are encoded the way
Bedrock encodes them: one Converse JSON answer for `POST /model/{id}/converse`, and for
`/model/{id}/converse-stream` the binary AWS event stream (`application/vnd.amazon.eventstream`):
`messageStart`, per content block its deltas (reasoning with a signature, text in word pieces, `toolUse` with
a `contentBlockStart` and its input in JSON fragments) and `contentBlockStop`, then `messageStop` and
`metadata` with usage. Payloads carry Bedrock's `p` padding field. Errors use Bedrock's body (`{"message"}`)
with the `x-amzn-ErrorType` header; exceptions mid-stream are exception frames.

Requests are checked as Bedrock checks them: the SigV4 signature is verified with the fake's credentials
(a wrong key, region, path, body or signed header gets the 403 AWS sends), roles must alternate, every
`toolUse` must be answered by a `toolResult` with its id in the next message, reasoning signatures must come
back intact.

    with FakeBedrockServer(["Hello!"]) as server:
        model = BedrockChatModel("anthropic.claude-test-v1:0", region="us-east-1",
                                 endpoint_url=server.base_url, aws_access_key_id=server.access_key,
                                 aws_secret_access_key=server.secret_key)
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import re
import string
import uuid
from collections.abc import Iterable
from typing import Any

import msgspec

from agentloop._values._messages import AiMessage, ChatResponse, FinishReason, TokenUsage
from agentloop.models._eventstream import encode_message

from ._fake_answers import arguments_object, output_tokens, scripted_response
from ._fake_server import FakeServer, RecordedRequest, Reply, split_evenly, split_text

__all__ = ["FakeBedrockServer"]

_STOP_REASONS = {
    FinishReason.STOP: "end_turn",
    FinishReason.LENGTH: "max_tokens",
    FinishReason.TOOL_EXECUTION: "tool_use",
    FinishReason.CONTENT_FILTER: "content_filtered",
    FinishReason.OTHER: "guardrail_intervened",
}
_ERROR_TYPES = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}
_BODY_FIELDS = frozenset(
    {
        "messages",
        "system",
        "inferenceConfig",
        "toolConfig",
        "guardrailConfig",
        "additionalModelRequestFields",
        "promptVariables",
        "additionalModelResponseFieldPaths",
        "requestMetadata",
        "performanceConfig",
        "serviceTier",
        "outputConfig",
    }
)
_BLOCK_KINDS = frozenset(
    {"text", "image", "document", "video", "audio", "toolUse", "toolResult", "cachePoint", "reasoningContent"}
)
_START = (
    "A conversation must start with a user message. Try again with a conversation that starts with a user "
    "message."
)
_ALTERNATE = (
    "A conversation must alternate between user and assistant roles. Make sure the conversation alternates "
    "between user and assistant roles and try again."
)
_NEEDS_TOOLS = "The toolConfig field must be defined when using toolUse and toolResult content blocks."
_IMAGE_FORMATS = ("png", "jpeg", "gif", "webp")
_DOCUMENT_FORMATS = ("pdf", "csv", "doc", "docx", "xls", "xlsx", "html", "txt", "md")
_DOCUMENT_NAME = re.compile(r"^[A-Za-z0-9\s\-()\[\]]{1,200}$")
_PADDING = string.ascii_letters + string.digits
_ids = itertools.count(1)


def signature_of(text: str) -> str:
    """The signature this fake puts on a reasoning block (and demands back with it)."""
    return base64.b64encode(hashlib.sha256(b"fake-bedrock:" + text.encode()).digest()).decode()


class FakeBedrockServer(FakeServer):
    """Speaks Bedrock's Converse / ConverseStream; see the module docstring.

    `responses`: `AiMessage`, `str`, `ChatResponse` or `Reply` items (or callables of the request returning
    one), answered in order. `access_key` / `secret_key` / `region`: the credentials requests must be signed
    with (`verify_signatures=False` accepts any signature). `api_key`: a Bedrock API key accepted as a bearer
    token instead of a signature (none by default). `argument_pieces`: fragments per tool input.
    `frame_pieces`: when set, the event-stream bytes go out cut into chunks of at most that many bytes (frames
    split at arbitrary points, as networks deliver them).
    """

    def __init__(
        self,
        responses: Iterable[Any] = (),
        *,
        access_key: str = "AKIDFAKEBEDROCK00001",
        secret_key: str = "fake/secret/key/for/agentloop/tests/0000000",
        region: str = "us-east-1",
        api_key: str | None = None,
        verify_signatures: bool = True,
        argument_pieces: int = 3,
        frame_pieces: int | None = None,
        keep_alive: bool = True,
        validate: bool = True,
    ) -> None:
        super().__init__(responses, keep_alive=keep_alive)
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = region
        self.api_key = api_key
        self.verify_signatures = verify_signatures
        self.argument_pieces = argument_pieces
        self.frame_pieces = frame_pieces
        self.validate = validate

    # -- errors -------------------------------------------------------------------------------------------

    @staticmethod
    def error(
        status: int, message: str, *, type: str | None = None, headers: Iterable[tuple[str, str]] = ()
    ) -> Reply:
        """An error answer as Bedrock sends it: `{"message": ...}` and the `x-amzn-ErrorType` header.

        `FakeBedrockServer.error(429, "Too many requests, please wait before trying again.")`
        """
        kind = type or _ERROR_TYPES.get(
            status, "InternalServerException" if status >= 500 else "ValidationException"
        )
        return Reply.json(
            {"message": message},
            status=status,
            headers=(
                ("x-amzn-errortype", f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"),
                ("x-amzn-requestid", str(uuid.uuid4())),
                *headers,
            ),
        )

    def stream_exception(self, exception: str, message: str, *, after: str | None = None) -> Reply:
        """A 200 event stream that sends `after` (partial text, if any) and then an exception frame, as
        Bedrock does when it fails mid-stream (`throttlingException`, `modelStreamErrorException`...)."""
        frames = [self._event("messageStart", {"role": "assistant"})]
        if after:
            frames.append(
                self._event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": after}})
            )
        headers = {
            ":exception-type": exception,
            ":content-type": "application/json",
            ":message-type": "exception",
        }
        frames.append(encode_message(headers, msgspec.json.encode({"message": message})))
        return self._stream_reply(frames)

    # -- rendering ----------------------------------------------------------------------------------------

    def render(self, item: Any, request: RecordedRequest) -> Reply:
        if isinstance(item, Reply):
            return item
        path = request.path
        prefix, _, rest = path.partition("/model/")
        _model_id, _, operation = rest.rpartition("/")
        if request.method != "POST" or prefix or operation not in ("converse", "converse-stream"):
            return self.error(
                404, f"Unknown operation: {request.method} {path}", type="UnknownOperationException"
            )
        problem = self._check_signature(request)
        if problem is not None:
            return problem
        body = request.json
        if not isinstance(body, dict):
            return self.error(400, "Malformed input request, please reformat your input and try again.")
        if self.validate:
            message = _check_request(body)
            if message:
                return self.error(400, message)
        response = scripted_response(item, "FakeBedrockServer")
        if operation == "converse-stream":
            return self._stream_reply(self._frames(response, body))
        return Reply.json(self._converse(response, body), headers=(("x-amzn-requestid", str(uuid.uuid4())),))

    def _check_signature(self, request: RecordedRequest) -> Reply | None:
        authorization = request.headers.get("authorization", "")
        if authorization.startswith("Bearer "):  # a Bedrock API key
            if self.api_key is None or authorization[len("Bearer ") :] != self.api_key:
                return self.error(403, "Authentication failed: Invalid API Key", type="AccessDeniedException")
            return None
        if not authorization.startswith("AWS4-HMAC-SHA256 "):
            return self.error(403, "Missing Authentication Token", type="MissingAuthenticationTokenException")
        fields = dict(
            part.strip().split("=", 1) for part in authorization[len("AWS4-HMAC-SHA256 ") :].split(",")
        )
        access_key, _, scope = fields.get("Credential", "").partition("/")
        if access_key != self.access_key:
            return self.error(
                403,
                "The security token included in the request is invalid.",
                type="UnrecognizedClientException",
            )
        _date, region, service, _ = [*scope.split("/"), "", "", "", ""][:4]
        if region != self.region or service != "bedrock":
            return self.error(
                403,
                f"Credential should be scoped to a valid region ('{self.region}') and service 'bedrock', "
                f"not '{region}' / '{service}'.",
                type="InvalidSignatureException",
            )
        if not self.verify_signatures:
            return None
        expected = self._signature(request, fields.get("SignedHeaders", "").split(";"))
        if expected != fields.get("Signature"):
            return self.error(
                403,
                "The request signature we calculated does not match the signature you provided. Check your "
                "AWS Secret Access Key and signing method. Consult the service documentation for details.",
                type="InvalidSignatureException",
            )
        return None

    def _signature(self, request: RecordedRequest, signed: list[str]) -> str | None:
        """The SigV4 signature of `request` over its `signed` headers, computed with botocore."""
        try:
            from botocore.auth import SigV4Auth
            from botocore.awsrequest import AWSRequest
            from botocore.credentials import Credentials
        except ImportError:  # without botocore the signature is not checked
            return None
        amz_date = request.headers.get("x-amz-date", "")
        token = request.headers.get("x-amz-security-token")
        auth = SigV4Auth(Credentials(self.access_key, self.secret_key, token), "bedrock", self.region)
        query = "&".join(f"{k}={v}" for k, v in request.query.items())
        url = f"http://{request.headers.get('host', '')}{request.path}{'?' + query if query else ''}"
        headers = {name: request.headers.get(name, "") for name in signed if name}
        aws = AWSRequest(method=request.method, url=url, data=request.body, headers=headers)
        aws.context["timestamp"] = amz_date
        canonical = auth.canonical_request(aws)
        return str(auth.signature(auth.string_to_sign(aws, canonical), aws))

    def _stream_reply(self, frames: list[bytes]) -> Reply:
        chunks: list[bytes] = frames
        if self.frame_pieces:
            data = b"".join(frames)
            size = self.frame_pieces
            chunks = [data[i : i + size] for i in range(0, len(data), size)]
        return Reply.stream(
            chunks,
            content_type="application/vnd.amazon.eventstream",
            headers=(("x-amzn-requestid", str(uuid.uuid4())),),
        )

    def _event(self, name: str, payload: dict[str, Any]) -> bytes:
        padding = _PADDING[: 1 + next(_ids) % len(_PADDING)]
        headers = {":event-type": name, ":content-type": "application/json", ":message-type": "event"}
        return encode_message(headers, msgspec.json.encode({**payload, "p": padding}))

    def _usage(self, response: ChatResponse, body: dict[str, Any]) -> TokenUsage:
        return response.token_usage or _estimate(response.ai_message, body)

    def _stop_reason(self, response: ChatResponse) -> str:
        if response.finish_reason is not None:
            return _STOP_REASONS[response.finish_reason]
        return "tool_use" if response.ai_message.tool_execution_requests else "end_turn"

    def _converse(self, response: ChatResponse, body: dict[str, Any]) -> dict[str, Any]:
        message = response.ai_message
        content: list[dict[str, Any]] = []
        if message.thinking:
            reasoning = {"text": message.thinking, "signature": signature_of(message.thinking)}
            content.append({"reasoningContent": {"reasoningText": reasoning}})
        if message.text:
            content.append({"text": message.text})
        for n, call in enumerate(message.tool_execution_requests):
            tool_use = {
                "toolUseId": _tool_id(call.id, n),
                "name": call.name,
                "input": arguments_object(call, "toolUse input"),
            }
            content.append({"toolUse": tool_use})
        usage = self._usage(response, body)
        return {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": self._stop_reason(response),
            "usage": _wire_usage(usage),
            "metrics": {"latencyMs": 42},
        }

    def _frames(self, response: ChatResponse, body: dict[str, Any]) -> list[bytes]:
        message = response.ai_message
        frames = [self._event("messageStart", {"role": "assistant"})]
        index = 0

        def delta(value: dict[str, Any]) -> None:
            frames.append(self._event("contentBlockDelta", {"contentBlockIndex": index, "delta": value}))

        def stop() -> None:
            nonlocal index
            frames.append(self._event("contentBlockStop", {"contentBlockIndex": index}))
            index += 1

        if message.thinking:
            for piece in split_text(message.thinking):
                delta({"reasoningContent": {"text": piece}})
            delta({"reasoningContent": {"signature": signature_of(message.thinking)}})
            stop()
        if message.text:
            for piece in split_text(message.text):
                delta({"text": piece})
            stop()
        for n, call in enumerate(message.tool_execution_requests):
            start = {"toolUse": {"toolUseId": _tool_id(call.id, n), "name": call.name}}
            frames.append(self._event("contentBlockStart", {"contentBlockIndex": index, "start": start}))
            arguments = call.arguments.strip()
            if arguments and arguments != "{}":
                for piece in split_evenly(arguments, self.argument_pieces):
                    delta({"toolUse": {"input": piece}})
            stop()
        frames.append(self._event("messageStop", {"stopReason": self._stop_reason(response)}))
        usage = self._usage(response, body)
        frames.append(self._event("metadata", {"usage": _wire_usage(usage), "metrics": {"latencyMs": 42}}))
        return frames


def _wire_usage(usage: TokenUsage) -> dict[str, int]:
    read, written = usage.cache_read_tokens, usage.cache_write_tokens
    wire = {
        "inputTokens": usage.input_tokens - (read or 0) - (written or 0),
        "outputTokens": usage.output_tokens,
        "totalTokens": usage.input_tokens + usage.output_tokens,
    }
    if read is not None:
        wire["cacheReadInputTokens"] = read
    if written is not None:
        wire["cacheWriteInputTokens"] = written
    return wire


def _tool_id(given: str | None, n: int) -> str:
    return given or f"tooluse_{next(_ids):018x}{n}"


def _estimate(message: AiMessage, body: dict[str, Any]) -> TokenUsage:
    words = len(split_text(msgspec.json.encode(body.get("messages") or []).decode()))
    out = output_tokens(message)
    return TokenUsage(words + 3, out)


# -- request validation (Bedrock's messages, or close to them) -----------------------------------------------


def _check_request(body: dict[str, Any]) -> str | None:
    unknown = sorted(set(body) - _BODY_FIELDS)
    if unknown:
        return f"Malformed input request: extraneous key [{unknown[0]}] is not permitted"
    for block in body.get("system") or ():
        if not isinstance(block, dict) or ("text" in block and not str(block["text"]).strip()):
            return "The text field in the ContentBlock object at system.0 is blank."
    names: set[str] = set()
    config = body.get("toolConfig")
    if config is not None:
        for n, tool in enumerate(config.get("tools") or ()):
            spec = tool.get("toolSpec") or {}
            if not isinstance(spec.get("inputSchema", {}).get("json"), dict):
                return f"toolConfig.tools.{n}.toolSpec.inputSchema.json: must be a JSON object"
            names.add(spec.get("name", ""))
        choice = config.get("toolChoice")
        if choice is not None and (len(choice) != 1 or next(iter(choice)) not in ("auto", "any", "tool")):
            return "toolConfig.toolChoice: must be exactly one of auto, any, tool"
        if choice is not None and "tool" in choice and choice["tool"].get("name") not in names:
            return f"toolConfig.toolChoice.tool.name {choice['tool'].get('name')!r} is not a defined tool"
    output = body.get("outputConfig")
    if output is not None:
        schema = ((output.get("textFormat") or {}).get("structure") or {}).get("jsonSchema") or {}
        if not isinstance(schema.get("schema"), str):
            return "outputConfig.textFormat.structure.jsonSchema.schema: must be a JSON string"
        try:
            msgspec.json.decode(schema["schema"])
        except msgspec.DecodeError:
            return "outputConfig.textFormat.structure.jsonSchema.schema: is not valid JSON"
    return _check_messages(body.get("messages"), config is not None)


def _check_messages(messages: Any, has_tools: bool) -> str | None:
    if not isinstance(messages, list) or not messages or messages[0].get("role") != "user":
        return _START
    pending: list[str] = []
    previous = None
    documents: set[str] = set()
    for n, message in enumerate(messages):
        role = message.get("role")
        if role not in ("user", "assistant"):
            return f"messages.{n}.role: must be user or assistant"
        if role == previous:
            return _ALTERNATE
        previous = role
        content = message.get("content")
        if not isinstance(content, list) or not content:
            return (
                f"The content field in the Message object at messages.{n} is empty. Add a ContentBlock "
                "object to the content field and try again."
            )
        results = [b["toolResult"].get("toolUseId") for b in content if "toolResult" in b]
        if pending and set(results) != set(pending):
            return (
                f"Expected toolResult blocks at messages.{n}.content for the following Ids: "
                f"{', '.join(pending)}"
            )
        if results and not pending:
            return f"messages.{n}: toolResult blocks found without a toolUse block in the previous message"
        pending = []
        for m, block in enumerate(content):
            if not isinstance(block, dict) or len(block) != 1 or next(iter(block)) not in _BLOCK_KINDS:
                return f"messages.{n}.content.{m}: a ContentBlock must have exactly one known member"
            if "text" in block and not str(block["text"]).strip():
                return (
                    f"The text field in the ContentBlock object at messages.{n}.content.{m} is blank. Add "
                    "text to the text field, and try again."
                )
            problem = _check_media(block, f"messages.{n}.content.{m}", documents)
            if problem:
                return problem
            if "toolResult" in block:
                for k, inner in enumerate(block["toolResult"].get("content") or ()):
                    problem = _check_media(
                        inner, f"messages.{n}.content.{m}.toolResult.content.{k}", documents
                    )
                    if problem:
                        return problem
            if ("toolUse" in block or "toolResult" in block) and not has_tools:
                return _NEEDS_TOOLS
            if "toolUse" in block:
                use = block["toolUse"]
                if not isinstance(use.get("input"), dict):
                    return f"messages.{n}.content.{m}.toolUse.input: must be a JSON object"
                pending.append(use.get("toolUseId"))
            reasoning = (block.get("reasoningContent") or {}).get("reasoningText")
            if reasoning is not None and reasoning.get("signature") != signature_of(
                reasoning.get("text", "")
            ):
                return f"messages.{n}.content.{m}.reasoningContent: Invalid signature in reasoningText"
    if pending:
        return (
            f"Expected toolResult blocks at messages.{len(messages)}.content for the following Ids: "
            f"{', '.join(pending)}"
        )
    return None


def _check_media(block: dict[str, Any], where: str, documents: set[str]) -> str | None:
    """Images and documents as Converse takes them: a known format, base64 bytes or an S3 location, and
    documents with a unique name of the allowed characters."""
    for kind, formats in (("image", _IMAGE_FORMATS), ("document", _DOCUMENT_FORMATS)):
        media = block.get(kind)
        if media is None:
            continue
        if media.get("format") not in formats:
            return f"{where}.{kind}.format: must be one of {', '.join(formats)}"
        source = media.get("source") or {}
        if len(source) != 1 or next(iter(source)) not in ("bytes", "s3Location"):
            return f"{where}.{kind}.source: must hold exactly one of bytes, s3Location"
        if "bytes" in source:
            try:
                base64.b64decode(source["bytes"], validate=True)
            except ValueError:
                return f"{where}.{kind}.source.bytes: Invalid base64-encoded string"
        elif not str(source["s3Location"].get("uri", "")).startswith("s3://"):
            return f"{where}.{kind}.source.s3Location.uri: must be an s3:// URI"
        if kind == "document":
            name = media.get("name")
            if not isinstance(name, str) or not _DOCUMENT_NAME.match(name) or "  " in name:
                return (
                    f"{where}.document.name: The document file name can only contain alphanumeric "
                    "characters, "
                    "whitespace characters, hyphens, parentheses, and square brackets."
                )
            if name in documents:
                return f"{where}.document.name: document names must be unique ({name!r} is used twice)"
            documents.add(name)
    return None
