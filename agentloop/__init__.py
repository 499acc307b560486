"""agentloop: an async, event-driven agent runtime with concurrent tool calling.

Messages, errors and `ToolSpecification` load with the package; everything else (the tool layer, the
runtime) loads on first use, so `import agentloop` stays cheap.

The package's folders are its layers, each importing only the ones below it (checked by import-linter;
docs/architecture.md): `_values/` (messages, events, results, errors, stored records) at the bottom, then
`_tools/`, `models/`, `_memory/`, `_runtime/` (the loop, the seam), the features (`_features/`,
`middleware/`), `_api/` (`Agent`), the integrations imported lazily (`stores`, `mcp`, `otel`, `dbos`, `ui`,
`testing`) and `abc` (every Protocol an implementer writes against).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._public import TOP_LEVEL, publish, publish_one
from ._values._content import Content, DocumentContent, ImageContent, TextContent
from ._values._errors import (
    AgentLoopError,
    ApprovalError,
    AuthenticationError,
    BadRequestError,
    BadResponseError,
    CassetteError,
    ChatMemoryConflictError,
    ChatMemoryStoreError,
    CodecError,
    GuardrailTripped,
    HallucinatedToolError,
    IllegalConfigurationError,
    InvocationTimeoutError,
    LimiterError,
    LimitExceededError,
    LocalModelWeightsError,
    MCPServerError,
    MCPToolError,
    MemoryBusyError,
    MissingExtraError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelRetry,
    ModelTimeoutError,
    NotFoundError,
    OutputValidationError,
    RateLimitError,
    RecordedToolError,
    ResponseTruncatedError,
    RunControlError,
    ServerError,
    ToolArgumentsError,
    ToolDeniedError,
    ToolExecutionError,
    ToolRoundsExceededError,
    ToolsNotSupportedError,
    UsageLimitExceeded,
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
    from ._features.approval import Decision, Defer, Denied, PendingApproval, ToolApprovalRequest
    from ._features.search import ToolSearch
    from ._memory._chat import (
        ChatMemory,
        ChatMemoryStore,
        InMemoryChatMemoryStore,
        MemoryLease,
        MessageWindowChatMemory,
        PendingApprovalStore,
        StoredMemory,
        VersionedChatMemoryStore,
        exclusive_access,
    )
    from ._runtime._hooks import CORRECTING, DEFERRED, NO_ANSWER
    from ._runtime._observe import Observer, instrument, uninstrument
    from ._runtime._one_response import execute_tool_calls
    from ._runtime._seam import (
        Answer,
        CallContext,
        Halt,
        HeldRound,
        InvocationCall,
        Middleware,
        ModelCall,
        RoundEnd,
        SavedRound,
        Stop,
        StreamCall,
        ToolCall,
        ToolRound,
    )
    from ._runtime._stream import TokenStream
    from ._tools._decorator import tool, tool_specification_from
    from ._tools._execution import ExecutionOptions, ToolRunner, should_return_immediately
    from ._tools._schema import P
    from ._tools._tool import Tool, ToolExecutor
    from ._tools._toolset import (
        ToolProvider,
        ToolProviderRequest,
        ToolProviderResult,
        ToolSource,
        tool_specifications_from,
    )
    from ._values._background import BackgroundTask
    from ._values._codec import decode, encode
    from ._values._context import ToolContext, ToolMemoryId
    from ._values._events import (
        ApprovalRequired,
        BackgroundTaskFinished,
        BackgroundTaskStarted,
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
        ToolOutputDelta,
        ToolProgress,
        ToolRetrying,
    )
    from ._values._records import ReturnBehavior, ToolExecution
    from ._values._result import Result
    from .models._base import TokenCount
    from .models._counting import count_tokens

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "count_tokens": ".models._counting",
    "ToolSearch": "._features.search",
    "TokenCount": ".models._base",
    "P": "._tools._schema",
    **dict.fromkeys(["CORRECTING", "DEFERRED", "NO_ANSWER"], "._runtime._hooks"),
    **dict.fromkeys(["ReturnBehavior", "ToolExecution"], "._values._records"),
    **dict.fromkeys(["Tool", "ToolExecutor"], "._tools._tool"),
    **dict.fromkeys(
        [
            "Answer",
            "CallContext",
            "Halt",
            "HeldRound",
            "RoundEnd",
            "Stop",
            "InvocationCall",
            "Middleware",
            "ModelCall",
            "SavedRound",
            "StreamCall",
            "ToolCall",
            "ToolRound",
        ],
        "._runtime._seam",
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
    **dict.fromkeys(["ExecutionOptions", "ToolRunner", "should_return_immediately"], "._tools._execution"),
    "execute_tool_calls": "._runtime._one_response",
    **dict.fromkeys(["decode", "encode"], "._values._codec"),
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
            "exclusive_access",
        ],
        "._memory._chat",
    ),
    **dict.fromkeys(
        ["Decision", "Defer", "Denied", "PendingApproval", "ToolApprovalRequest"], "._features.approval"
    ),
    **dict.fromkeys(
        [
            "ApprovalRequired",
            "BackgroundTaskFinished",
            "BackgroundTaskStarted",
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
            "ToolOutputDelta",
            "ToolProgress",
            "ToolRetrying",
        ],
        "._values._events",
    ),
    **dict.fromkeys(["Observer", "instrument", "uninstrument"], "._runtime._observe"),
    "Agent": "._api._agent",
    "BackgroundTask": "._values._background",
    "Result": "._values._result",
    "TokenStream": "._runtime._stream",
}

__all__ = [
    "CORRECTING",
    "DEFERRED",
    "NO_ANSWER",
    "Agent",
    "AgentLoopError",
    "AiMessage",
    "Answer",
    "ApprovalError",
    "ApprovalRequired",
    "AuthenticationError",
    "BackgroundTask",
    "BackgroundTaskFinished",
    "BackgroundTaskStarted",
    "BadRequestError",
    "BadResponseError",
    "BeforeToolExecution",
    "CallContext",
    "CassetteError",
    "ChatMemory",
    "ChatMemoryConflictError",
    "ChatMemoryStore",
    "ChatMemoryStoreError",
    "ChatMessage",
    "ChatRequest",
    "ChatResponse",
    "CodecError",
    "CompleteResponse",
    "Content",
    "Decision",
    "Defer",
    "Denied",
    "DocumentContent",
    "ExecutionOptions",
    "FinishReason",
    "GuardrailTripped",
    "HallucinatedToolError",
    "Halt",
    "HeldRound",
    "IllegalConfigurationError",
    "ImageContent",
    "InMemoryChatMemoryStore",
    "IntermediateResponse",
    "InvocationCall",
    "InvocationTimeoutError",
    "LimitExceededError",
    "LimiterError",
    "LocalModelWeightsError",
    "MCPServerError",
    "MCPToolError",
    "MemoryBusyError",
    "MemoryLease",
    "MessageWindowChatMemory",
    "Middleware",
    "MissingExtraError",
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
    "RecordedToolError",
    "ResponseFormat",
    "ResponseTruncatedError",
    "Result",
    "ReturnBehavior",
    "RoundEnd",
    "RunControlError",
    "SavedRound",
    "ServerError",
    "Stop",
    "StoredMemory",
    "StreamCall",
    "StreamEvent",
    "SystemMessage",
    "TextContent",
    "TokenCount",
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
    "ToolOutputDelta",
    "ToolProgress",
    "ToolProvider",
    "ToolProviderRequest",
    "ToolProviderResult",
    "ToolRetrying",
    "ToolRound",
    "ToolRoundsExceededError",
    "ToolRunner",
    "ToolSearch",
    "ToolSource",
    "ToolSpecification",
    "ToolsNotSupportedError",
    "UsageLimitExceeded",
    "UserInput",
    "UserMessage",
    "VersionedChatMemoryStore",
    "count_tokens",
    "decode",
    "encode",
    "exclusive_access",
    "execute_tool_calls",
    "instrument",
    "should_return_immediately",
    "tool",
    "tool_specification_from",
    "tool_specifications_from",
    "uninstrument",
]


TOP_LEVEL.update(__all__)
publish(globals(), __all__, __name__)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        from ._hints import missing_name

        raise missing_name(__name__, name)
    value = publish_one(getattr(importlib.import_module(module, __name__), name), __name__)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
