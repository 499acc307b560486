"""The harness can fail: the fake server answers as specified, and the checks reject broken contenders.

pytest benchmarks/test_harness.py -q       (not part of the default test suite; ~15 s)
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import types
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import contenders.floor as floor
import contenders.floor_features as floor_features
import httpx2
import pytest
from _driver import Bench
from _workload import QUESTION, Scenario, expected_output_tokens, text_tokens, tool_result
from contenders import Outcome

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    server = subprocess.Popen(
        [sys.executable, str(HERE / "fakeserver.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None and server.stdin is not None
    line = server.stdout.readline()
    assert line.startswith("PORT "), line
    yield int(line.split()[1])
    server.stdin.close()
    assert server.wait(timeout=10) == 0


def events(body: bytes) -> list[dict[str, Any]]:
    found = []
    for block in body.decode().split("\n\n"):
        if block.startswith("data: ") and block != "data: [DONE]":
            found.append(json.loads(block[6:]))
    return found


def post(port: int, scenario: Scenario, messages: list[dict[str, Any]]) -> httpx2.Response:
    body = {
        "model": "m",
        "stream": True,
        "messages": messages,
        "tools": [{"function": {"name": "get_value"}}],
    }
    return httpx2.post(scenario.base_url(port) + "/chat/completions", json=body, timeout=10)


def test_scenario_paths_round_trip() -> None:
    for scenario in (
        Scenario(),
        Scenario(tools=4, tokens=1000),
        Scenario(hold=5, tokens=20),
        Scenario(pause_ms=9),
    ):
        assert Scenario.from_path(scenario.prefix() + "/chat/completions") == scenario
    with pytest.raises(ValueError, match="unknown scenario segment"):
        Scenario.from_path("/x3/v1/chat/completions")


def test_request_one_streams_parallel_tool_calls_in_pieces(port: int) -> None:
    response = post(port, Scenario(tools=3), [{"role": "user", "content": QUESTION}])
    assert response.status_code == 200
    assert response.headers["transfer-encoding"] == "chunked"
    chunks = events(response.content)
    arguments: dict[int, list[str]] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            for call in choice["delta"].get("tool_calls", []):
                arguments.setdefault(call["index"], []).append(call["function"]["arguments"])
    assert sorted(arguments) == [0, 1, 2]
    for index, pieces in arguments.items():
        assert len([p for p in pieces if p]) >= 3, "arguments must arrive in several deltas"
        assert json.loads("".join(pieces)) == {"key": f"k{index}"}
    assert chunks[-1]["usage"]["completion_tokens"] == expected_output_tokens(0)


def test_request_two_streams_one_chunk_per_token_with_usage(port: int) -> None:
    results = [
        {"role": "tool", "tool_call_id": f"call_{i}", "content": tool_result(f"k{i}")} for i in range(3)
    ]
    response = post(port, Scenario(tools=3, tokens=50), [{"role": "user", "content": QUESTION}, *results])
    chunks = events(response.content)
    texts = [
        c["choices"][0]["delta"]["content"]
        for c in chunks
        if c["choices"] and c["choices"][0]["delta"].get("content")
    ]
    assert texts == text_tokens(50)
    assert chunks[-1]["usage"]["completion_tokens"] == 50


def test_wrong_or_missing_tool_results_are_rejected(port: int) -> None:
    one = [{"role": "tool", "tool_call_id": "call_0", "content": tool_result("k0")}]
    assert post(port, Scenario(tools=3), one).status_code == 400
    wrong = [{"role": "tool", "tool_call_id": f"call_{i}", "content": "nope"} for i in range(3)]
    assert post(port, Scenario(tools=3), wrong).status_code == 400


class Buffering(floor.Contender):
    """Delivers every delta only once the session is over: must fail the streaming probe."""

    async def session(self, question: str, on_delta: Callable[[str], None]) -> Outcome:
        held: list[str] = []
        outcome = await super().session(question, held.append)
        for text in held:
            on_delta(text)
        return outcome


class Merging(floor.Contender):
    """Delivers the text as one delta: must fail the per-session check."""

    async def session(self, question: str, on_delta: Callable[[str], None]) -> Outcome:
        held: list[str] = []
        outcome = await super().session(question, held.append)
        on_delta("".join(held))
        return outcome


class SkipsATool(floor.Contender):
    """Reports one tool execution fewer than it ran: must fail the per-session check."""

    async def session(self, question: str, on_delta: Callable[[str], None]) -> Outcome:
        outcome = await super().session(question, on_delta)
        return Outcome(outcome.tool_executions - 1, outcome.output_tokens)


def bench_for(contender: type[Any], port: int) -> Bench:
    return Bench(types.SimpleNamespace(Contender=contender), port)


def run(coroutine: Awaitable[Any]) -> Any:
    async def main() -> Any:
        return await coroutine

    return asyncio.run(main())


def test_the_floor_passes_every_check(port: int) -> None:
    bench = bench_for(floor.Contender, port)
    probe = run(bench.streaming_probe(pause_ms=100))
    assert probe["incremental"], probe

    async def sessions() -> None:
        contender = bench.contender(Scenario())
        try:
            for _ in range(5):
                await bench.session(contender, Scenario())
        finally:
            await contender.aclose()

    run(sessions())
    assert bench.checker.failures == 0, bench.checker.messages
    assert bench.checker.usage_reported


class ForgetsTheAnswer(floor_features.Contender):
    """Stores the tool round but not the answer."""

    def _append(self, conversation: str, seq: int, messages: list[object]) -> None:
        if len(messages) > 1:  # the answer is appended alone
            super()._append(conversation, seq, messages)


def test_the_floor_with_the_features_passes_every_check_and_stores_each_conversation(port: int) -> None:
    bench = bench_for(floor_features.Contender, port)

    async def sessions() -> int:
        contender = bench.contender(Scenario())
        try:
            for _ in range(3):
                await bench.session(contender, Scenario())
        finally:
            await contender.aclose()  # checks each conversation's rows, and flushes the spans
        return contender._exporter.spans  # type: ignore[no-any-return]

    spans = run(sessions())
    assert bench.checker.failures == 0, bench.checker.messages
    assert spans == 3 * 6  # invoke_agent, two chat spans, three execute_tool spans a session


def test_the_floor_with_the_features_fails_when_an_answer_is_not_stored(port: int) -> None:
    bench = bench_for(ForgetsTheAnswer, port)

    async def one() -> None:
        contender = bench.contender(Scenario())
        try:
            await bench.session(contender, Scenario())
        finally:
            await contender.aclose()

    with pytest.raises(AssertionError, match="conversation s1 stored"):
        run(one())


def test_a_buffering_contender_fails_the_streaming_probe(port: int) -> None:
    bench = bench_for(Buffering, port)
    probe = run(bench.streaming_probe(pause_ms=100))
    assert not probe["incremental"]
    assert bench.checker.failures == 1
    assert "buffered" in bench.checker.messages[0]


@pytest.mark.parametrize(("contender", "message"), [(Merging, "merged"), (SkipsATool, "tool executions")])
def test_a_wrong_session_fails_the_check(port: int, contender: type[Any], message: str) -> None:
    bench = bench_for(contender, port)

    async def one() -> bool:
        instance = bench.contender(Scenario())
        try:
            return (await bench.session(instance, Scenario()))[1]
        finally:
            await instance.aclose()

    assert run(one()) is False
    assert message in bench.checker.messages[0]


def test_held_sessions_are_held_then_released_whole(port: int, tmp_path: Path) -> None:
    out = tmp_path / "hold.json"
    config = {
        "tokens": 20,
        "hold_tokens": 5,
        "sessions": 50,
        "ramp": 16,
        "warmup": 2,
        "timeout": 30,
        "stall_s": 10,
    }
    command = [sys.executable, str(HERE / "_driver.py"), "floor", "hold", "--port", str(port)]
    subprocess.run([*command, "--out", str(out), "--config", json.dumps(config)], check=True, timeout=120)
    report = json.loads(out.read_text())
    assert report["ok"], report.get("traceback")
    assert report["held"] == report["server_held"] == report["released"] == 50
    assert report["completed_ok"] == 50
    assert report["checks"]["failures"] == 0


def test_side_by_side_blocks_pair_by_cycle_with_a_second_floor_and_a_contender_that_fails_is_dropped(
    port: int,
) -> None:
    import run as bench_run

    python = Path(sys.executable)
    contenders = [
        bench_run.Contender("floor", python, None),
        bench_run.Contender("floor_features", python, None),
        bench_run.Contender("no_such_contender", python, None),
    ]
    config = {"tokens": 20, "warmup": 2, "block": 3, "cycles": 4}
    bench_run.interleave(contenders, port, config)
    floor_run, features_run, missing = (c.interleaved or {} for c in contenders)
    for measured in (floor_run, features_run):
        assert measured["ok"], measured.get("error")
        assert [b["sessions"] for b in measured["blocks"]] == [3] * 4
        assert all(b["cpu_s"] > 0 and b["wall_s"] > 0 for b in measured["blocks"])
        assert measured["checks"] == {**measured["checks"], "sessions": 2 + 12, "failures": 0}
    assert not missing["ok"] and "no_such_contender" in missing["error"]
    # The floor ran twice: its second process's blocks, measured in the same cycles, are its control.
    assert [b["sessions"] for b in floor_run["control"]] == [3] * 4
    assert all(b["cpu_s"] > 0 for b in floor_run["control"])
    assert "control" not in features_run

    # The ratio is the median of the per-cycle ratios (paired by cycle), the per-round one kept beside it.
    floor_run["blocks"] = [{"sessions": 2, "cpu_s": c, "wall_s": 1.0} for c in (0.010, 0.020, 0.030)]
    features_run["blocks"] = [{"sessions": 2, "cpu_s": c, "wall_s": 1.0} for c in (0.012, 0.021, 0.045)]
    summary: dict[str, Any] = {"cpu_ratio": 1.4}
    bench_run.add_interleaved(summary, contenders[1], contenders[0])
    assert summary["cpu_ratio"] == pytest.approx(1.2)  # of 1.2, 1.05 and 1.5
    assert summary["cpu_ratio_rounds"] == 1.4
    assert summary["cpu_ratio_of_medians"] == pytest.approx(0.021 / 0.020)
    assert summary["interleaved_cpu_per_session_ms"] == pytest.approx(78 / 6)
    assert summary["interleaved_cycles"] == 3
    assert "cpu_ratio_control" not in summary

    # The floor's summary reads its second process against it, and every side-by-side detail says so.
    floor_run["control"] = [{"sessions": 2, "cpu_s": c, "wall_s": 1.0} for c in (0.011, 0.018, 0.030)]
    floor_summary: dict[str, Any] = {"cpu_ratio": 1.0}
    bench_run.add_interleaved(floor_summary, contenders[0], contenders[0])
    assert floor_summary["cpu_ratio_control"] == pytest.approx(1.0)  # of 1.1, 0.9 and 1.0
    assert "a second floor process read 1.00x the floor" in bench_run._cpu_detail(summary, floor_summary)


def test_the_breakdown_prints_each_features_cost_in_agentloop_and_by_hand() -> None:
    done = subprocess.run(
        [
            *(sys.executable, str(HERE / "breakdown.py"), "--cycles", "2", "--block", "2", "--tokens", "20"),
            *("--only", "floor,agentloop,agentloop_sqlite,floor_sqlite"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    names = [line.split()[0] for line in lines[:4]]
    assert names == ["floor", "agentloop", "agentloop_sqlite", "floor_sqlite"]
    assert "1.000x floor  (a second floor process: " in lines[0]
    assert lines[4].startswith("sqlite     over its base (x floor): agentloop ") and ", floor " in lines[4]
