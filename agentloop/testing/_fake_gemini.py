"""`FakeGeminiServer`: a Gemini API server on 127.0.0.1 that answers with scripted messages.

Scripted `AiMessage`s (or strings, or `ChatResponse`s to set usage and finish reason) are encoded the way the
Gemini API encodes them: one `GenerateContentResponse` for `:generateContent`, and for
`:streamGenerateContent?alt=sse` a stream of them (`data: {...}` events separated by CRLF CRLF): thought parts
(`thought: true`), the text a few words per chunk, each function call whole in its own part (the first one
carrying a `thoughtSignature`), `usageMetadata` on every chunk and `finishReason` on the last. Errors use
Google's body (`{"error": {"code", "message", "status", "details"}}`); a 429 carries a `RetryInfo` delay.
Requests are checked as the API checks them (the `x-goog-api-key` header, roles, every `functionCall`
answered by a `functionResponse` with its name and id, thought signatures returned on the parts they came
on), so a client that sends an invalid request gets the 400 it would get from Google.

    with FakeGeminiServer(["Hello!", AiMessage(tool_execution_requests=[...])]) as server:
        model = GeminiChatModel("gemini-2.5-flash", base_url=server.base_url, api_key="test")
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import re
from collections.abc import Iterable
from typing import Any

import msgspec

from agentloop._values._messages import AiMessage, ChatResponse, FinishReason, TokenUsage

from ._fake_answers import output_tokens, scripted_response
from ._fake_server import FakeServer, RecordedRequest, Reply, split_text

__all__ = ["FakeGeminiServer"]

SKIP_SIGNATURE = "skip_thought_signature_validator"
_FINISH = {
    FinishReason.STOP: "STOP",
    FinishReason.TOOL_EXECUTION: "STOP",
    FinishReason.LENGTH: "MAX_TOKENS",
    FinishReason.CONTENT_FILTER: "SAFETY",
    FinishReason.OTHER: "OTHER",
}
_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_PATH = re.compile(r"^/(v1beta|v1|v1alpha)/models/([^/:]+):(generateContent|streamGenerateContent)$")
_BODY_FIELDS = frozenset(
    {
        "contents",
        "systemInstruction",
        "tools",
        "toolConfig",
        "generationConfig",
        "safetySettings",
        "cachedContent",
        "labels",
        "serviceTier",
        "store",
    }
)
_PART_DATA = ("text", "functionCall", "functionResponse", "inlineData", "fileData")
_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_.:-]{0,127}$")
_ids = itertools.count(1)


def signature_of(name: str, args: Any) -> str:
    """The thought signature this fake puts on a function call (and demands back on it): a digest of the
    call's name and arguments (keys sorted, so a client may re-encode them)."""
    canonical = msgspec.json.encode(args, order="sorted").decode()
    digest = hashlib.sha256(f"fake-gemini:{name}:{canonical}".encode()).digest()
    return base64.b64encode(digest).decode()


class FakeGeminiServer(FakeServer):
    """Speaks the Gemini API (`POST {base_url}/v1beta/models/{model}:generateContent` and
    `:streamGenerateContent?alt=sse`); see the module docstring.

    `responses`: `AiMessage`, `str`, `ChatResponse` or `Reply` items (or callables of the request returning
    one), answered in order. `api_key`: when set, other keys get Google's 400 "API key not valid".
    `call_ids`: whether function calls carry an `id` (newer API versions do; older ones do not).
    `signatures`: whether function calls carry thought signatures (and must get them back). `validate`: check
    requests as the API does.
    """

    def __init__(
        self,
        responses: Iterable[Any] = (),
        *,
        api_key: str | None = None,
        call_ids: bool = True,
        signatures: bool = True,
        words_per_chunk: int = 2,
        keep_alive: bool = True,
        validate: bool = True,
    ) -> None:
        super().__init__(responses, keep_alive=keep_alive)
        self.api_key = api_key
        self.call_ids = call_ids
        self.signatures = signatures
        self.words_per_chunk = max(1, words_per_chunk)
        self.validate = validate

    # -- errors and refusals ------------------------------------------------------------------------------

    @staticmethod
    def error(
        status: int,
        message: str,
        *,
        status_name: str | None = None,
        retry_delay: float | None = None,
        headers: Iterable[tuple[str, str]] = (),
    ) -> Reply:
        """An error answer in Google's format; `retry_delay` adds a `google.rpc.RetryInfo` detail.

        `FakeGeminiServer.error(429, "Resource has been exhausted", retry_delay=0.01)`
        """
        error: dict[str, Any] = {
            "code": status,
            "message": message,
            "status": status_name or _STATUS.get(status, "UNKNOWN"),
        }
        if retry_delay is not None:
            error["details"] = [
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{retry_delay:g}s"}
            ]
        return Reply.json({"error": error}, status=status, headers=tuple(headers))

    @staticmethod
    def blocked(reason: str = "SAFETY", *, stream: bool = True) -> Reply:
        """A prompt refused before any answer (`promptFeedback.blockReason`), streamed or not."""
        body = {
            "promptFeedback": {
                "blockReason": reason,
                "safetyRatings": [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH"}],
            },
            "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9},
            "modelVersion": "gemini-2.5-flash",
        }
        if stream:
            return Reply.sse([_event(body)])
        return Reply.json(body)

    @staticmethod
    def stopped(reason: str, *, text: str | None = None, stream: bool = True) -> Reply:
        """An answer whose candidate ends with `finishReason` `reason` (SAFETY, RECITATION,
        MALFORMED_FUNCTION_CALL...), with `text` before it if given."""
        candidate: dict[str, Any] = {"finishReason": reason, "index": 0}
        if text:
            candidate["content"] = {"role": "model", "parts": [{"text": text}]}
        if reason in ("SAFETY", "IMAGE_SAFETY"):
            candidate["safetyRatings"] = [
                {"category": "HARM_CATEGORY_HARASSMENT", "probability": "HIGH", "blocked": True}
            ]
        body = {
            "candidates": [candidate],
            "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 2, "totalTokenCount": 11},
            "modelVersion": "gemini-2.5-flash",
        }
        if stream:
            return Reply.sse([_event(body)])
        return Reply.json(body)

    # -- rendering ----------------------------------------------------------------------------------------

    def render(self, item: Any, request: RecordedRequest) -> Reply:
        if isinstance(item, Reply):
            return item
        match = _PATH.match(request.path)
        if request.method != "POST" or match is None:
            return self.error(404, f"Method not found: {request.method} {request.path}")
        model, method = match.group(2), match.group(3)
        stream = method == "streamGenerateContent"
        if stream and request.query.get("alt") != "sse":
            return self.error(400, "this fake serves streamGenerateContent as SSE only: add ?alt=sse")
        key = request.headers.get("x-goog-api-key") or request.query.get("key")
        if not key:
            return self.error(
                403,
                "Method doesn't allow unregistered callers (callers without established identity). Please "
                "use API Key or other form of API consumer identity to call this API.",
            )
        if self.api_key is not None and key != self.api_key:
            return self.error(400, "API key not valid. Please pass a valid API key.")
        body = request.json
        if not isinstance(body, dict):
            return self.error(400, "Invalid JSON payload received.")
        if self.validate:
            problem = _check_request(body)
            if problem:
                return self.error(400, problem)
        response = scripted_response(item, "FakeGeminiServer")
        chunks = self._chunks(response, body, model, stream)
        if stream:
            return Reply.sse([_event(chunk) for chunk in chunks])
        return Reply.json(chunks[0])

    def _parts(self, message: AiMessage, stream: bool) -> list[list[dict[str, Any]]]:
        """The model's parts, grouped by the chunk they are sent in (one group when not streaming)."""
        groups: list[list[dict[str, Any]]] = []
        per = self.words_per_chunk
        if message.thinking:
            words = split_text(message.thinking) if stream else [message.thinking]
            groups.extend(
                [{"text": "".join(words[i : i + per]), "thought": True}] for i in range(0, len(words), per)
            )
        if message.text:
            words = split_text(message.text) if stream else [message.text]
            groups.extend([{"text": "".join(words[i : i + per])}] for i in range(0, len(words), per))
        calls = []
        for n, call in enumerate(message.tool_execution_requests):
            arguments = call.arguments.strip() or "{}"
            function: dict[str, Any] = {"name": call.name, "args": msgspec.Raw(arguments.encode())}
            if self.call_ids:
                function["id"] = call.id or f"{next(_ids):08x}"
            part: dict[str, Any] = {"functionCall": function}
            if self.signatures and n == 0:
                part["thoughtSignature"] = signature_of(call.name, msgspec.json.decode(arguments))
            calls.append(part)
        if calls:
            groups.append(calls)
        if not stream:
            return [[part for group in groups for part in group]]
        return groups or [[{"text": ""}]]

    def _chunks(
        self, response: ChatResponse, body: dict[str, Any], model: str, stream: bool
    ) -> list[dict[str, Any]]:
        message = response.ai_message
        usage = response.token_usage or _estimate(message, body)
        reason = _FINISH[response.finish_reason] if response.finish_reason is not None else "STOP"
        response_id = response.id or f"resp{next(_ids):012x}"
        version = response.model or model
        groups = self._parts(message, stream)
        chunks = []
        for n, parts in enumerate(groups):
            candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
            last = n == len(groups) - 1
            if last:
                candidate["finishReason"] = reason
            chunks.append(
                {
                    "candidates": [candidate],
                    "usageMetadata": _usage(usage, final=last),
                    "modelVersion": version,
                    "responseId": response_id,
                }
            )
        return chunks


def _event(chunk: dict[str, Any]) -> bytes:
    """One SSE event as Google sends it: `data: <json>` and a CRLF blank line."""
    return b"data: " + msgspec.json.encode(chunk) + b"\r\n\r\n"


def _usage(usage: TokenUsage, *, final: bool) -> dict[str, Any]:
    thoughts = usage.reasoning_tokens
    wire: dict[str, Any] = {"promptTokenCount": usage.input_tokens}
    if final:
        wire["candidatesTokenCount"] = usage.output_tokens - (thoughts or 0)
        wire["totalTokenCount"] = usage.input_tokens + usage.output_tokens
        if thoughts is not None:
            wire["thoughtsTokenCount"] = thoughts
    else:
        wire["totalTokenCount"] = usage.input_tokens
    if usage.cache_read_tokens is not None:
        wire["cachedContentTokenCount"] = usage.cache_read_tokens
    return wire


def _estimate(message: AiMessage, body: dict[str, Any]) -> TokenUsage:
    """Deterministic token counts: words of the request in, tokens of the answer out."""
    words = len(split_text(msgspec.json.encode(body.get("contents") or []).decode()))
    out = output_tokens(message)
    thoughts = len(split_text(message.thinking or "")) if message.thinking else None
    return TokenUsage(words + 3, out, reasoning_tokens=thoughts)


# -- request validation (the messages the real API answers with, or close to them) ---------------------------


def _check_request(body: dict[str, Any]) -> str | None:
    """The message Google would answer with 400 for this body, or None if it is valid."""
    unknown = sorted(set(body) - _BODY_FIELDS)
    if unknown:
        return f'Invalid JSON payload received. Unknown name "{unknown[0]}": Cannot find field.'
    config = body.get("generationConfig") or {}
    if not isinstance(config, dict):
        return "Invalid JSON payload received. generationConfig must be an object."
    if "responseSchema" in config and "responseJsonSchema" in config:
        return "responseSchema and responseJsonSchema cannot both be set"
    if ("responseSchema" in config or "responseJsonSchema" in config) and config.get(
        "responseMimeType"
    ) not in ("application/json", "text/x.enum"):
        return "responseMimeType must be application/json when a response schema is set"
    names = set()
    for tool in body.get("tools") or ():
        for n, declaration in enumerate(tool.get("functionDeclarations") or ()):
            name = declaration.get("name")
            if not isinstance(name, str) or not _NAME.match(name):
                return f"* GenerateContentRequest.tools.function_declarations[{n}].name: Invalid name."
            if "parameters" in declaration and "parametersJsonSchema" in declaration:
                return "parameters and parametersJsonSchema cannot both be set"
            names.add(name)
    tool_config = (body.get("toolConfig") or {}).get("functionCallingConfig") or {}
    if tool_config and tool_config.get("mode") not in ("AUTO", "ANY", "NONE", "VALIDATED"):
        return "Invalid value at 'tool_config.function_calling_config.mode'"
    for allowed in tool_config.get("allowedFunctionNames") or ():
        if allowed not in names:
            return f"allowed_function_names contains {allowed!r}, which is not a declared function"
    system = body.get("systemInstruction")
    if system is not None and not (isinstance(system, dict) and system.get("parts")):
        return "* GenerateContentRequest.system_instruction.parts: contents.parts must not be empty."
    return _check_contents(body.get("contents"))


def _check_contents(contents: Any) -> str | None:
    if not isinstance(contents, list) or not contents:
        return "* GenerateContentRequest.contents: contents is not specified"
    current_turn = max(
        (
            n
            for n, c in enumerate(contents)
            if c.get("role") == "user" and any("text" in p for p in c.get("parts") or ())
        ),
        default=0,
    )
    pending: list[tuple[str | None, str]] = []
    for n, content in enumerate(contents):
        where = f"* GenerateContentRequest.contents[{n}]"
        if not isinstance(content, dict) or content.get("role") not in ("user", "model", "function"):
            return f"{where}.role: Please use a valid role: user, model."
        parts = content.get("parts")
        if not isinstance(parts, list) or not parts:
            return f"{where}.parts: contents.parts must not be empty."
        answered = [p["functionResponse"] for p in parts if isinstance(p, dict) and "functionResponse" in p]
        if pending:
            if content["role"] == "model" or len(answered) != len(pending):
                return (
                    "Please ensure that the number of function response parts is equal to the number of "
                    "function call parts of the function call turn."
                )
            for k, response in enumerate(answered):
                for m, inner in enumerate(response.get("parts") or ()):
                    problem = _check_media(inner, f"{where}.function_response[{k}].parts[{m}]")
                    if problem:
                        return problem
            for (call_id, name), response in zip(pending, answered, strict=True):
                if response.get("name") != name:
                    return f"{where}: function response name {response.get('name')!r} does not match {name!r}"
                if call_id is not None and response.get("id") not in (None, call_id):
                    return f"{where}: function response id {response.get('id')!r} matches no function call"
        elif answered:
            return "Please ensure that function response turn comes immediately after a function call turn."
        pending = []
        for m, part in enumerate(parts):
            if not isinstance(part, dict):
                return f"{where}.parts[{m}]: must be an object"
            data = [
                k for k in ("text", "functionCall", "functionResponse", "inlineData", "fileData") if k in part
            ]
            if len(data) != 1:
                return f"{where}.parts[{m}].data: required oneof field 'data' must have one initialized field"
            if "text" in part and not isinstance(part["text"], str):
                return f"{where}.parts[{m}].text: must be a string"
            problem = _check_media(part, f"{where}.parts[{m}]")
            if problem:
                return problem
            call = part.get("functionCall")
            if call is not None:
                if content["role"] != "model":
                    return f"{where}.parts[{m}]: functionCall parts are only allowed in model turns"
                if not isinstance(call.get("args", {}), dict):
                    return f"{where}.parts[{m}].function_call.args: must be an object"
                pending.append((call.get("id"), call.get("name", "")))
                signature = part.get("thoughtSignature")
                if n >= current_turn and len(pending) == 1:
                    expected = {SKIP_SIGNATURE, signature_of(call.get("name", ""), call.get("args", {}))}
                    if signature is None:
                        return (
                            f"Function call is missing a thought_signature in functionCall parts. This is "
                            f"required for tools to work correctly, and missing thought_signature may lead "
                            f"to degraded model performance. Additional data, function call `default_api:"
                            f"{call.get('name')}` , position {m + 1}."
                        )
                    if signature != SKIP_SIGNATURE and _bytes_of(signature) not in map(_bytes_of, expected):
                        return f"{where}.parts[{m}]: Corrupted thought signature."
    return None


def _check_media(part: dict[str, Any], where: str) -> str | None:
    """`inlineData` must be base64 with a MIME type; `fileData` needs a URI. Google's JSON takes proto field
    names too (`inline_data`, `mime_type`: what google-genai sends inside function responses)."""
    inline = part.get("inlineData", part.get("inline_data"))
    if inline is not None:
        mime_type = inline.get("mimeType", inline.get("mime_type"))
        if not isinstance(mime_type, str) or not mime_type:
            return f"{where}.inline_data.mime_type: required"
        try:
            base64.b64decode(str(inline.get("data", "")).replace("-", "+").replace("_", "/"), validate=True)
        except ValueError:
            return f"{where}.inline_data.data: Invalid value (bytes must be base64)"
    file = part.get("fileData", part.get("file_data"))
    uri = None if file is None else str(file.get("fileUri", file.get("file_uri", "")))
    if uri is not None and not uri.startswith(("https://", "http://", "gs://")):
        return f"{where}.file_data.file_uri: Invalid or unsupported file uri"
    return None


def _bytes_of(signature: Any) -> bytes | None:
    """A signature's bytes: Google's JSON takes bytes fields in standard or URL-safe base64 (the SDKs send
    the URL-safe form), so both are read."""
    if not isinstance(signature, str):
        return None
    try:
        return base64.b64decode(signature.replace("-", "+").replace("_", "/"), validate=True)
    except ValueError:
        return None
