"""Every Protocol and base class an implementer writes against, in one place.

Write a model, a memory or store, a tool source or runner, or a middleware by implementing what is listed
here; agentloop checks capabilities structurally (`isinstance` against these runtime-checkable Protocols),
so nothing needs to inherit from them except `Middleware` and `Observer`, which are base classes with
pass-through hooks. The same objects stay importable where they were (`agentloop.models.ChatModel`,
`agentloop.ChatMemory`, ...). docs/abc.md describes each and shows an implementation of the common ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._features.approval._records import StoreBackedMemory
from ._memory._chat import (
    ChatMemory,
    ChatMemoryStore,
    ExclusiveMemory,
    FinalCommitMemory,
    LeasingStore,
    PendingApprovalStore,
    VersionedChatMemoryStore,
)
from ._public import publish
from ._runtime._observe import Observer
from ._runtime._seam import (
    CallContext,
    Halt,
    InvocationCall,
    Middleware,
    ModelCall,
    NextInvocation,
    NextModelCall,
    NextToolCall,
    ToolCall,
)
from ._tools._execution import ToolRunner
from ._tools._tool import ToolExecutor
from ._tools._toolset import DynamicToolProvider, ToolProvider, ToolSource
from ._values._convert import CarriesMedia
from .control._base import Inbox, RunControl
from .middleware._limiter import Limiter
from .models import (
    ChatModel,
    ClosableModel,
    LocallyNamedModel,
    ModelWithDefaults,
    NamedModel,
    ProviderModel,
    RemoteModel,
    StructuredOutputModel,
    TextSinkModel,
    TokenCountingModel,
    WrapperModel,
)

__all__ = [
    "CallContext",
    "CarriesMedia",
    "ChatMemory",
    "ChatMemoryStore",
    "ChatModel",
    "ClosableModel",
    "DynamicToolProvider",
    "ExclusiveMemory",
    "FinalCommitMemory",
    "Halt",
    "Inbox",
    "InvocationCall",
    "LeasingStore",
    "Limiter",
    "LocallyNamedModel",
    "Middleware",
    "ModelCall",
    "ModelWithDefaults",
    "NamedModel",
    "NextInvocation",
    "NextModelCall",
    "NextToolCall",
    "Observer",
    "PendingApprovalStore",
    "ProviderModel",
    "RemoteModel",
    "RunControl",
    "StoreBackedMemory",
    "StructuredOutputModel",
    "TextSinkModel",
    "TokenCountingModel",
    "ToolCall",
    "ToolExecutor",
    "ToolProvider",
    "ToolRunner",
    "ToolSource",
    "VersionedChatMemoryStore",
    "WrapperModel",
]

publish(globals(), __all__, __name__)

if not TYPE_CHECKING:  # at run time only: to mypy, this module's names stay exactly the ones above

    def __getattr__(name: str) -> object:
        """A name this module does not have: the error says which public module has it."""
        from ._hints import missing_name

        raise missing_name(__name__, name)
