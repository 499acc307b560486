"""Structured output: `output_type=T` turns the model's answer into a validated `T`.

`output_schema(T)` compiles a type once: its JSON schema as the model sees it (a type that is not a JSON
object travels wrapped as `{"result": ...}`), its validator, and what partial values look like while it
streams. `OutputRun` is one invocation's use of it, in one of three modes:

* `tool`: each output schema is a tool (`final_result`, or `final_result_<Member>` for each model of a
  union); a valid call ends the invocation once every call of its response ran (first valid call wins).
* `native`: the provider's own structured output (`ChatRequest.response_format`); the answer text is JSON.
* `prompted`: the schema goes into the system message and the JSON is read out of the answer text.

An invalid output goes back to the model as a correction naming each failing field, at most
`output_retries` times; then `OutputValidationError`.
"""

from ..._runtime._hooks import NOT_FOUND, RetryOutput
from ._answers import OutputRun, check_mode, check_retries, structured_output
from ._types import (
    DEFAULT_OUTPUT_TOOL_NAME,
    OutputMode,
    OutputSchema,
    OutputValidator,
    output_schema,
)

__all__ = [
    "DEFAULT_OUTPUT_TOOL_NAME",
    "NOT_FOUND",
    "OutputMode",
    "OutputRun",
    "OutputSchema",
    "OutputValidator",
    "RetryOutput",
    "check_mode",
    "check_retries",
    "output_schema",
    "structured_output",
]
