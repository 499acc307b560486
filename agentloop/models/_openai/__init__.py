"""`OpenAIChatModel`: OpenAI Chat Completions, and every server that speaks the same API.

That is OpenAI itself, Azure OpenAI (give its base URL, `query={"api-version": ...}` and an `api-key` header
if you use keys), vLLM, Ollama (`/v1`), llama.cpp server, LM Studio, Groq, Together, DeepSeek, OpenRouter...
Only the message mapping lives here; HTTP, retries and error mapping are `._http`'s.

Mapping decisions: a tool result flagged `is_error` is sent as its text (Chat Completions has no error flag);
tool `metadata` is never sent; `AiMessage.thinking` is not sent back (reasoning servers reject or ignore it);
a tool call without an id (possible with local models) gets a stable synthetic id, matched to its result by
tool name and position; a refusal is reported as the answer's text; a response with tool calls always
finishes with `FinishReason.TOOL_EXECUTION` (several servers say "stop").


Modules, one job each:
- `_model`: `OpenAIChatModel`: configuration, and the calls;
- `_connection`: base URL, key and headers (shared with the Responses API model);
- `_request`: the request body (messages, tools, tool choice, output format);
- `_shapes`: the msgspec shape of what the API answers;
- `_response`: decoded values as agentloop's (usage, arguments, finish reasons);
- `_stream`: stream chunks as events, and the whole response at their end.
"""

from ._connection import OPENAI_BASE_URL, openai_connection
from ._model import OpenAIChatModel

__all__ = ["OPENAI_BASE_URL", "OpenAIChatModel", "openai_connection"]
