"""`OpenAIResponsesModel`: OpenAI's Responses API (`POST {base_url}/responses`).

Only the mapping lives in this package (`_request` the body, `_shapes` the decoded answer, `_response`
the `ChatResponse`, `_model` the class, its calls and its stream); HTTP, retries and error mapping are
`.._http`'s.

Mapping decisions:
- System messages go out as `instructions`; user and assistant turns as `input` items; a tool call as a
  `function_call` item and its result as a `function_call_output` item with the same `call_id` (the
  `ToolExecutionRequest.id` is the `call_id`, never the item's `fc_...` id).
- Reasoning items (with `encrypted_content` when `include_reasoning` asks for it, the default for reasoning
  models) are kept on the answer's `AiMessage.provider_state["openai-responses"]` with the order of the
  output items and their ids, and sent back in that order on the next call, so a reasoning model keeps its
  reasoning between rounds with `store=False` too. The state of another provider is never sent.
- Pictures and documents go as `input_image` / `input_file`; pictures and documents a tool returned go in
  its `function_call_output` (its `output` becomes a list of `input_text` / `input_image` / `input_file`).
- `AiMessage.thinking` is the reasoning summary text (ask for summaries with `reasoning_summary="auto"`).
- Usage: `input_tokens` include the cached ones (`cache_read_tokens`), `output_tokens` the reasoning ones
  (`reasoning_tokens`), as the API reports them.
- An incomplete response (`max_output_tokens`, `content_filter`) finishes with `LENGTH` / `CONTENT_FILTER`;
  `response.failed` and `error` events raise the mapped `ModelError`.
"""

from ._model import OpenAIResponsesModel
from ._response import STATE_KEY

__all__ = ["STATE_KEY", "OpenAIResponsesModel"]
