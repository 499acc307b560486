"""Many workers, measured: the web example's app on 1, 2 and 4 uvicorn workers sharing one Redis store, and
durable runs on DBOS with PostgreSQL with 1 and 2 executors.

    python benchmarks/scale.py [--workers 1,2,4] [--clients 2000] [--tokens 50] [--executors 1,2]
        [--dbos-runs 300] [--no-dbos] [--plot benchmarks/scale.png] [--json PATH]

Everything runs on 127.0.0.1 and is started here: `redis-server` (a temp dir, no persistence), the fake
OpenAI server (`fakeserver.py`: 3 parallel tool calls, then T streamed tokens), uvicorn serving
`_scale_app.py` (examples/fastapi_sse.py's `create_app` with a Redis-backed agent) and, for the DBOS part,
a PostgreSQL cluster (`initdb` / `pg_ctl` in a temp dir) with `_scale_dbos.py` executors.

Web part, per worker count: `--clients` streaming clients at once (raw HTTP/1.0 over loopback, each its own
memory id), each `GET /chat` read to the end of its event stream. Measured: sessions/s, time to the first
`token` event and to the end of the stream (p50 / p99), resident memory of the workers (peak during the
load minus before it, per client in flight) and Redis commands per session (INFO commandstats). Checked:
every session's text (token by token), its 3 tool results, the `done` event, and afterwards its memory in
Redis (question, 3 calls, 3 results, the answer). A session over `--timeout` seconds counts as failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from _workload import QUESTION, Scenario, text_tokens, tool_result  # noqa: E402
from run import FakeServer  # noqa: E402

from agentloop import AiMessage, ToolExecutionResultMessage, UserMessage  # noqa: E402
from tests.store_servers import free_port, postgres_bin, postgres_server  # noqa: E402


def loadavg() -> list[str]:
    return Path("/proc/loadavg").read_text().split()[:3]


def raise_open_files() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def wait_port(port: int, timeout: float, process: subprocess.Popen[Any] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server on port {port} exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


@contextmanager
def redis_server() -> Iterator[tuple[str, int]]:
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("redis-server is not installed (apt-get install redis-server)")
    folder = tempfile.mkdtemp(prefix="agentloop-scale-redis-")
    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            folder,
            "--maxclients",
            "20000",
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_port(port, 10, process)
        yield f"redis://127.0.0.1:{port}/0", process.pid
    finally:
        process.terminate()
        process.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


def redis_command(port: int, *words: str) -> str:
    """One command over a raw socket (RESP), the answer as text (INFO's bulk string)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            f"*{len(words)}\r\n".encode() + b"".join(f"${len(w)}\r\n{w}\r\n".encode() for w in words)
        )
        data = b""
        while True:
            data += sock.recv(65536)
            if data.startswith(b"$"):
                size, _, rest = data[1:].partition(b"\r\n")
                if len(rest) >= int(size) + 2:
                    return rest[: int(size)].decode()
            elif data.endswith(b"\r\n"):
                return data.decode()


def command_stats(port: int) -> dict[str, int]:
    stats = {}
    for line in redis_command(port, "INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_"):
            name, _, fields = line[8:].partition(":")
            stats[name] = int(dict(f.split("=") for f in fields.split(","))["calls"])
    return stats


def rss_kb(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as status:
                total += next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            pass
    return total


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return found


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))] if ordered else float("nan")


# -- the web part --------------------------------------------------------------------------------------------


async def sse_session(port: int, user: str, expected: list[str], timeout: float) -> dict[str, Any]:
    """One client: `GET /chat` over HTTP/1.0, the event stream read to its end and checked."""
    started = time.perf_counter()
    first: float | None = None
    problems: list[str] = []
    tokens: list[str] = []
    results: list[str] = []
    done: dict[str, Any] | None = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            query = QUESTION.replace(" ", "+")
            writer.write(f"GET /chat?q={query}&user={user} HTTP/1.0\r\nHost: bench\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                problems.append(f"status {head[:40]!r}")
            event = ""
            while line := await reader.readline():
                text = line.decode().rstrip("\n")
                if text.startswith("event: "):
                    event = text[7:]
                elif text.startswith("data: "):
                    data = json.loads(text[6:])
                    if event == "token":
                        if first is None:
                            first = time.perf_counter() - started
                        tokens.append(data["text"])
                    elif event == "tool_result":
                        results.append(data["result"])
                    elif event == "done":
                        done = data
                    elif event == "error":
                        problems.append(f"error event: {data}")
            writer.close()
    except (TimeoutError, OSError, asyncio.IncompleteReadError) as error:
        problems.append(f"{type(error).__name__}: {error}")
    if tokens != expected:
        problems.append(f"{len(tokens)} tokens, not the {len(expected)} expected, one by one")
    if sorted(results) != [tool_result(f"k{i}") for i in range(3)]:
        problems.append(f"tool results {results}")
    if done is None or done.get("tools") != 3 or done.get("content") != "".join(expected):
        problems.append(f"done event {done!r:.120}")
    return {"total": time.perf_counter() - started, "ttft": first, "problems": problems}


async def drive_clients(port: int, prefix: str, count: int, expected: list[str], timeout: float) -> list[Any]:
    return await asyncio.gather(*(sse_session(port, f"{prefix}{i}", expected, timeout) for i in range(count)))


async def check_memory(url: str, users: list[str], expected: str) -> list[str]:
    """Every session's memory in Redis: the question, one AI message with 3 calls, 3 results, the answer."""
    from agentloop.stores import RedisChatMemoryStore

    problems = []
    async with RedisChatMemoryStore(url) as store:
        for user in users:
            messages = await store.get_messages(user)
            kinds = [type(m).__name__ for m in messages]
            ok = (
                len(messages) == 6
                and isinstance(messages[0], UserMessage)
                and messages[0].text == QUESTION
                and isinstance(messages[1], AiMessage)
                and len(messages[1].tool_execution_requests) == 3
                and all(isinstance(m, ToolExecutionResultMessage) for m in messages[2:5])
                and isinstance(messages[5], AiMessage)
                and messages[5].text == expected
            )
            if not ok:
                problems.append(f"memory {user}: {kinds}")
    return problems


def web_run(
    workers: int, clients: int, tokens: int, redis: tuple[str, int], model_url: str, timeout: float
) -> dict[str, Any]:
    url, _ = redis
    redis_port = int(url.rsplit(":", 1)[1].split("/")[0])
    port = free_port()
    env = {**os.environ, "SCALE_REDIS_URL": url, "SCALE_MODEL_URL": model_url, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "_scale_app:app",
            "--app-dir",
            str(HERE),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--log-level",
            "warning",
            "--no-access-log",
            "--backlog",
            "4096",
            "--timeout-keep-alive",
            "5",
        ],
        env=env,
    )
    expected = text_tokens(tokens)
    try:
        wait_port(port, 60, server)
        deadline = time.monotonic() + 60
        while workers > 1 and len(children(server.pid)) < workers and time.monotonic() < deadline:
            time.sleep(0.1)  # one worker: uvicorn serves in its own process, no child
        # Warm every worker: enough sessions that each imports and connects before measuring.
        warm = asyncio.run(drive_clients(port, f"w{workers}-warm", 20 * workers, expected, timeout))
        bad = [r["problems"] for r in warm if r["problems"]]
        if bad:
            raise RuntimeError(f"warm-up sessions failed: {bad[:3]}")
        time.sleep(0.5)
        pids = children(server.pid) if workers > 1 else [server.pid]
        base_rss = rss_kb(pids)
        stats_before = command_stats(redis_port)
        peak = [base_rss]
        prefix = f"w{workers}-"

        async def measured() -> tuple[list[Any], float]:
            async def sample() -> None:
                while True:
                    peak[0] = max(peak[0], rss_kb(pids))
                    await asyncio.sleep(0.2)

            sampler = asyncio.ensure_future(sample())
            started = time.perf_counter()
            results = await drive_clients(port, prefix, clients, expected, timeout)
            wall = time.perf_counter() - started
            sampler.cancel()
            return results, wall

        load_before = loadavg()
        results, wall = asyncio.run(measured())
        stats_after = command_stats(redis_port)
        calls = {k: stats_after.get(k, 0) - stats_before.get(k, 0) for k in stats_after}
        calls = {k: v for k, v in calls.items() if v and k not in ("info",)}
        users = [f"{prefix}{i}" for i in range(clients)]
        memory_problems = asyncio.run(check_memory(url, users, "".join(expected)))
        failed = [r["problems"] for r in results if r["problems"]]
        ttft = [r["ttft"] for r in results if r["ttft"] is not None]
        total = [r["total"] for r in results if not r["problems"]]
        return {
            "workers": workers,
            "clients": clients,
            "tokens": tokens,
            "wall_s": wall,
            "sessions_per_s": (clients - len(failed)) / wall,
            "ttft_p50_ms": percentile(ttft, 0.5) * 1000,
            "ttft_p99_ms": percentile(ttft, 0.99) * 1000,
            "total_p50_ms": percentile(total, 0.5) * 1000,
            "total_p99_ms": percentile(total, 0.99) * 1000,
            "rss_base_mb": base_rss / 1024,
            "rss_per_session_kb": (peak[0] - base_rss) / clients,
            "redis_commands_per_session": sum(calls.values()) / clients,
            "redis_commands": {k: round(v / clients, 2) for k, v in sorted(calls.items())},
            "failed": len(failed),
            "failures": [p for p in failed[:3]],
            "memory_failed": len(memory_problems),
            "memory_failures": memory_problems[:3],
            "loadavg_before": load_before,
            "loadavg_after": loadavg(),
        }
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


# -- the DBOS part -------------------------------------------------------------------------------------------


@contextmanager
def postgres() -> Iterator[str]:
    bindir = postgres_bin()
    if bindir is None:
        sys.exit("PostgreSQL's server binaries are not installed (apt-get install postgresql)")
    with postgres_server(bindir, "agentloop_scale") as url:
        yield url


def dbos_run(
    executors: int, runs: int, tokens: int, db: str, redis_url: str, model_url: str
) -> dict[str, Any]:
    """`executors` processes on one system database, each running `runs // executors` durable runs."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    tag = f"e{executors}x"
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                str(HERE / "_scale_dbos.py"),
                "--db",
                db,
                "--redis",
                redis_url,
                "--base-url",
                model_url,
                "--executor",
                f"{tag}{n}",
                "--runs",
                str(runs // executors),
                "--tokens",
                str(tokens),
            ],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(executors)
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            line = process.stdout.readline()
            if line.strip() != "READY":
                raise RuntimeError(f"a DBOS executor did not start (said {line!r})")
        load_before = loadavg()
        started = time.perf_counter()
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        reports = []
        for process in processes:
            assert process.stdout is not None
            reports.append(json.loads(process.stdout.readline()))
        wall = time.perf_counter() - started
        users = [f"{tag}{n}-{i}" for n in range(executors) for i in range(runs // executors)]
        memory_problems = asyncio.run(check_memory(redis_url, users, "".join(text_tokens(tokens))))
        done = sum(r["runs"] - r["failed"] for r in reports)
        return {
            "executors": executors,
            "runs": sum(r["runs"] for r in reports),
            "wall_s": wall,
            "runs_per_s": done / wall,
            "cpu_ms_per_run": 1000 * sum(r["cpu_s"] for r in reports) / max(1, done),
            "failed": sum(r["failed"] for r in reports),
            "failures": [f for r in reports for f in r["failures"]][:3],
            "memory_failed": len(memory_problems),
            "memory_failures": memory_problems[:3],
            "loadavg_before": load_before,
            "loadavg_after": loadavg(),
        }
    finally:
        for process in processes:
            if process.stdin is not None:
                process.stdin.close()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# -- reporting -----------------------------------------------------------------------------------------------


def plot(web: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workers = [r["workers"] for r in web]
    figure, left = plt.subplots(figsize=(6, 4))
    left.plot(workers, [r["sessions_per_s"] for r in web], "o-", color="tab:blue", label="sessions/s")
    left.set_xlabel("uvicorn workers (2-core machine)")
    left.set_ylabel("sessions/s", color="tab:blue")
    left.set_xticks(workers)
    right = left.twinx()
    right.plot(workers, [r["total_p99_ms"] for r in web], "s--", color="tab:red", label="p99 ms")
    right.plot(workers, [r["ttft_p99_ms"] for r in web], "^:", color="tab:orange", label="TTFT p99 ms")
    right.set_ylabel("p99 ms (session, first token)", color="tab:red")
    clients = web[0]["clients"]
    left.set_title(f"fastapi_sse + Redis store, {clients} concurrent streaming clients")
    figure.legend(loc="upper center", bbox_to_anchor=(0.5, 0.88), fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def checked(r: dict[str, Any]) -> str:
    if not r["failed"] and not r["memory_failed"]:
        return "all pass"
    return f"{r['failed']} failed, {r['memory_failed']} memories wrong"


def markdown(web: list[dict[str, Any]], dbos: list[dict[str, Any]]) -> str:
    lines = [
        "| workers | sessions/s | TTFT p50 / p99 ms | total p50 / p99 ms | RSS per session KB | "
        "Redis commands / session | checks | load before → after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in web:
        checks = (
            "all pass"
            if not r["failed"] and not r["memory_failed"]
            else f"{r['failed']} + {r['memory_failed']} memory failed"
        )
        lines.append(
            f"| {r['workers']} | {r['sessions_per_s']:.0f} | "
            f"{r['ttft_p50_ms']:.0f} / {r['ttft_p99_ms']:.0f} | "
            f"{r['total_p50_ms']:.0f} / {r['total_p99_ms']:.0f} | {r['rss_per_session_kb']:.1f} | "
            f"{r['redis_commands_per_session']:.1f} | {r['clients']} {checks} | "
            f"{' '.join(r['loadavg_before'])} → {' '.join(r['loadavg_after'])} |"
        )
    if dbos:
        lines += [
            "",
            "| DBOS executors | runs/s | CPU ms / run (executors) | checks | load before → after |",
            "|---|---|---|---|---|",
        ]
        for r in dbos:
            checks = (
                "all pass"
                if not r["failed"] and not r["memory_failed"]
                else f"{r['failed']} + {r['memory_failed']} memory failed"
            )
            lines.append(
                f"| {r['executors']} | {r['runs_per_s']:.1f} | {r['cpu_ms_per_run']:.1f} | "
                f"{r['runs']} {checks} | "
                f"{' '.join(r['loadavg_before'])} → {' '.join(r['loadavg_after'])} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--clients", type=int, default=2000)
    parser.add_argument("--tokens", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds a session may take")
    parser.add_argument("--executors", default="1,2")
    parser.add_argument("--dbos-runs", type=int, default=300)
    parser.add_argument("--no-dbos", action="store_true")
    parser.add_argument("--plot", type=Path, default=HERE / "scale.png")
    parser.add_argument("--json", type=Path, default=HERE / "scale.json")
    args = parser.parse_args()
    if not 1 <= args.clients <= 2000:
        sys.exit("--clients must be between 1 and 2000")
    raise_open_files()
    tokens = args.tokens
    web: list[dict[str, Any]] = []
    dbos: list[dict[str, Any]] = []
    with ExitStack() as stack:
        model = FakeServer()
        stack.callback(model.close)
        model_url = Scenario(tools=3, tokens=tokens).base_url(model.port)
        redis = stack.enter_context(redis_server())
        for workers in (int(w) for w in args.workers.split(",")):
            result = web_run(workers, args.clients, tokens, redis, model_url, args.timeout)
            print(json.dumps(result), flush=True)
            web.append(result)
        if not args.no_dbos:
            db = stack.enter_context(postgres())
            for executors in (int(e) for e in args.executors.split(",")):
                result = dbos_run(executors, args.dbos_runs, tokens, db, redis[0], model_url)
                print(json.dumps(result), flush=True)
                dbos.append(result)
    args.json.write_text(json.dumps({"web": web, "dbos": dbos}, indent=1))
    if web and args.plot:
        plot(web, args.plot)
    print(markdown(web, dbos))
    if any(r["failed"] or r["memory_failed"] for r in web + dbos):
        sys.exit(1)


if __name__ == "__main__":
    main()
