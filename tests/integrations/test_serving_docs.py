"""Every Python snippet of docs/serving.md runs, in order, as a reader would paste them.

The page's first part (the OpenAI-compatible endpoint, cassettes) runs on asyncio and trio, as the other
pages do in tests/project/test_docs.py. Its A2A and keyed-limits part runs on asyncio with a real
redis-server (the
`RedisLimiter` snippet): its A2A server runs in process, and a2a-sdk's server is asyncio-only, as the page
says; the A2A client on trio is covered by tests/integrations/test_a2a.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.snippets import FENCE, python_blocks, run_snippets
from tests.store_servers import redis_server

DOC = Path(__file__).resolve().parents[2] / "docs" / "serving.md"
A2A_HEADING = "## Agent2Agent (A2A)"


def halves() -> tuple[list[str], list[str]]:
    """The python blocks before the A2A section, and from it on."""
    text = DOC.read_text()
    before, after = text.split(A2A_HEADING, 1)
    return python_blocks_of(before), python_blocks_of(A2A_HEADING + after)


def python_blocks_of(text: str) -> list[str]:
    """The ```python blocks of `text`, in order (as `python_blocks` reads a file's)."""
    return FENCE.findall(text)


@pytest.fixture(scope="module")
def serving_redis() -> Iterator[str]:
    with redis_server() as url:
        yield url


async def test_the_endpoint_and_cassette_snippets_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-docs-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-docs-test")
    for variable in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    blocks, _ = halves()
    printed = await run_snippets(blocks, "docs/serving.md", {"__name__": "docs_serving"})
    for expected in [
        "'Adding.\\n\\n2 + 3 = 5.' stop",
        "Streamed|,| word| by| word|.|",
        "True Hello from the real model.",
        "False Hello from the real model. True",
        "False",
        "request #1 (POST /v1/chat/completions) does not match recorded exchange #1 of hello.yaml: "
        "$.messages[0].content: recorded 'Hi', now 'Bye'",
    ]:
        assert expected in printed, f"docs/serving.md: {expected!r} not printed; got {printed!r}"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_a2a_and_keyed_limits_snippets_run(
    serving_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_URL", serving_redis)
    _, blocks = halves()
    assert len(blocks) == 5
    assert len(python_blocks(DOC)) == len(halves()[0]) + 5  # every block of the page runs in one test
    printed = (await run_snippets(blocks, "docs/serving.md", {"__name__": "docs_serving_a2a"})).splitlines()
    assert printed[0] == "Echo -> You said: Hello"
    assert printed[1] == "You said: ping"
    assert printed[2] == "acme refused: acme 1"  # the second acme call, while the first holds the slot
    assert sorted(printed[3:5]) == ["acme done", "globex done"]
    assert printed[5] == "You said: Hello"
