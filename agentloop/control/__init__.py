"""Run control: reach a running invocation (cancel it, steer it) from this process or any other.

A `RunControl` is where running invocations register and where commands for them are sent:
`LocalRunControl` (one process, the default), `SQLiteRunControl(path)` (processes on one machine) and
`RedisRunControl(url)` (processes anywhere, extra `redis`). An invocation registers for as long as it runs
(`async with control.running(invocation_id, memory_id) as inbox`) and reads its commands from the inbox;
`await control.send(command, invocation_id=... | memory_id=...)` delivers a command and says whether any
running invocation received it.

Importing this package imports neither `redis` nor `sqlite3`; each loads with its class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._public import publish, publish_one
from ._base import Inbox, RunControl
from ._command import RunCommand
from ._local import LocalRunControl

if TYPE_CHECKING:
    from ._redis import RedisRunControl
    from ._sqlite import SQLiteRunControl

__all__ = ["Inbox", "LocalRunControl", "RedisRunControl", "RunCommand", "RunControl", "SQLiteRunControl"]


def __getattr__(name: str) -> Any:
    if name == "RedisRunControl":
        from ._redis import RedisRunControl

        return publish_one(RedisRunControl, __name__)
    if name == "SQLiteRunControl":  # loaded on first use: `import agentloop` (the Agent's default
        from ._sqlite import SQLiteRunControl  # LocalRunControl) does not import sqlite3

        return publish_one(SQLiteRunControl, __name__)
    raise AttributeError(f"module 'agentloop.control' has no attribute {name!r}")


publish(globals(), __all__, __name__)
