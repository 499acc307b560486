"""What an `MCPToolset` answers when the server asks the client something, or tells it something.

The SDK's `Client` takes async callbacks with its own signatures; the user gives friendlier ones (sync or
async functions, an agentloop `ChatModel`). This module turns the user's into the SDK's:
- elicitation: `elicitation_handler(context, params) -> ElicitResult`, sync or async;
- sampling: a `ChatModel` answers `sampling/createMessage` (messages, system prompt, limits -> a
  `ChatRequest`; its answer -> `CreateMessageResult`);
- logging and progress notifications: `on_log(params)`, `on_progress(progress, total, message)`.

A handler that raises answers the server with a JSON-RPC error naming the exception type only (its text may
hold secrets or user data; it is logged at debug level), so a broken handler never breaks the connection.
"""

from __future__ import annotations

import base64
import binascii
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

import anyio.to_thread
import mcp_types as types
from mcp.client.session import (
    ClientRequestContext,
    ElicitationFnT,
    LoggingFnT,
    SamplingFnT,
)
from mcp.shared.dispatcher import ProgressFnT

from .. import (
    AiMessage,
    ChatMessage,
    ChatRequest,
    FinishReason,
    IllegalConfigurationError,
    ImageContent,
    SystemMessage,
    UserMessage,
)
from ..models import ChatModel

__all__ = ["Callbacks", "ElicitationHandler", "LogHandler", "ProgressHandler"]

logger = logging.getLogger("agentloop.mcp")

ElicitationHandler: TypeAlias = Callable[
    [ClientRequestContext, types.ElicitRequestParams],
    "types.ElicitResult | types.ErrorData | Awaitable[types.ElicitResult | types.ErrorData]",
]
"""`(context, params) -> ElicitResult`: answers a server's `elicitation/create` (sync or async)."""
LogHandler: TypeAlias = Callable[[types.LoggingMessageNotificationParams], "Awaitable[None] | None"]
"""`(params) -> None`: sees each `notifications/message` (sync or async)."""
ProgressHandler: TypeAlias = Callable[[float, "float | None", "str | None"], "Awaitable[None] | None"]
"""`(progress, total, message) -> None`: sees each progress notification of a tool call (sync or async)."""

_STOP_REASONS = {FinishReason.STOP: "endTurn", FinishReason.LENGTH: "maxTokens"}


@dataclass(frozen=True)
class Callbacks:
    """The user's handlers of one toolset, checked once, turned into the SDK's callbacks on demand."""

    elicitation_handler: ElicitationHandler | None = None
    sampling_model: ChatModel | None = None
    on_log: LogHandler | None = None
    on_progress: ProgressHandler | None = None

    def __post_init__(self) -> None:
        for name in ("elicitation_handler", "on_log", "on_progress"):
            value = self.__dict__[name]
            if value is not None and not callable(value):
                raise IllegalConfigurationError(
                    f"MCPToolset: {name} takes a function, got {type(value).__name__}"
                )
        if self.sampling_model is not None and not isinstance(self.sampling_model, ChatModel):
            raise IllegalConfigurationError(
                "MCPToolset: sampling_model takes a ChatModel (e.g. OpenAIChatModel(...)), got "
                f"{type(self.sampling_model).__name__}"
            )

    def elicitation(self) -> ElicitationFnT | None:
        handler = self.elicitation_handler
        if handler is None:
            return None

        async def elicit(
            context: ClientRequestContext, params: types.ElicitRequestParams
        ) -> types.ElicitResult | types.ErrorData:
            try:
                answer = await _call(handler, context, params)
            except Exception as exc:
                return _handler_failed("elicitation_handler", exc)
            if not isinstance(answer, (types.ElicitResult, types.ErrorData)):
                return _handler_failed(
                    "elicitation_handler",
                    TypeError(f"it returned {type(answer).__name__}, not mcp_types.ElicitResult"),
                )
            return answer

        return elicit

    def sampling(self) -> SamplingFnT | None:
        model = self.sampling_model
        if model is None:
            return None

        async def sample(
            context: ClientRequestContext, params: types.CreateMessageRequestParams
        ) -> types.CreateMessageResult | types.ErrorData:
            try:
                request = sampling_request(params)
            except ValueError as exc:
                return types.ErrorData(code=types.INVALID_PARAMS, message=str(exc))
            try:
                response = await model.chat(request)
            except Exception as exc:
                return _handler_failed("sampling_model", exc)
            return types.CreateMessageResult(
                role="assistant",
                content=types.TextContent(type="text", text=response.ai_message.text or ""),
                model=response.model or type(model).__name__,
                stop_reason=_stop_reason(response.finish_reason),
            )

        return sample

    def logging(self) -> LoggingFnT | None:
        handler = self.on_log
        if handler is None:
            return None

        async def log(params: types.LoggingMessageNotificationParams) -> None:
            try:
                await _call(handler, params)
            except Exception as exc:
                logger.warning("MCP: on_log raised %s; the notification is dropped", type(exc).__name__)

        return log

    def progress(self) -> ProgressFnT | None:
        handler = self.on_progress
        if handler is None:
            return None

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            try:
                await _call(handler, progress, total, message)
            except Exception as exc:
                logger.warning("MCP: on_progress raised %s; the notification is dropped", type(exc).__name__)

        return progress


def sampling_request(params: types.CreateMessageRequestParams) -> ChatRequest:
    """The `ChatRequest` a server's `sampling/createMessage` asks for: its system prompt, its messages
    (text, and pictures in the user's turns), its limits. Sound, pictures in the assistant's turns and tool
    blocks have no agentloop message to go in: they are refused (`ValueError`, sent as invalid params)."""
    messages: list[ChatMessage] = []
    if params.system_prompt:
        messages.append(SystemMessage(params.system_prompt))
    for number, message in enumerate(params.messages, 1):
        blocks = message.content if isinstance(message.content, list) else [message.content]
        parts: list[str | ImageContent] = []
        for block in blocks:
            if isinstance(block, types.TextContent):
                parts.append(block.text)
            elif isinstance(block, types.ImageContent) and message.role == "user":
                try:
                    picture = ImageContent(data=base64.b64decode(block.data), media_type=block.mime_type)
                except (ValueError, binascii.Error) as exc:
                    raise ValueError(f"sampling message {number}: an unusable image ({exc})") from None
                parts.append(picture)
            else:
                raise ValueError(
                    f"sampling message {number} ({message.role}) holds a {block.type!r} block; the "
                    "sampling_model takes text, and pictures from the user"
                )
        texts = [part for part in parts if isinstance(part, str)]
        if message.role == "user" and len(texts) < len(parts):
            messages.append(UserMessage.of(parts))
        elif message.role == "user":
            messages.append(UserMessage("\n".join(texts)))
        else:
            messages.append(AiMessage(text="\n".join(texts)))
    if not any(isinstance(m, UserMessage) for m in messages):
        raise ValueError("sampling/createMessage holds no user message")
    parameters: dict[str, Any] = {"max_tokens": params.max_tokens}
    if params.temperature is not None:
        parameters["temperature"] = params.temperature
    if params.stop_sequences:
        parameters["stop"] = list(params.stop_sequences)
    return ChatRequest(messages=messages, parameters=parameters)


def _stop_reason(reason: FinishReason | None) -> str:
    """MCP's name for why the model stopped ("endTurn", "maxTokens", or agentloop's own word)."""
    if reason is None:
        return "endTurn"
    return _STOP_REASONS.get(reason, reason.value)


async def _call(function: Callable[..., Any], *args: Any) -> Any:
    """Calls a sync or async user function; a sync one runs in a worker thread (it may block)."""
    if inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        type(function).__call__  # an object whose __call__ is async
    ):
        return await function(*args)
    result = await anyio.to_thread.run_sync(lambda: function(*args))
    if inspect.isawaitable(result):
        return await result
    return result


def _handler_failed(name: str, exc: Exception) -> types.ErrorData:
    """The error sent to the server for a failing handler: the exception type, never its text."""
    logger.debug("MCP: %s failed: %r", name, exc)
    logger.warning("MCP: %s raised %s; the server is told the request failed", name, type(exc).__name__)
    return types.ErrorData(
        code=types.INTERNAL_ERROR, message=f"the client's {name} failed ({type(exc).__name__})"
    )
