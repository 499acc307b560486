"""Keyed limits under load: 5 worker processes (3 on asyncio, 2 on trio) run 2,000 invocations through one
`RedisLimiter` on a real redis-server. Every key's concurrency, gauged in Redis across all workers, never
goes past its limit (the busy key uses all of it); every invocation of every key finishes (the light key is
not starved by the heavy one; the longest wait per key is printed); no slot or queue entry is left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import redis

from tests.limits_worker import LIMIT
from tests.store_servers import redis_server

ROOT = Path(__file__).resolve().parents[3]
WORKERS = 5
INVOCATIONS = 2_000


def test_five_workers_2000_invocations_keep_every_key_within_its_limit() -> None:
    prefix = f"load-{uuid.uuid4().hex}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with redis_server() as url:
        workers = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.limits_worker",
                    url,
                    prefix,
                    str(n),
                    str(INVOCATIONS // WORKERS),
                    "trio" if n % 2 else "asyncio",
                ],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in range(WORKERS)
        ]
        done: Counter[str] = Counter()
        waited: dict[str, float] = {}
        for worker in workers:
            out, err = worker.communicate(timeout=300)
            assert worker.returncode == 0, err
            report = json.loads(out.splitlines()[-1])
            done.update(report["done"])
            for key, seconds in report["longest_wait"].items():
                waited[key] = max(waited.get(key, 0.0), seconds)
        print(f"longest wait for a slot, per key: {waited}")
        client = redis.Redis.from_url(url)
        most = {k.decode().rsplit(":", 1)[1]: int(client.get(k)) for k in client.keys(f"{prefix}:most:*")}
        now = {k.decode().rsplit(":", 1)[1]: int(client.get(k)) for k in client.keys(f"{prefix}:now:*")}
        zsets = [k for k in client.keys(f"{prefix}:limit:*") if client.type(k) == b"zset"]
        left = [k for k in zsets if client.zcard(k)]
        client.close()
    assert sum(done.values()) == INVOCATIONS
    assert set(done) == {"heavy", "medium", "light"} and done["light"] >= 90
    assert max(most.values()) == LIMIT, most  # never past the limit
    assert most["heavy"] == LIMIT  # and the busy key used all of it
    assert set(now.values()) == {0}
    assert left == []  # no slot held, nobody queued
