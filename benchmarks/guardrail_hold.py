"""What holding a streamed answer until an `OutputGuardrail` checked it costs in time to first token.

    python benchmarks/guardrail_hold.py

An `Agent` over `OpenAIChatModel` streams one answer from `FakeOpenAIServer` on 127.0.0.1: 6 sentences, 120
words, one chunk per word, 20 ms between chunks (a model writing about 50 tokens a second). Measured per
`hold` setting of the guardrail (which passes everything, so only the holding costs): the time from the
invocation's start to the first text piece the consumer receives, and to the last. Medians of 7 runs.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentloop import Agent
from agentloop.middleware import OutputGuardrail
from agentloop.models import OpenAIChatModel
from agentloop.testing import FakeOpenAIServer

SENTENCE = "The weather in Paris is mild today with a light breeze from the west and no rain at all."
ANSWER = " ".join(f"{SENTENCE[:-1]} ({n + 1})." for n in range(6))
DELAY = 0.02
RUNS = 7
SETTINGS: list[tuple[str, Any]] = [
    ("no guardrail", "none"),
    ("hold=None (unchecked while streaming)", None),
    ('hold="sentence"', "sentence"),
    ("hold=80 (characters)", 80),
    ('hold="answer" (the default)', "answer"),
]


async def one(server: FakeOpenAIServer, hold: Any) -> tuple[float, float]:
    server.add(ANSWER, chunk_delay=DELAY)
    middleware = [] if hold == "none" else [OutputGuardrail(lambda text: False, hold=hold)]
    async with OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key="test") as model:
        agent = Agent(model, middleware=middleware)
        started = time.perf_counter()
        first = None
        pieces = []
        async with agent.stream("Weather in Paris?") as stream:
            async for piece in stream:
                if first is None:
                    first = time.perf_counter() - started
                pieces.append(piece)
        assert "".join(pieces) == ANSWER and first is not None
        return first, time.perf_counter() - started


async def main() -> None:
    words = len(ANSWER.split())
    print(f"{words} words, {DELAY * 1000:.0f} ms between chunks, median of {RUNS} runs\n")
    print("| guardrail | time to first token ms | time to last token ms |")
    print("| --- | ---: | ---: |")
    with FakeOpenAIServer() as server:
        for label, hold in SETTINGS:
            runs = [await one(server, hold) for _ in range(RUNS)]
            first = statistics.median(r[0] for r in runs) * 1000
            last = statistics.median(r[1] for r in runs) * 1000
            print(f"| {label} | {first:,.0f} | {last:,.0f} |")


if __name__ == "__main__":
    asyncio.run(main())
