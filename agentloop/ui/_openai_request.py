"""The requests of the OpenAI API that `openai_app` answers, read strictly: a Chat Completions or Responses
body becomes the user's question, the history before it and how to answer; anything else is an
`OpenAIError` naming the field (OpenAI's own 400 shape).

Fields the agent cannot honour change what the answer means (client tools, several choices, log
probabilities, audio, a JSON schema the agent does not enforce), so they are refused rather than ignored.
Sampling fields (`temperature`, `max_tokens`, ...) are accepted and left to the agent's model settings.
System and developer messages are dropped: the server owns the instructions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import AiMessage, ChatMessage, UserMessage
from ._history import media, user_message

__all__ = ["Asked", "OpenAIError", "read_chat", "read_responses"]


class OpenAIError(Exception):
    """An answer in OpenAI's error shape `{"error": {message, type, param, code}}`; nothing ran."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class Asked:
    """One request: the new user message, the conversation before it (as the client sent it), whether to
    stream, whether the stream ends with a usage chunk, and the `model` and `user` fields."""

    question: UserMessage
    history: list[ChatMessage]
    stream: bool
    include_usage: bool
    model: str
    user: str | None


# Fields accepted and left to the agent (its model's settings decide); anything not listed here or below
# is not an OpenAI field and is refused.
_CHAT_IGNORED = frozenset(
    {
        "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed", "presence_penalty",
        "frequency_penalty", "logit_bias", "metadata", "store", "service_tier", "reasoning_effort",
        "parallel_tool_calls", "top_logprobs", "safety_identifier", "prompt_cache_key", "verbosity",
        "prompt_cache_retention",
    }
)  # fmt: skip
_CHAT_READ = frozenset(
    {
        "model", "messages", "stream", "stream_options", "user", "tools", "functions", "tool_choice",
        "function_call", "n", "logprobs", "response_format", "modalities", "audio", "prediction",
        "web_search_options",
    }
)  # fmt: skip
_RESPONSES_IGNORED = frozenset(
    {
        "temperature", "top_p", "max_output_tokens", "metadata", "store", "include", "parallel_tool_calls",
        "reasoning", "truncation", "service_tier", "safety_identifier", "prompt_cache_key", "top_logprobs",
        "max_tool_calls", "instructions", "stream_options", "prompt_cache_retention",
    }
)  # fmt: skip
_RESPONSES_READ = frozenset(
    {
        "model", "input", "stream", "user", "tools", "tool_choice", "previous_response_id", "conversation",
        "background", "text", "prompt",
    }
)  # fmt: skip

_TOOLS_REFUSED = (
    "this endpoint serves an agent that runs its own tools on the server; a client's tools cannot be "
    "given to it. Send the conversation without `{field}`"
)


def _bad(message: str, param: str | None) -> OpenAIError:
    return OpenAIError(400, message, param=param)


def _check_fields(body: Any, known: frozenset[str], what: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise _bad(f"The request body must be a JSON object (a {what} request)", None)
    for name in body:
        if name not in known:
            raise _bad(f"Unrecognized request argument supplied: {name}", name)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("you must provide a model parameter (a string: see GET /v1/models)", "model")
    for name in ("stream", "background"):
        if name in body and body[name] is not None and not isinstance(body[name], bool):
            raise _bad(f"`{name}` must be a boolean, got {type(body[name]).__name__}", name)
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise _bad(f"`user` must be a string, got {type(user).__name__}", "user")
    return body


def _refuse_tools(body: dict[str, Any], fields: tuple[str, ...]) -> None:
    for name in fields:
        value = body.get(name)
        if value not in (None, [], "auto", "none"):
            raise _bad(_TOOLS_REFUSED.format(field=name), name)


def _parts(content: Any, where: str, text_kinds: tuple[str, ...], image_kind: str | None) -> list[Any]:
    """The text and picture parts of a message's content (a string or a list of typed parts)."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        raise _bad(f"{where} must be a string or a list of content parts", where)
    found: list[Any] = []
    for n, part in enumerate(content):
        at = f"{where}[{n}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in text_kinds:
            if not isinstance(part.get("text"), str):
                raise _bad(f"{at}.text must be a string", f"{at}.text")
            found.append(part["text"])
        elif kind is not None and kind == image_kind:
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url  # chat: {url}; responses: the URL
            if not isinstance(url, str):
                raise _bad(f"{at}.image_url must give the picture's URL (a data: URL or a web address)", at)
            try:
                found.append(media(url, None, part="image"))
            except ValueError as error:
                raise _bad(f"{at}: {error}", at) from None
        else:
            raise _bad(
                f"{at}: a part of type {kind!r} cannot go to this agent; send text or pictures "
                f"({', '.join(repr(k) for k in (*text_kinds, image_kind) if k)})",
                f"{at}.type",
            )
    return found


def _conversation(
    messages: list[Any], where: str, read: Callable[[dict[str, Any], str], ChatMessage | None]
) -> tuple[UserMessage, list[ChatMessage]]:
    """The last message (which must be the user's) and the ones before it, read by `read`."""
    said: list[ChatMessage] = []
    for n, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _bad(f"{where}[{n}] must be an object with a `role`", f"{where}[{n}]")
        one = read(message, f"{where}[{n}]")
        if one is not None:
            said.append(one)
    if not said or not isinstance(said[-1], UserMessage):
        raise _bad(f"The last of `{where}` must be the user's, with text or a picture", where)
    return said[-1], said[:-1]


def _message(
    message: dict[str, Any], at: str, texts: tuple[str, ...], image: str | None
) -> ChatMessage | None:
    role = message.get("role")
    if role in ("system", "developer"):
        return None  # the server owns the instructions
    if role == "user":
        said = user_message(_parts(message.get("content"), f"{at}.content", texts, image))
        if said is None:
            raise _bad(f"{at}: a user message needs text or a picture", f"{at}.content")
        return said
    if role == "assistant":
        if message.get("tool_calls") or message.get("function_call"):
            raise _bad(_TOOLS_REFUSED.format(field=f"{at}.tool_calls"), f"{at}.tool_calls")
        content = message.get("content")
        words = _parts(content, f"{at}.content", (*texts, "output_text", "refusal"), None) if content else []
        text = "".join(w for w in words if isinstance(w, str))
        return AiMessage(text) if text else None
    if role in ("tool", "function"):
        raise _bad(_TOOLS_REFUSED.format(field=f"{at} (a {role} message)"), f"{at}.role")
    raise _bad(f"{at}.role must be 'user', 'assistant', 'system' or 'developer', got {role!r}", f"{at}.role")


def _stream_flags(body: dict[str, Any]) -> tuple[bool, bool]:
    stream = bool(body.get("stream"))
    options = body.get("stream_options")
    if options is None:
        return stream, False
    if not isinstance(options, dict):
        raise _bad("`stream_options` must be an object {include_usage: boolean}", "stream_options")
    usage = options.get("include_usage", False)
    if not isinstance(usage, bool):
        raise _bad("`stream_options.include_usage` must be a boolean", "stream_options.include_usage")
    if not stream and usage:
        raise _bad("`stream_options` is only allowed when `stream` is true", "stream_options")
    return stream, usage


def read_chat(body: Any) -> Asked:
    """A `POST /v1/chat/completions` body."""
    body = _check_fields(body, _CHAT_IGNORED | _CHAT_READ, "Chat Completions")
    _refuse_tools(body, ("tools", "functions", "tool_choice", "function_call"))
    if body.get("n") not in (None, 1):
        raise _bad("`n`: this agent gives one answer per request; leave `n` out or set it to 1", "n")
    if body.get("logprobs"):
        raise _bad("`logprobs`: an agent's answer has no log probabilities; leave it out", "logprobs")
    format_ = body.get("response_format")
    if format_ is not None and (not isinstance(format_, dict) or format_.get("type") != "text"):
        raise _bad(
            "`response_format`: the agent decides the shape of its answer; only {type: 'text'} is accepted",
            "response_format",
        )
    for name in ("modalities", "audio", "prediction", "web_search_options"):
        if body.get(name) not in (None, ["text"]):
            raise _bad(f"`{name}` is not supported by this agent endpoint; leave it out", name)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("`messages` must be a non-empty list of messages", "messages")
    question, history = _conversation(
        messages, "messages", lambda m, at: _message(m, at, ("text",), "image_url")
    )
    stream, usage = _stream_flags(body)
    return Asked(question, history, stream, usage, body["model"], body.get("user"))


def _item(item: dict[str, Any], at: str) -> ChatMessage | None:
    kind = item.get("type", "message")
    if kind != "message":
        if kind in ("function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output"):
            raise _bad(_TOOLS_REFUSED.format(field=f"{at} (a {kind} item)"), f"{at}.type")
        raise _bad(
            f"{at}: an input item of type {kind!r} cannot go to this agent; send messages", f"{at}.type"
        )
    return _message(item, at, ("input_text",), "input_image")


def read_responses(body: Any) -> Asked:
    """A `POST /v1/responses` body."""
    body = _check_fields(body, _RESPONSES_IGNORED | _RESPONSES_READ, "Responses")
    _refuse_tools(body, ("tools", "tool_choice"))
    for name, why in (
        ("previous_response_id", "send X-Memory-Id (or `user`) to continue a conversation the server keeps"),
        ("conversation", "send X-Memory-Id (or `user`) to continue a conversation the server keeps"),
        ("background", "answers are given in the request (stream them with `stream: true`)"),
        ("prompt", "the server owns the agent's instructions"),
    ):
        if body.get(name) not in (None, False):
            raise _bad(f"`{name}` is not supported: {why}", name)
    text = body.get("text")
    if text is not None:
        format_ = text.get("format") if isinstance(text, dict) else None
        if not isinstance(text, dict) or (format_ is not None and format_ != {"type": "text"}):
            raise _bad(
                "`text.format`: the agent decides the shape of its answer; only {type: 'text'}", "text"
            )
    given = body.get("input")
    if isinstance(given, str):
        given = [{"role": "user", "content": given}]
    if not isinstance(given, list) or not given:
        raise _bad("`input` must be a string or a non-empty list of input items", "input")
    question, history = _conversation(given, "input", _item)
    stream, usage = _stream_flags(body)
    return Asked(question, history, stream, usage or stream, body["model"], body.get("user"))
