"""`GeminiChatModel`: Google's Gemini API (`generateContent`, and `streamGenerateContent` over SSE).

HTTP, retries and error mapping come from `.._http`; this package only translates: agentloop messages to the
Gemini `contents` payload, and the API's JSON answer or event stream back to agentloop's response and events.

Modules, one job each:
- `_model`: `GeminiChatModel`: configuration, and the calls;
- `_auth`: the API key (argument or environment) and the errors a wrong key causes;
- `_request`: the request body (contents, function calls and responses with their thought signatures,
  media, tools, parameters, output format);
- `_shapes`: the msgspec shape of what the API answers;
- `_response`: chunks as agentloop events and the `ChatResponse` (usage, finish reasons, blocked prompts);
- `_stream`: one event of the stream read as a chunk.
"""

from ._auth import GEMINI_BASE_URL
from ._model import GeminiChatModel
from ._request import SKIP_SIGNATURE

__all__ = ["GEMINI_BASE_URL", "SKIP_SIGNATURE", "GeminiChatModel"]
