"""MCP: MCPToolset against real servers written with the mcp SDK (in process, a stdio subprocess, streamable
HTTP on 127.0.0.1), and agentloop tools served over MCP (`server_from`, `python -m agentloop.mcp serve`)."""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

pytest.importorskip("mcp", reason="the MCP tests need the mcp extra: pip install -e '.[mcp]'")

from mcp import StdioServerParameters

from agentloop import (
    Agent,
    AiMessage,
    BeforeToolExecution,
    IllegalConfigurationError,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    tool,
)
from agentloop.mcp import MCPServerError, MCPToolError, MCPToolResult, MCPToolset, server_from
from agentloop.mcp._names import local_name
from agentloop.models import OpenAIChatModel
from agentloop.testing import FakeOpenAIServer, ScriptedChatModel
from tests.mcp_demo_server import LONG_NAME, make_server
from tests.snippets import python_blocks, run_snippets

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(Path(__file__).resolve().parents[1] / "mcp_demo_server.py")


@pytest.fixture(autouse=True)
def _quiet_server_logs() -> Iterator[None]:
    # The SDK's in-process server logs each failing tool's traceback; the tests cause them on purpose.
    logger = logging.getLogger("mcp")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def call(name: str, arguments: str = "{}", call_id: str | None = None) -> ToolExecutionRequest:
    return ToolExecutionRequest(call_id or f"call_{name}", name, arguments)


def calls(*requests: ToolExecutionRequest) -> AiMessage:
    return AiMessage(tool_execution_requests=list(requests))


async def eventually(condition: Any, timeout: float = 10.0) -> None:
    """Waits until `condition()` is true (something another task or process does), failing after `timeout`."""
    with anyio.fail_after(timeout):
        while not condition():
            await anyio.sleep(0.01)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def stdio(*args: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=list(args), env=subprocess_env(), cwd=str(ROOT))


class HTTPServer:
    """A server process on 127.0.0.1 that can be killed and started again on the same port."""

    def __init__(self, *command: str) -> None:
        self.port = free_port()
        self.command = [c.replace("{port}", str(self.port)) for c in command]
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def start(self) -> None:
        self.process = subprocess.Popen(self.command, env=subprocess_env(), cwd=ROOT)
        with anyio.fail_after(30):
            while True:
                assert self.process.poll() is None, "the MCP server process exited"
                try:
                    stream = await anyio.connect_tcp("127.0.0.1", self.port)
                except OSError:
                    await anyio.sleep(0.05)
                else:
                    await stream.aclose()
                    return

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()


@pytest.fixture
async def demo_http(tmp_path: Path) -> AsyncIterator[HTTPServer]:
    server = HTTPServer(sys.executable, DEMO, "http", "{port}", str(tmp_path))
    await server.start()
    try:
        yield server
    finally:
        server.kill()


# -- names ------------------------------------------------------------------------------------------------


def test_valid_names_stay_and_others_become_valid_deterministically() -> None:
    assert local_name("search") == "search"
    assert local_name("search", "gh") == "gh_search"
    dotted = local_name("files.read")
    assert dotted == local_name("files.read")  # the same every time
    assert dotted.startswith("files_read_") and len(dotted) == len("files_read_") + 8
    assert dotted != local_name("files_read")  # names that clean up alike stay apart
    long = local_name("x" * 100, "server")
    assert len(long) == 64 and long.startswith("server_xxx")
    assert long != local_name("x" * 101, "server")
    for name in (dotted, long, local_name("a b/c")):
        assert all(c.isalnum() or c in "_-" for c in name)


# -- listing, calling, results (in process) ---------------------------------------------------------------


async def test_lists_tools_with_schemas_descriptions_and_annotations() -> None:
    server = make_server()
    async with MCPToolset(server) as toolset:
        remote = {t.name: t for t in await server.list_tools()}
        assert set(toolset.tools.names) == {local_name(n) for n in remote}
        add = toolset.tools.get("add")
        assert add is not None
        assert add.specification.parameters == remote["add"].input_schema
        assert add.specification.description == "Adds two integers."
        assert add.specification.metadata["readOnlyHint"] is True
        assert add.specification.metadata["destructiveHint"] is False
        assert add.specification.metadata["mcp_tool"] == "add"


async def test_an_agent_calls_mcp_tools_and_the_model_reads_their_results() -> None:
    model = ScriptedChatModel(
        [
            calls(
                call("add", '{"a": 2, "b": 40}'),
                call("forecast", '{"city": "Paris"}'),
                call("refuse", '{"reason": "no disk"}'),
                call("crash"),
                call("picture"),
            ),
            "done",
        ]
    )
    async with MCPToolset(make_server()) as toolset:
        result = await Agent(model, tools=[toolset]).chat("go")

    add, forecast, refuse, crash, picture = result.tool_executions
    assert add.result == "42" and add.result_object.structured == 42 and not add.has_failed
    assert isinstance(forecast.result_object, MCPToolResult)
    assert forecast.result_object.structured == {"city": "Paris", "temperature": 21.5}
    assert '"temperature": 21.5' in forecast.result
    # isError results are failed executions whose text goes to the model.
    assert refuse.has_failed and refuse.is_error and isinstance(refuse.error, MCPToolError)
    assert "refused: no disk" in refuse.result
    assert crash.is_error and crash.result == "Error executing tool crash"
    assert "secret" not in crash.result  # the server keeps an unexpected exception's text
    assert picture.result == "a red dot\n[image: image/png, 8 bytes]"
    sent = [m for m in model.requests[1].messages if isinstance(m, ToolExecutionResultMessage)]
    assert [(m.text, m.is_error) for m in sent] == [(e.result, e.is_error) for e in result.tool_executions]


async def test_structured_content_alone_becomes_the_text() -> None:
    from mcp.server import Server
    from mcp.types import CallToolResult, ListToolsResult, Tool

    async def list_tools(ctx: Any, params: Any) -> ListToolsResult:
        return ListToolsResult(tools=[Tool(name="stats", input_schema={"type": "object"})])

    async def call_tool(ctx: Any, params: Any) -> CallToolResult:
        return CallToolResult(content=[], structured_content={"mean": 2.5, "n": 4})

    server = Server("bare", on_list_tools=list_tools, on_call_tool=call_tool)
    async with MCPToolset(server) as toolset:
        result = await toolset.call_tool("stats")
    assert result.structured == {"mean": 2.5, "n": 4}
    assert result.text == '{"mean":2.5,"n":4}'


async def test_mcp_errors_go_through_the_agents_error_policy() -> None:
    seen: list[BaseException] = []

    def handler(error: Exception, request: ToolExecutionRequest) -> str:
        seen.append(error)
        return f"[{request.name} failed]"

    model = ScriptedChatModel([calls(call("refuse", '{"reason": "x"}')), "ok"])
    async with MCPToolset(make_server()) as toolset:
        agent = Agent(model, tools=[toolset], tool_execution_error_handler=handler)
        result = await agent.chat("go")
    assert result.tool_executions[0].result == "[refuse failed]"
    assert isinstance(seen[0], MCPToolError) and seen[0].tool_name == "refuse"


async def test_invalid_json_arguments_are_an_arguments_error() -> None:
    model = ScriptedChatModel([calls(call("add", "{not json")), "ok"])
    async with MCPToolset(make_server()) as toolset:
        result = await Agent(model, tools=[toolset]).chat("go")
    assert "Invalid JSON arguments for tool 'add'" in result.tool_executions[0].result


async def test_metadata_is_not_sent_to_the_provider() -> None:
    async with MCPToolset(make_server(), include=["add"]) as toolset:
        with FakeOpenAIServer(["fine"]) as fake:
            model = OpenAIChatModel("gpt-4o-mini", base_url=fake.base_url, api_key="test")
            await Agent(model, tools=[toolset]).chat("go")
            body = fake.requests[0].json
    (sent,) = body["tools"]
    assert sent["function"]["name"] == "add"
    assert "readOnlyHint" not in str(body) and "mcp_server" not in str(body)


# -- names, prefixes, filters, several toolsets ------------------------------------------------------------


async def test_long_and_dotted_names_are_mapped_back_on_call() -> None:
    dotted, long = local_name("files.read-v2"), local_name(LONG_NAME)
    model = ScriptedChatModel([calls(call(dotted, '{"path": "/etc/motd"}'), call(long)), "ok"])
    async with MCPToolset(make_server()) as toolset:
        result = await Agent(model, tools=[toolset]).chat("go")
    assert [e.result for e in result.tool_executions] == ["contents of /etc/motd", "long"]
    assert all(len(s.name) <= 64 for s in model.requests[0].tool_specifications)


async def test_two_toolsets_clash_unless_prefixed() -> None:
    async with MCPToolset(make_server(name="one")) as one, MCPToolset(make_server(name="two")) as two:
        with pytest.raises(IllegalConfigurationError) as error:
            Agent(ScriptedChatModel(["x"]), tools=[one, two])
        assert "'one' (in process)" in str(error.value) and "'two' (in process)" in str(error.value)

    async with (
        MCPToolset(make_server(name="one"), prefix="a", include=["add"]) as one,
        MCPToolset(make_server(name="two"), prefix="b", include=["add", "echo"]) as two,
    ):
        model = ScriptedChatModel(
            [calls(call("a_add", '{"a": 1, "b": 1}'), call("b_echo", '{"text": "hi"}')), "ok"]
        )
        result = await Agent(model, tools=[one, two]).chat("go")
        assert [e.result for e in result.tool_executions] == ["2", "hi"]
        assert {s.name for s in model.requests[0].tool_specifications} == {"a_add", "b_add", "b_echo"}


async def test_a_clash_with_a_local_tool_names_both() -> None:
    @tool
    def echo(text: str) -> str:
        """Local echo."""
        return text

    async with MCPToolset(make_server()) as toolset:
        with pytest.raises(IllegalConfigurationError, match="'echo'") as error:
            Agent(ScriptedChatModel(["x"]), tools=[echo, toolset])
        assert "MCP server 'demo' (in process)" in str(error.value) and "function" in str(error.value)


async def test_include_and_exclude_choose_tools() -> None:
    async with MCPToolset(make_server(), include=["add", "echo", "crash"], exclude=["crash"]) as toolset:
        assert toolset.tools.names == ("add", "echo")


# -- concurrency, timeouts, cancellation ------------------------------------------------------------------


async def test_calls_of_one_response_run_concurrently_on_one_connection() -> None:
    # `meet` answers only once 3 calls are running at once: sent one by one, they would time out.
    model = ScriptedChatModel([calls(*(call("meet", '{"count": 3}', f"c{i}") for i in range(3))), "ok"])
    async with MCPToolset(make_server(), call_timeout=10) as toolset:
        result = await Agent(model, tools=[toolset]).chat("go")
    assert [e.result for e in result.tool_executions] == ["3", "3", "3"]


async def test_a_server_that_never_answers_hits_call_timeout() -> None:
    server = make_server()
    model = ScriptedChatModel([calls(call("hang")), "ok"])
    async with MCPToolset(server, call_timeout=0.3) as toolset:
        with anyio.fail_after(10):
            result = await Agent(model, tools=[toolset]).chat("go")
        (execution,) = result.tool_executions
        assert isinstance(execution.error, MCPServerError)
        assert "did not answer the call of tool 'hang' within call_timeout=0.3 s" in execution.result
        await eventually(lambda: server.state.cancelled == 1)  # the server saw the call cancelled
        assert (await toolset.call_tool("add", {"a": 1, "b": 2})).text == "3"  # the connection still works


async def test_cancelling_the_invocation_cancels_the_call_on_the_server() -> None:
    server = make_server()
    model = ScriptedChatModel([calls(call("hang")), "never"])
    async with MCPToolset(server) as toolset:
        agent = Agent(model, tools=[toolset])
        with anyio.CancelScope() as scope:
            async for event in agent.stream("go").events():
                if isinstance(event, BeforeToolExecution):
                    await eventually(lambda: server.state.hanging == 1)
                    scope.cancel()
        assert scope.cancelled_caught
        await eventually(lambda: server.state.cancelled == 1)


async def test_connect_timeout_bounds_a_server_that_never_starts() -> None:
    never = [sys.executable, "-c", "import time; time.sleep(60)"]
    with (
        anyio.fail_after(20),
        pytest.raises(MCPServerError, match="Could not connect to the MCP server") as error,
    ):
        async with MCPToolset(never, connect_timeout=1.0):
            pass
    assert "connect_timeout=1" in str(error.value) and "time.sleep(60)" in error.value.server


async def test_the_toolset_closes_cleanly_and_can_open_again() -> None:
    toolset = MCPToolset(make_server())
    with pytest.raises(KeyError, match="mine"):  # the body's error comes out unchanged
        async with toolset:
            raise KeyError("mine")
    with anyio.move_on_after(0.3) as scope:  # cancelled while a call waits
        async with toolset:
            await toolset.call_tool("hang")
    assert scope.cancelled_caught
    async with toolset:
        assert (await toolset.call_tool("add", {"a": 1, "b": 1})).text == "2"
    with pytest.raises(IllegalConfigurationError, match="not open"):
        await toolset.call_tool("add", {"a": 1, "b": 1})


# -- list_changed -----------------------------------------------------------------------------------------


async def test_list_changed_refreshes_the_tools_of_a_provider() -> None:
    model = ScriptedChatModel([calls(call("grow")), calls(call("extra")), "ok"])
    async with MCPToolset(make_server()) as toolset:
        result = await Agent(model, tool_provider=toolset).chat("go")
        assert [e.result for e in result.tool_executions] == ["grown", "extra"]
        first, second = ({s.name for s in r.tool_specifications} for r in model.requests[:2])
        assert "extra" not in first and "extra" in second
        assert "extra" in toolset.tools


async def test_cache_tools_false_lists_every_time() -> None:
    server = make_server()
    async with MCPToolset(server, cache_tools=False) as toolset:
        server.add_tool(lambda: "quiet", name="quiet")  # added without a notification
        assert "quiet" in await toolset.refresh()
    server = make_server()
    async with MCPToolset(server) as toolset:
        server.add_tool(lambda: "quiet", name="quiet")
        assert "quiet" not in await toolset.refresh()  # cached: nothing said the list changed


# -- misuse -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"server": "localhost:8000"}, "not an http(s) URL"),
        ({"server": []}, "non-empty list of strings"),
        ({"server": 42}, "takes a URL, a command list"),
        ({"server": "http://x/mcp", "prefix": "a.b"}, "prefix must be"),
        ({"server": "http://x/mcp", "include": "add"}, "include takes a list"),
        ({"server": "http://x/mcp", "call_timeout": 0}, "call_timeout must be a positive number"),
    ],
)
def test_bad_configuration_is_refused_with_a_clear_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(IllegalConfigurationError, match=re.escape(message)):
        MCPToolset(**kwargs)


async def test_tools_need_an_open_toolset() -> None:
    toolset = MCPToolset("http://user:secret@127.0.0.1:9/mcp")
    assert "secret" not in toolset.server_name
    with pytest.raises(IllegalConfigurationError, match="not open"):
        Agent(ScriptedChatModel(["x"]), tools=[toolset])
    with pytest.raises(IllegalConfigurationError, match="not open"):
        await toolset.call_tool("add")


def test_import_agentloop_does_not_import_mcp_and_a_missing_extra_says_what_to_install() -> None:
    code = (
        "import sys; import agentloop; assert 'mcp' not in sys.modules, 'mcp imported'\n"
        "sys.modules['mcp'] = None\n"
        "try:\n    import agentloop.mcp\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env())
    assert out.returncode == 0, out.stderr
    assert "pip install 'agentloop-runtime[mcp]'" in out.stdout


# -- stdio ------------------------------------------------------------------------------------------------


async def test_stdio_server_lists_calls_times_out_and_sees_cancellation(tmp_path: Path) -> None:
    model = ScriptedChatModel(
        [calls(call("add", '{"a": 1, "b": 2}'), call("forecast", '{"city": "Oslo"}')), "ok"]
    )
    async with MCPToolset(stdio(DEMO, "stdio", str(tmp_path)), call_timeout=0.5) as toolset:
        assert "forecast" in toolset.tools
        result = await Agent(model, tools=[toolset]).chat("go")
        assert result.tool_executions[0].result == "3"
        assert result.tool_executions[1].result_object.structured == {"city": "Oslo", "temperature": 21.5}
        with (
            anyio.fail_after(10),
            pytest.raises(MCPServerError, match=re.escape("within call_timeout=0.5 s")),
        ):
            await toolset.call_tool("hang")
        await eventually(lambda: (tmp_path / "cancelled").exists())
        pid = (await toolset.call_tool("pid")).structured
    # Leaving `async with` stopped the server process.
    await eventually(lambda: subprocess.run(["ps", "-p", str(pid)], capture_output=True).returncode != 0)


async def test_stdio_server_killed_mid_call_is_restarted_and_the_call_sent_again(tmp_path: Path) -> None:
    async with MCPToolset([sys.executable, DEMO, "stdio", str(tmp_path)], call_timeout=30) as toolset:
        first_pid = (await toolset.call_tool("pid")).structured
        answers: list[str] = []

        async def call_hang_once() -> None:
            answers.append((await toolset.call_tool("hang_once")).text)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call_hang_once)
            await eventually(lambda: (tmp_path / "hang_once").exists())
            os.kill(int((tmp_path / "hang_once").read_text()), signal.SIGKILL)
        assert answers == ["done"]  # sent again to a new server process
        assert (await toolset.call_tool("pid")).structured != first_pid


# -- streamable HTTP --------------------------------------------------------------------------------------


async def test_http_server_restarted_between_calls_and_killed_mid_call(
    demo_http: HTTPServer, tmp_path: Path
) -> None:
    async with MCPToolset(demo_http.url, call_timeout=5) as toolset:
        assert (await toolset.call_tool("add", {"a": 1, "b": 2})).text == "3"
        # A new server process knows none of the old sessions: the next call still works.
        demo_http.kill()
        await demo_http.start()
        assert (await toolset.call_tool("add", {"a": 2, "b": 2})).text == "4"
        # Killed mid-call and not back: the call fails with an error naming the server.
        failures: list[BaseException] = []

        async def call_hang() -> None:
            try:
                await toolset.call_tool("hang")
            except MCPServerError as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call_hang)
            await eventually(lambda: (tmp_path / "hanging").exists())
            demo_http.kill()
        assert len(failures) == 1 and demo_http.url in str(failures[0])
        # Back again: the toolset reconnects.
        await demo_http.start()
        assert (await toolset.call_tool("add", {"a": 3, "b": 4})).text == "7"


async def test_http_server_from_before_2026_07_28_sessions_and_list_changed(tmp_path: Path) -> None:
    # A server that answers with the initialize handshake: HTTP sessions, list_changed as notifications.
    server = HTTPServer(sys.executable, DEMO, "http", "{port}", str(tmp_path), "--legacy")
    await server.start()
    try:
        model = ScriptedChatModel([calls(call("grow")), calls(call("extra")), "ok"])
        async with MCPToolset(server.url, call_timeout=10) as toolset:
            assert toolset.protocol_version == "2025-11-25"
            result = await Agent(model, tool_provider=toolset).chat("go")
            assert [e.result for e in result.tool_executions] == ["grown", "extra"]
            first_pid = (await toolset.call_tool("pid")).structured
            # The new process answers 404 to the old session id: the toolset starts a new session.
            server.kill()
            await server.start()
            assert (await toolset.call_tool("pid")).structured != first_pid
            assert "extra" not in await toolset.refresh()  # listed again on the new connection
    finally:
        server.kill()


@pytest.mark.parametrize(
    "answer", ["404", "400 with a JSON-RPC error and no id"], ids=["404", "400-jsonrpc-no-id"]
)
async def test_a_session_the_restarted_server_does_not_know_is_renewed_once_and_the_call_resent(
    answer: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The SDK reports the 400 form only as "Server returned an error response": before, every later call
    # failed with it until the toolset was entered again.
    flags = ["--legacy"] + (["--session-error-400"] if answer.startswith("400") else [])
    server = HTTPServer(sys.executable, DEMO, "http", "{port}", str(tmp_path), *flags)
    await server.start()
    try:
        async with MCPToolset(server.url, call_timeout=10) as toolset:
            pids = [(await toolset.call_tool("pid")).structured]
            for n in range(2):  # restarted twice: each time one new session, the call sent again
                server.kill()
                await server.start()
                with caplog.at_level(logging.INFO, logger="agentloop.mcp"):
                    assert (await toolset.call_tool("add", {"a": n, "b": 1})).text == str(n + 1)
                pids.append((await toolset.call_tool("pid")).structured)
            assert len(set(map(str, pids))) == 3
        renewed = [r.getMessage() for r in caplog.records if "no longer knows the session" in r.getMessage()]
        assert len(renewed) == 2 and all(f"HTTP {answer[:3]}" in text for text in renewed), renewed
    finally:
        server.kill()


class Bearer(httpx2.Auth):
    def __init__(self, token: str) -> None:
        self.token = token

    def auth_flow(self, request: httpx2.Request) -> Any:
        request.headers["Authorization"] = f"Bearer {self.token}"
        yield request


async def test_a_server_that_requires_authorization_says_so_and_auth_passes_credentials(
    tmp_path: Path,
) -> None:
    server = HTTPServer(sys.executable, DEMO, "http", "{port}", str(tmp_path), "--token=s3cret-token")
    await server.start()
    try:
        with pytest.raises(MCPServerError) as refused:
            async with MCPToolset(server.url, connect_timeout=10):
                pass
        assert str(refused.value) == (
            f"The MCP server {server.url} requires authorization: it answered HTTP 401 Unauthorized (it asks "
            "for Bearer authentication); pass credentials with MCPToolset(url, auth=...): an httpx2.Auth, "
            "such as httpx2.BasicAuth, an Auth subclass that sets a bearer token, or the mcp SDK's "
            "OAuthClientProvider for OAuth"
        )
        with pytest.raises(MCPServerError, match="the credentials given with auth= were refused: check them"):
            async with MCPToolset(server.url, auth=Bearer("wrong")):
                pass
        async with MCPToolset(server.url, auth=Bearer("s3cret-token")) as toolset:
            assert (await toolset.call_tool("add", {"a": 1, "b": 2})).text == "3"
        with pytest.raises(IllegalConfigurationError, match="auth applies to a server reached by URL"):
            MCPToolset(["python", "server.py"], auth=Bearer("x"))
    finally:
        server.kill()


# -- serving agentloop tools ------------------------------------------------------------------------------


async def test_server_from_serves_schemas_errors_and_structured_results() -> None:
    from tests.mcp_served_tools import toolbox

    async with MCPToolset(server_from(toolbox)) as toolset:
        forecast = toolset.tools.get("forecast")
        assert forecast is not None
        assert set(forecast.specification.parameters["properties"]) == {"city"}  # injected ones hidden
        assert toolset.tools.get("add").specification.metadata["readOnlyHint"] is True  # type: ignore[union-attr]
        assert (await toolset.call_tool("add", {"a": 1, "b": 2.5})).structured == 3.5
        result = await toolset.call_tool("forecast", {"city": "Rome", "user": "ignored"})
        assert result.structured == {"city": "Rome", "temperature": 21.5}
        with pytest.raises(MCPToolError, match="cannot divide by zero"):
            await toolset.call_tool("divide", {"a": 1, "b": 0})
        with pytest.raises(MCPToolError, match="b: required field is missing"):
            await toolset.call_tool("divide", {"a": 1})
        with pytest.raises(MCPToolError, match="Unknown tool: 'nope'"):
            await toolset.call_tool("nope")
        answer = await toolset.call_tool("geography", {"request": "Capital of France?"})
        assert answer.text == "The capital of France is Paris." and answer.structured is None


ROUND_TRIP = [
    calls(
        call("add", '{"a": 20, "b": 22}'),
        call("forecast", '{"city": "Lima"}'),
        call("divide", '{"a": 1, "b": 0}'),
        call("geography", '{"request": "Capital of France?"}'),
    ),
    "all done",
]


def check_round_trip(result: Any) -> None:
    add, forecast, divide, geography = result.tool_executions
    assert add.result == "42.0"
    assert forecast.result_object.structured == {"city": "Lima", "temperature": 21.5}
    assert divide.is_error and "cannot divide by zero" in divide.result
    assert geography.result == "The capital of France is Paris."
    assert result.content == "all done"


async def test_round_trip_over_stdio_with_python_m_agentloop_mcp_serve() -> None:
    command = stdio("-m", "agentloop.mcp", "serve", "tests.mcp_served_tools:toolbox")
    async with MCPToolset(command) as toolset:
        check_round_trip(await Agent(ScriptedChatModel(ROUND_TRIP), tools=[toolset]).chat("go"))


async def test_round_trip_over_http_with_python_m_agentloop_mcp_serve() -> None:
    server = HTTPServer(
        sys.executable,
        "-m",
        "agentloop.mcp",
        "serve",
        "tests.mcp_served_tools:toolbox",
        "--http",
        "127.0.0.1:{port}",
    )
    await server.start()
    try:
        async with MCPToolset(server.url) as toolset:
            check_round_trip(await Agent(ScriptedChatModel(ROUND_TRIP), tools=[toolset]).chat("go"))
    finally:
        server.kill()


def test_serve_command_refuses_bad_targets() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agentloop.mcp", "serve", "no_colon_here"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=ROOT,
    )
    assert out.returncode == 2 and "expected module:object" in out.stderr


async def test_the_snippets_of_docs_mcp_md_run() -> None:
    blocks = python_blocks(ROOT / "docs" / "mcp.md")
    printed = await run_snippets(blocks, "docs/mcp.md", {"__name__": "docs_mcp"})
    assert "Dune is 61 years old." in printed
    assert "files_read_" in printed and "gh_search" in printed
    assert "212.0" in printed and "'celsius'" in printed
    assert "'user'" not in printed  # the injected parameter is not in the served schema
    assert "compiled" in printed and "['module 1 of 2', 'module 2 of 2']" in printed  # on_progress
    # a served tool asks the user, logs and reports progress, in order, before its result
    assert (
        "asked: Import 10 rows?\nlog: 0 rows imported\nprogress: 0/10\nlog: 5 rows imported\n"
        "progress: 5/10\nlog: 10 rows imported\nprogress: 10/10\nImported 10 rows.\n"
    ) in printed
    assert '{"user": "ada", "plan": "pro"}' in printed
    assert "Summarise in one line: MCP" in printed
