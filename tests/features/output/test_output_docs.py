"""Every Python snippet of docs/output.md runs, in order, as a reader would paste them."""

from __future__ import annotations

from pathlib import Path

from tests.snippets import python_blocks, run_snippets

DOC = Path(__file__).resolve().parents[3] / "docs" / "output.md"


async def test_output_doc_snippets_run() -> None:
    blocks = python_blocks(DOC)
    assert len(blocks) == 4
    printed = await run_snippets(blocks, "docs/output.md", {"__name__": "output_doc"})
    lines = printed.splitlines()
    assert lines[0] == "Acme 99.5"
    assert lines[1] == "('total',) Input should be greater than or equal to 0"
    assert lines[2] == "customer='Acme' total=99.5"
    assert lines[3].startswith("Invoice(customer='")
    assert lines[-2] == "Invoice(customer='Acme Corporation', total=99.5)"
    assert lines[-1] == "True"
