"""agentloop tools as an MCP server: `server_from(tools)` and `serve(tools, http=...)`.

Each call runs through `execute_tool_call`, as inside an agent: arguments are validated against the tool's
signature, injected parameters (`ToolMemoryId`, `ToolContext`) stay hidden, a failure becomes an `isError`
result with the text the model would read, and a result that is not text also goes as structured content.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import mcp_types as types
import msgspec
import pydantic_core
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

from .._errors import IllegalConfigurationError
from .._execution import ExecutionOptions, ToolExecution, execute_tool_call
from .._messages import ToolExecutionRequest
from .._result import Result
from .._toolset import Toolset, ToolsLike, resolve_tools

__all__ = ["serve", "server_from"]

logger = logging.getLogger("agentloop.mcp")

_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
_HINT_FIELDS = {
    "readOnlyHint": "read_only_hint",
    "destructiveHint": "destructive_hint",
    "idempotentHint": "idempotent_hint",
    "openWorldHint": "open_world_hint",
}


def server_from(
    tools: ToolsLike,
    *,
    name: str = "agentloop",
    instructions: str | None = None,
    options: ExecutionOptions | None = None,
) -> Server[Any]:
    """An MCP server (the SDK's low-level `Server`) offering `tools`: anything `Agent(tools=...)` takes.

    Run it with `serve()`, the SDK's transports, or connect to it in process with `MCPToolset(server)`.
    `options` sets the tools' timeout and error handlers, as for an agent.
    """
    toolset = resolve_tools(tools)
    if not len(toolset):
        raise IllegalConfigurationError(
            "server_from(tools): no tools given; an MCP server needs at least one"
        )
    listing = types.ListToolsResult(tools=[_describe(tool.specification) for tool in toolset])
    run_options = options if options is not None else ExecutionOptions()

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return listing

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await _call(toolset, run_options, params.name, params.arguments, str(ctx.request_id))

    return Server(name, instructions=instructions, on_list_tools=list_tools, on_call_tool=call_tool)


def _describe(spec: Any) -> types.Tool:
    """The MCP description of one tool: its name, description and parameter schema; hints from metadata."""
    metadata: Mapping[str, Any] = spec.metadata
    hints = {_HINT_FIELDS[key]: metadata[key] for key in _HINTS if isinstance(metadata.get(key), bool)}
    return types.Tool(
        name=spec.name,
        description=spec.description,
        input_schema=spec.parameters,
        annotations=types.ToolAnnotations(**hints) if hints else None,
    )


async def _call(
    toolset: Toolset,
    options: ExecutionOptions,
    name: str,
    arguments: Mapping[str, Any] | None,
    call_id: str,
) -> types.CallToolResult:
    if name not in toolset:
        return _error(f"Unknown tool: {name!r}; this server offers {', '.join(toolset.names)}")
    request = ToolExecutionRequest(call_id, name, msgspec.json.encode(dict(arguments or {})).decode())
    execution = await execute_tool_call(request, index=0, toolset=toolset, options=options)
    if execution.is_error:
        return _error(execution.result)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=execution.result)],
        structured_content=_structured(execution),
    )


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _structured(execution: ToolExecution) -> dict[str, Any] | None:
    """The result as structured content when it is data (a dict, a model, a number...): None for text.

    A value that is not a JSON object goes as `{"result": value}`, as the SDK's own servers send it.
    """
    value = execution.result_object
    if value is None or isinstance(value, (str, Result)):
        return None
    try:
        data = pydantic_core.to_jsonable_python(value)
    except (pydantic_core.PydanticSerializationError, ValueError, TypeError):
        return None
    return data if isinstance(data, dict) else {"result": data}


async def serve(
    tools: ToolsLike,
    *,
    http: str | None = None,
    name: str = "agentloop",
    instructions: str | None = None,
) -> None:
    """Serves `tools` over MCP until cancelled: on stdin/stdout, or over streamable HTTP at `http`
    ("HOST:PORT", path `/mcp`)."""
    server = server_from(tools, name=name, instructions=instructions)
    if http is None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
        return
    host, port = parse_address(http)
    import uvicorn

    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()


def parse_address(text: str) -> tuple[str, int]:
    """("HOST", PORT) from "HOST:PORT" (or ":PORT" for 127.0.0.1); raises `IllegalConfigurationError`."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise IllegalConfigurationError(f"--http takes HOST:PORT (e.g. 127.0.0.1:8000), got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)
