"""Structured output on the embedded local model: the answer is decoded under the output's JSON schema (a
grammar), so it always parses; the extracted values are checked."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import anyio
import pytest
from pydantic import BaseModel, Field

from agentloop import Agent
from agentloop.models._local import _with_schema


class Invoice(BaseModel):
    """The key fields of an invoice."""

    invoice_number: str
    customer: str = Field(description="Who the invoice is billed to")
    total: float = Field(description="The total amount due")
    currency: str = Field(description="The three-letter currency code of the total, as written")


TEXT = """INVOICE No. INV-7730
Billed to: Contoso Ltd
3 x Cable @ 5.00 USD
1 x Router @ 64.90 USD
Total due: 79.90 USD"""


def test_the_prompt_carries_the_schema_beside_the_grammar() -> None:
    schema = {"type": "object", "properties": {"total": {"type": "number"}}}
    with_system = _with_schema(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "x"}], schema
    )
    assert with_system[0]["content"].startswith("Be brief.\n\nAnswer with a JSON object")
    assert '{"type":"object","properties":{"total":{"type":"number"}}}' in with_system[0]["content"]
    assert with_system[1] == {"role": "user", "content": "x"}
    alone = _with_schema([{"role": "user", "content": "x"}], schema)
    assert [m["role"] for m in alone] == ["system", "user"]


@pytest.mark.local_model
async def test_embedded_model_extracts_an_invoice() -> None:
    pytest.importorskip("xllamacpp", reason='needs pip install "agentloop-runtime[local]"')
    agent = Agent("local", output_type=Invoice, system_message="Extract the invoice's fields from the text.")
    try:
        result = await agent.chat(TEXT)
    finally:
        await agent.model.aclose()  # type: ignore[attr-defined]
    invoice = result.output
    assert isinstance(invoice, Invoice)
    assert invoice.invoice_number == "INV-7730"
    assert invoice.customer == "Contoso Ltd"
    assert invoice.total == pytest.approx(79.90)
    assert invoice.currency == "USD"
    assert [e.request.name for e in result.tool_executions] == ["final_result"]


@pytest.mark.local_model
def test_the_structured_output_example_runs_on_the_embedded_model() -> None:
    pytest.importorskip("xllamacpp", reason='needs pip install "agentloop-runtime[local]"')
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    example = importlib.import_module("structured_output")
    anyio.run(example.main)  # the example asserts the extracted fields and the labels itself
