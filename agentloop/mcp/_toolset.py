"""`MCPToolset`: the tools of one MCP server, offered to an `Agent` like local tools.

One long-lived task, started by `__aenter__`, owns the SDK's `Client`: it enters it, holds it while the
connection lives, and exits it, always in that same task (the SDK's cancel scopes demand it). Tool calls
use the client from any task. A call whose connection broke, or whose HTTP session the server no longer
knows (it restarted), asks that task for a new connection and is sent again, once.

Over streamable HTTP the toolset gives the SDK an httpx2 client of its own (with `auth`), whose response
hook sees the HTTP status behind an error the SDK reports only as "Server returned an error response": a
404, or a 400 carrying a JSON-RPC error without an id, to a request in a session means the session is gone;
a 401 means the server wants credentials.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

import anyio
import anyio.abc
import httpx2
import mcp_types as types
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server
from mcp.server.mcpserver import MCPServer
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .. import (
    IllegalConfigurationError,
    MCPServerError,
    ToolArgumentsError,
    ToolContext,
    ToolExecutionRequest,
    ToolSpecification,
)
from .._tools._tool import Tool, check_timeout
from .._tools._toolset import ToolProviderRequest, ToolProviderResult, Toolset
from ..models import ChatModel
from ._callbacks import Callbacks, ElicitationHandler, LogHandler, ProgressHandler
from ._names import check_prefix, local_name
from ._results import MCPToolResult, result_of

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

__all__ = ["MCPServerError", "MCPToolset"]

logger = logging.getLogger("agentloop.mcp")

ServerLike = str | Sequence[str] | StdioServerParameters | Server[Any] | MCPServer[Any]
_T = TypeVar("_T")
_MAX_PAGES = 100
_HTTP_TIMEOUT, _HTTP_READ_TIMEOUT = 30.0, 300.0
"""Seconds to connect, write or wait for the pool, and to read (a server may hold a stream open): the
defaults of the SDK's own HTTP client."""
_CLOSE_GRACE = 5.0
"""Seconds the connection gets to close cleanly (HTTP DELETE, stdio process exit) before it is cancelled."""


class _ConnectionLost(Exception):
    """Internal: the connection broke under a request; the request may be sent again on a new one."""


@dataclass(eq=False)
class _HTTPErrors:
    """What the HTTP responses of one connection said that the SDK's errors do not carry."""

    session_lost: str | None = None  # how the server said it no longer knows the session
    unauthorized: str | None = None  # the 401's WWW-Authenticate challenge (or "")

    async def __call__(self, response: httpx2.Response) -> None:
        """httpx2's response hook: notes a lost session or a 401 (reads only small error bodies)."""
        status = response.status_code
        if status == 401:
            self.unauthorized = response.headers.get("www-authenticate", "")
            return
        if status not in (400, 404) or not response.request.headers.get("mcp-session-id"):
            return
        if status == 404:
            self.session_lost = "HTTP 404 to a request in that session"
            return
        body = (await response.aread())[:65536]
        try:
            error = msgspec.json.decode(body)
        except (msgspec.DecodeError, RecursionError):
            return
        if isinstance(error, dict) and "error" in error and error.get("id") is None:
            # A JSON-RPC error not about any request: the server refused the session itself.
            self.session_lost = "HTTP 400 with a JSON-RPC error and no id to a request in that session"


@dataclass(eq=False)
class _Connection:
    """One live connection: the entered client, its tool list, the requests running on it."""

    client: Client | None = None
    tools: Toolset | None = None
    http: _HTTPErrors = field(default_factory=_HTTPErrors)
    lost: bool = False
    closing: anyio.Event = field(default_factory=anyio.Event)
    _requests: set[anyio.CancelScope] = field(default_factory=set)

    def drop(self) -> None:
        """Marks the connection dead: its running requests are cancelled and the owner closes it."""
        if not self.lost:
            self.lost = True
            for scope in self._requests:
                scope.cancel()
        self.closing.set()

    @contextmanager
    def request(self, timeout: float | None) -> Iterator[anyio.CancelScope]:
        """A cancel scope for one request: cancelled by its timeout or when the connection drops."""
        deadline = math.inf if timeout is None else anyio.current_time() + timeout
        with anyio.CancelScope(deadline=deadline) as scope:
            if self.lost:  # dropped between being handed out and this request: take the reconnect path
                scope.cancel()
            self._requests.add(scope)
            try:
                yield scope
            finally:
                self._requests.discard(scope)


@dataclass(eq=False)
class _Attempt:
    """One connection attempt made by the owner task on a caller's behalf."""

    done: anyio.Event = field(default_factory=anyio.Event)
    connection: _Connection | None = None
    error: BaseException | None = None
    http: _HTTPErrors | None = None


class MCPToolset:
    """The tools of an MCP server, for `Agent(tools=[...])` or `Agent(tool_provider=...)`.

    `server`: a URL (streamable HTTP), a command (`["python", "server.py"]`) or `StdioServerParameters`
    (stdio), or an in-process SDK server (`mcp.server.mcpserver.MCPServer` or the low-level `Server`).
    `prefix` puts `prefix_` before every tool name; `include`/`exclude` choose tools by their server names.
    `call_timeout` bounds each request (None: no bound), `connect_timeout` each connection attempt.
    `cache_tools` keeps the tool list until the server says it changed or the connection is renewed.
    `auth` (an `httpx2.Auth`, such as the SDK's `OAuthClientProvider`) authorises every HTTP request of a URL
    server.

    What the server may ask or tell the client: `elicitation_handler(context, params) -> ElicitResult`
    (sync or async, the SDK's types) answers its questions to the user; `sampling_model` (a `ChatModel`)
    answers its `sampling/createMessage`; `on_log(params)` sees its log messages and
    `on_progress(progress, total, message)` the progress of tool calls (each call then carries a progress
    token). Without them the client does not offer these capabilities.

    Use it as an async context manager: `async with MCPToolset(url) as github: Agent(model, tools=[github])`.
    """

    dynamic = True
    """As a `tool_provider`, asked before every model call, so a changed tool list shows at once."""

    def __init__(
        self,
        server: ServerLike,
        *,
        prefix: str | None = None,
        include: Collection[str] | None = None,
        exclude: Collection[str] | None = None,
        call_timeout: float | None = 60.0,
        connect_timeout: float = 10.0,
        cache_tools: bool = True,
        auth: httpx2.Auth | None = None,
        elicitation_handler: ElicitationHandler | None = None,
        sampling_model: ChatModel | None = None,
        on_log: LogHandler | None = None,
        on_progress: ProgressHandler | None = None,
    ) -> None:
        self._server, self.server_name = _target(server)
        if auth is not None and not isinstance(self._server, str):
            raise IllegalConfigurationError(
                f"MCPToolset: auth applies to a server reached by URL, not to {self.server_name}"
            )
        if auth is not None and not isinstance(auth, httpx2.Auth):
            raise IllegalConfigurationError(
                f"MCPToolset: auth takes an httpx2.Auth (e.g. httpx2.BasicAuth, or the SDK's "
                f"OAuthClientProvider), got {type(auth).__name__}"
            )
        self.auth = auth
        self._callbacks = Callbacks(elicitation_handler, sampling_model, on_log, on_progress)
        try:
            self.prefix = check_prefix(prefix)
        except ValueError as exc:
            raise IllegalConfigurationError(f"MCPToolset: {exc}") from None
        self.include = _names_or_none(include, "include")
        self.exclude = _names_or_none(exclude, "exclude")
        self.call_timeout = check_timeout(call_timeout, "MCPToolset: call_timeout")
        timeout = check_timeout(connect_timeout, "MCPToolset: connect_timeout")
        if timeout is None:
            raise IllegalConfigurationError(
                "MCPToolset: connect_timeout must be a positive number of seconds"
            )
        self.connect_timeout = timeout
        self.cache_tools = bool(cache_tools)
        self._task_group: anyio.abc.TaskGroup | None = None
        self._connection: _Connection | None = None
        self._attempt: _Attempt | None = None
        self._attempts: MemoryObjectSendStream[_Attempt] | None = None
        self._lock: anyio.Lock | None = None
        self._tools = Toolset.EMPTY
        self._entered = False

    def __repr__(self) -> str:
        prefix = f", prefix={self.prefix!r}" if self.prefix else ""
        return f"MCPToolset({self.server_name!r}{prefix})"

    # -- lifecycle ----------------------------------------------------------------------------------------

    async def __aenter__(self) -> MCPToolset:
        if self._entered:
            raise IllegalConfigurationError(f"{self!r} is already open; use one `async with` at a time")
        self._entered = True
        send, receive = anyio.create_memory_object_stream[_Attempt](math.inf)
        self._attempts, self._lock = send, anyio.Lock()
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        try:
            await task_group.start(self._own_connections, receive)
            await self.refresh()
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._close()

    async def _close(self) -> None:
        """Closes the connection (in its owner task) and ends that task; the caller's error, if any,
        propagates unchanged."""
        task_group, self._task_group = self._task_group, None
        if self._attempts is not None:
            self._attempts.close()
        self._attempts = self._lock = self._attempt = None
        if self._connection is not None:
            self._connection.closing.set()
        self._connection = None
        self._entered = False
        if task_group is not None:
            task_group.cancel_scope.deadline = anyio.current_time() + _CLOSE_GRACE
            await task_group.__aexit__(None, None, None)

    async def _own_connections(
        self,
        attempts: MemoryObjectReceiveStream[_Attempt],
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """The owner task: makes each connection asked for and holds it until it is dropped or closed."""
        task_status.started()
        async with attempts:
            async for attempt in attempts:
                try:
                    await self._hold_connection(attempt)
                except BaseException as exc:  # the owner must not fail: that would cancel the user's code
                    error = _failure(exc)
                    logger.debug("MCP server %s: connection ended: %r", self.server_name, error)
                    if attempt.connection is None:
                        attempt.error = error
                finally:
                    if attempt.connection is not None:
                        attempt.connection.drop()
                    attempt.done.set()

    async def _hold_connection(self, attempt: _Attempt) -> None:
        connection = _Connection()

        async def on_message(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                connection.tools = None

        attempt.http = connection.http
        with anyio.CancelScope(deadline=anyio.current_time() + self.connect_timeout) as scope:
            async with self._client(connection.http, on_message) as client:
                scope.deadline = math.inf
                connection.client = client
                attempt.connection = connection
                attempt.done.set()
                async with anyio.create_task_group() as task_group:
                    if _announces_list_changes(client):
                        task_group.start_soon(_listen_for_changes, client, connection)
                    await connection.closing.wait()
                    task_group.cancel_scope.cancel()
        if scope.cancelled_caught and attempt.connection is None:
            attempt.error = TimeoutError(f"no answer within connect_timeout={self.connect_timeout:g} s")

    @asynccontextmanager
    async def _client(self, http: _HTTPErrors, on_message: Any) -> AsyncIterator[Client]:
        """The SDK's client; for a URL, over an httpx2 client of ours (auth, and the hook noting statuses)."""
        callbacks = self._callbacks
        options: dict[str, Any] = {
            "message_handler": on_message,
            "cache": None,
            "elicitation_callback": callbacks.elicitation(),
            "sampling_callback": callbacks.sampling(),
            "logging_callback": callbacks.logging(),
            # 2026-07-28 servers send log messages only to requests that opt in (older ones to everyone).
            "log_level": "debug" if callbacks.on_log is not None else None,
        }
        if not isinstance(self._server, str):
            async with Client(self._server, **options) as client:
                yield client
            return
        timeout = httpx2.Timeout(_HTTP_TIMEOUT, read=_HTTP_READ_TIMEOUT)  # the SDK's own client's
        async with httpx2.AsyncClient(timeout=timeout, auth=self.auth, event_hooks={"response": [http]}) as (
            http_client
        ):
            transport = streamable_http_client(self._server, http_client=http_client)
            async with Client(transport, **options) as client:
                yield client

    async def _connected(self) -> _Connection:
        """The live connection, connecting first when there is none (bounded by `connect_timeout`)."""
        connection = self._connection
        if connection is not None and not connection.lost:
            return connection
        if self._lock is None or self._attempts is None:
            raise IllegalConfigurationError(
                f"{self!r} is not open: use `async with MCPToolset(...) as tools:` and call the agent inside"
            )
        async with self._lock:
            connection = self._connection
            if connection is not None and not connection.lost:
                return connection
            attempt = self._attempt
            if attempt is None or attempt.done.is_set():
                attempt = self._attempt = _Attempt()
                try:
                    self._attempts.send_nowait(attempt)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    raise IllegalConfigurationError(f"{self!r} is closed") from None
            await attempt.done.wait()
            if attempt.connection is None or attempt.connection.lost:
                if attempt.http is not None and attempt.http.unauthorized is not None:
                    raise self._unauthorized(attempt.http.unauthorized, attempt.error) from attempt.error
                raise MCPServerError(
                    f"Could not connect to the MCP server {self.server_name}: {_describe(attempt.error)}",
                    server=self.server_name,
                ) from attempt.error
            self._connection = attempt.connection
            return attempt.connection

    # -- requests -----------------------------------------------------------------------------------------

    async def _request(self, what: str, send: Callable[[Client], Any]) -> Any:
        """Runs `send(client)` within call_timeout; a broken connection is renewed and `send` retried once."""
        for attempt in (1, 2):
            connection = await self._connected()
            client = connection.client
            assert client is not None
            answered = False
            try:
                with connection.request(self.call_timeout):
                    result = await send(client)
                    answered = True
            except MCPError as exc:
                if connection.http.unauthorized is not None:
                    raise self._unauthorized(connection.http.unauthorized) from exc
                if not _is_connection_error(exc) and connection.http.session_lost is None:
                    raise MCPServerError(
                        f"The MCP server {self.server_name} answered {what} with an error: "
                        f"{exc.error.message}",
                        server=self.server_name,
                    ) from exc
                error: BaseException = exc
            except (httpx2.TransportError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                error = exc
            except (RuntimeError, ValueError) as exc:  # output validation and malformed results
                raise MCPServerError(
                    f"The MCP server {self.server_name} sent an invalid answer to {what}: {exc}",
                    server=self.server_name,
                ) from exc
            else:
                if answered:
                    return result
                # The request's scope swallowed a cancellation: its timeout, or the connection dropped.
                if not connection.lost:
                    raise MCPServerError(
                        f"The MCP server {self.server_name} did not answer {what} within "
                        f"call_timeout={self.call_timeout:g} s",
                        server=self.server_name,
                    )
                error = _ConnectionLost("the connection closed")
            connection.drop()
            if attempt == 2:
                raise MCPServerError(
                    f"The connection to the MCP server {self.server_name} broke during {what} (reconnected "
                    f"once, then it broke again): {_describe(error)}",
                    server=self.server_name,
                ) from error
            if connection.http.session_lost is not None:
                logger.info(
                    "MCP server %s no longer knows the session (%s; it restarted?): starting a new one and "
                    "sending %s again",
                    self.server_name,
                    connection.http.session_lost,
                    what,
                )
            else:
                logger.info("MCP server %s: connection lost during %s; reconnecting", self.server_name, what)
        raise AssertionError("unreachable")

    def _unauthorized(self, challenge: str, error: BaseException | None = None) -> MCPServerError:
        scheme = challenge.split(" ", 1)[0] if challenge else ""
        asked = f" (it asks for {scheme} authentication)" if scheme else ""
        given = (
            "the credentials given with auth= were refused: check them"
            if self.auth is not None
            else "pass credentials with MCPToolset(url, auth=...): an httpx2.Auth, such as "
            "httpx2.BasicAuth, an Auth subclass that sets a bearer token, or the mcp SDK's "
            "OAuthClientProvider for OAuth"
        )
        if self.auth is not None and error is not None and _auth_failure(error) is not None:
            # The auth flow itself failed (an OAuth provider's discovery, registration or login).
            given = f"authorizing with auth= failed: {_describe(_auth_failure(error))}"
        return MCPServerError(
            f"The MCP server {self.server_name} requires authorization: it answered HTTP 401 "
            f"Unauthorized{asked}; {given}",
            server=self.server_name,
        )

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> MCPToolResult:
        """Calls the server's tool `name` (its own name, not the prefixed one) and returns its result.

        Raises `MCPToolError` when the tool reports an error, `MCPServerError` for transport and protocol
        failures.
        """
        progress = self._callbacks.progress()
        result: types.CallToolResult = await self._request(
            f"the call of tool {name!r}",
            lambda client: client.call_tool(name, arguments or {}, progress_callback=progress),
        )
        return result_of(result, server=self.server_name, tool_name=name)

    async def list_tools(self) -> list[types.Tool]:
        """The server's tools, every page, as the SDK describes them (unfiltered, names unchanged)."""

        async def every_page(client: Client) -> list[types.Tool]:
            found: list[types.Tool] = []
            cursor: str | None = None
            for _ in range(_MAX_PAGES):
                page = await client.list_tools(cursor=cursor)
                found.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
            return found

        listed: list[types.Tool] = await self._request("the tool listing", every_page)
        return listed

    async def refresh(self) -> Toolset:
        """This server's tools now: the cached list, or a new listing when it is stale or caching is off."""
        connection = await self._connected()
        if connection.tools is None or not self.cache_tools:
            remote = await self.list_tools()
            tools = Toolset(self._tool(t) for t in remote if self._wanted(t.name))
            if not connection.lost:
                connection.tools = tools
            self._tools = tools
            return tools
        self._tools = connection.tools
        return connection.tools

    # -- as a tool source ---------------------------------------------------------------------------------

    @property
    def protocol_version(self) -> str | None:
        """The MCP protocol version of the live connection (e.g. "2026-07-28"), or None when there is none."""
        connection = self._connection
        if connection is None or connection.lost or connection.client is None:
            return None
        return connection.client.protocol_version

    @property
    def tools(self) -> Toolset:
        """The tools as last listed (`refresh()` lists again when needed)."""
        return self._tools

    def __agentloop_tools__(self) -> list[Tool]:
        """In `tools=[...]`: the tools as last listed; the agent keeps the list it was given."""
        if not self._entered:
            raise IllegalConfigurationError(
                f"{self!r} is not open: create the Agent inside `async with MCPToolset(...) as tools:` "
                "so the tool list is known"
            )
        return list(self._tools)

    async def provide_tools(self, request: ToolProviderRequest) -> ToolProviderResult:
        """As a `tool_provider`: the current tools, listed again after the server announced a change."""
        return ToolProviderResult(await self.refresh())

    def _wanted(self, name: str) -> bool:
        if self.include is not None and name not in self.include:
            return False
        return self.exclude is None or name not in self.exclude

    def _tool(self, remote: types.Tool) -> Tool:
        name = local_name(remote.name, self.prefix)
        specification = ToolSpecification(
            name=name,
            description=remote.description or remote.title,
            parameters=dict(remote.input_schema) or {"type": "object", "properties": {}},
            metadata=_metadata(remote, self.server_name),
        )
        remote_name = remote.name

        async def execute(request: ToolExecutionRequest, context: ToolContext) -> MCPToolResult:
            return await self.call_tool(remote_name, _arguments(request.arguments, name))

        return Tool(
            specification,
            execute,
            result_converter=_text_of,
            source=f"MCP server {self.server_name} (tool {remote_name!r})",
        )


# -- helpers ----------------------------------------------------------------------------------------------


def _target(server: object) -> tuple[Any, str]:
    """What the SDK's `Client` takes for `server`, and a name for messages."""
    if isinstance(server, str):
        if not server.startswith(("http://", "https://")):
            raise IllegalConfigurationError(
                f"MCPToolset: {server!r} is not an http(s) URL; for a command give a list, "
                "e.g. ['python', 'server.py']"
            )
        return server, _without_userinfo(server)
    if isinstance(server, StdioServerParameters):
        return server, " ".join([server.command, *server.args])
    if isinstance(server, (list, tuple)):
        if not server or not all(isinstance(part, str) and part for part in server):
            raise IllegalConfigurationError(
                f"MCPToolset: a command is a non-empty list of strings, got {server!r}"
            )
        return StdioServerParameters(command=server[0], args=list(server[1:])), " ".join(server)
    if isinstance(server, MCPServer):
        return server, f"{server.name!r} (in process)"
    if isinstance(server, Server):
        return server, f"{server.name!r} (in process)"
    raise IllegalConfigurationError(
        f"MCPToolset takes a URL, a command list, StdioServerParameters or an in-process MCP server, "
        f"got {type(server).__name__}"
    )


def _without_userinfo(url: str) -> str:
    """`url` without credentials (user:password@), for messages and logs."""
    scheme, sep, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    return f"{scheme}{sep}{authority.rpartition('@')[2]}{slash}{path}"


def _names_or_none(value: Collection[str] | None, what: str) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise IllegalConfigurationError(f"MCPToolset: {what} takes a list of tool names, got {value!r}")
    return frozenset(value)


def _metadata(remote: types.Tool, server: str) -> dict[str, Any]:
    """The `ToolSpecification.metadata` of an MCP tool: where it comes from and its annotations.

    Never sent to a provider unless a model is told to send these keys.
    """
    metadata: dict[str, Any] = {"mcp_server": server, "mcp_tool": remote.name}
    annotations = remote.annotations
    if annotations is not None:
        hints = {
            "readOnlyHint": annotations.read_only_hint,
            "destructiveHint": annotations.destructive_hint,
            "idempotentHint": annotations.idempotent_hint,
            "openWorldHint": annotations.open_world_hint,
        }
        metadata.update((key, value) for key, value in hints.items() if value is not None)
    return metadata


def _arguments(text: str, tool_name: str) -> dict[str, Any]:
    """The model's JSON arguments as the dict MCP sends; the server validates them against its schema."""
    if not text.strip():
        return {}
    try:
        value = msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ToolArgumentsError(
            f"Invalid JSON arguments for tool '{tool_name}': {exc}", tool_name=tool_name
        ) from None
    if not isinstance(value, dict):
        raise ToolArgumentsError(
            f"The arguments of tool '{tool_name}' must be a JSON object, got {type(value).__name__}",
            tool_name=tool_name,
        )
    return value


def _text_of(result: Any) -> str:
    return result.text if isinstance(result, MCPToolResult) else str(result)


def _is_connection_error(error: MCPError) -> bool:
    """The connection closed, or the server no longer knows the HTTP session (a 404 on a stale session id:
    "Session not found" from the SDK's servers, "Session terminated" from its client, others alike)."""
    if error.error.code == types.CONNECTION_CLOSED:
        return True
    message = error.error.message.lower()
    return "session" in message and any(
        word in message for word in ("not found", "terminated", "expired", "unknown")
    )


def _announces_list_changes(client: Client) -> bool:
    """A 2026-07-28 server that says its tool list can change: listen for it (older ones just notify)."""
    capabilities = client.server_capabilities.tools
    return client.protocol_version in MODERN_PROTOCOL_VERSIONS and bool(
        capabilities is not None and capabilities.list_changed
    )


async def _listen_for_changes(client: Client, connection: _Connection) -> None:
    try:
        async with client.listen(tools_list_changed=True) as subscription:
            async for _ in subscription:
                connection.tools = None
    except Exception as exc:  # no change events: the list is still refreshed on reconnect
        logger.debug("MCP: listening for tool list changes failed: %r", exc)


def _failure(exc: BaseException) -> BaseException:
    """The error in what ended a connection; re-raises a cancellation (or KeyboardInterrupt/SystemExit)
    that came with nothing else, so closing the toolset is never swallowed."""
    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
        raise exc
    cancelled = anyio.get_cancelled_exc_class()
    if isinstance(exc, BaseExceptionGroup):
        _, rest = exc.split(cancelled)
        if rest is None:
            raise exc
        return rest
    if isinstance(exc, cancelled):
        raise exc
    return exc


def _auth_failure(error: BaseException) -> BaseException | None:
    """The error an `auth` flow raised under a connection attempt (not the SDK's own MCPError), if any."""
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _auth_failure(inner)
            if found is not None:
                return found
        return None
    return None if isinstance(error, (MCPError, httpx2.HTTPStatusError)) else error


def _describe(error: BaseException | None) -> str:
    if error is None:
        return "the connection closed"
    if isinstance(error, BaseExceptionGroup) and error.exceptions:
        return _describe(error.exceptions[0])
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
