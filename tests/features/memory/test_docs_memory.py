"""Every Python snippet of docs/memory.md runs, in order, against a real redis-server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.snippets import python_blocks, run_snippets
from tests.store_servers import redis_url  # noqa: F401 (fixture)

DOC = Path(__file__).resolve().parents[3] / "docs" / "memory.md"


async def test_memory_doc_snippets_run(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setenv("REDIS_URL", redis_url)
    blocks = python_blocks(DOC)
    assert len(blocks) == 3
    printed = (await run_snippets(blocks, "docs/memory.md", {"__name__": "docs"})).splitlines()
    assert printed[0] == "Your name is Ada."
    assert printed[1] == "['My name is Ada', 'Nice to meet you, Ada.', 'What is my name?']"
    assert "UserMessage(text='Hello')" in printed[2] and "AiMessage(text='Hi!'" in printed[2]
    assert printed[3].startswith('{"format":1,"kind":"chat_response","data":{"ai_message":{"type":"ai"')
