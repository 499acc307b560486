"""Partial structured outputs at any size (issue 39): what `outputs()` and `PartialOutput` guarantee.

Within an attempt every partial extends the one before (strings grow at their end, lists gain items, a
model gains fields); the last value is `Result.output`; a consumer slower than the model gets the latest
partial, never a backlog of stale ones. Run on asyncio and trio, through middleware.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import anyio
import pydantic
import pytest

from agentloop import Agent, AiMessage, Middleware, ModelCall, PartialOutput, ToolExecutionRequest
from agentloop.testing import ScriptedChatModel


class Address(pydantic.BaseModel):
    street: str
    city: str


class Entry(pydantic.BaseModel):
    heading: str
    text: str
    address: Address


class Report(pydantic.BaseModel):
    title: str
    summary: str
    entries: list[Entry]
    tags: list[str]
    body: str


def report(size: int) -> dict[str, Any]:
    """A report of about `size` characters in several growing fields, with escapes and non-ASCII text."""
    line = 'Revenue grew 4% in the "north"; caf\u00e9 \u2014 \U0001f600 steady.\n\ttabbed \\ back\n'
    text = (line * (size // len(line) // 4 + 1))[: size // 4]
    return {
        "title": "Annual report \u00e9\U0001f680",
        "summary": text,
        "entries": [
            {
                "heading": f"Part {n}",
                "text": text[: 40 + n],
                "address": {"street": f"{n} Main St", "city": "Z\u00fcrich"},
            }
            for n in range(12)
        ],
        "tags": [f"tag-{n}\u2014" for n in range(30)],
        "body": text * 2,
    }


def tool_answer(wire: dict[str, Any]) -> AiMessage:
    """The answer giving `wire` as the output tool's arguments, as ASCII JSON (every non-ASCII character a
    \\uXXXX escape, emoji a surrogate pair, so 8-character chunks cut escapes and pairs apart)."""
    arguments = json.dumps(wire, ensure_ascii=True)
    return AiMessage(
        tool_execution_requests=[ToolExecutionRequest(id="c1", name="final_result", arguments=arguments)]
    )


def assert_extends(earlier: Any, later: Any, where: str = "output") -> None:
    """`later` is `earlier` grown: strings longer at their end, lists with more items (the earlier ones
    unchanged but the last, which may have grown), models and dicts with more fields."""
    if isinstance(earlier, str):
        assert isinstance(later, str) and later.startswith(earlier), where
    elif isinstance(earlier, list):
        assert isinstance(later, list) and len(later) >= len(earlier), where
        for index, item in enumerate(earlier):
            if index < len(earlier) - 1:
                assert later[index] == item, f"{where}[{index}]"
            else:
                assert_extends(item, later[index], f"{where}[{index}]")
    elif isinstance(earlier, pydantic.BaseModel):
        assert type(later) is type(earlier), where
        assert later.model_fields_set >= earlier.model_fields_set, where
        for name in earlier.model_fields_set:
            assert_extends(getattr(earlier, name), getattr(later, name), f"{where}.{name}")
    elif isinstance(earlier, dict):
        assert isinstance(later, dict) and later.keys() >= earlier.keys(), where
        for key, item in earlier.items():
            assert_extends(item, later[key], f"{where}[{key!r}]")
    else:
        assert later == earlier, where


class Passing(Middleware):
    """Middleware around every model call and invocation that lets everything through, counting calls."""

    def __init__(self) -> None:
        self.model_calls = 0

    async def wrap_model_call(self, call: ModelCall, call_next: Any) -> Any:
        self.model_calls += 1
        return await call_next(call)


@pytest.mark.parametrize("chunk_size", [1, 3, 8])
@pytest.mark.parametrize("size", [600, 40_000])
async def test_partials_extend_each_other_and_end_with_the_result(chunk_size: int, size: int) -> None:
    wire = report(size)
    middleware = Passing()
    agent = Agent(ScriptedChatModel([tool_answer(wire)], chunk_size=chunk_size), output_type=Report)
    sent: list[Report] = []
    stream = agent.stream("report", middleware=[middleware]).on_partial_output(sent.append)
    outputs = [o async for o in stream.outputs()]
    final = Report.model_validate(wire)
    assert outputs[-1] == final == stream.result.output and middleware.model_calls == 1
    assert len(sent) >= 20 and all(o in sent for o in outputs[:-1])
    for earlier, later in itertools.pairwise(sent):
        assert_extends(earlier, later)
    assert_extends(sent[-1], final)
    # No partial shows half a character: escapes and surrogate pairs cut by the chunks are whole or absent.
    assert all("\ufffd" not in json.dumps(p.model_dump(), ensure_ascii=False) for p in sent)
    # Every growing field was seen growing before the end (long outputs too: partials are spaced out).
    for name in ("summary", "entries", "tags", "body"):
        lengths = {len(getattr(p, name)) for p in sent if name in p.model_fields_set}
        assert len(lengths - {0, len(getattr(final, name))}) >= 2, name


async def test_every_new_value_shows_at_once_while_a_string_shows_by_steps() -> None:
    """A value that begins (a field, a list item) is in a partial at once, however small; a string that only
    grows is shown once it grew by FLOOR characters (or a share of the output, or INTERVAL seconds passed),
    so a fast stream of a few KB does not build a partial per chunk."""
    tags = [f"t{n}" for n in range(20)]
    wire = {"title": "T", "summary": "s" * 1000, "entries": [], "tags": tags, "body": "b"}
    agent = Agent(ScriptedChatModel([tool_answer(wire)], chunk_size=1), output_type=Report)
    sent: list[Report] = []
    stream = agent.stream("report").on_partial_output(sent.append)
    assert (await stream.start()).output == Report.model_validate(wire)
    tags = {len(p.tags) for p in sent if "tags" in p.model_fields_set}
    assert tags >= set(range(1, 20)), "each tag appeared in a partial of its own"
    summaries = sorted({len(p.summary) for p in sent if "summary" in p.model_fields_set} - {0, 1000})
    assert 1000 // 64 - 2 <= len(summaries) <= 1000 // 16, summaries  # by steps, not once per character


@pytest.mark.parametrize("size", [2_000, 200_000])
async def test_events_carry_the_same_partials_in_the_same_order(size: int) -> None:
    wire = report(size)
    agent = Agent(ScriptedChatModel([tool_answer(wire)], chunk_size=8), output_type=Report)
    events = [e async for e in agent.stream("report").events()]
    partials = [e.output for e in events if isinstance(e, PartialOutput)]
    assert partials and all(e.attempt == 1 for e in events if isinstance(e, PartialOutput))
    for earlier, later in itertools.pairwise(partials):
        assert_extends(earlier, later)
    # A long output is not rebuilt for every chunk: far fewer partials than the 25,000 chunks.
    assert len(partials) < size // 8 // 10 if size > 100_000 else len(partials) > 10


async def test_a_slow_consumer_gets_the_latest_partial_not_the_stale_ones() -> None:
    wire = report(20_000)
    agent = Agent(ScriptedChatModel([tool_answer(wire)], chunk_size=8), output_type=Report)
    sent: list[Report] = []
    finished = anyio.Event()
    stream = agent.stream("report").on_partial_output(sent.append)
    stream.on_complete_response(lambda _: finished.set())
    outputs = stream.outputs()
    first = await outputs.__anext__()
    with anyio.fail_after(
        60
    ):  # a guard only: were stale partials queued, the full queue would stall the model
        await finished.wait()  # the consumer is busy while the model streams all the rest
    rest = [o async for o in outputs]
    assert len(sent) > 20
    assert first in sent[:3]  # the first partial, or (trio wakes the consumer later) one just after it
    # Of the partials sent meanwhile only the latest waited for it, then the final output.
    assert rest == [sent[-1], stream.result.output]
    assert_extends(first, rest[0])


class Person(pydantic.BaseModel):
    name: str
    age: int = pydantic.Field(ge=0)
    note: str


async def test_partials_start_again_with_each_attempt() -> None:
    bad = {"name": "Ada Lovelace", "age": -4, "note": "first try " * 20}
    good = {"name": "Ada King", "age": 36, "note": "second try " * 20}
    model = ScriptedChatModel([tool_answer(bad), tool_answer(good)], chunk_size=4)
    events = [
        e async for e in Agent(model, output_type=Person).stream("who", middleware=[Passing()]).events()
    ]
    partials = [e for e in events if isinstance(e, PartialOutput)]
    attempts = [e.attempt for e in partials]
    assert attempts == sorted(attempts) and set(attempts) == {1, 2}
    for attempt in (1, 2):
        mine = [e.output for e in partials if e.attempt == attempt]
        for earlier, later in itertools.pairwise(mine):
            assert_extends(earlier, later)
    assert [e.output.name for e in partials if e.attempt == 2][-1] == "Ada King"
    assert events[-1].result.output == Person.model_validate(good)  # type: ignore[union-attr]


async def test_the_web_ui_stream_of_a_long_output_grows_and_ends_whole() -> None:
    from agentloop.ui import vercel_ai_events

    wire = report(150_000)
    agent = Agent(ScriptedChatModel([tool_answer(wire)], chunk_size=8), output_type=Report)
    frames = [frame async for frame in vercel_ai_events(agent.stream("report"))]
    data = [
        json.loads(frame[len("data: ") :])["data"]
        for frame in frames
        if frame.startswith('data: {"type":"data-output"')
    ]
    chunks = len(tool_answer(wire).tool_execution_requests[0].arguments) // 8
    # The page's output part grows (each one replaces the last), a bounded number of times, then is whole.
    assert 20 < len(data) < chunks // 10
    assert data[-1] == Report.model_validate(wire).model_dump()
    bodies = [d["body"] for d in data if "body" in d]
    assert bodies and all(later.startswith(earlier) for earlier, later in itertools.pairwise(bodies))
