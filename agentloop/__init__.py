"""agentloop: an async, event-driven agent runtime with concurrent tool calling.

Messages, errors and `ToolSpecification` load with the package; everything else (the tool layer, the
runtime) loads on first use, so `import agentloop` stays cheap.

The package's folders follow its layers (each imports only the ones above it; docs/architecture.md):
- the core, `agentloop/_*.py`: messages, errors and tool specifications (`_messages`, `_errors`, `_spec`,
  `_events`); the tool layer (`_tool`, `_decorator`, `_threads`, `_schema`, `_arguments`, `_toolset`,
  `_execution`); memory (`_memory`, `_codec`); the loop and its front ends (`_loop`, `_agent`, `_stream`,
  `_result`, `_sync`, `_observe`);
- features on the seam around the loop, `agentloop/_features/`: `output` (structured output), `approval`;
- providers, `agentloop/models/`: the `ChatModel` protocol (`_base`), the shared HTTP base (`_http/`), one
  module per provider, fallback and local models;
- integrations, optional extras imported lazily: `stores`, `mcp`, `otel`, `dbos`, `testing`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._values._content import Content, DocumentContent, ImageContent, TextContent
from ._values._errors import (
    AgentLoopError,
    ApprovalError,
    AuthenticationError,
    BadRequestError,
    BadResponseError,
    ChatMemoryConflictError,
    ChatMemoryStoreError,
    HallucinatedToolError,
    IllegalConfigurationError,
    InvocationTimeoutError,
    LimiterError,
    LimitExceededError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelRetry,
    ModelTimeoutError,
    NotFoundError,
    OutputValidationError,
    RateLimitError,
    ResponseTruncatedError,
    ServerError,
    ToolArgumentsError,
    ToolDeniedError,
    ToolExecutionError,
    ToolRoundsExceededError,
    ToolsNotSupportedError,
)
from ._values._messages import (
    AiMessage,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    FinishReason,
    ResponseFormat,
    SystemMessage,
    TokenUsage,
    ToolChoice,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserInput,
    UserMessage,
)
from ._values._spec import ToolSpecification

if TYPE_CHECKING:
    from ._api._agent import Agent
    from ._features.approval import Defer, Denied, PendingApproval, ToolApprovalRequest
    from ._memory._chat import (
        ChatMemory,
        ChatMemoryStore,
        InMemoryChatMemoryStore,
        MemoryLease,
        MessageWindowChatMemory,
        PendingApprovalStore,
        StoredMemory,
        VersionedChatMemoryStore,
    )
    from ._runtime._observe import Observer, instrument, uninstrument
    from ._runtime._one_response import execute_tool_calls
    from ._runtime._seam import CallContext, InvocationCall, Middleware, ModelCall, ToolCall
    from ._runtime._stream import TokenStream
    from ._tools._decorator import tool, tool_specification_from
    from ._tools._execution import ToolExecution, ToolRunner, should_return_immediately
    from ._tools._schema import P
    from ._tools._tool import ReturnBehavior, Tool, ToolExecutor
    from ._tools._toolset import (
        ToolProvider,
        ToolProviderRequest,
        ToolProviderResult,
        ToolSource,
        tool_specifications_from,
    )
    from ._values._context import ToolContext, ToolMemoryId
    from ._values._events import (
        ApprovalRequired,
        BeforeToolExecution,
        CompleteResponse,
        IntermediateResponse,
        ModelProgress,
        PartialOutput,
        PartialResponse,
        PartialThinking,
        PartialToolCall,
        StreamEvent,
        ToolExecuted,
    )
    from ._values._result import Result

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "P": "._tools._schema",
    **dict.fromkeys(["ReturnBehavior", "Tool", "ToolExecutor"], "._tools._tool"),
    **dict.fromkeys(
        ["CallContext", "InvocationCall", "Middleware", "ModelCall", "ToolCall"], "._runtime._seam"
    ),
    **dict.fromkeys(["ToolContext", "ToolMemoryId"], "._values._context"),
    **dict.fromkeys(["tool", "tool_specification_from"], "._tools._decorator"),
    **dict.fromkeys(
        [
            "ToolProvider",
            "ToolProviderRequest",
            "ToolProviderResult",
            "ToolSource",
            "tool_specifications_from",
        ],
        "._tools._toolset",
    ),
    **dict.fromkeys(["ToolExecution", "ToolRunner", "should_return_immediately"], "._tools._execution"),
    "execute_tool_calls": "._runtime._one_response",
    **dict.fromkeys(
        [
            "ChatMemory",
            "ChatMemoryStore",
            "InMemoryChatMemoryStore",
            "MemoryLease",
            "MessageWindowChatMemory",
            "PendingApprovalStore",
            "StoredMemory",
            "VersionedChatMemoryStore",
        ],
        "._memory._chat",
    ),
    **dict.fromkeys(["Defer", "Denied", "PendingApproval", "ToolApprovalRequest"], "._features.approval"),
    **dict.fromkeys(
        [
            "ApprovalRequired",
            "BeforeToolExecution",
            "CompleteResponse",
            "IntermediateResponse",
            "ModelProgress",
            "PartialOutput",
            "PartialResponse",
            "PartialThinking",
            "PartialToolCall",
            "StreamEvent",
            "ToolExecuted",
        ],
        "._values._events",
    ),
    **dict.fromkeys(["Observer", "instrument", "uninstrument"], "._runtime._observe"),
    "Agent": "._api._agent",
    "Result": "._values._result",
    "TokenStream": "._runtime._stream",
}

__all__ = [
    "Agent",
    "AgentLoopError",
    "AiMessage",
    "ApprovalError",
    "ApprovalRequired",
    "AuthenticationError",
    "BadRequestError",
    "BadResponseError",
    "BeforeToolExecution",
    "CallContext",
    "ChatMemory",
    "ChatMemoryConflictError",
    "ChatMemoryStore",
    "ChatMemoryStoreError",
    "ChatMessage",
    "ChatRequest",
    "ChatResponse",
    "CompleteResponse",
    "Content",
    "Defer",
    "Denied",
    "DocumentContent",
    "FinishReason",
    "HallucinatedToolError",
    "IllegalConfigurationError",
    "ImageContent",
    "InMemoryChatMemoryStore",
    "IntermediateResponse",
    "InvocationCall",
    "InvocationTimeoutError",
    "LimitExceededError",
    "LimiterError",
    "MemoryLease",
    "MessageWindowChatMemory",
    "Middleware",
    "ModelCall",
    "ModelConnectionError",
    "ModelError",
    "ModelHTTPError",
    "ModelProgress",
    "ModelRetry",
    "ModelTimeoutError",
    "NotFoundError",
    "Observer",
    "OutputValidationError",
    "P",
    "PartialOutput",
    "PartialResponse",
    "PartialThinking",
    "PartialToolCall",
    "PendingApproval",
    "PendingApprovalStore",
    "RateLimitError",
    "ResponseFormat",
    "ResponseTruncatedError",
    "Result",
    "ReturnBehavior",
    "ServerError",
    "StoredMemory",
    "StreamEvent",
    "SystemMessage",
    "TextContent",
    "TokenStream",
    "TokenUsage",
    "Tool",
    "ToolApprovalRequest",
    "ToolArgumentsError",
    "ToolCall",
    "ToolChoice",
    "ToolContext",
    "ToolDeniedError",
    "ToolExecuted",
    "ToolExecution",
    "ToolExecutionError",
    "ToolExecutionRequest",
    "ToolExecutionResultMessage",
    "ToolExecutor",
    "ToolMemoryId",
    "ToolProvider",
    "ToolProviderRequest",
    "ToolProviderResult",
    "ToolRoundsExceededError",
    "ToolRunner",
    "ToolSource",
    "ToolSpecification",
    "ToolsNotSupportedError",
    "UserInput",
    "UserMessage",
    "VersionedChatMemoryStore",
    "execute_tool_calls",
    "instrument",
    "should_return_immediately",
    "tool",
    "tool_specification_from",
    "tool_specifications_from",
    "uninstrument",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        from ._hints import missing_name

        raise missing_name(__name__, name)
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
