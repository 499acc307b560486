"""`MCPToolset(url, auth=OAuthClientProvider(...))` through a whole OAuth 2.1 flow against a real
authorization server on 127.0.0.1 (tests/mcp_oauth_server.py, built from the `mcp` SDK's server-side auth):
the 401, protected-resource and authorization-server discovery, dynamic client registration, authorization
code with PKCE, the bearer token on every request, and a refresh when the access token has expired."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import OAuthClientMetadata

from agentloop.mcp import MCPServerError, MCPToolset
from tests.integrations.test_mcp import HTTPServer
from tests.mcp_conformance_client import REDIRECT_URI, Browser, MemoryTokens

pytestmark = pytest.mark.anyio

SERVER = str(Path(__file__).resolve().parents[1] / "mcp_oauth_server.py")
TOKEN_SECONDS = 2


@pytest.fixture
async def oauth_server() -> AsyncIterator[HTTPServer]:
    server = HTTPServer(sys.executable, SERVER, "{port}", str(TOKEN_SECONDS))
    await server.start()
    try:
        yield server
    finally:
        server.kill()


def provider(url: str, storage: MemoryTokens, browser: Browser) -> OAuthClientProvider:
    return OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="agentloop test",
            redirect_uris=[REDIRECT_URI],  # type: ignore[list-item]  # pydantic coerces
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        ),
        storage=storage,
        redirect_handler=browser.open,
        callback_handler=browser.callback,
    )


async def stats(toolset: MCPToolset) -> dict[str, int]:
    counts = json.loads((await toolset.call_tool("stats")).text)
    assert isinstance(counts, dict)
    return counts


async def test_authorization_code_with_pkce_then_a_refresh(oauth_server: HTTPServer) -> None:
    storage, browser = MemoryTokens(), Browser()
    async with MCPToolset(oauth_server.url, auth=provider(oauth_server.url, storage, browser)) as toolset:
        assert [t.name for t in toolset.tools] == ["stats"]
        first = await stats(toolset)
        assert first == {"registrations": 1, "authorizations": 1, "code_exchanges": 1, "refreshes": 0}
        assert storage.client is not None and storage.tokens is not None
        token = storage.tokens.access_token
        # Let the access token expire: the provider refreshes it before the next request (no new login).
        await anyio.sleep(TOKEN_SECONDS + 0.5)
        second = await stats(toolset)
        assert second == {"registrations": 1, "authorizations": 1, "code_exchanges": 1, "refreshes": 1}
        assert storage.tokens.access_token != token


async def test_without_credentials_the_error_says_how_to_give_them(oauth_server: HTTPServer) -> None:
    with pytest.raises(MCPServerError, match=r"requires authorization.*auth=") as caught:
        async with MCPToolset(oauth_server.url):
            pass
    assert "Bearer" in str(caught.value)


async def test_a_refused_authorization_fails_with_a_clear_error(oauth_server: HTTPServer) -> None:
    async def refuse(authorization_url: str) -> None:
        raise PermissionError("the user said no")

    auth = OAuthClientProvider(
        server_url=oauth_server.url,
        client_metadata=OAuthClientMetadata(redirect_uris=[REDIRECT_URI]),  # type: ignore[list-item]
        storage=MemoryTokens(),
        redirect_handler=refuse,
        callback_handler=Browser().callback,
    )
    with pytest.raises(MCPServerError, match="authorizing with auth= failed") as caught:
        async with MCPToolset(oauth_server.url, auth=auth):
            pass
    assert "user said no" in str(caught.value)
