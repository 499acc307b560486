"""`BedrockChatModel`: models on Amazon Bedrock through the Converse and ConverseStream APIs.

Requests go out on httpx2 (through `.._http`, like every provider), signed with SigV4 by botocore, whose
standard credential chain finds the credentials (explicit keys, environment, shared files and profiles, SSO,
assumed roles, container and instance roles). botocore is imported when a model is made, never by
`import agentloop` (extra `bedrock`). ConverseStream's answer is the AWS binary event stream, decoded
incrementally (`.._eventstream`).

Modules, one job each:
- `_model`: `BedrockChatModel`: configuration, and the Converse / ConverseStream calls;
- `_auth`: region, credentials and signing (botocore imported lazily), or a Bedrock API key;
- `_request`: the Converse body (messages, media, tools, parameters, output format);
- `_shapes`: the msgspec shapes of what Bedrock answers;
- `_response`: a Converse answer as a `ChatResponse` (usage, finish reasons, reasoning kept);
- `_stream`: ConverseStream's events as agentloop events, exceptions in the stream as `ModelError`s.
"""

from ._model import BedrockChatModel

__all__ = ["BedrockChatModel"]
