"""What structured output costs per streamed chunk: the partial-JSON parser alone, and the whole
partial-output path (parse, validate the partial value, build the event), for outputs of growing size.

    python benchmarks/output_cost.py

The JSON is an invoice with N line items, cut into 4-character chunks (about one token each), fed as the
model would stream it (1 to 1,650 lines: 180 bytes to 150 KB). CPU time (`time.process_time`), best of
several runs. Neither the parser's cost per chunk nor the whole partial path's should grow with the document:
the parser keeps its place between chunks, and `PartialTracker` validates each whole field and list item
once, only the part still being written again. The last column is the whole stream's CPU time for the
partial path (what `outputs()` adds to a streamed answer).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pydantic

from agentloop._features.output import OutputRun, output_schema
from agentloop._partial_json import PartialJSON
from agentloop.models import ResponseComplete, TextDelta, ToolCallDelta

CHUNK = 4


class Line(pydantic.BaseModel):
    sku: str
    description: str
    quantity: int
    unit_price: float


class Invoice(pydantic.BaseModel):
    invoice_number: str
    customer: str
    lines: list[Line]
    total: float


def document(lines: int) -> str:
    return json.dumps(
        {
            "invoice_number": "INV-2041",
            "customer": "Northwind Traders",
            "lines": [
                {
                    "sku": f"SKU-{n:04d}",
                    "description": f"Widget model {n}",
                    "quantity": n % 7 + 1,
                    "unit_price": 9.5,
                }
                for n in range(lines)
            ],
            "total": 123.45,
        }
    )


def chunks(text: str) -> list[str]:
    return [text[i : i + CHUNK] for i in range(0, len(text), CHUNK)]


def parser_cost(pieces: list[str]) -> float:
    """µs of CPU per chunk for the parser alone (`feed` and reading `value` after each chunk that grew it)."""
    best = float("inf")
    repeat = max(1, 20000 // len(pieces))
    for _ in range(3):
        start = time.process_time()
        for _ in range(repeat):
            parser = PartialJSON()
            for piece in pieces:
                if parser.feed(piece):
                    parser.value  # noqa: B018
        best = min(best, (time.process_time() - start) / repeat / len(pieces) * 1e6)
    return best


class _Sink:
    def __init__(self) -> None:
        self.partials = 0

    async def __call__(self, event: Any) -> None:
        self.partials += 1


async def _watch(run: OutputRun, pieces: list[str], sink: _Sink) -> None:
    async def events() -> Any:
        yield ToolCallDelta(0, "call_1", "final_result", "")
        for piece in pieces:
            yield ToolCallDelta(0, None, None, piece)
        yield ResponseComplete(None)  # type: ignore[arg-type]

    async for _ in run.watch(events(), 0, sink):  # type: ignore[arg-type]
        pass


def watch_cost(pieces: list[str]) -> tuple[float, int]:
    """µs of CPU per chunk for the whole partial-output path of the tool mode, and how many partials."""
    run = OutputRun(output_schema(Invoice), "tool", 1, None)
    best, partials = float("inf"), 0
    repeat = max(1, 5000 // len(pieces))
    for _ in range(3):
        sink = _Sink()
        start = time.process_time()
        for _ in range(repeat):
            asyncio.run(_watch(run, pieces, sink))
        best = min(best, (time.process_time() - start) / repeat / len(pieces) * 1e6)
        partials = sink.partials // repeat
    return best, partials


def text_passthrough_cost(count: int = 20000) -> float:
    """µs per text chunk passing the watcher in the tool mode (text is not output there): its overhead."""
    run = OutputRun(output_schema(Invoice), "tool", 1, None)

    async def main() -> float:
        async def events() -> Any:
            for _ in range(count):
                yield TextDelta("tok ")

        async def plain() -> None:
            async for _ in events():
                pass

        async def watched() -> None:
            async for _ in run.watch(events(), 0, _Sink()):  # type: ignore[arg-type]
                pass

        timings = []
        for loop in (plain, watched):
            best = float("inf")
            for _ in range(5):
                start = time.process_time()
                await loop()
                best = min(best, time.process_time() - start)
            timings.append(best)
        return (timings[1] - timings[0]) / count * 1e6

    return asyncio.run(main())


def main() -> None:
    with open("/proc/loadavg") as file:
        print(f"load average: {file.read().split()[0]}")
    print("| invoice lines | JSON chars | chunks | parser µs/chunk | partial path µs/chunk", end="")
    print(" | partials | stream CPU |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for lines in (1, 10, 50, 280, 1650):
        text = document(lines)
        pieces = chunks(text)
        parse = parser_cost(pieces)
        watch, partials = watch_cost(pieces)
        total = watch * len(pieces) / 1e3
        print(
            f"| {lines} | {len(text):,} | {len(pieces):,} | {parse:.2f} | {watch:.1f} | {partials:,} | "
            f"{total:,.0f} ms |"
        )
    extra = text_passthrough_cost()
    print(f"\ntool mode, a text chunk passing the partial-output watcher: {extra:.2f} µs extra")


if __name__ == "__main__":
    main()
