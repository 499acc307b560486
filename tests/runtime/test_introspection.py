"""`help()` and `typing.get_type_hints()` work for every public name: no annotation names a type that exists
only under `TYPE_CHECKING` (that was a NameError for ToolExecuted, ApprovalRequired, CompleteResponse)."""

from __future__ import annotations

import inspect
import pydoc
import typing

import pytest

import agentloop


def annotated_parts(obj: object) -> list[tuple[str, object]]:
    """The object and, for a class, its own methods and properties (what help() shows)."""
    parts: list[tuple[str, object]] = [("", obj)]
    if inspect.isclass(obj):
        for name, member in vars(obj).items():
            if name.startswith("__") and name not in ("__init__", "__call__"):
                continue
            function = member.fget if isinstance(member, property) else member
            function = getattr(function, "__func__", function)  # classmethod / staticmethod
            if inspect.isfunction(function):
                parts.append((f".{name}", function))
    return parts


@pytest.mark.parametrize("name", agentloop.__all__)
def test_help_and_type_hints_resolve(name: str) -> None:
    obj = getattr(agentloop, name)
    assert pydoc.render_doc(obj)  # what help(obj) prints
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        return  # aliases (ChatMessage, StreamEvent), constants, TypeVars
    for where, part in annotated_parts(obj):
        try:
            typing.get_type_hints(part)
        except NameError as error:
            pytest.fail(f"agentloop.{name}{where}: {error}")


def test_the_reported_events_resolve_to_their_types() -> None:
    hints = typing.get_type_hints(agentloop.ToolExecuted)
    assert hints["execution"] is agentloop.ToolExecution
    assert typing.get_type_hints(agentloop.ApprovalRequired)["pending"] is agentloop.PendingApproval
    assert typing.get_origin(typing.get_type_hints(agentloop.CompleteResponse)["result"]) is agentloop.Result
