"""An A2A worker process: `a2a_app` on uvicorn, its tasks, memory and run control in the SQLite files of
DIRECTORY (shared with the test's own worker). Prints {"url": ...} once serving, then {"model": "started"}
and {"model": "cancelled"} as its model is held and let go (tests/integrations/test_a2a_workers.py).

    python a2a_worker.py DIRECTORY
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import uvicorn

from agentloop.a2a import a2a_app
from tests.a2a_shared import SQLiteTaskStore, worker_agent


def say(what: str) -> None:
    print(json.dumps({"model": what}), flush=True)


def main(directory: Path) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    agent = worker_agent(directory, on_hang=say)
    app = a2a_app(
        agent, name="Echo", description="Echoes.", task_store=SQLiteTaskStore(directory / "tasks.db")
    )
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    print(json.dumps({"url": f"http://127.0.0.1:{port}"}), flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main(Path(sys.argv[1]))
