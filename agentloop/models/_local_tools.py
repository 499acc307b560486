"""Tool calling for local models without native tool support: agentloop owns the protocol.

Two prompt renderings of one conversation:

* the *protocol* rendering offers the tools in the system prompt and asks for one JSON object that decides
  first and calls second: `{"functions": [<names>], "tool_calls": [{"name": ..., "arguments": {...}}, ...]}`,
  or `{"functions": ["answer"], "answer": ...}` when no tool is needed. The reply is constrained by a JSON
  schema built from the tools (`tool_calls_schema`), so it always parses and only names offered tools with
  arguments that match their schemas. On "answer" the provider stops reading and has the answer written by
  a second, unconstrained pass over the *plain* rendering.
* the *plain* rendering has no tool list and no JSON: earlier tool rounds become "Tool results" notes in the
  user's turn, so the model answers in its natural voice.

Everything here is pure (no model, no I/O) so it is tested without the weights.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec

from .._errors import BadResponseError, IllegalConfigurationError
from .._messages import (
    AiMessage,
    ChatMessage,
    SystemMessage,
    ToolChoice,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from .._spec import ToolSpecification

__all__ = [
    "ToolCallScanner",
    "answer_choice",
    "answered_calls",
    "call_key",
    "offered_tools",
    "render_plain",
    "render_protocol",
    "tool_calls_schema",
]

Wire = dict[str, str]
"""One OpenAI-format chat message: {"role": ..., "content": ...}."""

_RESULTS_TAIL = (
    "These are the results of your calls. If they are enough to answer my request, reply with "
    '{{"functions": ["{answer}"], "answer": ...}}; call a function again only for information you do not '
    "have yet."
)

_MUST_CALL = (
    "When a function can provide the answer or part of it (a calculation, a conversion, live data, a "
    "lookup), call it: never work out, recall or guess its result yourself. Call every function the request "
    "needs at once."
)
_ANSWER_TAIL = (
    "Answer my request from these results in one or two plain sentences, stating the results exactly as "
    "given. No code, no working, nothing the results do not say."
)

_encode = msgspec.json.Encoder().encode
_decode_any = msgspec.json.Decoder().decode


class _Call(msgspec.Struct, frozen=True):
    name: str
    arguments: dict[str, Any]


_decode_call = msgspec.json.Decoder(_Call).decode


def offered_tools(
    specs: Sequence[ToolSpecification], choice: ToolChoice | None
) -> tuple[tuple[ToolSpecification, ...], bool]:
    """The tools to offer for `choice`, and whether a final answer (no call) is allowed.

    NONE offers nothing; REQUIRED removes the final-answer option; `ToolChoice.tool(name)` offers only `name`.
    """
    mode = choice.mode if choice is not None else "auto"
    if mode == "none" or not specs:
        if mode in ("required", "tool"):
            raise IllegalConfigurationError(
                f"tool_choice={mode!r} needs at least one tool in ChatRequest.tool_specifications"
            )
        return (), True
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise IllegalConfigurationError(f"tool names must be unique within one request, got {names}")
    if choice is not None and choice.tool_name is not None:
        chosen = tuple(spec for spec in specs if spec.name == choice.tool_name)
        if not chosen:
            raise IllegalConfigurationError(
                f"ToolChoice.tool({choice.tool_name!r}) names no offered tool; offered: {names}"
            )
        return chosen, False
    return tuple(specs), mode == "auto"


# -- the constraint ---------------------------------------------------------------------------------------


def answer_choice(specs: Sequence[ToolSpecification]) -> str:
    """The name that means "no call, answer": `answer`, unless a tool has that name (then `answer_`...)."""
    names = {spec.name for spec in specs}
    choice = "answer"
    while choice in names:
        choice += "_"
    return choice


def tool_calls_schema(
    specs: Sequence[ToolSpecification], *, allow_no_call: bool, max_calls: int = 8
) -> dict[str, Any]:
    """JSON schema of a reply: `{"functions": [<names>], "tool_calls": [...]}`, a decision then the calls.

    `functions` names the tools the request needs (an enum of the offered names: the decision is one semantic
    choice, made before any argument is written). Each `tool_calls` item is one `anyOf` option `{"name":
    <const>, "arguments": <its parameters schema>}`; at most `max_calls` items (a small model can fall into
    repeating one call forever: the bound ends that). With `allow_no_call` a second option
    `{"functions": ["answer"], "answer": <text>}` is the final answer (see `answer_choice`). Each tool's
    `$defs` are hoisted to the root under a per-tool prefix so their `$ref`s still resolve.
    """
    defs: dict[str, Any] = {}
    options = []
    for index, spec in enumerate(specs):
        arguments = _hoist_definitions(spec.parameters, f"t{index}_", defs)
        if arguments.get("type") == "object" and "additionalProperties" not in arguments:
            # Unknown arguments are ignored by the runtime anyway; closing the object keeps a small model
            # from rambling into invented keys.
            arguments["additionalProperties"] = False
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": spec.name}, "arguments": arguments},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    names = [spec.name for spec in specs]
    calls: dict[str, Any] = {
        "type": "object",
        "properties": {
            "functions": {"type": "array", "minItems": 1, "maxItems": max_calls, "items": {"enum": names}},
            "tool_calls": {
                "type": "array",
                "minItems": 1,
                "maxItems": max_calls,
                "items": {"anyOf": options},
            },
        },
        "required": ["functions", "tool_calls"],
        "additionalProperties": False,
    }
    schema: dict[str, Any] = calls
    if allow_no_call:
        # The answer option names its text field so the model "plans" an answer; the provider stops reading
        # once the decision is written and has the answer written by an unconstrained pass instead.
        answer = {
            "type": "object",
            "properties": {
                "functions": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 1,
                    "items": {"const": answer_choice(specs)},
                },
                "answer": {"type": "string"},
            },
            "required": ["functions", "answer"],
            "additionalProperties": False,
        }
        schema = {"anyOf": [calls, answer]}
    if defs:
        schema["$defs"] = defs
    return schema


def _hoist_definitions(schema: dict[str, Any], prefix: str, into: dict[str, Any]) -> dict[str, Any]:
    """`schema` without its `$defs`/`definitions`: they move to `into` as `<prefix><name>`, refs rewritten."""
    refs: dict[str, str] = {}
    sections: list[dict[str, Any]] = []
    for key in ("$defs", "definitions"):
        section = schema.get(key)
        if isinstance(section, dict):
            sections.append(section)
            refs.update({f"#/{key}/{name}": f"#/$defs/{prefix}{name}" for name in section})

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                key: refs.get(value, value) if key == "$ref" and isinstance(value, str) else rewrite(value)
                for key, value in node.items()
            }
        if isinstance(node, list):
            return [rewrite(item) for item in node]
        return node

    for section in sections:
        for name, value in section.items():
            into[f"{prefix}{name}"] = rewrite(value)
    result: dict[str, Any] = rewrite({k: v for k, v in schema.items() if k not in ("$defs", "definitions")})
    return result


# -- prompt renderings ------------------------------------------------------------------------------------


def render_protocol(
    messages: Sequence[ChatMessage], specs: Sequence[ToolSpecification], *, allow_no_call: bool
) -> list[Wire]:
    """The conversation as the model sees it when it may call tools (see the module docstring)."""
    lines = [
        "# Tools",
        "",
        "You may call one or more functions to assist with the user query.",
        "",
        "You are provided with function signatures within <tools></tools> XML tags:",
        "<tools>",
    ]
    for spec in specs:
        function: dict[str, Any] = {"name": spec.name}
        if spec.description:
            function["description"] = spec.description
        function["parameters"] = spec.parameters
        lines.append(_pretty({"type": "function", "function": function}))
    lines += ["</tools>", ""]
    form = (
        '{"functions": [<names of the functions the request needs>], '
        '"tool_calls": [{"name": <function-name>, "arguments": <args-json-object>}, ...]}'
    )
    answer = answer_choice(specs)
    if allow_no_call:
        lines.append(
            f"Reply with a JSON object: {form} to call the functions the request needs (their results come "
            f'back in the next message), or {{"functions": ["{answer}"], "answer": <text>}} when no function '
            "fits the request or the function results you already have answer it."
        )
        lines.append(_MUST_CALL)
    else:
        lines.append(f"Reply with a JSON object: {form} listing the function calls the request needs.")
    tools_prompt = "\n".join(lines)

    system = _system_text(messages)
    out: list[Wire] = [
        {"role": "system", "content": f"{system}\n\n{tools_prompt}" if system else tools_prompt}
    ]
    calls_by_id: dict[str, ToolExecutionRequest] = {}
    results: list[str] = []
    for message in messages:
        if isinstance(message, ToolExecutionResultMessage):
            results.append(_tool_response(message, calls_by_id))
            continue
        if results:
            _append(out, "user", "\n".join(results) + "\n" + _RESULTS_TAIL.format(answer=answer))
            results = []
        if isinstance(message, UserMessage):
            _append(out, "user", message.text)
        elif isinstance(message, AiMessage):
            if message.tool_execution_requests:
                for request in message.tool_execution_requests:
                    if request.id is not None:
                        calls_by_id[request.id] = request
                calls = [
                    {"name": request.name, "arguments": _arguments_value(request.arguments)}
                    for request in message.tool_execution_requests
                ]
                decided = list(dict.fromkeys(request.name for request in message.tool_execution_requests))
                body = _pretty({"functions": decided, "tool_calls": calls})
                _append(out, "assistant", f"{message.text}\n{body}" if message.text else body)
            elif message.text:
                # Earlier answers in the reply format keep the conversation consistent with what is asked.
                reply = {"functions": [answer], "answer": message.text} if allow_no_call else None
                _append(out, "assistant", _pretty(reply) if reply else message.text)
    if results:
        _append(out, "user", "\n".join(results) + "\n" + _RESULTS_TAIL.format(answer=answer))
    return out


def render_plain(messages: Sequence[ChatMessage]) -> list[Wire]:
    """The conversation without tools or JSON: each tool round becomes a "Tool results" note for the user."""
    system = _system_text(messages)
    out: list[Wire] = [{"role": "system", "content": system}] if system else []
    calls_by_id: dict[str, ToolExecutionRequest] = {}
    results: list[str] = []
    for message in messages:
        if isinstance(message, ToolExecutionResultMessage):
            request = calls_by_id.get(message.id) if message.id is not None else None
            call = f"{message.tool_name}({request.arguments if request is not None else ''})"
            verb = "failed with" if message.is_error else "returned"
            results.append(f"- {call} {verb}: {message.text}")
            continue
        if results:
            _append(out, "user", "Tool results:\n" + "\n".join(results) + "\n\n" + _ANSWER_TAIL)
            results = []
        if isinstance(message, UserMessage):
            _append(out, "user", message.text)
        elif isinstance(message, AiMessage):
            for request in message.tool_execution_requests:
                if request.id is not None:
                    calls_by_id[request.id] = request
            if message.text:
                _append(out, "assistant", message.text)
    if results:
        _append(out, "user", "Tool results:\n" + "\n".join(results) + "\n\n" + _ANSWER_TAIL)
    return out


def call_key(request: ToolExecutionRequest) -> tuple[str, str]:
    """A call's name and arguments in a canonical form (key order and spacing do not matter)."""
    arguments = _arguments_value(request.arguments)
    return request.name, json.dumps(arguments, sort_keys=True, separators=(",", ":"))


def answered_calls(messages: Sequence[ChatMessage]) -> frozenset[tuple[str, str]]:
    """The `call_key`s of the calls made and answered since the user's last message (this turn's rounds)."""
    answered: set[tuple[str, str]] = set()
    requests: dict[str, ToolExecutionRequest] = {}
    for message in messages:
        if isinstance(message, UserMessage):
            answered.clear()
            requests.clear()
        elif isinstance(message, AiMessage):
            requests.update((r.id, r) for r in message.tool_execution_requests if r.id is not None)
        elif isinstance(message, ToolExecutionResultMessage) and message.id in requests:
            answered.add(call_key(requests[message.id]))
    return frozenset(answered)


def _system_text(messages: Sequence[ChatMessage]) -> str:
    return "\n\n".join(message.text for message in messages if isinstance(message, SystemMessage))


def _append(out: list[Wire], role: str, content: str) -> None:
    """Adds a turn, merging it into the previous one of the same role (many templates demand alternation)."""
    if out and out[-1]["role"] == role and role != "system":
        out[-1] = {"role": role, "content": f"{out[-1]['content']}\n\n{content}"}
    else:
        out.append({"role": role, "content": content})


def _pretty(value: Any) -> str:
    """JSON the way the model writes it (`", "` and `": "` separators): a small model follows the prompt's
    JSON much better when it looks like its own."""
    return json.dumps(value, ensure_ascii=False)


def _arguments_value(arguments: str) -> Any:
    try:
        return _decode_any(arguments)
    except msgspec.DecodeError:
        return arguments


def _tool_response(message: ToolExecutionResultMessage, calls_by_id: dict[str, ToolExecutionRequest]) -> str:
    item: dict[str, Any] = {"name": message.tool_name}
    request = calls_by_id.get(message.id) if message.id is not None else None
    if request is not None:
        item["arguments"] = _arguments_value(request.arguments)
    item["error" if message.is_error else "result"] = message.text
    return f"<tool_response>\n{_pretty(item)}\n</tool_response>"


# -- reading the reply ------------------------------------------------------------------------------------


class ToolCallScanner:
    """Reads a `{"functions": [...], "tool_calls": [...]}` reply as it streams: the decision as soon as its
    list closes, each call as soon as its object closes.

    It tracks JSON nesting (strings and escapes included), so it works whatever whitespace the model chose.
    """

    __slots__ = (
        "_answer",
        "_array_key",
        "_array_start",
        "_calls",
        "_closed",
        "_depth",
        "_escape",
        "_in_string",
        "_item_start",
        "_key",
        "_opened",
        "_string_start",
        "_text",
        "decision",
    )

    def __init__(self, answer: str = "answer") -> None:
        self._answer = answer
        self._text = ""
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._string_start = -1
        self._key = ""
        self._array_key = ""
        self._array_start = -1
        self._item_start = -1
        self._opened = False
        self._closed = False
        self._calls = 0
        self.decision: list[str] | None = None
        """The names in `functions` once that list closed (the `answer` name when the model answers)."""

    def feed(self, piece: str) -> Iterator[ToolExecutionRequest]:
        """Consumes the next piece of the reply and yields every call it completed, in order."""
        base = len(self._text)
        self._text += piece
        for offset, char in enumerate(piece):
            position = base + offset
            if self._in_string:
                if self._escape:
                    self._escape = False
                elif char == "\\":
                    self._escape = True
                elif char == '"':
                    self._in_string = False
                    if self._depth == 1:
                        self._key = self._text[self._string_start + 1 : position]
            elif char == '"':
                self._in_string = True
                self._string_start = position
            elif char in "{[":
                self._depth += 1
                self._opened = True
                if self._depth == 2:
                    self._array_key, self._array_start = self._key, position
                elif self._depth == 3 and self._array_key == "tool_calls":
                    self._item_start = position
            elif char in "}]":
                if self._depth == 3 and self._item_start >= 0:
                    self._calls += 1
                    yield self._call(self._text[self._item_start : position + 1])
                    self._item_start = -1
                elif self._depth == 2 and self._array_key == "functions":
                    self.decision = _decode_names(self._text[self._array_start : position + 1])
                elif self._depth == 2 and self._array_key == "tool_calls":
                    self._closed = True
                self._depth -= 1

    @property
    def text(self) -> str:
        """Everything fed so far."""
        return self._text

    @property
    def chose_answer(self) -> bool:
        """True once the model decided to answer instead of calling (or closed an empty `tool_calls` list)."""
        if self.decision is not None and self.decision and set(self.decision) == {self._answer}:
            return True
        return self._closed and self._calls == 0

    @property
    def complete(self) -> bool:
        """True once the reply's outer object closed."""
        return self._opened and self._depth == 0

    def _call(self, item: str) -> ToolExecutionRequest:
        try:
            call = _decode_call(item)
        except msgspec.DecodeError as exc:
            raise BadResponseError(f"the local model wrote a malformed tool call {item!r}: {exc}") from exc
        return ToolExecutionRequest(
            id=f"call_{uuid.uuid4().hex[:24]}", name=call.name, arguments=_encode(call.arguments).decode()
        )


_decode_names = msgspec.json.Decoder(list[str]).decode
