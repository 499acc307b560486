"""One invocation's structured output: the request it shapes and the answers it checks and retries."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import AsyncIterator, Sequence
from typing import (
    Any,
    NoReturn,
)

import msgspec

from agentloop._features.output._streaming import Watch
from agentloop._features.output._types import (
    FENCE,
    MAX_INPUT_REPR,
    MAX_LISTED_ERRORS,
    MODES,
    PROCESSED,
    InvalidOutput,
    OutputMember,
    OutputMode,
    OutputSchema,
    OutputValidator,
    output_schema,
)
from agentloop._runtime._hooks import CORRECTING, NOT_FOUND
from agentloop._runtime._seam import Answer, Middleware, ModelCall, NextModelCall, StreamCall, ToolRound
from agentloop._tools._tool import Tool
from agentloop._values._context import ToolContext
from agentloop._values._errors import IllegalConfigurationError, ModelRetry, OutputValidationError
from agentloop._values._messages import (
    AiMessage,
    ChatRequest,
    ChatResponse,
    ResponseFormat,
    SystemMessage,
    ToolChoice,
    ToolExecutionRequest,
)
from agentloop._values._records import ReturnBehavior, ToolExecution
from agentloop._values._spec import ToolSpecification
from agentloop.models._base import ModelEvent, supports_response_format

# -- one invocation -------------------------------------------------------------------------------------


class OutputRun(Middleware):
    """Structured output in one invocation: what the requests carry (its `wrap_model_call`), and judging what
    the model answered (its `on_tool_round` and `on_answer`), and partial outputs as they stream (its
    `wrap_stream`)."""

    __slots__ = ("_failures", "mode", "retries", "schema", "validator")

    def __init__(
        self, schema: OutputSchema | None, mode: OutputMode, retries: int, validator: OutputValidator | None
    ) -> None:
        self.schema = schema
        self.mode = mode
        self.retries = retries
        self.validator = validator
        self._failures = 0

    # -- what the model is told ---------------------------------------------------------------------

    @property
    def _schema(self) -> OutputSchema:
        assert self.schema is not None
        return self.schema

    def tools(self) -> list[Tool]:
        """The output tools (tool mode), one per member; a valid call's `result_object` is the value."""
        return [self._tool(member) for member in self._schema.members]

    def _tool(self, member: OutputMember) -> Tool:
        description = member.description or "Give the final result."
        if len(self._schema.members) > 1:
            description = f"Give the final result as a {member.type_.__name__}. {description}"
        specification = ToolSpecification(member.tool_name, description, member.schema)

        async def executor(request: ToolExecutionRequest, context: ToolContext) -> Any:
            return await self._judge(member, request.arguments, context, "call the tool again")

        return Tool(
            specification,
            executor,
            return_behavior=ReturnBehavior.IMMEDIATE,
            result_converter=_processed,
            source=f"output tool {member.tool_name!r}",
        )

    def instructions(self) -> str:
        """The prompted mode's addition to the system message."""
        schema = msgspec.json.encode(self._schema.whole.schema).decode()
        return (
            "Answer with a JSON object that matches this JSON schema, and nothing else (no prose, no code "
            f"fence):\n{schema}"
        )

    def request(self, request: ChatRequest) -> ChatRequest:
        """The request as this mode sends it: the tool mode asks for a tool call, native for the schema."""
        if self.mode == "tool":
            return msgspec.structs.replace(request, tool_choice=ToolChoice.REQUIRED)
        if self.mode == "native":
            whole = self._schema.whole
            name = _format_name(whole.type_)
            format = ResponseFormat(whole.schema, name=name, description=whole.description)
            return msgspec.structs.replace(request, response_format=format)
        return request

    def system_message(self, message: SystemMessage | None) -> SystemMessage | None:
        """The system message with the prompted mode's instructions added (unchanged in other modes)."""
        if self.mode != "prompted" or self.schema is None:
            return message
        text = self.instructions()
        return SystemMessage(f"{message.text}\n\n{text}" if message is not None else text)

    # -- judging the answer -------------------------------------------------------------------------

    async def on_answer(self, answer: Answer) -> Any:
        """The output of an answer without tool calls; raises `ModelRetry` (a correction for the model) or,
        once retries ran out, `OutputValidationError`. An output call's value was judged when it ran."""
        message, context = answer.message, answer.context
        if message.tool_execution_requests:
            return answer.output
        if self.schema is None:  # plain text, checked by the output validator
            return await self._check_text(message, context)
        if self.mode == "tool":
            names = " or ".join(repr(m.tool_name) for m in self.schema.members)
            self._failed(
                f"Answer by calling the tool {names} with the final result; plain text is not accepted.",
                message.text,
                [{"loc": (), "msg": "no output tool was called", "type": "missing_output_call"}],
            )
        text = _json_text(message.text or "")
        try:
            return await self._judge(self.schema.whole, text, context, "answer again with the JSON only")
        except InvalidOutput as invalid:
            self._failed(invalid.message, message.text, invalid.errors)

    async def _check_text(self, message: AiMessage, context: ToolContext) -> Any:
        assert self.validator is not None
        try:
            value = self.validator(message.text, context)
            return (await value) if inspect.isawaitable(value) else value
        except ModelRetry as retry:
            self._failed(retry.message, message.text, [_retry_error(retry)])

    @property
    def attempt(self) -> int:
        """The output attempt under way, from 1: each invalid output sent back for correction adds one."""
        return self._failures + 1

    @property
    def retrying(self) -> bool:
        """True once an output was sent back for correction: from then on the invocation's messages are held
        and stored with the valid output (an `OutputValidationError` stores none of them)."""
        return self._failures > 0

    def _failed(self, correction: str, output: str | None, errors: list[dict[str, Any]]) -> NoReturn:
        self._failures += 1
        if self._failures > self.retries:
            raise _exhausted(self.retries, output, errors)
        raise ModelRetry(correction)

    async def on_tool_round(self, round: ToolRound) -> Any:
        """The output of a tool round (its first valid output call); `CORRECTING` once an output was sent
        back for correction, else `NOT_FOUND`; raises `OutputValidationError` when the round's output calls
        failed and retries ran out."""
        return self._found(round.executions)

    def _found(self, executions: Sequence[ToolExecution]) -> Any:
        if self.schema is None:
            return CORRECTING if self.retrying else NOT_FOUND
        names = {member.tool_name for member in self.schema.members}
        failed: ToolExecution | None = None
        for execution in executions:
            if execution.request.name not in names:
                continue
            if execution.error is None:
                return execution.result_object
            failed = failed or execution
        if failed is not None:  # the output calls failed: one retry used
            self._failures += 1
            if self._failures > self.retries:
                error = failed.error
                if isinstance(error, InvalidOutput):
                    raise _exhausted(self.retries, error.output, error.errors)
                kind = "model_retry" if isinstance(error, ModelRetry) else type(error).__name__
                raise _exhausted(
                    self.retries, failed.request.arguments, [{"loc": (), "msg": failed.result, "type": kind}]
                )
        return CORRECTING if self.retrying else NOT_FOUND

    async def _judge(self, member: OutputMember, text: str, context: ToolContext, how: str) -> Any:
        """The validated (and user-checked) value of `text`, or `InvalidOutput` with the correction."""
        import pydantic

        try:
            value = member.validate_json(text)
        except pydantic.ValidationError as exc:
            value = self._nulls_as_absent(member, text)
            if value is NOT_FOUND:
                errors = [dict(e) for e in exc.errors(include_url=False)]
                raise InvalidOutput(_correction(errors, how), output=text, errors=errors) from None
        if self.validator is not None:
            try:
                value = self.validator(value, context)
                if inspect.isawaitable(value):
                    value = await value
            except ModelRetry as retry:
                raise InvalidOutput(
                    f"{retry.message}\nFix this and {how}.", output=text, errors=[_retry_error(retry)]
                ) from None
            except Exception as exc:  # a failing validator is a failed output, whatever the mode
                message = str(exc) or type(exc).__name__
                error = {"loc": (), "msg": message, "type": type(exc).__name__}
                raise InvalidOutput(f"{message}\nFix this and {how}.", output=text, errors=[error]) from exc
        return value

    def _nulls_as_absent(self, member: OutputMember, text: str) -> Any:
        """Native mode: a strict schema made every optional field required and nullable, so a null may
        stand for a field left out: the value without its nulls, if that validates (else `NOT_FOUND`)."""
        import pydantic

        if self.mode != "native":
            return NOT_FOUND
        try:
            value = member.adapter.validate_python(_without_nulls(member.restored(msgspec.json.decode(text))))
        except (msgspec.DecodeError, pydantic.ValidationError, RecursionError):
            return NOT_FOUND
        return value["result"] if member.wrapped else value

    # -- streaming ----------------------------------------------------------------------------------

    def wrap_stream(self, events: AsyncIterator[ModelEvent], call: StreamCall) -> AsyncIterator[ModelEvent]:
        """`events` with partial outputs announced as they stream; in the native and prompted modes the
        answer text is the output, so it is not passed on as text."""
        return Watch(events, self, call.round, call.announce, self.attempt)


class ShapingOutputRun(OutputRun):
    """Structured output in the tool and native modes: it also shapes every request (a model hook on the
    seam; the prompted mode has none, so a run without other model middleware keeps the direct path)."""

    __slots__ = ()

    allows_eager_tools = True
    """Its `wrap_model_call` shapes the request only; the answer is judged after the round."""

    async def wrap_model_call(self, call: ModelCall, call_next: NextModelCall) -> ChatResponse:
        """Each model call asks for this output (the tool mode a tool call, the native mode the schema)."""
        return await call_next(call.replace(request=self.request(call.request)))


# -- helpers --------------------------------------------------------------------------------------------

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def structured_output(agent: Any, output_type: Any) -> OutputRun | None:
    """The `OutputRun` of one invocation of `agent` (its output settings, `output_type` for this call), or
    None for plain text without a validator. The native mode falls back to the tool mode for a model that
    does not declare `supports_response_format`."""
    mode = check_mode(agent.output_mode)
    retries = check_retries(agent.output_retries)
    validator = agent.output_validator
    if validator is not None and not callable(validator):
        raise IllegalConfigurationError(
            f"output_validator must be a function (value, ctx) -> value, got {type(validator).__name__}"
        )
    name = agent.output_tool_name
    if not isinstance(name, str) or not _TOOL_NAME.match(name):
        raise IllegalConfigurationError(
            f"output_tool_name must be 1-64 letters, digits, '_' or '-', got {name!r}"
        )
    if output_type is str:
        return None if validator is None else OutputRun(None, "prompted", retries, validator)
    schema = output_schema(output_type, name)
    if mode == "native" and not supports_response_format(agent.model):
        mode = "tool"
    kind = OutputRun if mode == "prompted" else ShapingOutputRun
    return kind(schema, mode, retries, validator)


def check_mode(mode: str) -> OutputMode:
    if mode not in MODES:
        raise IllegalConfigurationError(f"output_mode must be 'tool', 'native' or 'prompted', got {mode!r}")
    return mode  # type: ignore[return-value]


def check_retries(retries: int) -> int:
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise IllegalConfigurationError(f"output_retries must be an int >= 0, got {retries!r}")
    return retries


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


def _processed(value: Any) -> str:
    return PROCESSED


_MAX_JSON_STARTS = 8
"""How many `{` of a prompted answer may start its JSON (prose may hold a few braces before it)."""
_raw_decode = json.JSONDecoder().raw_decode


def _json_text(text: str) -> str:
    """The JSON in an answer: a code fence's content, or the first whole JSON object in the text (prose
    before and after it, a `{` in the prose before it, are passed over); failing that, the text from the
    first `{` to the last `}`, so the correction names what is wrong with it."""
    fenced = FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return text
    if start == 0 and end == len(text) - 1:
        return text  # the whole answer is the candidate: the validator reads it at once
    tries = 0
    while start >= 0 and tries < _MAX_JSON_STARTS:
        try:
            _, stop = _raw_decode(text, start)
        except (ValueError, RecursionError):
            start, tries = text.find("{", start + 1), tries + 1
            continue
        return text[start:stop]
    return text[text.find("{") : end + 1]


def _format_name(output_type: Any) -> str:
    name = getattr(output_type, "__name__", None)
    if isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
        return name
    return "output"


def _correction(errors: list[dict[str, Any]], how: str) -> str:
    """The retry request for a failed validation: one line per error, naming the field and what it needs."""
    lines = ["The output is not valid:"]
    for error in errors[:MAX_LISTED_ERRORS]:
        where = _where(error.get("loc", ())) or "(the whole output)"
        line = f"- {where}: {error.get('msg')}"
        if error.get("type") not in ("missing", "json_invalid") and "input" in error:
            shown = repr(error["input"])
            if len(shown) > MAX_INPUT_REPR:
                shown = shown[: MAX_INPUT_REPR - 3] + "..."
            line += f" (got {shown})"
        lines.append(line)
    if len(errors) > MAX_LISTED_ERRORS:
        lines.append(f"- ... and {len(errors) - MAX_LISTED_ERRORS} more")
    lines.append(f"Fix these errors and {how}.")
    return "\n".join(lines)


def _where(loc: Sequence[Any]) -> str:
    """A field's path, shortened when it is deep (a recursive model nested 250 levels)."""
    parts = [str(part) for part in loc]
    if len(parts) > 8:
        parts = [*parts[:3], f"...({len(parts) - 5} levels)...", *parts[-2:]]
    return ".".join(parts)


def _retry_error(retry: ModelRetry) -> dict[str, Any]:
    return {"loc": (), "msg": retry.message, "type": "model_retry"}


def _exhausted(retries: int, output: str | None, errors: list[dict[str, Any]]) -> OutputValidationError:
    summary = "; ".join(f"{_where(e.get('loc', ())) or 'output'}: {e.get('msg')}" for e in errors[:3])
    return OutputValidationError(
        f"The model's output was still invalid after {retries} "
        f"{'retry' if retries == 1 else 'retries'} (output_retries={retries}): {summary}",
        output=output,
        errors=errors,
    )
