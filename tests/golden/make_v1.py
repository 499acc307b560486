"""How the version-1 golden records were written: run once with the code of main at 587dd80 (before the seam
refactor), `PYTHONPATH=<that checkout> python tests/golden/make_v1.py`. Kept for the record; never re-run it
over the checked-in files (tests/values/test_golden_records.py reads them and they must stay as written)."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parents[1]))
from store_servers import redis_server

from agentloop import Agent, Denied, MessageWindowChatMemory, ToolExecutionRequest, tool
from agentloop._values._codec import encode
from agentloop._values._messages import AiMessage
from agentloop.dbos._agent import encode_decisions, encode_result
from agentloop.stores import RedisChatMemoryStore, SQLiteChatMemoryStore
from agentloop.testing import ScriptedChatModel

HERE = Path(__file__).parent


@tool("Pays someone", requires_approval=True)
def pay(to: str, amount: int) -> str:
    return f"paid {amount} to {to}"


@tool("Deletes a file", requires_approval=True)
def delete_file(path: str) -> str:
    return f"deleted {path}"


@tool("Looks someone up")
def lookup(name: str) -> str:
    if name == "eve":
        raise ValueError("no such person: eve")
    return f"{name} is a friend"


def mixed() -> AiMessage:
    return AiMessage(
        None,
        [
            ToolExecutionRequest("c_pay", "pay", '{"to":"bob","amount":5}'),
            ToolExecutionRequest("c_look", "lookup", '{"name":"bob"}'),
            ToolExecutionRequest("c_eve", "lookup", '{"name":"eve"}'),
            ToolExecutionRequest("c_del", "delete_file", '{"path":"/tmp/x"}'),
        ],
    )


def handler(request: object) -> object:
    from agentloop import Defer

    return Defer if request.tool_name == "pay" else Denied("not that file")  # type: ignore[attr-defined]


async def main() -> None:
    # A paused round: one call waits, one was denied, one ran, one failed.
    agent = Agent(
        ScriptedChatModel([mixed(), "done"]), tools=[pay, delete_file, lookup], approval_handler=handler
    )
    paused = await agent.chat("pay bob, look up bob and eve, delete /tmp/x", memory_id="ann")
    assert paused.pending is not None
    (HERE / "approval" / "pending_approval-v1.json").write_bytes(paused.pending.to_json())

    # DBOS records: a finished invocation's result, decisions sent to a paused run, one tool step.
    done = await Agent(
        ScriptedChatModel([mixed(), "done"]),
        tools=[lookup, pay, delete_file],
        approval_handler=lambda r: Denied("no") if r.tool_name == "delete_file" else True,
    ).chat("go")
    (HERE / "dbos" / "result-v1.json").write_bytes(encode_result(done))
    (HERE / "dbos" / "decisions-v1.json").write_bytes(
        encode_decisions({"c_pay": Denied("not today")}, paused.pending.id)
    )
    denied = next(e for e in done.tool_executions if e.request.id == "c_del")
    (HERE / "dbos" / "tool_execution-v1.json").write_bytes(encode(denied, "tool_execution"))
    failed = next(e for e in done.tool_executions if e.request.id == "c_eve")
    (HERE / "dbos" / "tool_execution_error-v1.json").write_bytes(encode(failed, "tool_execution"))

    # Store rows: a conversation of two invocations and a paused round, in SQLite and in Redis.
    db = HERE / "stores" / "sqlite-v1.sqlite"
    db.unlink(missing_ok=True)
    async with SQLiteChatMemoryStore(db) as store:
        await run_in(store)
    with sqlite3.connect(db) as con:
        con.execute("VACUUM")
    with redis_server() as url:
        store = RedisChatMemoryStore(url, prefix="golden")
        await run_in(store)
        import redis

        client = redis.Redis.from_url(url)
        dump = {}
        for key in sorted(client.keys("golden*")):
            kind = client.type(key).decode()
            if kind == "string":
                value = client.get(key).decode()
            elif kind == "hash":
                value = {k.decode(): v.decode() for k, v in client.hgetall(key).items()}
            elif kind == "list":
                value = [v.decode() for v in client.lrange(key, 0, -1)]
            elif kind == "zset":
                value = [[m.decode(), s] for m, s in client.zrange(key, 0, -1, withscores=True)]
            else:
                raise RuntimeError(f"unexpected redis type {kind}")
            dump[key.decode()] = {"type": kind, "value": value}
        await store.aclose()
    (HERE / "stores" / "redis-v1.json").write_text(json.dumps(dump, indent=1, sort_keys=True) + "\n")


async def run_in(store: object) -> None:
    agent = Agent(
        ScriptedChatModel(["Hello.", mixed(), "done"]),
        tools=[pay, delete_file, lookup],
        approval_handler=handler,
        memory=MessageWindowChatMemory.provider(50, store=store),  # type: ignore[arg-type]
    )
    await agent.chat("hi", memory_id="ann")
    paused = await agent.chat("pay bob, look up bob and eve, delete /tmp/x", memory_id="ann")
    assert paused.pending is not None


if __name__ == "__main__":
    anyio.run(main)
