"""agentloop.ui's apps served by uvicorn on 127.0.0.1 and driven by the protocols' own JavaScript clients:
the Vercel AI SDK's chat (`ai` package: its transport validates every chunk against the SDK's schema and
builds the UI messages) and AG-UI's `HttpAgent` (@ag-ui/client: schema-checks and order-verifies every
event). The clients run on Node 22 from tests/node (pinned in package-lock.json)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from agentloop import (
    Agent,
    AiMessage,
    ImageContent,
    ModelError,
    ToolContext,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
    tool,
)
from agentloop.testing import ScriptedChatModel
from agentloop.ui import ag_ui_app, vercel_ai_app
from tests.ui_clients import EndlessModel, run_node, serving

XSS = '<img src=x onerror="window.__xss=1">'

sent: list[str] = []


@tool("Adds two numbers")
def add(a: int, b: int) -> int:
    return a + b


@tool("Sends an email", requires_approval=True)
def send_email(to: str) -> str:
    sent.append(to)
    return f"sent to {to}"


@tool("Downloads files, saying how far it got")
async def download(files: int, ctx: ToolContext) -> str:
    for done in range(1, files + 1):
        await ctx.report_progress(done, files, f"file {done} of {files}")
    return f"{files} files"


@tool("Writes a report, streaming it as it grows")
async def report(lines: int) -> Any:
    text = ""
    for n in range(lines):
        text += f"line {n}\n"
        yield {"text": text, "done": n + 1 == lines}


@tool("Always fails")
def broken() -> str:
    raise RuntimeError("the disk is full")


def call(id: str, name: str, arguments: dict[str, Any]) -> ToolExecutionRequest:
    return ToolExecutionRequest(id, name, json.dumps(arguments))


@pytest.fixture(autouse=True)
def _clear_sent() -> None:
    sent.clear()


def kinds(request: dict[str, Any]) -> list[str]:
    return [chunk["type"] for chunk in request["chunks"]]


# -- Vercel AI SDK ----------------------------------------------------------------------------------------


def test_vercel_text_reasoning_and_tools_through_the_sdk_chat() -> None:
    model = ScriptedChatModel(
        [
            AiMessage("Adding.", [call("c1", "add", {"a": 1, "b": 2})], thinking="Use the tool."),
            f"The answer is 3. {XSS}",
        ]
    )
    with serving(vercel_ai_app(Agent(model, tools=[add]))) as url:
        out = run_node("vercel_chat.mjs", url, [{"send": "What is 1 + 2?"}])
    assert out["errors"] == [] and out["status"] == "ready"
    [request] = out["requests"]
    assert request["status"] == 200
    assert request["headers"]["x-vercel-ai-ui-message-stream"] == "v1"
    sequence = kinds(request)
    assert sequence[0] == "start" and sequence[-3:] == ["finish-step", "finish", "[DONE]"]
    for kind in ("reasoning-delta", "text-delta", "tool-input-delta", "tool-output-available"):
        assert kind in sequence
    assert sequence.count("tool-input-delta") > 1  # the arguments streamed in pieces
    assert sequence.index("tool-input-start") < sequence.index("tool-input-available")
    assert sequence.count("start-step") == 2  # one per model call
    user, assistant = out["messages"]
    assert user["role"] == "user" and assistant["role"] == "assistant"
    parts = [p for p in assistant["parts"] if p["type"] != "step-start"]
    assert [p["type"] for p in parts] == ["reasoning", "text", "dynamic-tool", "text"]
    assert parts[0]["text"] == "Use the tool." and parts[1]["text"] == "Adding."
    tool_part = parts[2]
    assert tool_part["toolName"] == "add" and tool_part["state"] == "output-available"
    assert tool_part["input"] == {"a": 1, "b": 2} and tool_part["output"] == "3"
    assert parts[3]["text"] == f"The answer is 3. {XSS}"  # carried as data, exactly


def test_vercel_provider_ids_reused_across_responses_stay_two_parts() -> None:
    # Some providers number calls per response: `call_1` in the first response and again in the second.
    model = ScriptedChatModel(
        [
            AiMessage(tool_execution_requests=[call("call_1", "add", {"a": 1, "b": 1})]),
            AiMessage(tool_execution_requests=[call("call_1", "add", {"a": 2, "b": 2})]),
            "2 and 4.",
        ]
    )
    with serving(vercel_ai_app(Agent(model, tools=[add]))) as url:
        out = run_node("vercel_chat.mjs", url, [{"send": "1 + 1 and 2 + 2?"}])
    assert out["errors"] == []
    tools = [p for p in out["messages"][-1]["parts"] if p["type"] == "dynamic-tool"]
    assert [(t["input"], t["output"]) for t in tools] == [({"a": 1, "b": 1}, "2"), ({"a": 2, "b": 2}, "4")]
    assert tools[0]["toolCallId"] != tools[1]["toolCallId"]


def test_vercel_structured_output_is_one_data_part_that_grows() -> None:
    from pydantic import BaseModel

    class City(BaseModel):
        name: str
        population: int

    model = ScriptedChatModel(['{"name": "Paris", "population": 2100000}'])
    with serving(vercel_ai_app(Agent(model, output_type=City, output_mode="native"))) as url:
        out = run_node("vercel_chat.mjs", url, [{"send": "Paris?"}])
    assert out["errors"] == []
    assert kinds(out["requests"][0]).count("data-output") >= 2  # partial values, then the whole one
    [data] = [p for p in out["messages"][-1]["parts"] if p["type"] == "data-output"]  # replaced in place
    assert data["data"] == {"name": "Paris", "population": 2100000}


def test_vercel_a_picture_attached_in_the_chat_reaches_the_model() -> None:
    import base64

    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    )
    picture = {
        "type": "file",
        "mediaType": "image/png",
        "url": "data:image/png;base64," + base64.b64encode(png).decode(),
    }
    model = ScriptedChatModel(["A very small picture."])
    with serving(vercel_ai_app(Agent(model))) as url:
        out = run_node("vercel_chat.mjs", url, [{"send": "What is this?", "files": [picture]}])
    assert out["errors"] == []
    question = model.requests[0].messages[-1]
    assert isinstance(question, UserMessage) and question.text == "What is this?"
    [image] = [c for c in question.contents if isinstance(c, ImageContent)]
    assert image.data == png and image.media_type == "image/png"


def test_vercel_second_turn_sends_the_conversation_as_history() -> None:
    model = ScriptedChatModel(
        [AiMessage(tool_execution_requests=[call("c1", "add", {"a": 2, "b": 2})]), "4.", "Yes."]
    )
    with serving(vercel_ai_app(Agent(model, tools=[add], system_message="Be brief."))) as url:
        out = run_node("vercel_chat.mjs", url, [{"send": "2 + 2?"}, {"send": "Sure?"}])
    assert out["errors"] == []
    second = model.requests[2].messages
    assert second[0].text == "Be brief."  # the server's instructions, not the page's
    history = second[1:]
    assert isinstance(history[0], UserMessage) and history[0].text == "2 + 2?"
    assert isinstance(history[1], AiMessage) and history[1].tool_execution_requests[0].name == "add"
    assert isinstance(history[2], ToolExecutionResultMessage) and history[2].text == "4"
    assert history[2].id == history[1].tool_execution_requests[0].id  # the page's (namespaced) id, paired
    assert history[3] == AiMessage("4.") and history[4] == UserMessage("Sure?")


def test_vercel_regenerate_answers_the_same_question_again() -> None:
    model = ScriptedChatModel(["First try.", "Second try."])
    with serving(vercel_ai_app(Agent(model))) as url:
        out = run_node("vercel_chat.mjs", url, [{"send": "Tell me"}, {"regenerate": True}])
    assert out["errors"] == [] and [m["role"] for m in out["messages"]] == ["user", "assistant"]
    assert out["messages"][-1]["parts"][-1]["text"] == "Second try."
    assert out["requests"][1]["body"]["trigger"] == "regenerate-message"
    assert [m.text for m in model.requests[1].messages] == ["Tell me"]  # the first answer is not history


def approval_agent() -> tuple[Agent, ScriptedChatModel]:
    model = ScriptedChatModel(
        [
            AiMessage("I will send it.", [call("c1", "send_email", {"to": "ada@example.com"})]),
            lambda request: f"Done: {request.messages[-1].text}",
        ]
    )
    return Agent(model, tools=[send_email]), model


def test_vercel_approval_resumes_the_paused_run_once() -> None:
    agent, model = approval_agent()
    with serving(vercel_ai_app(agent)) as url:
        out = run_node("vercel_chat.mjs", url, [{"send": "Email Ada"}, {"answer": [True]}, {"replay": 1}])
    assert out["errors"] == []
    first, second = out["requests"]
    assert "tool-approval-request" in kinds(first) and kinds(first)[-2:] == ["finish", "[DONE]"]
    approval = next(c for c in first["chunks"] if c["type"] == "tool-approval-request")
    # The answer came back in the next request's messages; only an id and a yes travelled.
    answered = second["body"]["messages"][-1]
    part = next(p for p in answered["parts"] if p["type"] == "dynamic-tool")
    assert part["state"] == "approval-responded"
    assert part["approval"] == {"id": approval["approvalId"], "approved": True}
    assert "tool-output-available" in kinds(second)
    assert sent == ["ada@example.com"]
    [_, assistant] = out["messages"]  # the resumed stream went on in the same assistant message
    [tool_part] = [p for p in assistant["parts"] if p["type"] == "dynamic-tool"]  # one part, updated
    assert tool_part["state"] == "output-available" and tool_part["output"] == "sent to ada@example.com"
    assert assistant["parts"][-1]["text"] == "Done: sent to ada@example.com"
    # The same answer again: refused, nothing ran again.
    [replay] = out["replays"]
    assert replay["status"] == 409 and json.loads(replay["body"])["type"] == "RunNotWaiting"
    assert sent == ["ada@example.com"] and len(model.requests) == 2


def test_vercel_denial_reaches_the_model_and_the_page() -> None:
    agent, model = approval_agent()
    with serving(vercel_ai_app(agent)) as url:
        out = run_node("vercel_chat.mjs", url, [{"send": "Email Ada"}, {"answer": ["Not today"]}])
    assert out["errors"] == [] and sent == []
    assert "tool-output-denied" in kinds(out["requests"][1])
    assistant = out["messages"][-1]
    [tool_part] = [p for p in assistant["parts"] if p["type"] == "dynamic-tool"]
    assert tool_part["state"] == "output-denied"
    assert assistant["parts"][-1]["text"] == "Done: Not today"
    assert model.requests[1].messages[-1].is_error


def test_vercel_tool_error_and_model_error() -> None:
    model = ScriptedChatModel(
        [AiMessage(tool_execution_requests=[call("c1", "broken", {})]), ModelError("the provider said no")]
    )
    with serving(vercel_ai_app(Agent(model, tools=[broken]))) as url:
        out = run_node("vercel_chat.mjs", url, [{"send": "Break it"}])
    sequence = kinds(out["requests"][0])
    assert "tool-output-error" in sequence and sequence[-2:] == ["error", "[DONE]"]
    assert out["status"] == "error" and out["errors"] == ["ModelError: the provider said no"]
    tool_part = next(p for p in out["messages"][-1]["parts"] if p["type"] == "dynamic-tool")
    assert tool_part["state"] == "output-error" and "the disk is full" in tool_part["errorText"]


def test_vercel_stop_in_the_browser_cancels_the_model() -> None:
    model = EndlessModel()
    with serving(vercel_ai_app(Agent(model))) as url:
        out = run_node("vercel_chat.mjs", url, [{"send": "Go on forever", "stopAfter": "text-delta"}])
        assert model.cancelled.wait(10), "the model request was not cancelled when the client went away"
        pieces = model.pieces
        time.sleep(0.2)
        assert model.pieces == pieces  # nothing streams any more
    assert pieces < 1000
    assert "text-delta" in kinds(out["requests"][0])


def test_vercel_bad_requests_are_refused_with_json() -> None:
    import httpx2

    with serving(vercel_ai_app(Agent(ScriptedChatModel(["x"])))) as url:
        bad = httpx2.post(url, content=b"{", headers={"content-type": "application/json"})
        assert bad.status_code == 400 and bad.json()["type"] == "BadRequest"
        empty = httpx2.post(url, json={"messages": []})
        assert empty.status_code == 400 and "messages" in empty.json()["message"]
        unknown = httpx2.post(
            url,
            json={
                "messages": [
                    {"id": "1", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
                    {
                        "id": "2",
                        "role": "assistant",
                        "parts": [
                            {
                                "type": "dynamic-tool",
                                "toolName": "send_email",
                                "toolCallId": "x",
                                "state": "approval-responded",
                                "input": {},
                                "approval": {"id": "forged.0", "approved": True},
                            }
                        ],
                    },
                ]
            },
        )
        assert unknown.status_code == 409 and unknown.json()["type"] == "RunNotWaiting"
        get = httpx2.get(url)
        assert get.status_code == 405


# -- AG-UI ------------------------------------------------------------------------------------------------


def test_vercel_tool_progress_and_preliminary_output_reach_the_sdk_chat() -> None:
    calls = [call("d", "download", {"files": 3}), call("r", "report", {"lines": 2})]
    model = ScriptedChatModel([AiMessage(tool_execution_requests=calls), "Done."])
    with serving(vercel_ai_app(Agent(model, tools=[download, report]))) as url:
        out = run_node("vercel_chat.mjs", url, [{"send": "Fetch and report"}])
    assert out["errors"] == [] and out["status"] == "ready"
    [request] = out["requests"]
    progress = [c for c in request["chunks"] if c["type"] == "data-tool-progress"]
    assert [(c["data"]["progress"], c["data"]["total"], c["data"]["message"]) for c in progress] == [
        (1, 3, "file 1 of 3"),
        (2, 3, "file 2 of 3"),
        (3, 3, "file 3 of 3"),
    ]
    outputs = [c for c in request["chunks"] if c["type"] == "tool-output-available"]
    preliminary = [c["output"] for c in outputs if c.get("preliminary")]
    assert preliminary == [{"text": "line 0\n", "done": False}, {"text": "line 0\nline 1\n", "done": True}]
    [assistant] = [m for m in out["messages"] if m["role"] == "assistant"]
    tools = {p["toolName"]: p for p in assistant["parts"] if p["type"] == "dynamic-tool"}
    assert tools["report"]["state"] == "output-available" and not tools["report"].get("preliminary")
    assert tools["download"]["output"] == "3 files"
    # The page keeps the last progress report as the call's data part (the SDK merges parts by id).
    [bar] = [p for p in assistant["parts"] if p["type"] == "data-tool-progress"]
    assert bar["data"]["progress"] == 3 and bar["data"]["toolCallId"] == tools["download"]["toolCallId"]


def test_ag_ui_tool_progress_and_streamed_output_are_activities() -> None:
    calls = [call("d", "download", {"files": 2}), call("r", "report", {"lines": 2})]
    model = ScriptedChatModel([AiMessage(tool_execution_requests=calls), "Done.", "Again."])
    with serving(ag_ui_app(Agent(model, tools=[download, report]))) as url:
        out = run_node("ag_ui_run.mjs", url, [{"user": "Fetch and report"}, {"user": "Once more?"}])
    first, second = out["runs"]
    assert first["error"] is None and second["error"] is None  # the client's verifier accepts the order
    activities = [e for e in first["events"] if e["type"] == "ACTIVITY_SNAPSHOT"]
    progress = [e["content"] for e in activities if e["activityType"] == "tool-progress"]
    assert [(c["progress"], c["total"], c["message"]) for c in progress] == [
        (1, 2, "file 1 of 2"),
        (2, 2, "file 2 of 2"),
    ]
    streamed = [e["content"]["output"] for e in activities if e["activityType"] == "tool-output"]
    assert streamed == [{"text": "line 0\n", "done": False}, {"text": "line 0\nline 1\n", "done": True}]
    types = [e["type"] for e in first["events"]]
    results = [i for i, t in enumerate(types) if t == "TOOL_CALL_RESULT"]
    assert all(types.index("ACTIVITY_SNAPSHOT") < i for i in results[1:])
    # The activity messages the client keeps do not disturb the next run's history.
    assert any(m["role"] == "activity" for m in out["messages"])
    history = model.requests[2].messages
    results = [m.text for m in history if isinstance(m, ToolExecutionResultMessage)]
    assert results == ["2 files", '{"text":"line 0\\nline 1\\n","done":true}']
    assert {type(m) for m in history} == {UserMessage, AiMessage, ToolExecutionResultMessage}
    assert isinstance(history[-1], UserMessage) and history[-1].text == "Once more?"


def test_ag_ui_run_with_tools_passes_the_client_verifier() -> None:
    model = ScriptedChatModel(
        [
            AiMessage("Adding.", [call("c1", "add", {"a": 1, "b": 2})], thinking="Use the tool."),
            f"The answer is 3. {XSS}",
            "Still 3.",
        ]
    )
    with serving(ag_ui_app(Agent(model, tools=[add]))) as url:
        out = run_node("ag_ui_run.mjs", url, [{"user": "What is 1 + 2?"}, {"user": "Sure?"}])
    first, second = out["runs"]
    assert first["error"] is None and second["error"] is None
    types = [e["type"] for e in first["events"]]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
    for kind in ("REASONING_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT", "TOOL_CALL_ARGS", "TOOL_CALL_RESULT"):
        assert kind in types
    assert types.index("TOOL_CALL_END") < types.index("TOOL_CALL_RESULT")
    roles = [m["role"] for m in out["messages"]]
    assert roles.count("user") == 2 and "tool" in roles
    tool_message = next(m for m in out["messages"] if m["role"] == "tool")
    assert tool_message["content"] == "3"
    assert any(
        m["role"] == "assistant" and m.get("content") == f"The answer is 3. {XSS}" for m in out["messages"]
    )
    history = model.requests[2].messages
    assert [type(m).__name__ for m in history] == [
        "UserMessage",
        "AiMessage",
        "ToolExecutionResultMessage",
        "AiMessage",
        "UserMessage",
    ]


def test_ag_ui_over_a_provider_streaming_parallel_calls_on_the_wire() -> None:
    # The model is OpenAIChatModel against agentloop's fake OpenAI server (the Chat Completions wire
    # protocol over a real socket): two parallel calls whose arguments stream in pieces, then text.
    from anyio.from_thread import start_blocking_portal

    from agentloop.models import OpenAIChatModel
    from agentloop.testing import FakeOpenAIServer

    script = [
        AiMessage(
            tool_execution_requests=[
                call("call_1", "add", {"a": 1, "b": 2}),
                call("call_2", "add", {"a": 3, "b": 4}),
            ]
        ),
        "3 and 7.",
    ]
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(FakeOpenAIServer(script, argument_pieces=4)) as server,
    ):
        model = OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key="sk-test")
        with serving(ag_ui_app(Agent(model, tools=[add]))) as url:
            out = run_node("ag_ui_run.mjs", url, [{"user": "1 + 2 and 3 + 4?"}])
    [run] = out["runs"]
    assert run["error"] is None
    types = [e["type"] for e in run["events"]]
    assert types.count("TOOL_CALL_START") == 2 and types.count("TOOL_CALL_ARGS") >= 8
    results = [e["content"] for e in run["events"] if e["type"] == "TOOL_CALL_RESULT"]
    assert sorted(results) == ["3", "7"]
    assert run["events"][-1]["result"] == "3 and 7."


def test_ag_ui_approval_interrupt_and_resume() -> None:
    agent, _ = approval_agent()
    with serving(ag_ui_app(agent)) as url:
        out = run_node("ag_ui_run.mjs", url, [{"user": "Email Ada"}, {"resume": [True]}])
    paused, resumed = out["runs"]
    assert paused["error"] is None and resumed["error"] is None
    outcome = paused["events"][-1]["outcome"]
    assert outcome["type"] == "interrupt" and outcome["interrupts"][0]["reason"] == "tool_approval"
    assert len(paused["pending"]) == 1 and resumed["pending"] == []
    assert sent == ["ada@example.com"]
    types = [e["type"] for e in resumed["events"]]
    assert "TOOL_CALL_RESULT" in types and types[-1] == "RUN_FINISHED"
    assert "TOOL_CALL_START" not in types  # the client has the call from the paused run
    calls = [c["id"] for m in out["messages"] if m["role"] == "assistant" for c in m.get("toolCalls", [])]
    results = [m["toolCallId"] for m in out["messages"] if m["role"] == "tool"]
    assert len(calls) == 1 and results == calls


def test_ag_ui_denial_reaches_the_model() -> None:
    agent, model = approval_agent()
    with serving(ag_ui_app(agent)) as url:
        out = run_node("ag_ui_run.mjs", url, [{"user": "Email Ada"}, {"resume": ["Not today"]}])
    paused, resumed = out["runs"]
    assert paused["events"][-1]["outcome"]["type"] == "interrupt"
    assert resumed["error"] is None and sent == []
    [result] = [e for e in resumed["events"] if e["type"] == "TOOL_CALL_RESULT"]
    assert result["content"] == "Not today" and resumed["result"] == "Done: Not today"
    assert model.requests[1].messages[-1].is_error


def test_ag_ui_model_error_is_run_error() -> None:
    model = ScriptedChatModel([ModelError("the provider said no")])
    with serving(ag_ui_app(Agent(model))) as url:
        out = run_node("ag_ui_run.mjs", url, [{"user": "hi"}])
    [run] = out["runs"]
    assert [e["type"] for e in run["events"]] == ["RUN_STARTED", "RUN_ERROR"]
    assert run["events"][-1]["message"] == "ModelError: the provider said no"
