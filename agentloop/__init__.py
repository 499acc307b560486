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

from ._content import Content, DocumentContent, ImageContent, TextContent
from ._errors import (
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
from ._messages import (
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
from ._spec import ToolSpecification

if TYPE_CHECKING:
    from ._agent import Agent
    from ._context import ToolContext, ToolMemoryId
    from ._decorator import tool, tool_specification_from
    from ._events import (
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
    from ._execution import ToolExecution, ToolRunner, should_return_immediately
    from ._features.approval import Defer, Denied, PendingApproval, ToolApprovalRequest
    from ._memory import (
        ChatMemory,
        ChatMemoryStore,
        InMemoryChatMemoryStore,
        MemoryLease,
        MessageWindowChatMemory,
        PendingApprovalStore,
        StoredMemory,
        VersionedChatMemoryStore,
    )
    from ._observe import Observer, instrument, uninstrument
    from ._one_response import execute_tool_calls
    from ._result import Result
    from ._schema import P
    from ._seam import CallContext, InvocationCall, Middleware, ModelCall, ToolCall
    from ._stream import TokenStream
    from ._tool import ReturnBehavior, Tool, ToolExecutor
    from ._toolset import (
        ToolProvider,
        ToolProviderRequest,
        ToolProviderResult,
        ToolSource,
        tool_specifications_from,
    )

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "P": "._schema",
    **dict.fromkeys(["ReturnBehavior", "Tool", "ToolExecutor"], "._tool"),
    **dict.fromkeys(["CallContext", "InvocationCall", "Middleware", "ModelCall", "ToolCall"], "._seam"),
    **dict.fromkeys(["ToolContext", "ToolMemoryId"], "._context"),
    **dict.fromkeys(["tool", "tool_specification_from"], "._decorator"),
    **dict.fromkeys(
        [
            "ToolProvider",
            "ToolProviderRequest",
            "ToolProviderResult",
            "ToolSource",
            "tool_specifications_from",
        ],
        "._toolset",
    ),
    **dict.fromkeys(["ToolExecution", "ToolRunner", "should_return_immediately"], "._execution"),
    "execute_tool_calls": "._one_response",
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
        "._memory",
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
        "._events",
    ),
    **dict.fromkeys(["Observer", "instrument", "uninstrument"], "._observe"),
    "Agent": "._agent",
    "Result": "._result",
    "TokenStream": "._stream",
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
        raise AttributeError(f"module 'agentloop' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
