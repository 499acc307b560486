"""MCP (Model Context Protocol) for agentloop: any MCP server's tools in an agent, and agentloop tools
served over MCP. Needs the `mcp` extra: `pip install 'agentloop-runtime[mcp]'`.

`MCPToolset(server, ...)` connects to a server (a URL, a command, or an in-process SDK server) and offers
its tools; `server_from(tools)` and `serve(tools)` go the other way (also `python -m agentloop.mcp serve
module:object`).
"""

from __future__ import annotations

import importlib.metadata
from typing import TYPE_CHECKING

from .. import MissingExtraError
from .._public import publish
from .._values._text import whole_number
from ._names import local_name

__all__ = [
    "MCPServerError",
    "MCPToolError",
    "MCPToolResult",
    "MCPToolset",
    "MissingExtraError",
    "local_name",
    "serve",
    "server_from",
]

_HINT = "pip install 'agentloop-runtime[mcp]'"


def _check_sdk() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(f"agentloop.mcp needs the MCP SDK (the mcp package): {_HINT}") from exc
    try:
        version = importlib.metadata.version("mcp")
    except importlib.metadata.PackageNotFoundError:
        return  # importable but not installed as a distribution (a source checkout): trust it
    major = version.split(".", 1)[0]
    if (whole_number(major) or 0) < 2:
        raise MissingExtraError(f"agentloop.mcp needs mcp 2.x, found mcp {version}: {_HINT}")


_check_sdk()

from ._results import MCPToolError, MCPToolResult  # noqa: E402
from ._server import serve, server_from  # noqa: E402
from ._toolset import MCPServerError, MCPToolset  # noqa: E402

publish(globals(), __all__, __name__)

if not TYPE_CHECKING:  # at run time only: to mypy, this module's names stay exactly the ones above

    def __getattr__(name: str) -> object:
        """A name this module does not have: the error says which public module has it."""
        from .._hints import missing_name

        raise missing_name(__name__, name)
