"""What `stream.outputs()` costs per chunk and per stream, for structured outputs of 5 KB to 1 MB (issue 39).

    python benchmarks/partial_outputs.py [--repeat N] [--sizes 5,50,150,1000]

Public API only. The output is a report whose `body` is one long string field (the case that grows: long
reports, generated code, extracted text), answered as the output tool's arguments by `ScriptedChatModel` in
8-character chunks (what providers send). For each size the same stream is read three ways, CPU time
(`time.process_time`), best of `--repeat` runs:

- `text`: the same characters answered as plain text, read with `async for text in stream` (the floor);
- `outputs()`: every partial output and the final one, read as fast as they come;
- `events()`: every event, `PartialOutput` included;
- web UI: the Vercel AI SDK stream (`vercel_ai_events`) of the structured run, against the same for the
  text run (its `data-output` parts carry the partial outputs).

"per chunk" is the CPU from the first item to the end, divided by the chunks (the stream's setup, the same
for any size, left out); "stream" is the whole stream's CPU from asking for its first item. The targets are
a per-chunk cost of `outputs()` within 1.5x from 5 KB to 1 MB, and a whole 150 KB stream with `outputs()`
within 2x of it read as text.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pydantic

from agentloop import Agent, AiMessage, ToolExecutionRequest
from agentloop.testing import ScriptedChatModel
from agentloop.ui import vercel_ai_events

CHUNK = 8


class Section(pydantic.BaseModel):
    heading: str
    words: int


class Report(pydantic.BaseModel):
    title: str
    sections: list[Section]
    body: str


def document(size: int) -> dict[str, object]:
    """A report whose JSON is about `size` bytes, nearly all of it in `body` (with escapes and unicode)."""
    line = 'Quarterly revenue grew 4% in the "north" region; caf\u00e9 sales \u2014 steady.\n'
    body = (line * (size // len(line) + 1))[: max(size - 200, 10)]
    return {
        "title": "Annual report",
        "sections": [{"heading": "Summary", "words": 120}, {"heading": "Outlook", "words": 80}],
        "body": body,
    }


def _tool_answer(wire: dict[str, object]) -> AiMessage:
    request = ToolExecutionRequest(id="call_1", name="final_result", arguments=json.dumps(wire))
    return AiMessage(tool_execution_requests=[request])


Run = Callable[[dict[str, object]], Awaitable[tuple[float, float, int]]]


async def _read(items: AsyncIterator[object]) -> tuple[float, float, int, object]:
    """CPU time of the whole stream (from asking for the first item) and from its first item on; the
    number of items and the last one."""
    start = time.process_time()
    first = None
    seen = 0
    last: object = None
    async for item in items:
        if first is None:
            first = time.process_time()
        seen += 1
        last = item
    end = time.process_time()
    return end - start, end - (first or start), seen, last


async def _text(wire: dict[str, object]) -> tuple[float, float, int]:
    stream = Agent(ScriptedChatModel([json.dumps(wire)], chunk_size=CHUNK)).stream("report")
    whole, streaming, seen, _ = await _read(stream)
    return whole, streaming, seen


async def _outputs(wire: dict[str, object]) -> tuple[float, float, int]:
    model = ScriptedChatModel([_tool_answer(wire)], chunk_size=CHUNK)
    stream = Agent(model, output_type=Report).stream("report")
    whole, streaming, seen, last = await _read(stream.outputs())
    assert last == Report.model_validate(wire), "the last output is the whole, validated one"
    return whole, streaming, seen


async def _events(wire: dict[str, object]) -> tuple[float, float, int]:
    model = ScriptedChatModel([_tool_answer(wire)], chunk_size=CHUNK)
    whole, streaming, seen, _ = await _read(Agent(model, output_type=Report).stream("report").events())
    return whole, streaming, seen


async def _web(wire: dict[str, object]) -> tuple[float, float, int]:
    model = ScriptedChatModel([_tool_answer(wire)], chunk_size=CHUNK)
    frames = vercel_ai_events(Agent(model, output_type=Report).stream("report"))
    whole, streaming, seen, _ = await _read(frames)
    return whole, streaming, seen


async def _web_text(wire: dict[str, object]) -> tuple[float, float, int]:
    frames = vercel_ai_events(Agent(ScriptedChatModel([json.dumps(wire)], chunk_size=CHUNK)).stream("report"))
    whole, streaming, seen, _ = await _read(frames)
    return whole, streaming, seen


def _cpu(run: Run, wire: dict[str, object], repeat: int) -> tuple[float, float, int]:
    """The best of `repeat` runs: whole stream's CPU, CPU from its first item on, items seen."""
    runs = [asyncio.run(run(wire)) for _ in range(repeat)]  # type: ignore[arg-type]
    return min(r[0] for r in runs), min(r[1] for r in runs), runs[-1][2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", default="5,50,150,1000", help="document sizes in KB")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print(
        "| document | chunks | text: stream | outputs(): stream | outputs() / text | text: us/chunk "
        "| outputs(): us/chunk | outputs() seen | events(): stream | web UI: text | web UI: output "
        "| web UI: output / text |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for kb in (int(s) for s in args.sizes.split(",")):
        wire = document(kb * 1000)
        chunks = -(-len(json.dumps(wire)) // CHUNK)
        text, text_streaming, _ = _cpu(_text, wire, args.repeat)
        outputs, streaming, seen = _cpu(_outputs, wire, args.repeat)
        events, _, _ = _cpu(_events, wire, args.repeat)
        web_text, _, _ = _cpu(_web_text, wire, args.repeat)
        web, _, _ = _cpu(_web, wire, args.repeat)
        print(
            f"| {kb} KB | {chunks:,} | {text:.3f} s | {outputs:.3f} s | {outputs / text:.2f}x "
            f"| {text_streaming / chunks * 1e6:.1f} | {streaming / chunks * 1e6:.1f} | {seen:,} "
            f"| {events:.3f} s | {web_text:.3f} s | {web:.3f} s | {web / web_text:.2f}x |",
            flush=True,
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
