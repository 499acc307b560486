"""A process that registers one running invocation with a shared run control and prints the commands it
receives, one JSON line each, until it receives a cancel
(tests/features/run_control/test_run_control_transport.py)."""

from __future__ import annotations

import json
import sys

import anyio

from agentloop.control import RedisRunControl, SQLiteRunControl


async def main(kind: str, where: str, invocation_id: str, memory_id: str) -> None:
    control = SQLiteRunControl(where) if kind == "sqlite" else RedisRunControl(where)
    async with control.running(invocation_id, memory_id) as inbox:
        print(json.dumps({"ready": invocation_id}), flush=True)
        while True:
            command = await inbox.receive()
            message = None if command.message is None else command.message.text
            print(
                json.dumps({"kind": command.kind, "reason": command.reason, "message": message}), flush=True
            )
            if command.kind == "cancel":
                return


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:5], backend=sys.argv[5])
