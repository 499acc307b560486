"""`python -m agentloop demo`: its tools, and what it prints (on a scripted model; the real run is in
test_local_model.py)."""

from __future__ import annotations

import io
import socket
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest

from agentloop import AiMessage, ChatRequest, ChatResponse, TokenUsage, ToolExecutionRequest
from agentloop._demo import capital_of, run_demo
from agentloop.models import GenerationProgress, ModelEvent, ResponseComplete, TextDelta
from agentloop.testing import ScriptedChatModel


async def test_demo_prints_tokens_tool_events_and_summary() -> None:
    model = ScriptedChatModel(
        [
            AiMessage(
                tool_execution_requests=[
                    ToolExecutionRequest("c1", "add", '{"a": 1234, "b": 4321}'),
                    ToolExecutionRequest("c2", "capital_of", '{"country": "Japan"}'),
                ]
            ),
            "1234 + 4321 = 5555, and the capital of Japan is Tokyo.",
        ]
    )
    out = io.StringIO()
    result = await run_demo("question", model, out=out)
    printed = out.getvalue()
    assert result.content == "1234 + 4321 = 5555, and the capital of Japan is Tokyo."
    assert '-> add({"a": 1234, "b": 4321})' in printed
    assert "<- add: 5555.0" in printed
    assert "<- capital_of: Tokyo" in printed
    assert "answer: 1234 + 4321 = 5555, and the capital of Japan is Tokyo." in printed
    assert "tool #0 round 1: add" in printed and "tool #1 round 1: capital_of" in printed
    assert "model calls: 2" in printed


class ReportingModel:
    """A model that reports its progress as the local one does, then answers (a `ChatModel`)."""

    def __init__(self, cached: int = 0, answer_prompt: int = 0) -> None:
        self.cached = cached
        self.answer_prompt = answer_prompt  # > 0: after deciding, a second pass reads the answer's prompt

    async def chat(self, request: ChatRequest) -> ChatResponse:
        async for event in self.stream(request):
            if isinstance(event, ResponseComplete):
                return event.response
        raise AssertionError("no response")

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        for read in (self.cached, 128, 256, 300):
            yield GenerationProgress(read, 300, self.cached)
        for written in (1, 2, 3):
            yield GenerationProgress(300, 300, self.cached, written)
        if self.answer_prompt:  # as the local model does when its decision was "answer"
            for read in (18, self.answer_prompt):
                yield GenerationProgress(read, self.answer_prompt, 10)
        yield TextDelta("Done.")
        usage = TokenUsage(300, 3, cache_read_tokens=self.cached)
        yield ResponseComplete(ChatResponse(AiMessage("Done."), usage))


async def test_demo_shows_the_models_progress_instead_of_a_silent_wait() -> None:
    out = io.StringIO()  # not a terminal: one line per prompt step, one for the writing stage
    await run_demo("question", ReportingModel(cached=40), out=out)
    lines = out.getvalue().splitlines()
    progress = [line for line in lines if line.startswith("  .. ")]
    assert progress == [
        "  .. reading the prompt: 40/300 tokens, 40 from the cache",
        "  .. reading the prompt: 128/300 tokens, 40 from the cache",
        "  .. reading the prompt: 256/300 tokens, 40 from the cache",
        "  .. reading the prompt: 300/300 tokens, 40 from the cache",
        "  .. deciding: tool calls or an answer",
    ]
    assert lines.index(progress[-1]) < next(i for i, line in enumerate(lines) if line.startswith("answer: "))
    assert "tokens: 300 in (40 from the prompt cache), 3 out" in out.getvalue()


async def test_on_a_terminal_the_progress_line_is_rewritten_then_erased() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    await run_demo("question", ReportingModel(), out=out)
    printed = out.getvalue()
    assert "\r\033[K  .. reading the prompt: 128/300 tokens" in printed
    assert "\r\033[K  .. deciding: tool calls or an answer, 3 tokens" in printed
    assert "\r\033[Kanswer: Done." in printed  # the status line is erased before the answer
    assert "\n  .. " not in printed  # never a line of its own


async def test_the_answer_pass_says_it_reads_the_answers_prompt() -> None:
    # The local model decided "answer" and reads a second, shorter prompt: the demo says which prompt it is,
    # never "the tool calls" it will not write.
    out = io.StringIO()
    await run_demo("question", ReportingModel(answer_prompt=124), out=out)
    progress = [line for line in out.getvalue().splitlines() if line.startswith("  .. ")]
    assert progress[-3:] == [
        "  .. deciding: tool calls or an answer",
        "  .. reading the answer's prompt: 18/124 tokens, 10 from the cache",
        "  .. reading the answer's prompt: 124/124 tokens, 10 from the cache",
    ]
    assert not any("tool calls:" in line or "writing" in line for line in progress)


async def test_a_new_model_call_reads_the_prompt_again_not_the_answers() -> None:
    out = io.StringIO()
    model = ReportingModel()
    await run_demo("question", model, out=out)
    await run_demo("question", model, out=out)  # a fresh call: its first prompt is "the prompt" again
    assert "the answer's prompt" not in out.getvalue()


def test_threads_option_builds_a_local_model_with_that_count() -> None:
    from agentloop._demo import demo_model
    from agentloop.models import LocalChatModel

    assert demo_model("local", None) == "local"
    model = demo_model("local:/models/other.gguf", 1)
    assert isinstance(model, LocalChatModel) and model.n_threads == 1
    assert str(model.model_path) == "/models/other.gguf"
    assert isinstance(demo_model("local", 3), LocalChatModel)
    with pytest.raises(SystemExit, match="local model only"):
        demo_model("openai:gpt-4o-mini", 2)
    with pytest.raises(SystemExit, match="at least 1"):
        demo_model("local", 0)


def test_capital_lookup_error_names_known_countries() -> None:
    with pytest.raises(ValueError, match="known: france"):
        capital_of("Atlantis")


def test_cli_help_and_unknown_command() -> None:
    ok = subprocess.run([sys.executable, "-m", "agentloop", "--help"], capture_output=True, text=True)
    assert ok.returncode == 0 and "demo" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "agentloop", "frobnicate"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown command" in bad.stderr


@pytest.mark.local_model
async def test_demo_on_the_embedded_model_calls_both_tools() -> None:
    from agentloop._demo import DEFAULT_QUESTION
    from agentloop.models import LocalChatModel

    out = io.StringIO()
    async with LocalChatModel(progress=False) as model:
        result = await run_demo(DEFAULT_QUESTION, model, out=out)
    calls = {e.request.name: e.result for e in result.tool_executions}
    assert calls == {"add": "5555.0", "capital_of": "Tokyo"}
    assert result.content
    assert "<- add: 5555.0" in out.getvalue()


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    environment = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-m", "agentloop", *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=60,
    )


def test_cli_version() -> None:
    import agentloop

    done = run_cli("--version")
    assert done.returncode == 0 and done.stdout.startswith(f"agentloop {agentloop.__version__} ")


def test_a_missing_api_key_is_one_line_saying_what_to_set() -> None:
    done = run_cli("demo", "--model", "openai:gpt-4o-mini")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("agentloop demo failed: ")
    assert "set the environment variable OPENAI_API_KEY" in line


def test_an_unreachable_server_is_one_line_naming_url_and_kind_and_verbose_shows_the_cause() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    done = run_cli("demo", "--model", "openai:m", OPENAI_BASE_URL=url)
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert f"could not connect to OpenAI-compatible server at {url}" in line
    assert "check that the server is running" in line
    verbose = run_cli("demo", "--model", "openai:m", "--verbose", OPENAI_BASE_URL=url)
    assert verbose.returncode == 1
    assert "Traceback" in verbose.stderr and "ConnectError" in verbose.stderr  # the cause, chained
    assert verbose.stderr.rstrip().splitlines()[-1] == line


def test_an_unknown_model_string_is_one_line() -> None:
    done = run_cli("demo", "--model", "gpt-4o")
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert "did you mean 'openai:gpt-4o'?" in line
