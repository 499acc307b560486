"""How Bedrock requests are authenticated: SigV4 with credentials from botocore's chain, or a Bedrock API
key sent as a bearer token (as the AWS SDKs do).

botocore is imported here when a model is made (`load_botocore`), never by `import agentloop` (extra
`bedrock`). Credentials are found, and refreshed, in a worker thread: botocore may read files, run a process
or call STS or the instance metadata service to get them.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import anyio.to_thread

from agentloop._values._errors import AuthenticationError, IllegalConfigurationError

from .._http import ProviderClient
from .._secrets import clean_api_key, mask_secret
from ._shapes import PROVIDER

__all__ = ["AwsAuth", "load_botocore"]

_SERVICE = "bedrock"  # the SigV4 signing name of bedrock-runtime


def load_botocore() -> Any:
    """The botocore modules used for signing and credentials, with a clear error when it is missing."""
    try:
        import botocore.auth
        import botocore.awsrequest
        import botocore.credentials
        import botocore.session
    except ImportError:
        raise IllegalConfigurationError(
            "BedrockChatModel signs its requests with botocore, which is not installed: "
            "pip install 'agentloop-runtime[bedrock]'"
        ) from None
    return botocore


class AwsAuth:
    """A model's region and the way its requests are authenticated.

    `region`: the argument, else `AWS_REGION`, else `AWS_DEFAULT_REGION`, else the profile's region.
    Credentials: the explicit keys, else botocore's chain (through `profile` or the `botocore_session`
    given). `api_key`: the Bedrock API key (the argument, else `AWS_BEARER_TOKEN_BEDROCK` when no keys were
    passed), cleaned; when set, requests carry it as a bearer token instead of a signature.
    """

    __slots__ = (
        "_aws_request",
        "_credentials",
        "_refreshable",
        "_session",
        "_signer",
        "api_key",
        "region",
        "source",
    )

    def __init__(
        self,
        *,
        region: str | None,
        profile: str | None,
        api_key: str | None,
        aws_access_key_id: str | None,
        aws_secret_access_key: str | None,
        aws_session_token: str | None,
        botocore_session: Any,
    ) -> None:
        botocore = load_botocore()
        # Credentials of this class (those of the chain's temporary sources) expire and are refreshed.
        self._refreshable: type[Any] = botocore.credentials.RefreshableCredentials
        if (aws_access_key_id is None) != (aws_secret_access_key is None):
            raise IllegalConfigurationError(
                "BedrockChatModel: pass aws_access_key_id and aws_secret_access_key together (or neither, "
                "to use the standard AWS credential chain)"
            )
        if botocore_session is None:
            try:
                botocore_session = botocore.session.Session(profile=profile)
            except Exception as exc:  # botocore.exceptions.ProfileNotFound and its kin
                raise IllegalConfigurationError(f"BedrockChatModel: {exc}") from None
        self._session = botocore_session
        region = (
            region
            or os.environ.get("AWS_REGION")
            or os.environ.get("AWS_DEFAULT_REGION")
            or self._profile_region()
        )
        if not region:
            raise IllegalConfigurationError(
                "BedrockChatModel needs an AWS region: pass region='us-east-1' (or another), or set "
                "AWS_REGION"
            )
        self.region: str = region.strip()
        self._credentials: Any = None
        self.source = "the AWS credential chain"
        """Where the credentials come from, as said in authentication errors."""
        if aws_access_key_id is not None and aws_secret_access_key is not None:
            self._credentials = botocore.credentials.Credentials(
                aws_access_key_id.strip(), aws_secret_access_key.strip(), aws_session_token
            )
            self.source = "aws_access_key_id= / aws_secret_access_key="
        # A Bedrock API key (a bearer token) replaces SigV4, as in the AWS SDKs: api_key=, else
        # AWS_BEARER_TOKEN_BEDROCK unless keys were passed.
        key_source = "api_key="
        if api_key is None and self._credentials is None and os.environ.get("AWS_BEARER_TOKEN_BEDROCK"):
            api_key, key_source = os.environ["AWS_BEARER_TOKEN_BEDROCK"], "AWS_BEARER_TOKEN_BEDROCK"
        self.api_key = clean_api_key(api_key, owner="BedrockChatModel", source=key_source)
        if self.api_key is not None:
            self.source = f"the Bedrock API key from {key_source}"
        self._signer = botocore.auth.SigV4Auth
        self._aws_request = botocore.awsrequest.AWSRequest

    def _profile_region(self) -> str | None:
        try:
            region = self._session.get_config_variable("region")
        except Exception:  # a broken config file: the error below says what to set instead
            return None
        return str(region) if region else None

    def describe(self) -> str:
        """Where the credentials come from, with the masked access key id when signing (for errors)."""
        credentials = self._credentials
        key_id = None if self.api_key is not None or credentials is None else credentials.access_key
        shown = f", access key {mask_secret(key_id)}" if key_id else ""
        return f"{self.source}{shown}"

    async def _frozen_credentials(self, http: ProviderClient) -> Any:
        """The credentials to sign with now, found (and refreshed) in a worker thread; their secrets are
        masked in `http`'s errors from then on."""
        credentials = self._credentials
        if credentials is None:
            credentials = await anyio.to_thread.run_sync(self._session.get_credentials)
            if credentials is None:
                raise AuthenticationError(
                    "bedrock: no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                    "or AWS_PROFILE (a profile in ~/.aws/config), or run where a role provides them; or "
                    "pass aws_access_key_id= and aws_secret_access_key=",
                    provider=PROVIDER,
                )
            self._credentials = credentials
            method = credentials.method  # botocore's name of the source, e.g. "env" (None: not said)
            self.source = f"AWS credentials from {method}" if method else self.source
        if isinstance(credentials, self._refreshable) and credentials.refresh_needed():
            frozen = await anyio.to_thread.run_sync(credentials.get_frozen_credentials)
        else:
            frozen = credentials.get_frozen_credentials()
        http.add_secrets(frozen.secret_key, frozen.token)
        return frozen

    async def signed_headers(self, http: ProviderClient, path: str, body: bytes) -> dict[str, str] | None:
        """The SigV4 headers of a POST of `body` to `path` (None with an API key: its bearer header, set
        once on the client, is sent instead)."""
        if self.api_key is not None:
            return None
        credentials = await self._frozen_credentials(http)
        request = self._aws_request(
            method="POST",
            url=http.url(path),
            data=body,
            headers={"content-type": "application/json"},
        )
        self._signer(credentials, _SERVICE, self.region).add_auth(request)
        signed = {
            "authorization": request.headers["Authorization"],
            "x-amz-date": request.headers["X-Amz-Date"],
        }
        token = request.headers.get("X-Amz-Security-Token")
        if token:
            signed["x-amz-security-token"] = token
        return signed
