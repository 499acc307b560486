"""Stored formats pinned both ways: records written by an older release still load (paused rounds, DBOS
records, store rows), and today's writer produces the `*-current.json` files byte for byte.

The `*-v1` files in tests/golden/{approval,dbos,stores}/ were written by main at 587dd80, before the seam
refactor (tests/golden/make_v1.py shows how). They are never edited: a format change adds an upgrade step, and
these tests prove that a user's saved data survives it. The `*-current.json` files come from
tests/golden_writer.py (fixed values: every message kind, every kind of tool error, a format-2 paused round
with a call's own options, a DBOS result and decisions, a store row's body).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from agentloop import (
    Agent,
    AiMessage,
    Denied,
    FinishReason,
    InMemoryChatMemoryStore,
    MessageWindowChatMemory,
    PendingApproval,
    ToolDeniedError,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
    tool,
)
from agentloop._values import _codec
from agentloop.testing import ScriptedChatModel
from tests.golden_writer import documents
from tests.store_servers import redis_url  # noqa: F401 (fixture)

GOLDEN = Path(__file__).parents[1] / "golden"
ASKED = "pay bob, look up bob and eve, delete /tmp/x"
CALLS = [
    ToolExecutionRequest("c_pay", "pay", '{"to":"bob","amount":5}'),
    ToolExecutionRequest("c_look", "lookup", '{"name":"bob"}'),
    ToolExecutionRequest("c_eve", "lookup", '{"name":"eve"}'),
    ToolExecutionRequest("c_del", "delete_file", '{"path":"/tmp/x"}'),
]
RAN: list[str] = []


@tool("Pays someone", requires_approval=True)
def pay(to: str, amount: int) -> str:
    RAN.append("pay")
    return f"paid {amount} to {to}"


@tool("Deletes a file", requires_approval=True)
def delete_file(path: str) -> str:
    RAN.append("delete_file")
    return f"deleted {path}"


@tool("Looks someone up")
def lookup(name: str) -> str:
    if name == "eve":
        raise ValueError("no such person: eve")
    return f"{name} is a friend"


def agent(answers: list[Any], **options: Any) -> Agent:
    return Agent(ScriptedChatModel(answers), tools=[pay, delete_file, lookup], **options)


async def test_a_pending_approval_of_format_1_loads_and_resumes() -> None:
    pending = PendingApproval.from_json((GOLDEN / "approval" / "pending_approval-v1.json").read_bytes())
    assert pending.memory_id == "ann" and pending.round == 1
    assert [r.call_id for r in pending.requests] == ["c_pay"]
    finished = {e.request.id: e for e in pending.executions}
    assert finished["c_look"].result == "bob is a friend"
    assert finished["c_eve"].is_error and "no such person: eve" in finished["c_eve"].result
    assert isinstance(finished["c_del"].error, ToolDeniedError)  # the stored name still means "denied"
    RAN.clear()
    store = InMemoryChatMemoryStore()  # as the store of the process that paused would hold the round
    await store.save_pending_approval("ann", pending.id, pending.record)
    memory = MessageWindowChatMemory.provider(50, store=store)
    resumed = await agent(["paid."], memory=memory).resume(pending, {"c_pay": True})
    assert resumed.content == "paid." and RAN == ["pay"]
    results = [m for m in resumed.messages if isinstance(m, ToolExecutionResultMessage)]
    assert [m.id for m in results] == ["c_pay", "c_look", "c_eve", "c_del"]  # the model's order


def test_dbos_records_of_format_1_load() -> None:
    from agentloop.dbos._agent import _decisions_for, decode_result

    result = decode_result((GOLDEN / "dbos" / "result-v1.json").read_bytes())
    assert result.content == "done" and result.finish_reason is FinishReason.STOP
    errors = {e.request.id: e.error for e in result.tool_executions}
    assert getattr(errors["c_del"], "error_type", type(errors["c_del"]).__name__).endswith("ToolDeniedError")
    assert errors["c_pay"] is None and errors["c_eve"] is not None
    denied = _codec.decode((GOLDEN / "dbos" / "tool_execution-v1.json").read_bytes(), "tool_execution")
    assert denied.request.id == "c_del" and denied.is_error
    failed = _codec.decode((GOLDEN / "dbos" / "tool_execution_error-v1.json").read_bytes(), "tool_execution")
    assert "ValueError" in getattr(failed.error, "error_type", "")
    pending = PendingApproval.from_json((GOLDEN / "approval" / "pending_approval-v1.json").read_bytes())
    decisions = _decisions_for(pending, (GOLDEN / "dbos" / "decisions-v1.json").read_bytes())
    assert decisions == {"c_pay": Denied("not today")}


def conversation_so_far() -> list[Any]:
    return [UserMessage("hi"), AiMessage("Hello.")]


async def resume_from_store(store: Any) -> None:
    """The stored conversation reads back, and the paused round stored beside it resumes once."""
    memory = MessageWindowChatMemory.provider(50, store=store)
    assert await store.get_messages("ann") == conversation_so_far()
    paused = await agent([CALLS_MESSAGE], approval_handler=None, memory=memory).chat(ASKED, memory_id="ann")
    assert paused.pending is not None  # a new pause beside the old record: both coexist
    resumed = await agent(["paid."], memory=memory).resume(paused.pending, {"c_pay": True, "c_del": False})
    assert resumed.content == "paid."
    messages = await store.get_messages("ann")
    assert messages[:2] == conversation_so_far() and messages[-1] == AiMessage("paid.")


CALLS_MESSAGE = AiMessage(None, CALLS)


async def test_sqlite_rows_of_format_1_load(tmp_path: Path) -> None:
    from agentloop.stores import SQLiteChatMemoryStore

    path = tmp_path / "old.sqlite"
    shutil.copy(GOLDEN / "stores" / "sqlite-v1.sqlite", path)
    async with SQLiteChatMemoryStore(path) as store:
        await resume_from_store(store)


async def test_redis_rows_of_format_1_load(redis_url: str) -> None:  # noqa: F811
    import redis

    from agentloop.stores import RedisChatMemoryStore

    dump = json.loads((GOLDEN / "stores" / "redis-v1.json").read_text())
    client = redis.Redis.from_url(redis_url)  # sync: redis.asyncio runs on asyncio only
    prefix = f"golden{id(dump)}"
    try:
        for key, entry in dump.items():
            key = key.replace("golden", prefix, 1)
            value = entry["value"]
            if entry["type"] == "string":
                client.set(key, value)
            elif entry["type"] == "hash":
                client.hset(key, mapping=value)
            elif entry["type"] == "list":
                client.rpush(key, *value)
            elif entry["type"] == "zset":
                client.zadd(key, {member: score for member, score in value})
        store = RedisChatMemoryStore(redis_url, prefix=prefix)
        try:
            await resume_from_store(store)
        finally:
            await store.aclose()
    finally:
        keys = client.keys(f"{prefix}*")
        if keys:
            client.delete(*keys)
        client.close()


# -- today's writer, pinned byte for byte --------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(documents()))
def test_todays_writer_produces_the_current_golden_files(path: str) -> None:
    """A change to what is stored shows here: bump the format, keep the old file, write the new one
    (`python -m tests.golden_writer`)."""
    assert documents()[path] == (GOLDEN / path).read_bytes()


def test_the_current_golden_files_read_back_as_written() -> None:
    from agentloop.dbos._agent import decode_result
    from tests.golden_writer import executions, messages, response

    assert list(_codec.decode((GOLDEN / "codec" / "messages-current.json").read_bytes())) == messages()
    assert _codec.decode((GOLDEN / "codec" / "chat_response-current.json").read_bytes()) == response()
    request = _codec.decode((GOLDEN / "codec" / "chat_request-current.json").read_bytes())
    assert list(request.messages) == messages() and request.tool_specifications[0].name == "lookup"
    read = _codec.decode((GOLDEN / "codec" / "tool_executions-current.json").read_bytes())
    written = executions()
    assert [e.request for e in read] == [e.request for e in written]
    assert [e.result_object for e in read] == [e.result_object for e in written]
    kinds = [getattr(e.error, "error_type", None) for e in read]
    assert kinds == [
        None,
        None,
        None,
        "ValueError",
        "agentloop.ToolDeniedError",
        "agentloop.ToolArgumentsError",
        "agentloop.ToolExecutionError",
        "agentloop.HallucinatedToolError",
        "agentloop.MCPToolError",
        "agentloop.MCPServerError",
        "someapp.errors.Boom",
        "tests.golden_writer.AppError",
    ]
    body = (GOLDEN / "stores" / "round_body-current.json").read_bytes()
    assert _codec.decode_messages(body) == messages()[1:]
    pending = PendingApproval.from_json((GOLDEN / "approval" / "pending_approval-current.json").read_bytes())
    assert pending.paused_with == ("tests.golden_writer.Answer", ("Audit",))
    assert [r.call_id for r in pending.requests] == ["c_pay"]
    assert isinstance({e.request.id: e for e in pending.executions}["c_del"].error, ToolDeniedError)
    result = decode_result((GOLDEN / "dbos" / "result-current.json").read_bytes())
    assert result.content == "done" and len(result.tool_executions) == len(written)
    assert result.final_response == response()


def test_every_golden_file_is_checked() -> None:
    """Each stored document under tests/golden/ (old formats and today's) is read by a test (here, or the
    feature's own: test_codec.py, test_compaction.py, ...)."""
    source = "".join(path.read_text() for path in Path(__file__).parents[1].rglob("test_*.py"))
    current = set(documents())
    for path in sorted(GOLDEN.rglob("*")):
        relative = path.relative_to(GOLDEN).as_posix()
        if path.is_dir() or relative.startswith("schemas/") or path.suffix == ".py":
            continue  # the schema goldens have their own test (test_schema.py)
        assert relative in current or path.name in source, f"{relative} is not read by any test"
