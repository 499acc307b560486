"""agentloop tools as an MCP server: `server_from(tools)` and `serve(tools, http=...)`.

Each call runs through `execute_tool_call`, as inside an agent: arguments are validated against the tool's
signature, injected parameters (`ToolMemoryId`, `ToolContext`) stay hidden, a failure becomes an `isError`
result with the text the model would read, and a result that is not text also goes as structured content.
While a tool runs, `ToolContext` logs, reports progress and asks the client (elicitation, sampling) over
the call's own channel. Resources and prompts are served when given.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types
import msgspec
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPDeprecationWarning

from .. import IllegalConfigurationError, ToolExecutionRequest
from .._tools._execution import ExecutionOptions, execute_tool_call
from .._tools._toolset import Toolset, ToolsLike, resolve_tools
from .._values._context import bind_channel
from .._values._text import whole_number
from ._blocks import content_blocks, structured_content
from ._catalog import PromptsLike, ResourcesLike, catalog_of
from ._channel import CallChannel, LogLevels

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
    resources: ResourcesLike | None = None,
    prompts: PromptsLike | None = None,
    name: str = "agentloop",
    instructions: str | None = None,
    options: ExecutionOptions | None = None,
) -> Server[Any]:
    """An MCP server (the SDK's low-level `Server`) offering `tools`: anything `Agent(tools=...)` takes.

    `resources` (`{uri: function}` or the SDK's resource objects) and `prompts` (functions or the SDK's
    prompt objects) are offered too when given. Run it with `serve()`, the SDK's transports, or connect to it
    in process with `MCPToolset(server)`. `options` sets the tools' timeout and error handlers, as for an
    agent.
    """
    toolset = resolve_tools(tools)
    if not len(toolset):
        raise IllegalConfigurationError(
            "server_from(tools): no tools given; an MCP server needs at least one"
        )
    listing = types.ListToolsResult(tools=[_describe(tool.specification) for tool in toolset])
    run_options = options if options is not None else ExecutionOptions()
    catalog = catalog_of(resources, prompts)
    levels = LogLevels()

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return listing

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        channel = CallChannel(ctx, levels, name)
        async with anyio.create_task_group() as group:
            group.start_soon(channel.drain)
            try:
                with bind_channel(channel):
                    result = await _call(
                        toolset, run_options, params.name, params.arguments, str(ctx.request_id)
                    )
            finally:
                channel.close()  # every notification is delivered before the result goes out
        return result

    async def set_level(
        ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        levels.set(ctx.session, params.level)
        return types.EmptyResult()

    handlers: dict[str, Any] = {}
    if catalog.resources or catalog.templates:
        subscribed: set[str] = set()

        async def list_resources(
            ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
        ) -> types.ListResourcesResult:
            return types.ListResourcesResult(resources=catalog.list_resources())

        async def list_templates(
            ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
        ) -> types.ListResourceTemplatesResult:
            return types.ListResourceTemplatesResult(resource_templates=catalog.list_templates())

        async def read_resource(
            ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
        ) -> types.ReadResourceResult:
            return await catalog.read(str(params.uri))

        async def subscribe(
            ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams
        ) -> types.EmptyResult:
            subscribed.add(str(params.uri))
            return types.EmptyResult()

        async def unsubscribe(
            ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams
        ) -> types.EmptyResult:
            subscribed.discard(str(params.uri))
            return types.EmptyResult()

        handlers.update(
            on_list_resources=list_resources,
            on_list_resource_templates=list_templates,
            on_read_resource=read_resource,
            on_subscribe_resource=subscribe,
            on_unsubscribe_resource=unsubscribe,
        )
    if catalog.prompts:

        async def list_prompts(
            ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
        ) -> types.ListPromptsResult:
            return types.ListPromptsResult(prompts=catalog.list_prompts())

        async def get_prompt(
            ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
        ) -> types.GetPromptResult:
            return await catalog.get_prompt(params.name, params.arguments)

        handlers.update(on_list_prompts=list_prompts, on_get_prompt=get_prompt)
    if catalog.prompts or catalog.templates:

        async def complete(
            ctx: ServerRequestContext[Any], params: types.CompleteRequestParams
        ) -> types.CompleteResult:
            # Arguments are free text: no suggestions, as the protocol allows (an empty list).
            return types.CompleteResult(completion=types.Completion(values=[], has_more=False))

        handlers["on_completion"] = complete
    with warnings.catch_warnings():
        # The SDK flags logging/setLevel as deprecated by the 2026-07-28 protocol; clients of the current
        # protocols still send it, and it filters what a tool's ctx.log() sends them.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        return Server(
            name,
            instructions=instructions,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            on_set_logging_level=set_level,
            **handlers,
        )


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
    blocks = content_blocks(execution.result_object)
    if blocks is not None:
        return types.CallToolResult(content=blocks)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=execution.result)],
        structured_content=structured_content(execution),
    )


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


async def serve(
    tools: ToolsLike | Server[Any],
    *,
    http: str | None = None,
    name: str = "agentloop",
    instructions: str | None = None,
) -> None:
    """Serves `tools` (or a server `server_from` made) over MCP until cancelled: on stdin/stdout, or over
    streamable HTTP at `http` ("HOST:PORT", path `/mcp`)."""
    server = tools if isinstance(tools, Server) else server_from(tools, name=name, instructions=instructions)
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
    host, sep, digits = text.rpartition(":")
    port = whole_number(digits, 5)
    if not sep or port is None or not 0 < port < 65536:
        raise IllegalConfigurationError(f"--http takes HOST:PORT (e.g. 127.0.0.1:8000), got {text!r}")
    return host.strip("[]") or "127.0.0.1", port
