"""Properties and fuzzing, on top of tests/values/test_sse.py (the SSE parser: any chunking, any bytes) and
tests/tools/test_tool_properties.py (schema <-> argument round trips), whose strategies are reused here:

* each provider's stream decoder, fed real transcripts cut at arbitrary places, gives exactly the events of
  the uncut transcript;
* arbitrary bytes give a complete response or a `ModelError`, nothing else; arbitrary JSON events shaped like
  each provider's (right and wrong types, any order) through an `Agent` give an answer or a `ModelError` (or
  `ToolRoundsExceededError`), tools run exactly with the calls committed to memory, memory stays valid;
* arguments nested to any depth give a result or a `ToolArgumentsError`, never a `RecursionError`;
* whatever JSON the model sends, injected parameters keep the invocation's values.
"""

from __future__ import annotations

import itertools
import json
from contextlib import aclosing
from pathlib import Path
from typing import Annotated, Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloop import (
    Agent,
    AiMessage,
    ChatRequest,
    MessageWindowChatMemory,
    ModelError,
    ToolArgumentsError,
    ToolContext,
    ToolExecutionRequest,
    ToolMemoryId,
    ToolRoundsExceededError,
    ToolSpecification,
    UserMessage,
    execute_tool_calls,
    tool,
)
from agentloop.models import ResponseComplete
from agentloop.models._anthropic import AnthropicChatModel
from agentloop.models._base import ModelEvent
from agentloop.models._openai import OpenAIChatModel
from tests.tools.test_tool_properties import (
    CASE_NAMES,
    _accepted_or_argument_error,
    _tool,
    _valid_arguments,
    json_values,
)

from ._support import PLANTED_KEY, Fault, invoke, running_tasks, seed_messages

FIXTURES = Path(__file__).parent.parent / "fixtures"
TRANSCRIPTS = sorted(
    [("openai", path.name) for path in (FIXTURES / "openai").glob("*.sse")]
    + [("anthropic", path.name) for path in (FIXTURES / "anthropic").glob("*.sse")]
)
FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
REQUEST = ChatRequest([UserMessage("hi")])


def mock_model(provider: str, chunks: list[bytes]) -> Any:
    """The provider's model over an in-memory transport that answers with `chunks`, cut exactly there."""

    async def body() -> Any:
        for chunk in chunks:
            yield chunk

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body())

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(answer))
    if provider == "openai":
        return OpenAIChatModel(
            "gpt-4o-mini", base_url="http://fake.test/v1", api_key=PLANTED_KEY, http_client=client
        )
    return AnthropicChatModel(
        "claude-sonnet-4-5", base_url="http://fake.test", api_key=PLANTED_KEY, http_client=client
    )


async def decode(provider: str, chunks: list[bytes]) -> list[ModelEvent]:
    model = mock_model(provider, chunks)
    async with aclosing(model.stream(REQUEST)) as events:
        return [event async for event in events]


def cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


@pytest.mark.parametrize(("provider", "name"), TRANSCRIPTS)
@FUZZ
@given(cuts=st.lists(st.integers(0, 5000), max_size=40))
async def test_transcripts_cut_anywhere_decode_to_the_same_events(
    provider: str, name: str, cuts: list[int], fault: Fault
) -> None:
    fault.declare(
        "property",
        f"real transcripts ({len(TRANSCRIPTS)} documented streams) cut at arbitrary byte boundaries",
        "the provider's stream decoder gives exactly the events of the uncut transcript",
        provider=provider,
        mode="stream",
    )
    data = (FIXTURES / provider / name).read_bytes()
    expected = await decode(provider, [data])
    assert isinstance(expected[-1], ResponseComplete) and len(expected) > 3
    assert await decode(provider, cut(data, cuts)) == expected


# -- arbitrary input: a complete, consistent response, or a ModelError ---------------------------------------

anything: st.SearchStrategy[Any] = json_values | st.just({})


def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`good` nine times in ten, else `bad`: well-typed events get deep into a decoder, broken ones test
    its error paths."""
    return st.integers(0, 9).flatmap(lambda n: bad if n == 0 else good)


def sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


openai_call = st.fixed_dictionaries(
    {"index": st.integers(0, 2)},
    optional={
        "id": st.sampled_from(["call_a", "call_b", "call_c"]),
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {}, optional={"name": st.sampled_from(["f", "g", ""]), "arguments": st.text(max_size=6)}
        ),
    },
)
openai_chunk = st.fixed_dictionaries(
    {
        "choices": st.lists(
            st.fixed_dictionaries(
                {
                    "index": st.sampled_from([0, 0, 0, 1]),
                    "delta": st.fixed_dictionaries(
                        {},
                        optional={
                            "role": st.just("assistant"),
                            "content": st.none() | st.text(max_size=8),
                            "reasoning_content": st.text(max_size=5),
                            "tool_calls": st.lists(openai_call, max_size=2),
                        },
                    ),
                },
                optional={"finish_reason": st.sampled_from([None, "stop", "tool_calls", "length", "weird"])},
            ),
            max_size=1,
        )
    },
    optional={
        "id": st.text(max_size=4),
        "usage": st.fixed_dictionaries(
            {"prompt_tokens": st.integers(0, 9), "completion_tokens": st.integers(0, 9)}
        ),
    },
)
openai_broken = anything | st.fixed_dictionaries(
    {"choices": st.lists(st.dictionaries(st.sampled_from(["index", "delta", "finish_reason"]), anything))}
)
openai_events = st.tuples(
    st.lists(mostly(openai_chunk.map(sse), openai_broken.map(sse) | st.binary(max_size=12)), max_size=12),
    st.booleans(),
).map(lambda t: [*t[0], *([b"data: [DONE]\n\n"] if t[1] else [])])

indexes = st.integers(0, 2)
anthropic_block = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=5)}),
    st.fixed_dictionaries(
        {"type": st.just("tool_use"), "id": st.sampled_from(["toolu_a", "toolu_b"]), "name": st.just("f")},
        optional={"input": st.just({}) | st.dictionaries(st.text(max_size=3), st.integers())},
    ),
    st.fixed_dictionaries({"type": st.just("thinking"), "thinking": st.text(max_size=5)}),
    st.fixed_dictionaries({"type": st.sampled_from(["redacted_thinking", "server_tool_use"])}),
)
anthropic_delta = st.one_of(
    st.fixed_dictionaries({"type": st.just("text_delta"), "text": st.text(max_size=5)}),
    st.fixed_dictionaries({"type": st.just("input_json_delta"), "partial_json": st.text(max_size=5)}),
    st.fixed_dictionaries({"type": st.just("thinking_delta"), "thinking": st.text(max_size=5)}),
    st.fixed_dictionaries({"type": st.just("signature_delta"), "signature": st.text(max_size=5)}),
    st.fixed_dictionaries({"type": st.just("citations_delta")}),
)
usage = st.fixed_dictionaries(
    {}, optional={"input_tokens": st.integers(0, 9), "output_tokens": st.integers(0, 9)}
)
anthropic_event = st.one_of(
    st.builds(lambda u: ("message_start", {"message": {"id": "msg_1", "usage": u}}), usage),
    st.builds(
        lambda i, b: ("content_block_start", {"index": i, "content_block": b}), indexes, anthropic_block
    ),
    st.builds(lambda i, d: ("content_block_delta", {"index": i, "delta": d}), indexes, anthropic_delta),
    st.builds(lambda i: ("content_block_stop", {"index": i}), indexes),
    st.builds(
        lambda r, u: ("message_delta", {"delta": {"stop_reason": r}, "usage": u}),
        st.sampled_from(["end_turn", "tool_use", "max_tokens", "weird"]),
        usage,
    ),
    st.just(("message_stop", {})),
    st.just(("ping", {})),
)
anthropic_broken = st.tuples(
    st.sampled_from(["message_start", "content_block_start", "content_block_delta", "error", "message"]),
    st.dictionaries(
        st.sampled_from(["type", "index", "delta", "content_block", "message", "error"]), anything
    ),
)
anthropic_events = st.lists(
    mostly(anthropic_event, anthropic_broken).map(lambda e: sse({"type": e[0], **e[1]}, e[0]))
    | st.binary(max_size=12),
    max_size=14,
)


async def check_decodes_or_raises_model_error(provider: str, chunks: list[bytes], fault: Fault) -> None:
    try:
        events = await decode(provider, chunks)
    except ModelError as error:
        fault.scan(error)
        return
    assert isinstance(events[-1], ResponseComplete)
    assert sum(isinstance(e, ResponseComplete) for e in events) == 1


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@FUZZ
@given(data=st.binary(max_size=400), cuts=st.lists(st.integers(0, 400), max_size=10))
async def test_arbitrary_bytes_decode_or_raise_a_model_error(
    provider: str, data: bytes, cuts: list[int], fault: Fault
) -> None:
    fault.declare(
        "property",
        "arbitrary bytes as an event stream",
        "a complete response or a ModelError, never another exception",
        provider=provider,
        mode="stream",
    )
    await check_decodes_or_raises_model_error(provider, cut(data, cuts), fault)


async def check_agent_over(provider: str, events: list[bytes], fault: Fault) -> None:
    """An agent whose model streams `events` (for every request): it answers, or fails with a ModelError or
    ToolRoundsExceededError; tools ran exactly with the calls committed to memory; memory stays valid."""
    before = running_tasks()
    ran: list[ToolExecutionRequest] = []

    async def record(request: ToolExecutionRequest, context: Any) -> str:
        ran.append(request)
        return "ok"

    memory = MessageWindowChatMemory(50)
    await memory.add(seed_messages())
    agent = Agent(
        mock_model(provider, events),
        tools=[(ToolSpecification("f"), record), (ToolSpecification("g"), record)],
        hallucinated_tool_name_strategy=lambda request: "no such tool",
        max_tool_rounds=1,
        memory=memory,
    )
    outcome = await invoke(agent, "stream", "hi")
    messages = await memory.messages()
    fault.check_memory(messages)
    if outcome.error is not None and not isinstance(outcome.error, ToolRoundsExceededError):
        assert isinstance(outcome.error, ModelError), repr(outcome.error)
        assert messages == seed_messages()
    else:
        committed = [r for m in messages if isinstance(m, AiMessage) for r in m.tool_execution_requests]
        assert sorted(ran, key=lambda r: r.id or "") == sorted(
            (r for r in committed if r.name in ("f", "g")), key=lambda r: r.id or ""
        )
    fault.check_tasks(before)


@FUZZ
@given(events=openai_events)
async def test_arbitrary_openai_chunks_through_the_agent(events: list[bytes], fault: Fault) -> None:
    fault.declare(
        "property",
        "arbitrary provider-shaped JSON events through the Agent (right and wrong types, any order)",
        "an answer, or a ModelError / ToolRoundsExceededError; tools ran exactly as committed; memory valid",
        provider="openai",
        mode="stream",
    )
    await check_agent_over("openai", events, fault)


@FUZZ
@given(events=anthropic_events)
async def test_arbitrary_anthropic_events_through_the_agent(events: list[bytes], fault: Fault) -> None:
    fault.declare(
        "property",
        "arbitrary provider-shaped JSON events through the Agent (right and wrong types, any order)",
        "an answer, or a ModelError / ToolRoundsExceededError; tools ran exactly as committed; memory valid",
        provider="anthropic",
        mode="stream",
    )
    await check_agent_over("anthropic", events, fault)


# -- arguments ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASE_NAMES)
@settings(max_examples=15, deadline=None, suppress_health_check=list(FUZZ.suppress_health_check))
@given(data=st.data(), depth=st.integers(0, 5000))
def test_any_nesting_depth_is_accepted_or_an_argument_error(
    case: str, data: st.DataObject, depth: int, fault: Fault
) -> None:
    fault.declare(
        "property",
        f"arguments nested to any depth (0-5,000) in every kind of parameter ({len(CASE_NAMES)} families)",
        "accepted or ToolArgumentsError, never RecursionError",
    )
    arguments = data.draw(_valid_arguments(case))
    key = data.draw(st.sampled_from(sorted(arguments) or ["extra"]))
    text = json.dumps(arguments | {key: "PLACEHOLDER"}).replace('"PLACEHOLDER"', "[" * depth + "]" * depth)
    _accepted_or_argument_error(_tool(case), text)


@tool
async def whoami(
    label: str = "", user: Annotated[str, ToolMemoryId] = "", ctx: ToolContext | None = None
) -> str:
    """Says who is asking, for which tenant."""
    assert ctx is not None
    return f"{user}@{ctx['tenant']}"


@FUZZ
@given(
    extra=st.dictionaries(
        st.sampled_from(["user", "ctx", "memory_id", "context", "tenant"]) | st.text(), json_values
    )
)
async def test_the_model_never_sets_injected_parameters(extra: dict[str, Any], fault: Fault) -> None:
    fault.declare(
        "property",
        "arbitrary arguments naming injected parameters",
        "the tool always gets the invocation's memory id and context",
    )
    request = ToolExecutionRequest("call_1", "whoami", json.dumps({"label": "x", **extra}))
    (execution,) = await execute_tool_calls(
        [request], [whoami], memory_id="alice", context={"tenant": "acme"}
    )
    if execution.has_failed:  # e.g. `label` replaced by something that is not a string
        assert isinstance(execution.error, ToolArgumentsError)
    else:
        assert execution.result == "alice@acme"
