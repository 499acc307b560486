"""`ToolSearch`: a large toolset behind a `search_tools(query)` tool (BM25, offline)."""

from __future__ import annotations

from ._native import check_native_model, has_deferred
from ._search import SearchTool, ToolSearch, search_filters

__all__ = ["SearchTool", "ToolSearch", "check_native_model", "has_deferred", "search_filters"]
