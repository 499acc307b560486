"""Every Python snippet of the README runs on its own, as a reader would paste it alone into a fresh
interpreter: each gets a namespace of its own, so a snippet that leans on a name defined by an earlier one
fails here with the reader's NameError."""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


async def test_readme_snippets_run() -> None:
    blocks = snippets()
    assert len(blocks) >= 7
    output = io.StringIO()
    for number, block in enumerate(blocks, 1):
        namespace: dict[str, object] = {"__name__": f"readme_snippet_{number}"}
        code = compile(block, f"README.md snippet {number}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        with contextlib.redirect_stdout(output):
            outcome = eval(code, namespace)
            if inspect.iscoroutine(outcome):
                await outcome
        main = namespace.pop("main", None)  # the `asyncio.run(main())` form: run its body here
        if main is not None:
            with contextlib.redirect_stdout(output):
                await main()  # type: ignore[operator]
    printed = output.getvalue()
    assert "The square root of 475695037565 is 689706.486532." in printed
    assert "Let me compute that. 2 + 3 = 5." in printed
    assert "Rent paid. Sent 1200 EUR to landlord" in printed
    assert "category='billing' urgent=True" in printed
    assert "4 messages stored for bob" in printed  # two exchanges
    assert "sk-..." not in printed and "sk-ant-..." not in printed  # provider reprs never show keys
    assert "tool calls, in a script" in printed and "tool calls, blocking" in printed


def test_readme_stays_a_front_door() -> None:
    # Issue 38: at most 250 lines and 2 tables; measurements and their history live in benchmarks/RESULTS.md
    # and docs/local-model.md, the install story in docs/install.md.
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    assert len(re.findall(r"^\|[ :-]*-{3}", text, flags=re.MULTILINE)) <= 2
    for link in re.findall(r"\]\(((?:docs|benchmarks)/[^)#]+|CHANGELOG\.md)", text):
        assert (README.parent / link).exists(), f"README links to {link}, which does not exist"
