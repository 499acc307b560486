"""What a person is asked about a tool call and what they answer; which calls need asking."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, Union

import msgspec

from agentloop._values._context import ToolContext
from agentloop._values._errors import (
    IllegalConfigurationError,
)
from agentloop._values._messages import ToolExecutionRequest

if TYPE_CHECKING:
    pass


# -- what a person is asked, and what they answer ----------------------------------------------------------


class ToolApprovalRequest(msgspec.Struct, frozen=True):
    """A tool call that waits for a person's decision: the tool's name and the arguments as the model sent
    them (JSON text; `args` decodes them). `index` is the call's position in the response, `round` its tool
    round (from 1)."""

    call_id: str
    tool_name: str
    arguments: str
    index: int = 0
    round: int = 1
    memory_id: Any = None
    invocation_id: str = ""

    @property
    def args(self) -> dict[str, Any]:
        """The arguments decoded from JSON (an empty dict when they are not a JSON object)."""
        try:
            value = msgspec.json.decode(self.arguments or "{}")
        except (msgspec.DecodeError, RecursionError):
            return {}
        return value if isinstance(value, dict) else {}

    @property
    def request(self) -> ToolExecutionRequest:
        """The call as the model asked for it."""
        return ToolExecutionRequest(self.call_id, self.tool_name, self.arguments)


class Denied(msgspec.Struct, frozen=True):
    """A "no" to a tool call. The call does not run; `reason` goes to the model as the call's error result
    (a default text saying the user denied it when None)."""

    reason: str | None = None

    def __post_init__(self) -> None:
        if self.reason is not None and not isinstance(self.reason, str):
            raise IllegalConfigurationError(f"Denied(reason): reason must be a str, got {self.reason!r}")


class Defer:
    """Returned by an approval handler (the class or an instance): no decision now. The call waits, and the
    invocation pauses with `FinishReason.APPROVAL_REQUIRED` once the response's other calls finished."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Defer()"


Decision = Union[bool, Denied]
"""What `Agent.resume()` takes per waiting call: True (run it), False or `Denied(reason)` (do not)."""

ApprovalHandler = Callable[[ToolApprovalRequest], Any]
"""`(request) -> bool | Denied | Defer`, sync (run in a worker thread) or async."""

ApprovalPredicate = Callable[[ToolApprovalRequest, ToolContext], Any]
"""`(request, ctx) -> bool`, sync or async: whether this call needs a person's approval."""


class ApprovalRules(msgspec.Struct, frozen=True):
    """An agent's approval settings: which calls need approval besides the tools' own rules; who answers."""

    requires: ApprovalPredicate | None = None
    handler: ApprovalHandler | None = None

    @classmethod
    def build(cls, requires_approval: Any, approval_handler: Any) -> ApprovalRules:
        """Checks `Agent(requires_approval=..., approval_handler=...)`."""
        if approval_handler is not None and not callable(approval_handler):
            raise IllegalConfigurationError(
                "approval_handler must be a callable `(ToolApprovalRequest) -> bool | Denied | Defer`, got "
                f"{type(approval_handler).__name__}"
            )
        return cls(_agent_rule(requires_approval), approval_handler)


def _agent_rule(value: Any) -> ApprovalPredicate | None:
    """`Agent(requires_approval=)`: None/False, True (every call), tool names or patterns, or a predicate."""
    if value is None or value is False:
        return None
    if value is True:
        return lambda request, ctx: True
    if callable(value):
        return value  # type: ignore[no-any-return]
    names = (value,) if isinstance(value, str) else value
    if isinstance(names, Collection) and names and all(isinstance(n, str) for n in names):
        exact = frozenset(n for n in names if not _is_pattern(n))
        patterns = tuple(n for n in names if _is_pattern(n))

        def by_name(request: ToolApprovalRequest, ctx: ToolContext) -> bool:
            name = request.tool_name
            return name in exact or any(fnmatch.fnmatchcase(name, p) for p in patterns)

        return by_name
    raise IllegalConfigurationError(
        "requires_approval must be True, a tool name, a list of tool names or patterns (e.g. ['fs_*']), or a "
        f"callable `(request, ctx) -> bool`, got {value!r}"
    )


def _is_pattern(name: str) -> bool:
    return any(c in name for c in "*?[")
