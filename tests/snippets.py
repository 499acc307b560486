"""Runs a page's ```python snippets as a reader would paste them: in order, in one namespace, with top-level
`await` allowed. Shared by every test that checks a document's snippets."""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import re
from collections.abc import Sequence
from pathlib import Path

FENCE = re.compile(r"```python\n(.*?)```", flags=re.DOTALL)


def python_blocks(path: Path) -> list[str]:
    """The ```python blocks of the document at `path`, in order."""
    return FENCE.findall(path.read_text())


async def run_snippets(blocks: Sequence[str], label: str, namespace: dict[str, object]) -> str:
    """Runs `blocks` one after another in `namespace` (named `label ... snippet N` in tracebacks) and returns
    what they printed."""
    output = io.StringIO()
    for number, block in enumerate(blocks, 1):
        code = compile(block, f"{label} snippet {number}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        with contextlib.redirect_stdout(output):
            outcome = eval(code, namespace)
            if inspect.iscoroutine(outcome):
                await outcome
    return output.getvalue()
