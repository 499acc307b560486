"""`ToolSearch(native=True)`: the provider's own tool search finds the tools. agentloop marks the searchable
tools deferred (`DEFER_LOADING` in their specification's metadata), the model sends them so with its
provider's search tool beside them, and this module checks that the model has one."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import msgspec

from ..._runtime._seam import Middleware, ModelCall, NextModelCall
from ..._tools._tool import Tool
from ..._values._errors import IllegalConfigurationError
from ..._values._messages import ChatResponse
from ..._values._spec import ToolSpecification
from ...models._base import DEFER_LOADING, supports_tool_search

__all__ = ["NATIVE_CHECK", "check_native_model", "deferred", "has_deferred", "has_deferred_specs"]

_SUPPORTED = (
    "AnthropicChatModel (Anthropic's tool search tool) and OpenAIResponsesModel (the Responses API's "
    "tool_search)"
)


def deferred(tool: Tool) -> Tool:
    """A copy of `tool` whose specification says the provider's tool search finds it (the tool itself, its
    runner and its settings shared)."""
    clone = copy.copy(tool)
    spec = tool.specification
    clone.specification = msgspec.structs.replace(spec, metadata={**spec.metadata, DEFER_LOADING: True})
    return clone


def has_deferred(tools: Iterable[Tool]) -> bool:
    """True when one of `tools` is searched for by the provider (`ToolSearch(native=True)`)."""
    return has_deferred_specs(t.specification for t in tools)


def has_deferred_specs(specs: Iterable[ToolSpecification]) -> bool:
    """True when one of `specs` is marked for the provider's tool search."""
    return any(s.metadata.get(DEFER_LOADING) is True for s in specs)


def check_native_model(model: Any) -> None:
    """Raises `IllegalConfigurationError` unless `model`'s provider has its own tool search."""
    if not supports_tool_search(model):
        raise IllegalConfigurationError(
            f"ToolSearch(native=True) needs a model whose provider searches tools itself: {_SUPPORTED}; "
            f"{type(model).__name__} has no tool search. Use ToolSearch(tools) instead (BM25 in agentloop, "
            "works with every provider)"
        )


class _NativeCheck(Middleware):
    """Refuses a model call with deferred tools to a model whose provider cannot search them (it would send
    every tool, or none)."""

    allows_eager_tools = True  # it only reads the request

    async def wrap_model_call(self, call: ModelCall, call_next: NextModelCall) -> ChatResponse:
        if has_deferred_specs(call.request.tool_specifications):
            check_native_model(call.model)
        return await call_next(call)


NATIVE_CHECK = _NativeCheck()
