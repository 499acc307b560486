"""`openai_app(agent)`: an agent behind the OpenAI API, for any OpenAI client, SDK or chat UI.

`POST /v1/chat/completions` and `POST /v1/responses` (streamed or not) run the agent, with its own tools,
memory and middleware on the server; `GET /v1/models` lists the one model it serves. Errors are in OpenAI's
shape. See docs/serving.md for what is read from a request and why.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Iterable
from typing import Any, Literal

import anyio

from .. import Agent, IllegalConfigurationError, TokenStream
from ._asgi import (
    HTTPError,
    Receive,
    Scope,
    Send,
    answer_json,
    check_scope,
    headers_of,
    read_body,
    stream_sse,
)
from ._history import check_if_busy, refuse_if_busy, stream_with_history
from ._openai_request import Asked, OpenAIError, read_chat, read_responses
from ._openai_wire import (
    RunFailed,
    chat_chunks,
    chat_completion,
    finished_response,
    response_events,
    run_text,
)

__all__ = ["OpenAIApp", "openai_app"]

logger = logging.getLogger("agentloop.ui")

SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}
SSE_HEADERS |= {"x-accel-buffering": "no"}

_NO_RETRY = {"x-should-retry": "false"}  # the SDKs retry 5xx; a failed run must not run again


def _keys(api_keys: str | Iterable[str] | None) -> tuple[bytes, ...] | None:
    if api_keys is None:
        return None
    keys = (api_keys,) if isinstance(api_keys, str) else tuple(api_keys)
    if not keys or not all(isinstance(k, str) and k.strip() for k in keys):
        raise IllegalConfigurationError(
            "openai_app(api_keys=...): give the accepted bearer keys as non-empty strings (or None to accept "
            "every request)"
        )
    return tuple(hashlib.sha256(k.encode()).digest() for k in keys)


class OpenAIApp:
    """The ASGI app `openai_app` returns: mount it in FastAPI or Starlette, or run it with uvicorn.
    `model_name` is the one model id it lists and accepts."""

    def __init__(
        self, agent: Agent[Any], keys: tuple[bytes, ...] | None, model_name: str, if_busy: Any = "wait"
    ) -> None:
        """`keys`: the SHA-256 digests of the accepted bearer keys (None: no check)."""
        self.agent = agent
        self.if_busy = if_busy
        self.model_name = model_name
        self._keys = keys

    def __repr__(self) -> str:
        return f"<openai_app serving {self.model_name!r}>"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await check_scope(scope, receive, send)
        if scope["type"] == "lifespan":
            return
        try:
            await self._route(scope, receive, send)
        except OpenAIError as error:
            headers = error.headers | (_NO_RETRY if error.status >= 500 else {})
            await answer_json(send, error.status, error.body(), headers)

    def _check_key(self, scope: Scope) -> None:
        if self._keys is None:
            return
        given = headers_of(scope).get("authorization", "")
        scheme, _, token = given.partition(" ")
        presented = token.strip().encode() if scheme.lower() == "bearer" else b""
        digest = hashlib.sha256(presented).digest()  # equal lengths: the time says nothing of the key's
        matched = False
        for key in self._keys:  # every key compared, each in constant time
            matched |= hmac.compare_digest(digest, key)
        if not matched:
            raise OpenAIError(
                401,
                "Incorrect API key provided. Send it as `Authorization: Bearer <key>`."
                if presented
                else "You didn't provide an API key. Send it as `Authorization: Bearer <key>`.",
                code="invalid_api_key",
                headers={"www-authenticate": "Bearer"},
            )

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        path = path.rstrip("/")
        if path.startswith("/v1/"):
            path = path[3:]
        method = scope["method"]
        self._check_key(scope)
        if path == "/models" or path.startswith("/models/"):
            if method != "GET":
                raise _not_allowed("GET", scope)
            await self._models(send, path[len("/models/") :] if path != "/models" else None)
            return
        read = {"/chat/completions": read_chat, "/responses": read_responses}.get(path)
        if read is None:
            raise OpenAIError(404, f"Invalid URL ({method} {scope['path']})", code="unknown_url")
        if method != "POST":
            raise _not_allowed("POST", scope)
        try:
            body = await read_body(receive)
        except HTTPError as error:
            raise OpenAIError(error.status, error.message) from None
        asked = read(body)
        if asked.model != self.model_name:
            raise OpenAIError(
                404,
                f"The model `{asked.model}` does not exist: this server serves `{self.model_name}`",
                param="model",
                code="model_not_found",
            )
        stream = await self._start(scope, asked)
        chat = path == "/chat/completions"
        if asked.stream:
            if chat:
                events = chat_chunks(stream, self.model_name, asked.include_usage)
            else:
                events = response_events(stream, self.model_name)
            await stream_sse(receive, send, SSE_HEADERS, events)
            return
        answer = await _until_disconnected(receive, stream)
        if answer is None:
            return  # the client went away: the run was cancelled, nobody to answer
        if isinstance(answer, RunFailed):
            raise OpenAIError(500, str(answer), kind="server_error")
        build = chat_completion if chat else finished_response
        await answer_json(send, 200, build(self.model_name, answer, stream.result))

    async def _start(self, scope: Scope, asked: Asked) -> TokenStream[Any]:
        header = headers_of(scope).get("x-memory-id")
        if self.agent.memory is None:
            if header is not None:
                raise OpenAIError(
                    400,
                    "X-Memory-Id: this agent keeps no memory; send the whole conversation in the request",
                    param="X-Memory-Id",
                )
            key = None
        else:
            key = header if header else asked.user
            if not key:
                raise OpenAIError(
                    400,
                    "This agent keeps the conversation on the server: say whose it is with the "
                    "`X-Memory-Id` header or the `user` field",
                    param="user",
                )
        try:
            await refuse_if_busy(self.agent, key, self.if_busy)
        except HTTPError as error:
            raise OpenAIError(409, error.message, kind="conflict", code="memory_busy") from None
        try:
            return stream_with_history(
                self.agent, asked.question, asked.history, memory_id=key, if_busy=self.if_busy
            )
        except HTTPError as error:
            raise OpenAIError(400, error.message, param="messages") from None

    async def _models(self, send: Send, model: str | None) -> None:
        entry = {"id": self.model_name, "object": "model", "created": 0, "owned_by": "agentloop"}
        if model is None:
            await answer_json(send, 200, {"object": "list", "data": [entry]})
        elif model == self.model_name:
            await answer_json(send, 200, entry)
        else:
            raise OpenAIError(
                404, f"The model `{model}` does not exist", param="model", code="model_not_found"
            )


def _not_allowed(method: str, scope: Scope) -> OpenAIError:
    return OpenAIError(
        405, f"Use {method} for {scope['path']}", code="method_not_allowed", headers={"allow": method}
    )


async def _until_disconnected(receive: Receive, stream: TokenStream[Any]) -> str | RunFailed | None:
    """Runs the stream to its end and returns its text (or how it failed), or None when the client
    disconnected first (then the run is cancelled: nothing of its current round is kept)."""
    answer: str | RunFailed | None = None
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            group.cancel_scope.cancel()

        group.start_soon(watch)
        pieces: list[str] = []
        try:
            async for text in run_text(stream):
                pieces.append(text)
            answer = "".join(pieces)
        except RunFailed as error:
            answer = error
        group.cancel_scope.cancel()
    return answer


def openai_app(
    agent: Agent[Any],
    *,
    api_keys: str | Iterable[str] | None = None,
    model_name: str | None = None,
    if_busy: Literal["wait", "steer", "interrupt", "reject"] = "wait",
) -> OpenAIApp:
    """An ASGI app serving `agent` as an OpenAI-compatible API: `POST /v1/chat/completions` and
    `POST /v1/responses` (streamed or not), `GET /v1/models`.

    `api_keys`: the bearer keys accepted (None: any request). `model_name`: the model id clients ask for
    (default: the agent's name, else "agentloop"). With a memory, the conversation is the server's, under
    the `X-Memory-Id` header (or the `user` field), and only the request's last user message is read;
    without one, the request's messages are the history. A client's `tools` are refused (the agent runs
    its own). A client that disconnects cancels the run. `if_busy`: what a request does while a run on
    the same memory id is under way: "wait" (default), "steer", "interrupt" or "reject" (HTTP 409,
    code `memory_busy`); see docs/runtime.md.
    """
    if not isinstance(agent, Agent):
        raise IllegalConfigurationError(f"openai_app serves an agentloop Agent, got {type(agent).__name__}")
    name = model_name if model_name is not None else (agent.name or "agentloop")
    if not isinstance(name, str) or not name:
        raise IllegalConfigurationError("openai_app(model_name=...): give the model id as a non-empty string")
    return OpenAIApp(agent, _keys(api_keys), name, check_if_busy("openai_app", if_busy))
