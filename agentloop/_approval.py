"""Human approval of tool calls: which calls need it, asking inline, pausing a round, resuming it.

A gated call is looked at after its arguments validated and before it runs. The agent's `approval_handler`
answers at once (True, False, `Denied(reason)`) or `Defer`s; without a handler the call waits. Once every
call of the response has finished or waits, and some wait, the invocation pauses: nothing of the round goes
to memory, and a `PendingApproval` keeps the response, the finished calls and the waiting ones.
`Agent.resume()` checks that state and the decisions, claims the round (once: through the memory store when
it records paused rounds, else in this process), runs the approved calls, and the loop goes on.
"""

from __future__ import annotations

import fnmatch
import hashlib
import inspect
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Union

import anyio
import msgspec

from ._codec import RecordedToolError, _from_stored, _to_stored, _ToolExecution
from ._context import ToolContext
from ._errors import (
    ApprovalError,
    IllegalConfigurationError,
    ToolArgumentsError,
    ToolDeniedError,
)
from ._events import ApprovalRequired
from ._execution import ToolExecution
from ._memory import PendingApprovalStore
from ._messages import ChatMessage, ChatResponse, ToolExecutionRequest, UserMessage
from ._tool import ReturnBehavior, Tool, _is_async_callable, run_sync_in_worker
from ._toolset import Toolset

if TYPE_CHECKING:
    from ._loop import Invocation, Listener

__all__ = [
    "ApprovalGate",
    "ApprovalHandler",
    "ApprovalRules",
    "Decision",
    "Defer",
    "Denied",
    "PendingApproval",
    "ToolApprovalRequest",
]

_KIND = "pending_approval"
_FORMAT = 1
"""The storage format's envelope: `{"format": 1, "kind": "pending_approval", "data": {...}}`."""
_DENIED = f"{ToolDeniedError.__module__}.{ToolDeniedError.__qualname__}"  # as the storage format names it


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


@dataclass(frozen=True, slots=True)
class ApprovalRules:
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


# -- the state of a paused round ----------------------------------------------------------------------------


class _Waiting(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A call that waits for a decision, as stored."""

    call_id: str
    tool_name: str
    arguments: str
    index: int


class _Check(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Digests of a paused state: one per call (its name, arguments, result), one of the whole state."""

    calls: dict[str, str]
    state: str


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
    executions: list[_ToolExecution]
    check: _Check | None = None


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


def _check_of(state: _State) -> _Check:
    calls = {call.id or "": _digest(stored) for call, _, stored in _calls(state)}
    return _Check(calls, _digest(msgspec.structs.replace(state, check=None)))


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

    @property
    def record(self) -> str:
        """The check record a `PendingApprovalStore` keeps for this round (an opaque string)."""
        assert self._state.check is not None
        return _encoder.encode(self._state.check).decode()

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
        if (document.kind, document.format) != (_KIND, _FORMAT):
            raise ApprovalError(
                f"Not the JSON of a PendingApproval this version reads: kind {document.kind!r}, format "
                f"{document.format!r} (expected {_KIND!r}, {_FORMAT})",
                pending_id=document.data.id,
            )
        return cls._from_state(document.data, None)

    @classmethod
    def _from_state(cls, state: _State, executions: tuple[ToolExecution, ...] | None) -> PendingApproval:
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
        )

    def __repr__(self) -> str:
        waiting = ", ".join(f"{r.tool_name}#{r.call_id}" for r in self.requests)
        return (
            f"PendingApproval(id={self.id!r}, memory_id={self.memory_id!r}, round={self.round}, "
            f"requests=[{waiting}], finished={len(self.executions)})"
        )


def _execution_of(stored: _ToolExecution) -> ToolExecution:
    """A finished call read back from JSON: as the storage format reads any execution, and a denial is a
    `ToolDeniedError` again."""
    execution = _from_stored(stored)
    error = execution.error
    if isinstance(error, RecordedToolError) and error.error_type == _DENIED:
        request = execution.request
        error = ToolDeniedError(error.message, call_id=request.id, tool_name=request.name)
        execution = msgspec.structs.replace(execution, error=error)
    return execution


def _paused(
    inv: Invocation,
    response: ChatResponse,
    round: int,
    waiting: list[ToolApprovalRequest],
    finished: list[ToolExecution],
    carried: list[ChatMessage],
) -> PendingApproval:
    state = _State(
        _pending_id(inv.invocation_id, round),
        inv.invocation_id,
        inv.memory_id,
        round,
        inv.user_message,
        list(carried),
        response,
        [_Waiting(r.call_id, r.tool_name, r.arguments, r.index) for r in sorted(waiting, key=_by_index)],
        [_to_stored(e) for e in finished],
    )
    state = msgspec.structs.replace(state, check=_check_of(state))
    return PendingApproval._from_state(state, tuple(finished))


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


def _compare(pending: PendingApproval, expected: _Check, found: _Check | None) -> None:
    """Raises naming the first call whose digest differs, or the state when only it differs."""
    names = {call.id: call.name for call, _, _ in _calls(pending._state)}
    if found is None:
        raise _altered(pending, None, None)
    for call_id in (*expected.calls, *found.calls):
        if expected.calls.get(call_id) != found.calls.get(call_id):
            raise _altered(pending, call_id, names.get(call_id))
    if expected.state != found.state:
        raise _altered(pending, None, None)


def _verify(pending: PendingApproval) -> None:
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
    _compare(pending, _check_of(state), state.check)


def _decisions(pending: PendingApproval, decisions: Any) -> dict[str, Decision]:
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


# -- where paused rounds are recorded ----------------------------------------------------------------------


class _ProcessRecords:
    """Paused rounds of agents whose memory has no `PendingApprovalStore`: recorded in this process only.

    It remembers the last `LIMIT` paused and `LIMIT` resumed rounds. A round is resumed here only if it
    paused here: a pending id this process never issued (one paused in another process, forgotten, or a
    forgery with a made-up id and recomputed digests) is refused, and an issued one is taken once.
    """

    LIMIT = 10_000

    def __init__(self) -> None:
        self._records: OrderedDict[str, str] = OrderedDict()
        self._taken: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def save(self, pending_id: str, record: str) -> None:
        with self._lock:
            self._records[pending_id] = record
            if len(self._records) > self.LIMIT:
                self._records.popitem(last=False)

    def take(self, pending_id: str, record: str) -> tuple[str | None, bool]:
        """(the record stored, None if this process did not issue the id; whether it was already taken).
        Takes the round when its record matches."""
        with self._lock:
            if pending_id in self._taken:
                return None, True
            stored = self._records.get(pending_id)
            if stored == record:
                del self._records[pending_id]
                self._taken[pending_id] = None
                if len(self._taken) > self.LIMIT:
                    self._taken.popitem(last=False)
            return stored, False


_process_records = _ProcessRecords()


def _store_of(memory: object) -> tuple[PendingApprovalStore | None, Any]:
    """The store that records paused rounds for `memory` (the memory itself or its `store`), and its key."""
    for candidate in (memory, getattr(memory, "store", None)):
        if candidate is not None and isinstance(candidate, PendingApprovalStore):
            return candidate, getattr(memory, "id", None)
    return None, None


async def _record(memory: object, pending: PendingApproval) -> None:
    store, key = _store_of(memory)
    if store is None:
        _process_records.save(pending.id, pending.record)
        return
    with anyio.CancelScope(shield=True):  # a cancelled pause must not leave a round unrecorded
        await store.save_pending_approval(
            key if key is not None else pending.memory_id, pending.id, pending.record
        )


async def _claim(memory: object, pending: PendingApproval) -> None:
    """Takes the paused round, once; raises when it was taken before or its record differs."""
    record = pending.record
    store, key = _store_of(memory)
    if store is None:
        stored, taken = _process_records.take(pending.id, record)
        if taken:
            raise ApprovalError(
                f"Paused round {pending.id} was already resumed; nothing ran", pending_id=pending.id
            )
        if stored is None:
            raise ApprovalError(
                f"Paused round {pending.id} did not pause in this process (or was forgotten, after "
                f"{_ProcessRecords.LIMIT} later pauses), and memory id {pending.memory_id!r} has no memory "
                "store that records paused rounds, so nothing vouches for this state; nothing ran. To resume "
                "in another process, give the agent a memory whose store records paused rounds (a "
                "SQLiteChatMemoryStore or RedisChatMemoryStore shared by the processes).",
                pending_id=pending.id,
            )
        where = "this process"
    else:
        with anyio.CancelScope(shield=True):  # taken or not, never half
            stored = await store.take_pending_approval(
                key if key is not None else pending.memory_id, pending.id, record
            )
        if stored is None:
            raise ApprovalError(
                f"Paused round {pending.id} is not recorded in the memory store of memory id "
                f"{pending.memory_id!r}: it was already resumed, its memory was deleted, or it paused with "
                "another store (an in-process store is not shared between processes); nothing ran",
                pending_id=pending.id,
            )
        where = "the memory store"
    if stored is not None and stored != record:
        try:
            found: _Check | None = msgspec.json.decode(stored, type=_Check)
        except msgspec.DecodeError:
            found = None
        try:
            _compare(pending, pending._state.check or _check_of(pending._state), found)
        except ApprovalError as error:
            raise ApprovalError(
                f"{error.message} (checked against the record in {where})",
                call_id=error.call_id,
                pending_id=pending.id,
            ) from None


# -- the gate each invocation's calls pass ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Settled:
    """A gated call that does not run now: its `execution` (None while it waits), and whether it is news
    (a `ToolExecuted` event is due)."""

    execution: ToolExecution | None
    report: bool


_WAITS = Settled(None, False)


class Resume:
    """A paused round to finish first: the state, checked, and a decision for each waiting call."""

    __slots__ = ("_finished", "_waiting", "decisions", "pending")

    def __init__(self, pending: Any, decisions: Any) -> None:
        if isinstance(pending, (bytes, bytearray, memoryview, str)):
            pending = PendingApproval.from_json(bytes(pending) if not isinstance(pending, str) else pending)
        if not isinstance(pending, PendingApproval):
            raise ApprovalError(
                "resume() takes the PendingApproval of a paused result (result.pending) or its to_json() "
                f"bytes, got {type(pending).__name__}"
            )
        _verify(pending)
        self.pending = pending
        self.decisions = _decisions(pending, decisions)
        self._finished = {e.index: e for e in pending.executions}
        self._waiting = {r.index: r for r in pending.requests}

    def settle(self, index: int, toolset: Toolset, clock: Callable[[], datetime]) -> Settled | None:
        finished = self._finished.get(index)
        if finished is not None:
            return Settled(finished, False)  # ran before the pause: never again
        request = self._waiting[index]
        decision = self.decisions[request.call_id]
        if decision is True:
            return None
        return Settled(_denied(request, toolset.get(request.tool_name), decision, clock), True)


class ApprovalGate:
    """The approval side of one invocation: asks about gated calls, collects those that wait, pauses the
    round, and finishes a resumed one."""

    __slots__ = ("_rules", "_waiting", "resumed")

    def __init__(self, rules: ApprovalRules, resumed: Resume | None = None) -> None:
        self._rules = rules
        self.resumed = resumed
        self._waiting: list[ToolApprovalRequest] = []

    def concerns(self, name: str, toolset: Toolset) -> bool:
        """Cheap first look: whether the call named `name` may need the gate at all."""
        if self.resumed is not None or self._rules.requires is not None:
            return True
        tool = toolset.get(name)
        return tool is not None and tool.requires_approval is not None

    async def settle(
        self, request: ToolExecutionRequest, index: int, round: int, toolset: Toolset, inv: Invocation
    ) -> Settled | None:
        """None when the call runs now; else what became of it (denied, or waiting for a person)."""
        resumed = self.resumed
        if resumed is not None and round == resumed.pending.round:
            return resumed.settle(index, toolset, inv.options.now)
        tool = toolset.get(request.name)
        if tool is None:
            return None  # an unknown tool runs nothing: the hallucination rules answer it
        try:
            tool.prepare(request.arguments)
        except ToolArgumentsError:
            return None  # bad arguments: the call fails without asking anyone
        asked = ToolApprovalRequest(
            request.id or "", request.name, request.arguments, index, round, inv.memory_id, inv.invocation_id
        )
        context = ToolContext(inv.invocation_id, inv.memory_id, inv.context, request, round, inv.deadline)
        if not await self._needs_approval(tool, asked, context):
            return None
        answer = await self._ask(asked)
        if answer is True:
            return None
        if answer is Defer or isinstance(answer, Defer):
            self._waiting.append(asked)
            return _WAITS
        return Settled(_denied(asked, tool, answer, inv.options.now), True)

    async def _needs_approval(self, tool: Tool, request: ToolApprovalRequest, context: ToolContext) -> bool:
        rule = tool.requires_approval
        if rule is True:
            return True
        if rule is not None and await _truth(
            rule(request, context), f"requires_approval of tool {tool.name!r}"
        ):
            return True
        agent_rule = self._rules.requires
        if agent_rule is None:
            return False
        return await _truth(agent_rule(request, context), "Agent(requires_approval=...)")

    async def _ask(self, request: ToolApprovalRequest) -> bool | Denied | Defer | type[Defer]:
        handler = self._rules.handler
        if handler is None:
            return Defer
        if _is_async_callable(handler):
            answer = await handler(request)
        else:  # a sync handler may block (a console prompt): the other calls go on meanwhile
            answer = await run_sync_in_worker(handler, request)
        if inspect.isawaitable(answer):
            answer = await answer
        if answer is True or answer is False or isinstance(answer, (Denied, Defer)) or answer is Defer:
            return answer
        raise IllegalConfigurationError(
            f"approval_handler must return True, False, Denied(reason) or Defer for call {request.call_id!r} "
            f"(tool {request.tool_name!r}), got {answer!r}"
        )

    # -- pausing and resuming ----------------------------------------------------------------------------

    @property
    def waiting(self) -> bool:
        """True when calls of the current round wait for a person: the round pauses instead of committing."""
        return bool(self._waiting)

    async def pause(
        self,
        inv: Invocation,
        response: ChatResponse,
        round: int,
        finished: list[ToolExecution],
        carried: list[ChatMessage],
        emit: Listener | None,
    ) -> PendingApproval:
        """The paused round's state, recorded where a resume will claim it, and announced to listeners."""
        pending = _paused(inv, response, round, self._waiting, finished, carried)
        self._waiting = []
        await _record(inv.memory, pending)
        if emit is not None:
            await emit(ApprovalRequired(pending))
        return pending

    async def resume(self, toolset: Toolset, inv: Invocation) -> ChatResponse:
        """Claims the paused round (once) and hands back its response, to run as if the model just sent it
        (without its usage, which the paused invocation counted)."""
        resumed = self.resumed
        assert resumed is not None
        pending = resumed.pending
        for request in pending.requests:
            if resumed.decisions[request.call_id] is True and request.tool_name not in toolset:
                raise ApprovalError(
                    f"Call {request.call_id!r} was approved, but this agent has no tool "
                    f"{request.tool_name!r} (build the agent with the same tools as the one that paused); "
                    "nothing ran",
                    call_id=request.call_id,
                    pending_id=pending.id,
                )
        await _claim(inv.memory, pending)
        return msgspec.structs.replace(pending.response, token_usage=None)


def _denied(
    request: ToolApprovalRequest,
    tool: Tool | None,
    decision: bool | Denied | Defer | type[Defer],
    clock: Callable[[], datetime],
) -> ToolExecution:
    reason = decision.reason if isinstance(decision, Denied) else None
    text = reason or f"The user denied this call of tool {request.tool_name!r}; it did not run."
    now = clock()
    return ToolExecution(
        request.request,
        text,
        None,
        ToolDeniedError(text, call_id=request.call_id, tool_name=request.tool_name),
        request.index,
        request.round,
        now,
        now,
        0.0,
        tool.return_behavior if tool is not None else ReturnBehavior.TO_LLM,
        True,
    )


async def _truth(value: Any, what: str) -> bool:
    if inspect.isawaitable(value):
        value = await value
    if not isinstance(value, bool):
        raise IllegalConfigurationError(
            f"{what} must return True or False, got {value!r} (a missing return must not let a call run "
            "unasked)"
        )
    return value
