"""The saved form of a paused round (`PendingApproval`) and the checks it passes before resuming."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from agentloop._values._approval import Decision, Denied, ToolApprovalRequest
from agentloop._values._codec import (
    RecordedToolError,
    StoredToolExecution,
    execution_from_stored,
    execution_to_stored,
    stored_type_name,
)
from agentloop._values._errors import (
    ApprovalError,
    IllegalConfigurationError,
    ToolDeniedError,
)
from agentloop._values._messages import ChatMessage, ChatResponse, ToolExecutionRequest, UserMessage
from agentloop._values._options import CallOptions
from agentloop._values._records import ToolExecution


class _Whose(Protocol):
    @property
    def invocation_id(self) -> str: ...
    @property
    def memory_id(self) -> Any: ...


class PausedRound(Protocol):
    """What the stored form takes from a held round (the seam's `HeldRound` has it): declared here, so the
    stored format, a value, does not import the runtime."""

    @property
    def response(self) -> ChatResponse: ...
    @property
    def round(self) -> int: ...
    @property
    def finished(self) -> tuple[ToolExecution, ...]: ...
    @property
    def messages(self) -> tuple[ChatMessage, ...]: ...
    @property
    def user_message(self) -> UserMessage: ...
    @property
    def context(self) -> _Whose: ...
    @property
    def call_options(self) -> Any: ...


_KIND = "pending_approval"
_FORMAT = 2
"""The storage format's envelope: `{"format": 2, "kind": "pending_approval", "data": {...}}`. Format 2 added
`data.options` (the call's own output type and middleware, by name); format 1 documents read the same way."""
_FORMATS = (1, 2)
_DENIED = (
    stored_type_name(ToolDeniedError),
    "agentloop._errors.ToolDeniedError",
)  # now, and as format 1 named it


# -- the state of a paused round ----------------------------------------------------------------------------


class _Waiting(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A call that waits for a decision, as stored."""

    call_id: str
    tool_name: str
    arguments: str
    index: int


class Check(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Digests of a paused state: one per call (its name, arguments, result), one of the whole state."""

    calls: dict[str, str]
    state: str


class _Options(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The call's own options a paused round resumes under, by name (`CallOptions.labels()`)."""

    output_type: str | None = None
    middleware: list[str] = []


class _State(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A paused round as JSON stores it (field names are the JSON keys). Finished calls are stored as the
    storage format stores any `ToolExecution` (error as type and message, result object as JSON)."""

    id: str
    invocation_id: str
    memory_id: Any
    round: int
    user_message: UserMessage
    messages: list[ChatMessage]
    """This invocation's messages before the response that are not in memory."""
    response: ChatResponse
    requests: list[_Waiting]
    executions: list[StoredToolExecution]
    check: Check | None = None
    options: _Options | None = None


class _Document(msgspec.Struct, frozen=True):
    """The envelope of the storage format (`{"format", "kind", "data"}`), kind `pending_approval`."""

    format: int
    kind: str
    data: _State


_decoder = msgspec.json.Decoder(_Document)
_encoder = msgspec.json.Encoder()
_digest_encoder = msgspec.json.Encoder(enc_hook=repr)  # a memory id JSON cannot hold still gets a digest


def _digest(value: Any) -> str:
    return hashlib.sha256(_digest_encoder.encode(value)).hexdigest()


def _calls(state: _State) -> list[tuple[ToolExecutionRequest, int, msgspec.Struct]]:
    """Every call of the state, waiting or finished: (the call, its index, how it is stored)."""
    found: list[tuple[ToolExecutionRequest, int, msgspec.Struct]] = [
        (ToolExecutionRequest(w.call_id, w.tool_name, w.arguments), w.index, w) for w in state.requests
    ]
    found += [(e.request, e.index, e) for e in state.executions]
    return found


def check_of(state: _State) -> Check:
    calls = {call.id or "": _digest(stored) for call, _, stored in _calls(state)}
    whole = msgspec.structs.asdict(state)  # shallow: the fields in their order, encoded as the struct is
    whole["check"] = None
    if state.options is None:
        del whole["options"]  # as format 1 digested a state: its rounds still resume
    return Check(calls, _digest(whole))


@dataclass(frozen=True, slots=True, eq=False)
class PendingApproval:
    """An invocation paused on tool calls that wait for a person: what `Agent.resume()` needs to go on.

    `requests` are the waiting calls; `executions` the calls of the same response that already finished
    (their results are kept, they never run again). `to_json()` writes it as readable JSON (tool names and
    argument text as the model sent them) and `PendingApproval.from_json()` reads it back, in any process
    (resuming it there needs a memory store that records paused rounds).
    Resuming checks digests of every call and of the whole state (see docs/approval.md for what they
    guarantee with and without a memory store).
    """

    id: str
    invocation_id: str
    memory_id: Any
    round: int
    requests: tuple[ToolApprovalRequest, ...]
    executions: tuple[ToolExecution, ...]
    response: ChatResponse
    user_message: UserMessage
    messages: tuple[ChatMessage, ...]
    _state: _State = field(repr=False)
    call_options: CallOptions | None = field(default=None, repr=False, compare=False)
    """The call's own `output_type` and `middleware` as Python objects (this process only; JSON keeps
    their names, `paused_with`)."""

    @property
    def paused_with(self) -> tuple[str | None, tuple[str, ...]]:
        """The call's own output type and middleware, by name, as the paused round recorded them."""
        options = self._state.options
        if options is None:
            return None, ()
        return options.output_type, tuple(options.middleware)

    @property
    def record(self) -> str:
        """The check record a `PendingApprovalStore` keeps for this round (an opaque string)."""
        assert self._state.check is not None
        return _encoder.encode(self._state.check).decode()

    def check_decisions(self, decisions: Mapping[str, Decision]) -> dict[str, Decision]:
        """`decisions` as `Agent.resume()` takes them, checked against this round's waiting calls: one
        decision (`True`, `False` or `Denied(reason)`) per waiting call and none for another call. Raises
        `ApprovalError` naming what is wrong, so a process that forwards decisions (a queue, a durable
        workflow) refuses bad ones before sending them."""
        return decisions_of(self, decisions)

    def to_json(self) -> bytes:
        """The paused round as JSON, to store anywhere (a database row, a queue message)."""
        try:
            return _encoder.encode(_Document(_FORMAT, _KIND, self._state))
        except TypeError as error:
            raise IllegalConfigurationError(
                f"This paused round cannot be written as JSON ({error}); its memory id "
                f"{self.memory_id!r} must be a str, an int or None"
            ) from None

    @classmethod
    def from_json(cls, data: bytes | str) -> PendingApproval:
        """Reads what `to_json()` wrote. Raises `ApprovalError` when it is not a paused round's JSON."""
        try:
            document = _decoder.decode(data)
        except (msgspec.DecodeError, RecursionError) as error:
            raise ApprovalError(f"Not the JSON of a PendingApproval: {error}") from None
        if document.kind != _KIND or document.format not in _FORMATS:
            raise ApprovalError(
                f"Not the JSON of a PendingApproval this version reads: kind {document.kind!r}, format "
                f"{document.format!r} (expected {_KIND!r}, {_FORMAT})",
                pending_id=document.data.id,
            )
        return cls._from_state(document.data, None)

    @classmethod
    def _from_state(
        cls, state: _State, executions: tuple[ToolExecution, ...] | None, options: CallOptions | None = None
    ) -> PendingApproval:
        if executions is None:
            executions = tuple(_execution_of(e) for e in state.executions)
        requests = tuple(
            ToolApprovalRequest(
                w.call_id,
                w.tool_name,
                w.arguments,
                w.index,
                state.round,
                state.memory_id,
                state.invocation_id,
            )
            for w in state.requests
        )
        return cls(
            state.id,
            state.invocation_id,
            state.memory_id,
            state.round,
            requests,
            executions,
            state.response,
            state.user_message,
            tuple(state.messages),
            state,
            options,
        )

    def __repr__(self) -> str:
        waiting = ", ".join(f"{r.tool_name}#{r.call_id}" for r in self.requests)
        return (
            f"PendingApproval(id={self.id!r}, memory_id={self.memory_id!r}, round={self.round}, "
            f"requests=[{waiting}], finished={len(self.executions)})"
        )


def _execution_of(stored: StoredToolExecution) -> ToolExecution:
    """A finished call read back from JSON: as the storage format reads any execution, and a denial is a
    `ToolDeniedError` again."""
    execution = execution_from_stored(stored)
    error = execution.error
    if isinstance(error, RecordedToolError) and error.error_type in _DENIED:
        request = execution.request
        error = ToolDeniedError(error.message, call_id=request.id, tool_name=request.name)
        execution = msgspec.structs.replace(execution, error=error)
    return execution


def paused_round_record(held: PausedRound, waiting: list[ToolApprovalRequest]) -> PendingApproval:
    invocation_id, round, finished = held.context.invocation_id, held.round, held.finished
    state = _State(
        _pending_id(invocation_id, round),
        invocation_id,
        held.context.memory_id,
        round,
        held.user_message,
        list(held.messages),
        held.response,
        [_Waiting(r.call_id, r.tool_name, r.arguments, r.index) for r in sorted(waiting, key=_by_index)],
        [execution_to_stored(e) for e in finished],
    )
    options = held.call_options
    if options.output_type is not None or options.middleware:
        output, middleware = options.labels()
        state = msgspec.structs.replace(state, options=_Options(output, list(middleware)))
    state = msgspec.structs.replace(state, check=check_of(state))
    return PendingApproval._from_state(state, tuple(finished), options)


def _pending_id(invocation_id: str, round: int) -> str:
    """The id of a round paused in an invocation: the same whenever that invocation pauses at that round (a
    replayed durable run records and claims the round under the same id)."""
    return hashlib.sha256(f"{invocation_id}\x00{round}".encode()).hexdigest()[:32]


def _by_index(request: ToolApprovalRequest) -> int:
    return request.index


# -- checking a state and its decisions ------------------------------------------------------------------


def _altered(pending: PendingApproval, call_id: str | None, tool_name: str | None) -> ApprovalError:
    if call_id is None:
        what = "its messages, ids or round were altered since it paused"
    else:
        tool = f" (tool {tool_name!r})" if tool_name else ""
        what = f"call {call_id!r}{tool} was altered since it paused (its name, arguments or result differ)"
    return ApprovalError(
        f"Paused round {pending.id}: {what}; nothing ran. Resume with the state as to_json() wrote it.",
        call_id=call_id,
        pending_id=pending.id,
    )


def compare_checks(pending: PendingApproval, expected: Check, found: Check | None) -> None:
    """Raises naming the first call whose digest differs, or the state when only it differs."""
    names = {call.id: call.name for call, _, _ in _calls(pending._state)}
    if found is None:
        raise _altered(pending, None, None)
    for call_id in (*expected.calls, *found.calls):
        if expected.calls.get(call_id) != found.calls.get(call_id):
            raise _altered(pending, call_id, names.get(call_id))
    if expected.state != found.state:
        raise _altered(pending, None, None)


def verify(pending: PendingApproval) -> None:
    """The state's own digests match its content, and its calls are exactly the response's calls."""
    state = pending._state
    calls = state.response.ai_message.tool_execution_requests
    covered: set[int] = set()
    for stored, index, _ in _calls(state):
        if not 0 <= index < len(calls) or index in covered or calls[index] != stored:
            raise _altered(pending, stored.id, stored.name)
        covered.add(index)
    for index, call in enumerate(calls):
        if index not in covered:
            raise _altered(pending, call.id, call.name)
    compare_checks(pending, check_of(state), state.check)


def decisions_of(pending: PendingApproval, decisions: Any) -> dict[str, Decision]:
    if not isinstance(decisions, Mapping):
        raise ApprovalError(
            "Give the decisions as a dict {call_id: True | False | Denied(reason)}, got "
            f"{type(decisions).__name__}",
            pending_id=pending.id,
        )
    waiting = {r.call_id: r for r in pending.requests}
    listed = ", ".join(f"{r.call_id!r} ({r.tool_name})" for r in pending.requests)
    for call_id, decision in decisions.items():
        if call_id not in waiting:
            raise ApprovalError(
                f"Paused round {pending.id} has no call {call_id!r} waiting for approval "
                f"(waiting: {listed}); nothing ran",
                call_id=str(call_id),
                pending_id=pending.id,
            )
        if not (decision is True or decision is False or isinstance(decision, Denied)):
            raise ApprovalError(
                f"The decision for call {call_id!r} must be True, False or Denied(reason), got {decision!r}; "
                "nothing ran",
                call_id=call_id,
                pending_id=pending.id,
            )
    for call_id, request in waiting.items():
        if call_id not in decisions:
            raise ApprovalError(
                f"No decision for call {call_id!r} (tool {request.tool_name!r}) of paused round "
                f"{pending.id}: every waiting call needs one ({listed}); nothing ran",
                call_id=call_id,
                pending_id=pending.id,
            )
    return dict(decisions)
