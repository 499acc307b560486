"""Every Python snippet of docs/memory.md runs, in order, against a real redis-server."""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import re
from pathlib import Path

import pytest

from .store_servers import redis_url  # noqa: F401 (fixture)

DOC = Path(__file__).resolve().parent.parent / "docs" / "memory.md"


async def test_memory_doc_snippets_run(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setenv("REDIS_URL", redis_url)
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) == 3
    namespace: dict[str, object] = {"__name__": "docs"}
    output = io.StringIO()
    for number, block in enumerate(blocks, 1):
        code = compile(
            block, f"docs/memory.md snippet {number}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        )
        with contextlib.redirect_stdout(output):
            outcome = eval(code, namespace)
            if inspect.iscoroutine(outcome):
                await outcome
    printed = output.getvalue().splitlines()
    assert printed[0] == "Your name is Ada."
    assert printed[1] == "['My name is Ada', 'Nice to meet you, Ada.', 'What is my name?']"
    assert "UserMessage(text='Hello')" in printed[2] and "AiMessage(text='Hi!'" in printed[2]
    assert printed[3].startswith('{"format":1,"kind":"chat_response","data":{"ai_message":{"type":"ai"')
