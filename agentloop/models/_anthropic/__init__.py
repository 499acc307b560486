"""`AnthropicChatModel`: Claude through Anthropic's Messages API (`POST /v1/messages`), streaming or not.

HTTP, retries and error mapping come from `._http`; this package only translates: agentloop messages to the
Messages API payload, and the API's JSON answer or event stream back to agentloop's response and events.


Modules, one job each:
- `_model`: `AnthropicChatModel`: configuration, the messages and tools of the body, the calls, and the
  `ChatResponse` (with the signed thinking blocks kept for the next round);
- `_request`: the other pieces of the body (content blocks, tool choice, thinking, portable parameters);
- `_shapes`: the msgspec shape of what the API answers;
- `_response`: decoded values as agentloop's (usage, finish reasons);
- `_stream`: stream events as agentloop events, and the whole content at their end.
"""

from ._model import ANTHROPIC_BASE_URL, AnthropicChatModel
from ._response import STATE_KEY

__all__ = ["ANTHROPIC_BASE_URL", "STATE_KEY", "AnthropicChatModel"]
