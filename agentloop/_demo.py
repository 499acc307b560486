"""`python -m agentloop demo`: an agent with a few real tools, streaming tokens and tool events.

Runs on the embedded local model by default (no API key, no network after install); `--model` switches to
any model string (`openai:gpt-4o-mini`, `anthropic:claude-...`, `ollama:qwen3`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import sys
import time
from typing import Annotated, TextIO

from ._api._agent import Agent
from ._cli import add_common_arguments, run_command
from ._tools._decorator import tool
from ._tools._schema import P
from ._values._events import (
    BeforeToolExecution,
    CompleteResponse,
    ModelProgress,
    PartialResponse,
    ToolExecuted,
)
from ._values._result import Result
from .models import ChatModel

DEFAULT_QUESTION = "Use the tools: add 1234 and 4321, and look up the capital of Japan."

CAPITALS = {
    "france": "Paris",
    "germany": "Berlin",
    "italy": "Rome",
    "japan": "Tokyo",
    "kenya": "Nairobi",
    "peru": "Lima",
    "spain": "Madrid",
}


@tool("Adds two numbers")
def add(a: float, b: float) -> float:
    return a + b


@tool("Multiplies two numbers")
def multiply(a: float, b: float) -> float:
    return a * b


@tool("Returns the square root of a number")
def square_root(x: Annotated[float, P("The number, must be >= 0")]) -> float:
    if x < 0:
        raise ValueError("x must be >= 0")
    return math.sqrt(x)


@tool("Returns the current date and time in UTC, ISO 8601")
def current_time() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


@tool("Looks up the capital city of a country")
def capital_of(country: Annotated[str, P("The country's name in English")]) -> str:
    capital = CAPITALS.get(country.strip().lower())
    if capital is None:
        raise ValueError(f"No capital known for {country!r}; known: {', '.join(sorted(CAPITALS))}")
    return capital


TOOLS = [add, multiply, square_root, current_time, capital_of]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m agentloop demo",
        description="An agent with calculator, clock and lookup tools, streaming tokens and tool events.",
    )
    parser.add_argument("question", nargs="?", default=DEFAULT_QUESTION, help="what to ask the agent")
    parser.add_argument(
        "--model",
        default="local",
        help="'local' (embedded, default), 'openai:gpt-4o-mini', 'anthropic:...', 'ollama:qwen3'",
    )
    parser.add_argument("--max-tool-rounds", type=int, default=5)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for the local model (default: physical cores not busy with other work)",
    )
    add_common_arguments(parser)
    return parser


def demo_model(model: str, threads: int | None) -> ChatModel | str:
    """The model to run: `model` as given, or a `LocalChatModel` with `threads` for a local one."""
    if threads is None:
        return model
    prefix, _, path = model.partition(":")
    if prefix != "local":
        raise SystemExit(f"--threads applies to the local model only, not {model!r}")
    if threads < 1:
        raise SystemExit(f"--threads must be at least 1, got {threads}")
    from .models import LocalChatModel

    return LocalChatModel(path or None, n_threads=threads)


async def run_demo(
    question: str, model: ChatModel | str, *, max_tool_rounds: int = 5, out: TextIO = sys.stdout
) -> Result[str]:
    """Runs the demo agent on `question`, printing its stream to `out`; returns the Result."""
    agent = Agent(
        model,
        tools=TOOLS,
        system_message="You are a helpful assistant. Use the tools for arithmetic, time and capitals.",
        max_tool_rounds=max_tool_rounds,
    )
    print(f"model: {agent.model!r}\nquestion: {question}\n", file=out)
    start = time.perf_counter()
    answering = False
    result: Result[str] | None = None
    status = _Status(out)
    async for event in agent.stream(question).events():
        if isinstance(event, ModelProgress):
            status.show(event)
            continue
        status.clear()
        if isinstance(event, PartialResponse):
            if not answering:
                print("answer: ", end="", file=out)
                answering = True
            print(event.text, end="", file=out, flush=True)
        elif isinstance(event, BeforeToolExecution):
            if answering:
                print(file=out)
                answering = False
            print(f"  -> {event.request.name}({event.request.arguments})", file=out, flush=True)
        elif isinstance(event, ToolExecuted):
            execution = event.execution
            mark = "!!" if execution.has_failed else "<-"
            print(f"  {mark} {execution.request.name}: {execution.result}", file=out, flush=True)
        elif isinstance(event, CompleteResponse):
            result = event.result
    elapsed = time.perf_counter() - start
    assert result is not None
    _summary(result, elapsed, out)
    return result


class _Status:
    """The model's progress on one line while nothing else is printed.

    With tools offered, the local model works in up to two passes per call: it reads the prompt ("reading the
    prompt: 256/552 tokens") and writes its decision, tool calls or "answer" ("deciding: tool calls or an
    answer, 12 tokens"); when it chose to answer, a second pass reads the answer's own prompt (the
    conversation without the tool list, mostly from the cache) and streams the answer. On a terminal the line
    is rewritten in place and erased before the next output; elsewhere (a pipe, a log) each prompt step gets
    a line and the deciding stage one line."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self.shown = False
        self.stage = ""
        self.decided = False  # this call's decision pass is over: a prompt read now is the answer's

    def show(self, event: ModelProgress) -> None:
        if event.reading_prompt or not event.generated_tokens:
            if self.stage == "deciding":
                self.decided = True
            cached = f", {event.cached_tokens} from the cache" if event.cached_tokens else ""
            stage = "prompt"
            what = "the answer's prompt" if self.decided else "the prompt"
            text = f"  .. reading {what}: {event.prompt_processed}/{event.prompt_tokens} tokens{cached}"
        else:
            stage = "deciding"
            text = f"  .. deciding: tool calls or an answer, {event.generated_tokens} tokens"
        if self.tty:
            print(f"\r\033[K{text}", end="", file=self.out, flush=True)
            self.shown = True
        elif stage == "prompt" or self.stage != stage:
            line = text if stage == "prompt" else "  .. deciding: tool calls or an answer"
            print(line, file=self.out, flush=True)
        self.stage = stage

    def clear(self) -> None:
        if self.shown:
            print("\r\033[K", end="", file=self.out, flush=True)
            self.shown = False
        self.stage = ""
        self.decided = False


def _summary(result: Result[str], elapsed: float, out: TextIO) -> None:
    print("\n\n--- result ---", file=out)
    print(f"content: {result.content!r}", file=out)
    for execution in result.tool_executions:
        status = "error" if execution.has_failed else "ok"
        print(
            f"  tool #{execution.index} round {execution.round}: {execution.request.name}"
            f"({execution.request.arguments}) = {execution.result} "
            f"[{status}, {execution.duration * 1000:.1f} ms]",
            file=out,
        )
    usage = result.token_usage
    if usage is not None:
        rate = usage.output_tokens / elapsed if elapsed > 0 else 0.0
        cached = f" ({usage.cache_read_tokens} from the prompt cache)" if usage.cache_read_tokens else ""
        print(
            f"tokens: {usage.input_tokens} in{cached}, {usage.output_tokens} out "
            f"({rate:.1f} output tokens/s overall)",
            file=out,
        )
    print(
        f"model calls: {len(result.intermediate_responses) + (0 if result.returned_immediately else 1)}",
        file=out,
    )
    print(f"time: {elapsed:.2f} s", file=out)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m agentloop demo`."""
    import anyio

    args = _parser().parse_args(argv)

    def run() -> None:
        model = demo_model(args.model, args.threads)
        anyio.run(lambda: run_demo(args.question, model, max_tool_rounds=args.max_tool_rounds))

    return run_command("agentloop demo", run, verbose=args.verbose)
