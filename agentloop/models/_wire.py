"""Small rules every provider applies the same way when it writes a request."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from agentloop._values._errors import IllegalConfigurationError
from agentloop._values._messages import ToolChoice, ToolExecutionResultMessage
from agentloop._values._spec import ToolSpecification
from agentloop._values._text import valid_text

__all__ = [
    "add_turn",
    "arguments_object",
    "check_tool_offered",
    "check_tools_for_choice",
    "load_unfound",
    "not_a_chat_message",
    "unanswered_result",
]

_decoder = msgspec.json.Decoder()


def arguments_object(arguments: str) -> dict[str, Any]:
    """A call's arguments as the JSON object the APIs that take them as an object require ({} when they
    are not one: empty, invalid, nested too deep for msgspec, or not an object)."""
    try:
        value = _decoder.decode(valid_text(arguments)) if arguments.strip() else {}
    except (msgspec.DecodeError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def check_tool_offered(choice: ToolChoice, specs: Sequence[ToolSpecification]) -> None:
    """Raises `IllegalConfigurationError` when `ToolChoice.tool(name)` names a tool the request lacks."""
    if all(spec.name != choice.tool_name for spec in specs):
        offered = ", ".join(spec.name for spec in specs) or "none"
        raise IllegalConfigurationError(
            f"ToolChoice.tool({choice.tool_name!r}) names a tool this request does not offer "
            f"(offered: {offered})"
        )


def check_tools_for_choice(choice: ToolChoice | None) -> None:
    """Raises `IllegalConfigurationError` when a request without tools demands a tool call."""
    if choice is not None and choice.mode in ("required", "tool"):
        raise IllegalConfigurationError(
            f"tool choice {choice.mode!r} needs at least one tool specification in the request"
        )


def unanswered_result(message: ToolExecutionResultMessage) -> IllegalConfigurationError:
    """The error for a result without an id that no earlier call of its tool's name is waiting for."""
    return IllegalConfigurationError(
        f"the result of tool {message.tool_name!r} has no id and answers no tool call before it; give "
        "ToolExecutionResultMessage the id of the call it answers"
    )


def not_a_chat_message(owner: str, message: object) -> IllegalConfigurationError:
    """The error for something in a request's messages that is none of the chat message types."""
    return IllegalConfigurationError(
        f"{owner} cannot send a {type(message).__name__}: not a chat message (use "
        "SystemMessage, UserMessage, AiMessage or ToolExecutionResultMessage)"
    )


def add_turn(
    turns: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]], key: str = "content"
) -> None:
    """Appends `blocks` to `turns` as a `role` turn, merged into the last turn when it has the same role (the
    APIs that demand alternating roles); nothing when there are no blocks."""
    if not blocks:
        return
    if turns and turns[-1]["role"] == role:
        turns[-1][key].extend(blocks)
    else:
        turns.append({"role": role, key: blocks})


def load_unfound(tools: list[dict[str, Any]], called: Iterable[str], found: Iterable[str]) -> None:
    """Sends as loaded (no `defer_loading`) each deferred tool the history calls that no search sent back in
    it found: the APIs refuse a call of a deferred tool they never saw loaded, and a memory window, a
    compaction or another provider's search can leave such a call without its search."""
    missing = set(called).difference(found)
    for tool in tools:
        if tool.get("defer_loading") is True and tool.get("name") in missing:
            del tool["defer_loading"]
