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

pytestmark = pytest.mark.local_model


class Invoice(BaseModel):
    """The key fields of an invoice."""

    invoice_number: str
    customer: str = Field(description="Who the invoice is billed to")
    total: float = Field(description="The total amount due")
    currency: str = Field(description="ISO 4217 code, e.g. EUR")


TEXT = """INVOICE No. INV-7730
Billed to: Contoso Ltd
3 x Cable @ 5.00 USD
1 x Router @ 64.90 USD
Total due: 79.90 USD"""


async def test_embedded_model_extracts_an_invoice() -> None:
    pytest.importorskip("xllamacpp", reason='needs pip install "agentloop[local]"')
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


def test_the_structured_output_example_runs_on_the_embedded_model() -> None:
    pytest.importorskip("xllamacpp", reason='needs pip install "agentloop[local]"')
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    example = importlib.import_module("structured_output")
    anyio.run(example.main)  # the example asserts the extracted fields and the labels itself
