"""Every Python snippet of docs/serving.md runs, in order, against a real redis-server (the `RedisLimiter`
snippet). On asyncio only: the page's A2A server runs in process, and a2a-sdk's server is asyncio-only, as
the page says; the A2A client on trio is covered by tests/test_a2a.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.snippets import python_blocks, run_snippets

from .store_servers import redis_server

DOC = Path(__file__).resolve().parent.parent / "docs" / "serving.md"


@pytest.fixture(scope="module")
def serving_redis() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_serving_doc_snippets_run(serving_redis: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", serving_redis)
    blocks = python_blocks(DOC)
    assert len(blocks) == 5
    printed = (await run_snippets(blocks, "docs/serving.md", {"__name__": "docs"})).splitlines()
    assert printed[0] == "Echo -> You said: Hello"
    assert printed[1] == "You said: ping"
    assert printed[2] == "acme refused: acme 1"  # the second acme call, while the first holds the slot
    assert sorted(printed[3:5]) == ["acme done", "globex done"]
    assert printed[5] == "You said: Hello"
