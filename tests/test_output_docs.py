"""Every Python snippet of docs/output.md runs, in order, as a reader would paste them."""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "output.md"


async def test_output_doc_snippets_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) == 4
    namespace: dict[str, object] = {"__name__": "output_doc"}
    printed = io.StringIO()
    for number, block in enumerate(blocks, 1):
        code = compile(
            block, f"docs/output.md snippet {number}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        )
        with contextlib.redirect_stdout(printed):
            outcome = eval(code, namespace)
            if inspect.iscoroutine(outcome):
                await outcome
    lines = printed.getvalue().splitlines()
    assert lines[0] == "Acme 99.5"
    assert lines[1] == "('total',) Input should be greater than or equal to 0"
    assert lines[2] == "customer='Acme' total=99.5"
    assert lines[3].startswith("Invoice(customer='")
    assert lines[-2] == "Invoice(customer='Acme Corporation', total=99.5)"
    assert lines[-1] == "True"
