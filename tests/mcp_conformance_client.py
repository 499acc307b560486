"""The client program the official MCP conformance suite drives: agentloop's `MCPToolset` against the
suite's scenario servers.

The suite (`conformance client --command "python tests/mcp_conformance_client.py" --scenario X`) starts a
server for scenario X, then runs this program with the server's URL as its last argument, the scenario's
name in MCP_CONFORMANCE_SCENARIO and, for some auth scenarios, JSON in MCP_CONFORMANCE_CONTEXT (client
ids, secrets, keys). It checks what the client sent; this program must exit 0 within 30 seconds.

Every scenario connects with `MCPToolset` (which lists the tools), calls the tool the scenario expects,
and closes. The OAuth scenarios use the SDK's OAuth client providers as `auth=`: discovery, dynamic client
registration or a client ID metadata document, authorization code with PKCE (the "browser" here fetches
the authorization URL and takes the code from its redirect), client credentials with a secret or a
signed JWT.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any
from urllib.parse import parse_qs, urlparse

import anyio
import httpx2
import mcp_types as types
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider
from mcp.client.context import ClientRequestContext
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from agentloop.mcp import MCPToolset

REDIRECT_URI = "http://localhost:3000/callback"
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"


class MemoryTokens:
    """The SDK's `TokenStorage`, in memory: tokens and the registered client, for one run."""

    def __init__(self, client: OAuthClientInformationFull | None = None) -> None:
        self.tokens: OAuthToken | None = None
        self.client = client

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Browser:
    """Stands in for the user's browser: opens the authorization URL and reads the code from its redirect
    (the suite's authorization server approves at once)."""

    def __init__(self) -> None:
        self.result: AuthorizationCodeResult | None = None

    async def open(self, authorization_url: str) -> None:
        async with httpx2.AsyncClient() as http:
            response = await http.get(authorization_url, follow_redirects=False)
        location = response.headers.get("location")
        if response.status_code not in (301, 302, 303, 307, 308) or not location:
            raise RuntimeError(f"the authorization server answered {response.status_code}, not a redirect")
        query = parse_qs(urlparse(location).query)
        if "code" not in query:
            raise RuntimeError(f"no code in the redirect to {location.split('?')[0]}")
        self.result = AuthorizationCodeResult(
            code=query["code"][0],
            state=query.get("state", [None])[0],
            iss=query.get("iss", [None])[0],
        )

    async def callback(self) -> AuthorizationCodeResult:
        result, self.result = self.result, None
        if result is None:
            raise RuntimeError("no authorization code: the redirect was never opened")
        return result


def context() -> dict[str, Any]:
    text = os.environ.get("MCP_CONFORMANCE_CONTEXT")
    value = json.loads(text) if text else {}
    if not isinstance(value, dict):
        raise RuntimeError("MCP_CONFORMANCE_CONTEXT is not a JSON object")
    return value


async def accept_with_defaults(
    context: ClientRequestContext, params: types.ElicitRequestParams
) -> types.ElicitResult:
    """Accepts a form, filling each field with its schema's default (SEP-1034)."""
    content: dict[str, Any] = {}
    if isinstance(params, types.ElicitRequestFormParams):
        for name, schema in params.requested_schema.get("properties", {}).items():
            if "default" in schema:
                content[name] = schema["default"]
    return types.ElicitResult(action="accept", content=content)


def authorization_code(server_url: str) -> OAuthClientProvider:
    given = context()
    client = None
    if given.get("client_id"):  # pre-registered: no dynamic registration
        secret = given.get("client_secret")
        client = OAuthClientInformationFull(
            client_id=given["client_id"],
            client_secret=secret,
            redirect_uris=[REDIRECT_URI],  # type: ignore[list-item]  # pydantic coerces to AnyUrl
            token_endpoint_auth_method="client_secret_basic" if secret else "none",
        )
    browser = Browser()
    return OAuthClientProvider(
        server_url=server_url,
        client_metadata=OAuthClientMetadata(
            client_name="agentloop conformance client",
            redirect_uris=[REDIRECT_URI],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        ),
        storage=MemoryTokens(client),
        redirect_handler=browser.open,
        callback_handler=browser.callback,
        client_metadata_url=CLIENT_METADATA_URL,
    )


def client_credentials_basic(server_url: str) -> OAuthClientProvider:
    given = context()
    return ClientCredentialsOAuthProvider(
        server_url=server_url,
        storage=MemoryTokens(),
        client_id=given["client_id"],
        client_secret=given["client_secret"],
        token_endpoint_auth_method="client_secret_basic",
    )


def client_credentials_jwt(server_url: str) -> OAuthClientProvider:
    given = context()
    signing = SignedJWTParameters(
        issuer=given["client_id"],
        subject=given["client_id"],
        signing_algorithm=given.get("signing_algorithm", "ES256"),
        signing_key=given["private_key_pem"],
    )
    return PrivateKeyJWTOAuthProvider(
        server_url=server_url,
        storage=MemoryTokens(),
        client_id=given["client_id"],
        assertion_provider=signing.create_assertion_provider(),
    )


async def cross_app_access(server_url: str) -> httpx2.Auth:
    """Enterprise-managed authorization (SEP-990): the IdP's ID token is exchanged at the IdP for an
    ID-JAG (RFC 8693 token exchange), which the SDK's provider presents to the MCP server's authorization
    server (RFC 7523 JWT-bearer grant)."""
    given = context()

    async def id_jag(audience: str, resource: str) -> str:
        async with httpx2.AsyncClient() as http:
            response = await http.post(
                given["idp_token_endpoint"],
                data={
                    "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
                    "requested_token_type": "urn:ietf:params:oauth:token-type:id-jag",
                    "subject_token": given["idp_id_token"],
                    "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
                    "audience": audience,
                    "resource": resource,
                    "client_id": given.get("idp_client_id", ""),
                },
            )
        response.raise_for_status()
        token = response.json()["access_token"]
        assert isinstance(token, str)
        return token

    # The provider takes the authorization server's issuer as configuration: the server's protected
    # resource metadata (RFC 9728) names it.
    origin = "/".join(server_url.split("/")[:3])
    path = server_url[len(origin) :]
    async with httpx2.AsyncClient() as http:
        metadata = (await http.get(f"{origin}/.well-known/oauth-protected-resource{path}")).json()
    issuer = metadata["authorization_servers"][0]
    return IdentityAssertionOAuthProvider(
        server_url=server_url,
        storage=MemoryTokens(),
        client_id=given["client_id"],
        client_secret=given["client_secret"],
        issuer=issuer,
        assertion_provider=id_jag,
        token_endpoint_auth_method="client_secret_basic",
    )


TOOL_OF = {
    "tools_call": ("add_numbers", {"a": 5, "b": 3}),
    "sse-retry": ("test_reconnection", {}),
    "elicitation-sep1034-client-defaults": ("test_client_elicitation_defaults", {}),
}
AUTH_OF: dict[str, Any] = {
    "auth/client-credentials-basic": client_credentials_basic,
    "auth/client-credentials-jwt": client_credentials_jwt,
}


async def run(scenario: str, server_url: str) -> None:
    auth: httpx2.Auth | None = None
    if scenario == "auth/cross-app-access-complete-flow":
        auth = await cross_app_access(server_url)
    elif scenario.startswith("auth/"):
        auth = AUTH_OF.get(scenario, authorization_code)(server_url)
    elif scenario not in TOOL_OF and scenario != "initialize":
        raise SystemExit(f"unknown scenario {scenario!r}")
    async with MCPToolset(
        server_url, auth=auth, elicitation_handler=accept_with_defaults, call_timeout=25
    ) as toolset:
        if scenario in TOOL_OF:
            name, arguments = TOOL_OF[scenario]
            result = await toolset.call_tool(name, arguments)
            logging.info("%s answered: %s", name, result.text)
        elif auth is not None and toolset.tools:  # the auth scenarios: call the first tool
            tool = next(iter(toolset.tools))
            result = await toolset.call_tool(tool.specification.metadata["mcp_tool"], {})
            logging.info("%s answered: %s", tool.name, result.text)


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(f"usage: {sys.argv[0]} SERVER_URL (scenario in MCP_CONFORMANCE_SCENARIO)")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s")
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "initialize")
    backend = os.environ.get("AGENTLOOP_ANYIO_BACKEND", "asyncio")
    anyio.run(run, scenario, sys.argv[-1], backend=backend)


if __name__ == "__main__":
    main()
