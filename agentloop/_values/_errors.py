"""The exception hierarchy: one base class, one subclass per thing a user may want to catch."""

from __future__ import annotations

from typing import Any

__all__ = [
    "AgentLoopError",
    "ApprovalError",
    "AuthenticationError",
    "BadRequestError",
    "BadResponseError",
    "CassetteError",
    "ChatMemoryConflictError",
    "ChatMemoryStoreError",
    "CodecError",
    "GuardrailTripped",
    "HallucinatedToolError",
    "IllegalConfigurationError",
    "InvocationTimeoutError",
    "LimitExceededError",
    "LimiterError",
    "LocalModelWeightsError",
    "MCPServerError",
    "MCPToolError",
    "MissingExtraError",
    "ModelConnectionError",
    "ModelError",
    "ModelHTTPError",
    "ModelRetry",
    "ModelTimeoutError",
    "NotFoundError",
    "OutputValidationError",
    "RateLimitError",
    "RecordedToolError",
    "ResponseTruncatedError",
    "RunControlError",
    "ServerError",
    "ToolArgumentsError",
    "ToolDeniedError",
    "ToolExecutionError",
    "ToolRoundsExceededError",
    "ToolsNotSupportedError",
    "UsageLimitExceeded",
]


class AgentLoopError(Exception):
    """Base class of every error agentloop raises on purpose."""


# -- tools ------------------------------------------------------------------------------------------------


class ToolExecutionError(AgentLoopError):
    """A tool failed. Raise it from a tool to send `message` to the model as the call's error result."""

    def __init__(self, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.error_code = error_code


class ToolDeniedError(ToolExecutionError):
    """A person (or the approval handler) denied a tool call; `message` went to the model as its result.

    A denial is a record of a decision, so it compares by value (message, call id, tool name): a paused
    round's executions read back from JSON equal the ones it paused with."""

    def __init__(self, message: str, *, call_id: str | None = None, tool_name: str | None = None) -> None:
        super().__init__(message)
        self.call_id = call_id
        self.tool_name = tool_name

    def __eq__(self, other: object) -> bool:
        if type(other) is not ToolDeniedError:
            return NotImplemented
        return (self.message, self.call_id, self.tool_name) == (other.message, other.call_id, other.tool_name)

    def __hash__(self) -> int:
        return hash((ToolDeniedError, self.message, self.call_id, self.tool_name))

    def __repr__(self) -> str:
        return f"ToolDeniedError({self.message!r}, call_id={self.call_id!r}, tool_name={self.tool_name!r})"


class ToolArgumentsError(AgentLoopError):
    """The model sent arguments that are not valid JSON or do not match the tool's parameters."""

    def __init__(self, message: str, *, tool_name: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.tool_name = tool_name


class HallucinatedToolError(AgentLoopError):
    """The model called a tool that this invocation does not offer."""

    def __init__(self, message: str, *, tool_name: str) -> None:
        super().__init__(message)
        self.message = message
        self.tool_name = tool_name


class RunControlError(AgentLoopError):
    """A run-control backend (`agentloop.control`) failed or holds data it cannot read; the message says
    which backend and why."""


class IllegalConfigurationError(AgentLoopError):
    """The agent or its tools are set up in a way that cannot work (duplicate names, bad signatures...)."""


class ModelRetry(AgentLoopError):
    """Raise it from a tool or an `output_validator` to ask the model to try again: `message` goes to the
    model as the retry request (a tool's error result, or a correction of its output)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class OutputValidationError(AgentLoopError):
    """The model's structured output stayed invalid after `output_retries` corrections.

    `output` is the last raw output (JSON text, or the answer text), `errors` what was wrong with it
    (pydantic's error dicts: `loc`, `msg`, `type`, `input`; or the message of a `ModelRetry`).
    """

    def __init__(self, message: str, *, output: str | None, errors: list[dict[str, object]]) -> None:
        super().__init__(message)
        self.message = message
        self.output = output
        self.errors = errors


# -- runtime ----------------------------------------------------------------------------------------------


class ToolRoundsExceededError(AgentLoopError):
    """The model kept calling tools for more rounds than `max_tool_rounds` allows."""

    def __init__(self, message: str, *, max_tool_rounds: int) -> None:
        super().__init__(message)
        self.max_tool_rounds = max_tool_rounds


class InvocationTimeoutError(AgentLoopError, TimeoutError):
    """A `timeout=` given to `chat()`, `stream()` or `ask()` expired before the invocation finished."""

    def __init__(self, message: str, *, timeout: float) -> None:
        super().__init__(message)
        self.timeout = timeout


class MemoryBusyError(AgentLoopError):
    """`if_busy="reject"`: an invocation on this memory id is running (in this process or another sharing the
    agent's run control), so this one did not start. The web apps answer it with HTTP 409. `memory_id` is the
    busy id."""

    def __init__(self, message: str, *, memory_id: Any) -> None:
        super().__init__(message)
        self.memory_id = memory_id


class LimitExceededError(AgentLoopError, TimeoutError):
    """A `ConcurrencyLimit` wait outlasted its `timeout`: `key` is the limited key, `limit` its setting and
    `timeout` the seconds waited. Nothing was taken: the call it guarded never started."""

    def __init__(self, message: str, *, key: str, limit: int, timeout: float) -> None:
        super().__init__(message)
        self.message = message
        self.key = key
        self.limit = limit
        self.timeout = timeout


class LimiterError(AgentLoopError):
    """A keyed limit's backend (`RedisLimiter`) could not be reached or refused a step: `backend` names it
    (its URL without a password). The call it guarded did not start."""

    def __init__(self, message: str, *, backend: str) -> None:
        super().__init__(message)
        self.message = message
        self.backend = backend


class ApprovalError(AgentLoopError):
    """A paused round cannot be resumed as asked (a decision missing or unknown, the state altered, already
    resumed...), or an invocation that waits for approval was asked for its text. Nothing ran."""

    def __init__(self, message: str, *, call_id: str | None = None, pending_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.call_id = call_id
        self.pending_id = pending_id


# -- memory -----------------------------------------------------------------------------------------------


class ChatMemoryStoreError(AgentLoopError):
    """A chat memory store could not be read or written (server unreachable, file locked or corrupt).

    `store` names the store (its URL or path, without secrets). The write that failed committed nothing.
    """

    def __init__(self, message: str, *, store: str | None = None) -> None:
        super().__init__(message)
        self.store = store


class ChatMemoryConflictError(ChatMemoryStoreError):
    """A write was refused: it was based on an older version of the memory, or its lease had been lost."""


# -- models -----------------------------------------------------------------------------------------------


class ModelError(AgentLoopError):
    """A chat model call failed. Subclasses say how; attributes carry what the provider said.

    `retryable` says whether the same request may succeed later (rate limits, server errors, timeouts, broken
    connections); an engine that retries on its own should retry only those, with the provider's own retries
    off (`max_retries=0`), so the two never multiply.
    """

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        provider: str | None = None,
        status_code: int | None = None,
        error_type: str | None = None,
        provider_message: str | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.provider = provider
        self.status_code = status_code
        self.error_type = error_type
        self.provider_message = provider_message
        self.request_id = request_id
        self.retry_after = retry_after


class ModelHTTPError(ModelError):
    """The provider answered with a non-2xx HTTP status."""


class BadRequestError(ModelHTTPError):
    """400/422: the provider rejected the request itself."""


class ToolsNotSupportedError(BadRequestError):
    """The provider says this model cannot take tools (e.g. Ollama's "does not support tools")."""


class AuthenticationError(ModelHTTPError):
    """401/403: the API key is missing, wrong, or lacks permission."""


class NotFoundError(ModelHTTPError):
    """404: unknown model or wrong base URL."""


class RateLimitError(ModelHTTPError):
    """429: too many requests (retried first; raised once retries are exhausted)."""

    retryable = True


class ServerError(ModelHTTPError):
    """5xx: the provider failed (retried first; raised once retries are exhausted)."""

    retryable = True


class ModelTimeoutError(ModelError, TimeoutError):
    """Connecting to, or reading from, the provider took longer than the configured timeout."""

    retryable = True


class ModelConnectionError(ModelError):
    """The connection to the provider could not be made or broke before the response was complete."""

    retryable = True


class BadResponseError(ModelError):
    """The provider's answer could not be understood (malformed JSON, broken stream, wrong content type)."""


class ResponseTruncatedError(ModelError):
    """The response hit the model's output token limit (finish reason LENGTH) in the middle of a tool call,
    so the call cannot run. Nothing of that response ran or was stored."""


# -- raised by one part of agentloop (stores, MCP, the local model, built-in middleware) ------------------


class CodecError(AgentLoopError):
    """Data could not be read as agentloop's storage format (corrupt, not ours, or from a newer release)."""


class RecordedToolError(ToolExecutionError):
    """A tool execution's error read back from storage: the original class name and its message.

    It is a record, so it compares by value (class name and message): an execution read back twice, or a
    durable run's result returned again, equals the first (unlike live exceptions, which compare by
    identity)."""

    def __init__(self, message: str, *, error_type: str) -> None:
        super().__init__(message)
        self.error_type = error_type

    def __repr__(self) -> str:
        return f"RecordedToolError({self.message!r}, error_type={self.error_type!r})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not RecordedToolError:
            return NotImplemented
        return (self.error_type, self.message) == (other.error_type, other.message)

    def __hash__(self) -> int:
        return hash((RecordedToolError, self.error_type, self.message))


class MCPServerError(ToolExecutionError):
    """The MCP server could not be reached, broke the connection, timed out, or answered with a protocol
    error. `server` names it (its URL, command or in-process name)."""

    def __init__(self, message: str, *, server: str) -> None:
        super().__init__(message)
        self.server = server


class MCPToolError(ToolExecutionError):
    """An MCP tool answered with `isError`: its text goes to the model as the call's error result."""

    def __init__(self, message: str, *, server: str, tool_name: str) -> None:
        super().__init__(message)
        self.server = server
        self.tool_name = tool_name


class LocalModelWeightsError(IllegalConfigurationError):
    """The embedded model's weights are missing, incomplete, or not the file agentloop pins.

    Nothing is loaded when this is raised; the message says how to fix it.
    """


class UsageLimitExceeded(AgentLoopError):
    """An invocation reached a `UsageLimits` budget: `limit` names it ("max_requests", ...), `value` is its
    setting and `used` what the invocation would have used. Nothing of the round in progress was stored."""

    def __init__(self, message: str, *, limit: str, value: int, used: int) -> None:
        super().__init__(message)
        self.message = message
        self.limit = limit
        self.value = value
        self.used = used


class GuardrailTripped(AgentLoopError):
    """A guardrail rejected the user's message (`InputGuardrail`) or the model's answer (`OutputGuardrail`):
    `guardrail` is its name, `value` what its check returned. Nothing of the round in progress was stored."""

    def __init__(self, message: str, *, guardrail: str, value: Any) -> None:
        super().__init__(message)
        self.message = message
        self.guardrail = guardrail
        self.value = value


class MissingExtraError(AgentLoopError, ImportError):
    """An optional part of agentloop was used without its extra; the message says what to install."""


class CassetteError(AgentLoopError):
    """A cassette cannot answer a request: the request differs from the recording (the message says which
    request and how), every recorded exchange was played, or the file is missing or not a cassette."""
