"""An MCP server written with the mcp SDK, for the MCP tests: in process (`make_server()`), or run as
`python tests/mcp_demo_server.py stdio [STATE_DIR]` / `... http PORT [STATE_DIR]`, with `--legacy` to answer
like a server from before protocol 2026-07-28 (initialize handshake, HTTP sessions); over HTTP,
`--session-error-400` answers an unknown session with a 400 (see `Gatekeeper`) and `--token=T` requires
`Authorization: Bearer T`.

STATE_DIR (a directory) gets a file `cancelled` when a `hang` call is cancelled, and holds the marker of
`hang_once`, so tests in another process can see what the server saw.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types
from mcp import MCPError, types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, ToolAnnotations
from mcp_types import METHOD_NOT_FOUND
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

LONG_NAME = "fetch_" + "x" * 70  # longer than the 64 characters providers accept


class Answer(BaseModel):
    name: str
    age: int = 30


class Forecast(BaseModel):
    city: str
    temperature: float


class State:
    """What the in-process server saw."""

    def __init__(self, state_dir: Path | None) -> None:
        self.dir = state_dir
        self.cancelled = 0
        self.hanging = 0
        self.arrived = 0
        self.all_arrived: anyio.Event | None = None

    def mark_cancelled(self) -> None:
        self.cancelled += 1
        if self.dir is not None:
            (self.dir / "cancelled").write_text(str(self.cancelled))


async def refuse_discover(ctx: Any, call_next: Any) -> Any:
    """Middleware that makes the server answer like one from before 2026-07-28 (initialize handshake)."""
    if ctx.method == "server/discover":
        raise MCPError(METHOD_NOT_FOUND, "Method not found")
    return await call_next(ctx)


def make_server(state_dir: Path | None = None, name: str = "demo", legacy: bool = False) -> MCPServer:
    server = MCPServer(name, middleware=[refuse_discover] if legacy else None)
    state = State(state_dir)
    server.state = state  # type: ignore[attr-defined]

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False))
    def add(a: int, b: int) -> int:
        """Adds two integers."""
        return a + b

    @server.tool()
    def forecast(city: str) -> Forecast:
        """The weather forecast for a city."""
        return Forecast(city=city, temperature=21.5)

    @server.tool()
    def echo(text: str) -> str:
        """Echoes the text."""
        return text

    @server.tool()
    def refuse(reason: str) -> str:
        """Always fails, with the reason given."""
        raise ToolError(f"refused: {reason}")

    @server.tool()
    def crash() -> str:
        """Raises an unexpected exception."""
        raise ValueError("secret internal detail")

    @server.tool()
    async def hang() -> str:
        """Never answers (until cancelled)."""
        state.hanging += 1
        if state.dir is not None:
            (state.dir / "hanging").write_text(str(os.getpid()))
        try:
            await anyio.sleep_forever()
        finally:
            state.mark_cancelled()
        return "unreachable"

    @server.tool()
    async def hang_once() -> str:
        """Hangs the first time it is called (leaving a marker in STATE_DIR), answers "done" afterwards."""
        assert state.dir is not None
        marker = state.dir / "hang_once"
        if not marker.exists():
            marker.write_text(str(os.getpid()))
            await anyio.sleep_forever()
        return "done"

    @server.tool()
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool()
    async def meet(count: int) -> int:
        """Returns once `count` calls of meet are running at the same time (they must run concurrently)."""
        if state.all_arrived is None:
            state.all_arrived = anyio.Event()
        state.arrived += 1
        if state.arrived >= count:
            state.all_arrived.set()
        await state.all_arrived.wait()
        return state.arrived

    @server.tool(structured_output=False)
    def picture() -> list[object]:
        """A caption and a tiny image."""
        return ["a red dot", ImageContent(type="image", data="iVBORw0KGgo=", mime_type="image/png")]

    @server.tool(name="files.read-v2")
    def files_read(path: str) -> str:
        """A tool whose name has a dot."""
        return f"contents of {path}"

    @server.tool(name=LONG_NAME)
    def fetch_long() -> str:
        """A tool whose name is too long for providers."""
        return "long"

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Adds the tool `extra` and announces that the tool list changed."""

        def extra() -> str:
            """A tool added while the server runs."""
            return "extra"

        server.add_tool(extra)
        await ctx.notify_tools_changed()  # 2026-07-28 clients listen for it
        try:
            # Older clients get a notification. Sent with this request (on its response stream, before the
            # result), so the client knows of `extra` when the result arrives; sent on the session's own
            # stream it could arrive after the result (docs/mcp.md, "Tool list").
            changed = types.ToolListChangedNotification()
            await ctx.session.send_notification(changed, related_request_id=ctx.request_id)
        except Exception:
            pass
        return "grown"

    @server.tool()
    async def ask(question: str, ctx: Context) -> Any:
        """Asks the client's user (elicitation) and reports what came back. In protocol 2026-07-28 the
        server has no channel for its own requests: it answers "input required" and is called again."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            if ctx.input_responses is None:
                schema = Answer.model_json_schema()
                form = mcp_types.ElicitRequestFormParams(message=question, requested_schema=schema)
                return mcp_types.InputRequiredResult(
                    input_requests={"who": mcp_types.ElicitRequest(params=form)}
                )
            answer = ctx.input_responses["who"]
            assert isinstance(answer, types.ElicitResult)
            if answer.action != "accept" or answer.content is None:
                return answer.action
            data = Answer.model_validate(answer.content)
        else:
            elicited = await ctx.elicit(question, schema=Answer)
            if elicited.action != "accept":
                return elicited.action
            data = elicited.data
        return f"accept: {data.name}, {data.age}"

    @server.tool()
    async def summarize(text: str, ctx: Context) -> Any:
        """Asks the client's model (sampling) to summarize `text`, and returns its answer and model."""
        params = mcp_types.CreateMessageRequestParams(
            messages=[types.SamplingMessage(role="user", content=types.TextContent(type="text", text=text))],
            max_tokens=50,
            system_prompt="Summarize in three words.",
            temperature=0.2,
            stop_sequences=["END"],
        )
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            if ctx.input_responses is None:
                return mcp_types.InputRequiredResult(
                    input_requests={"summary": mcp_types.CreateMessageRequest(params=params)}
                )
            result = ctx.input_responses["summary"]
            assert isinstance(result, types.CreateMessageResult)
        else:
            result = await ctx.session.create_message(
                params.messages,
                max_tokens=params.max_tokens,
                system_prompt=params.system_prompt,
                temperature=params.temperature,
                stop_sequences=params.stop_sequences,
                related_request_id=ctx.request_id,
            )
        content = result.content
        said = content.text if isinstance(content, types.TextContent) else repr(content)
        return f"{said} ({result.model}, {result.stop_reason})"

    @server.tool()
    async def work(steps: int, ctx: Context) -> str:
        """Logs and reports progress for each of `steps` steps."""
        for step in range(1, steps + 1):
            await ctx.info(f"step {step}")
            await ctx.report_progress(step, steps, f"step {step} of {steps}")
        await ctx.log("warning", {"finished": steps})
        return "worked"

    return server


class Gatekeeper:
    """ASGI middleware for the HTTP server: with `token`, a request without `Authorization: Bearer <token>`
    gets a 401; with `session_error_400`, a request in a session this process did not start gets what some
    servers answer instead of a 404: a 400 whose body is a JSON-RPC error with no id."""

    def __init__(self, app: Any, *, token: str | None, session_error_400: bool) -> None:
        self.app = app
        self.token = token
        self.session_error_400 = session_error_400
        self.sessions: set[bytes] = set()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if self.token is not None and headers.get(b"authorization") != f"Bearer {self.token}".encode():
            await _respond(
                send, 401, b'{"error": "unauthorized"}', (b"www-authenticate", b'Bearer realm="demo"')
            )
            return
        session = headers.get(b"mcp-session-id")
        if self.session_error_400 and session is not None and session not in self.sessions:
            error = b'{"jsonrpc": "2.0", "error": {"code": -32000, "message": "Bad Request: no session"}}'
            await _respond(send, 400, error)
            return

        async def noting_sessions(message: Any) -> None:
            if message["type"] == "http.response.start":
                self.sessions.update(
                    v for k, v in message.get("headers", []) if k.lower() == b"mcp-session-id"
                )
            await send(message)

        await self.app(scope, receive, noting_sessions)


async def _respond(send: Any, status: int, body: bytes, *headers: tuple[bytes, bytes]) -> None:
    start = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body})


if __name__ == "__main__":
    legacy = "--legacy" in sys.argv
    session_error_400 = "--session-error-400" in sys.argv
    token = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--token=")), None)
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if args[0] == "stdio":
        state = Path(args[1]) if len(args) > 1 else None
        make_server(state, legacy=legacy).run("stdio")
    else:
        import uvicorn

        port = int(args[1])
        state = Path(args[2]) if len(args) > 2 else None
        app = make_server(state, legacy=legacy).streamable_http_app()
        if token is not None or session_error_400:
            app = Gatekeeper(app, token=token, session_error_400=session_error_400)
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
