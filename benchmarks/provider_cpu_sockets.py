"""CPU each HTTP provider spends per streamed token and per call, over real loopback sockets.

    python benchmarks/provider_cpu_sockets.py [--calls 40] [--only openai,anthropic,gemini,bedrock]

For each provider its fake server (`agentloop.testing`) runs in a child process, so only the client's CPU is
measured (`time.process_time()` of this process): `model.stream(request)` read to its end, one token per
wire event (an SSE event, or for Bedrock one event-stream frame). Per token: the CPU of calls of 1000 tokens
minus that of 200-token calls, over 800; per call: what is left of a 200-token call. Median of `--trials`.
Write the machine load beside the figures: other processes on the machine move them. `provider_cpu.py`
measures the parsers alone (no transport), far more steadily.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentloop import ChatRequest, UserMessage  # noqa: E402
from agentloop.models import ResponseComplete  # noqa: E402

SERVER = """
import sys
sys.path.insert(0, {root!r})
from agentloop.testing import {cls}
words = " ".join(f"w{{i}}" for i in range({tokens}))
server = {cls}([words] * {count}, {options})
server.start()
print(server.base_url, flush=True)
sys.stdin.read()
server.stop()
"""

FAKES = {
    "openai": ("FakeOpenAIServer", ""),
    "anthropic": ("FakeAnthropicServer", ""),
    "gemini": ("FakeGeminiServer", "words_per_chunk=1"),
    "bedrock": ("FakeBedrockServer", ""),
}


def model_for(name: str, base_url: str) -> Any:
    if name == "openai":
        from agentloop.models import OpenAIChatModel

        return OpenAIChatModel("gpt-4o-mini", base_url=base_url, api_key="bench")
    if name == "anthropic":
        from agentloop.models import AnthropicChatModel

        return AnthropicChatModel("claude-bench", base_url=base_url, api_key="bench")
    if name == "gemini":
        from agentloop.models import GeminiChatModel

        return GeminiChatModel("gemini-bench", base_url=base_url, api_key="bench")
    from agentloop.models import BedrockChatModel
    from agentloop.testing import FakeBedrockServer

    fake = FakeBedrockServer()
    return BedrockChatModel(
        "anthropic.claude-bench-v1:0",
        region=fake.region,
        endpoint_url=base_url,
        aws_access_key_id=fake.access_key,
        aws_secret_access_key=fake.secret_key,
    )


async def measure(name: str, tokens: int, calls: int) -> float:
    """CPU seconds per call of `tokens` tokens (after 5 warm-up calls)."""
    cls, options = FAKES[name]
    script = SERVER.format(root=str(ROOT), cls=cls, tokens=tokens, count=calls + 5, options=options)
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        base_url = child.stdout.readline().strip()
        request = ChatRequest([UserMessage("Say many words")])
        async with model_for(name, base_url) as model:

            async def one() -> None:
                pieces = 0
                async for event in model.stream(request):
                    if isinstance(event, ResponseComplete):
                        assert len((event.response.text or "").split()) == tokens, name
                    else:
                        pieces += 1
                assert pieces >= tokens, (name, pieces)

            for _ in range(5):
                await one()
            start = time.process_time()
            for _ in range(calls):
                await one()
            return (time.process_time() - start) / calls
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--only", default=",".join(FAKES))
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    for name in args.only.split(","):
        per_token, per_call = [], []
        for _ in range(args.trials):
            short = asyncio.run(measure(name, 200, args.calls))
            long = asyncio.run(measure(name, 1000, args.calls))
            token = (long - short) / 800
            per_token.append(token)
            per_call.append(short - 200 * token)
        print(
            f"{name:10} {statistics.median(per_token) * 1e6:6.2f} µs/token  "
            f"{statistics.median(per_call) * 1e6:8.0f} µs/call (fixed)",
            flush=True,
        )
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
