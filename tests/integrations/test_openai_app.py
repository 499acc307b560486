"""agentloop.ui.openai_app served by uvicorn on 127.0.0.1 and driven by the official `openai` Python SDK (sync
and async, streamed and not) and the official openai-node client (Node 22, tests/node)."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai
import pytest

from agentloop import (
    Agent,
    AiMessage,
    ChatRequest,
    ChatResponse,
    MessageWindowChatMemory,
    ModelError,
    TokenUsage,
    ToolExecutionRequest,
    UserMessage,
    tool,
)
from agentloop.testing import ScriptedChatModel
from agentloop.ui import openai_app
from tests.ui_clients import EndlessModel, run_node, serving


@tool("Adds two numbers")
def add(a: int, b: int) -> int:
    return a + b


def adding_model() -> ScriptedChatModel:
    """Says it adds, calls `add`, then answers (three times over); each call reports 10 prompt and 4
    completion tokens."""
    return ScriptedChatModel(
        [
            AiMessage("Let me add.", [ToolExecutionRequest("c1", "add", '{"a": 2, "b": 3}')]),
            lambda request: f"The sum is {request.messages[-1].text}.",
        ]
        * 3,
        token_usage=TokenUsage(10, 4),
    )


def client(url: str, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


def test_chat_completion_runs_the_agents_tools_and_sums_the_usage() -> None:
    model = adding_model()
    with serving(openai_app(Agent(model, tools=[add]), model_name="adder")) as url:
        done = client(url).chat.completions.create(
            model="adder",
            messages=[
                {"role": "system", "content": "You are a pirate."},
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": [{"type": "text", "text": "What is 2 + 3?"}]},
            ],
        )
    assert done.object == "chat.completion" and done.model == "adder" and done.id.startswith("chatcmpl-")
    [choice] = done.choices
    assert choice.message.role == "assistant" and choice.finish_reason == "stop"
    assert choice.message.content == "Let me add.\n\nThe sum is 5."
    assert done.usage is not None
    assert (done.usage.prompt_tokens, done.usage.completion_tokens, done.usage.total_tokens) == (20, 8, 28)
    # Without a memory the request's messages are the history; the client's system message is dropped.
    sent = model.requests[0].messages
    assert [type(m).__name__ for m in sent] == ["UserMessage", "AiMessage", "UserMessage"]
    assert [m.text for m in sent] == ["Hi", "Hello.", "What is 2 + 3?"]


def test_chat_stream_sends_openai_chunks_then_usage_then_done() -> None:
    with serving(openai_app(Agent(adding_model(), tools=[add]), model_name="adder")) as url:
        chunks = list(
            client(url).chat.completions.create(
                model="adder",
                messages=[{"role": "user", "content": "What is 2 + 3?"}],
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        raw = httpx2.post(
            f"{url}/v1/chat/completions",
            json={"model": "adder", "messages": [{"role": "user", "content": "again"}], "stream": True},
        )
    assert all(c.object == "chat.completion.chunk" and c.model == "adder" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Let me add.\n\nThe sum is 5."
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 3  # streamed in pieces
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 28
    assert all(c.usage is None for c in chunks[:-1])
    # On the wire: SSE data lines, `data: [DONE]` last, no usage key unless asked.
    assert raw.headers["content-type"].startswith("text/event-stream")
    events = [e for e in raw.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events)
    assert "usage" not in json.loads(events[0][6:])


def test_responses_not_streamed_and_streamed_with_the_sdks_helper() -> None:
    with serving(openai_app(Agent(adding_model(), tools=[add]), model_name="adder")) as url:
        sdk = client(url)
        done = sdk.responses.create(model="adder", input="What is 2 + 3?")
        with sdk.responses.stream(
            model="adder", input=[{"role": "user", "content": [{"type": "input_text", "text": "Sum?"}]}]
        ) as stream:
            kinds = [event.type for event in stream]
            final = stream.get_final_response()
    assert done.object == "response" and done.status == "completed" and done.id.startswith("resp_")
    assert done.output_text == "Let me add.\n\nThe sum is 5."
    assert done.usage is not None and done.usage.total_tokens == 28
    assert final.output_text == "Let me add.\n\nThe sum is 5." and final.status == "completed"
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}


async def test_async_client_streams_both_apis() -> None:
    app = openai_app(Agent(ScriptedChatModel(["one two three", "four five"])), model_name="m")
    with serving(app) as url:
        sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        async with sdk:
            pieces = [
                c.choices[0].delta.content or ""
                async for c in await sdk.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "count"}], stream=True
                )
                if c.choices
            ]
            events = [e async for e in await sdk.responses.create(model="m", input="more", stream=True)]
            models = await sdk.models.list()
    assert "".join(pieces) == "one two three" and len(pieces) > 2
    assert events[-1].type == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "four five"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [m.id for m in models.data] == ["m"]


def test_memory_id_from_the_header_or_user_and_only_the_new_message_is_read() -> None:
    model = ScriptedChatModel(["Hi Ada.", "You are Ada.", "Hi Bob."])
    agent = Agent(model, memory=MessageWindowChatMemory.provider(20))
    with serving(openai_app(agent, model_name="m")) as url:
        sdk = client(url)
        sdk.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "I am Ada"}],
            extra_headers={"X-Memory-Id": "ada"},
        )
        second = sdk.responses.create(
            model="m",
            input=[
                {"role": "user", "content": "forged history the server ignores"},
                {"role": "assistant", "content": "ignored"},
                {"role": "user", "content": "Who am I?"},
            ],
            user="ada",
        )
        sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "I am Bob"}], user="bob")
        with pytest.raises(openai.BadRequestError) as missing:
            sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "Who?"}])
    assert second.output_text == "You are Ada."
    assert [m.text for m in model.requests[1].messages] == ["I am Ada", "Hi Ada.", "Who am I?"]
    assert [m.text for m in model.requests[2].messages] == ["I am Bob"]
    assert "X-Memory-Id" in missing.value.message and len(model.requests) == 3


def test_bearer_keys_are_checked_and_never_echoed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    with serving(openai_app(Agent(ScriptedChatModel(["ok"])), api_keys=["k-1", "k-2"])) as url:
        with pytest.raises(openai.AuthenticationError) as wrong:
            client(url, "sk-wrong-secret").models.list()
        no_key = httpx2.get(f"{url}/v1/models")
        assert [m.id for m in client(url, "k-2").models.list().data] == ["agentloop"]
        answer = client(url, "k-1").chat.completions.create(
            model="agentloop", messages=[{"role": "user", "content": "hi"}]
        )
    assert wrong.value.status_code == 401 and "sk-wrong-secret" not in str(wrong.value.body)
    assert wrong.value.code == "invalid_api_key"
    assert no_key.status_code == 401 and "didn't provide" in no_key.json()["error"]["message"]
    assert answer.choices[0].message.content == "ok"
    assert "sk-wrong-secret" not in caplog.text and "k-1" not in caplog.text


def test_refusals_name_the_field_in_openais_error_shape() -> None:
    model = ScriptedChatModel(["never"])
    with serving(openai_app(Agent(model), model_name="m")) as url:
        sdk = client(url)
        user = [{"role": "user", "content": "hi"}]
        tool_spec: Any = {"type": "function", "function": {"name": "f", "parameters": {}}}
        with pytest.raises(openai.BadRequestError) as tools:
            sdk.chat.completions.create(model="m", messages=user, tools=[tool_spec])  # type: ignore[arg-type]
        with pytest.raises(openai.BadRequestError) as responses_tools:
            sdk.responses.create(
                model="m", input="hi", tools=[{"type": "function", "name": "f", "parameters": {}}]
            )  # type: ignore[list-item]
        with pytest.raises(openai.NotFoundError) as unknown_model:
            sdk.chat.completions.create(model="gpt-9", messages=user)  # type: ignore[arg-type]
        posted = {
            "unknown": httpx2.post(
                f"{url}/v1/chat/completions", json={"model": "m", "messages": user, "colour": 1}
            ),
            "type": httpx2.post(
                f"{url}/v1/chat/completions", json={"model": "m", "messages": user, "stream": "y"}
            ),
            "json": httpx2.post(
                f"{url}/v1/responses", content=b"{", headers={"content-type": "application/json"}
            ),
            "part": httpx2.post(
                f"{url}/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": [{"type": "input_audio"}]}]},
            ),
            "tool_msg": httpx2.post(
                f"{url}/v1/chat/completions",
                json={
                    "model": "m",
                    "messages": [*user, {"role": "tool", "tool_call_id": "x", "content": "1"}],
                },
            ),
            "last": httpx2.post(
                f"{url}/v1/chat/completions",
                json={"model": "m", "messages": [*user, {"role": "assistant", "content": "hey"}]},
            ),
        }
        get = httpx2.get(f"{url}/v1/chat/completions")
        nowhere = httpx2.post(f"{url}/v1/embeddings", json={})
    assert tools.value.status_code == 400 and "own tools" in tools.value.message
    assert tools.value.param == "tools"  # type: ignore[attr-defined]
    assert responses_tools.value.status_code == 400 and "own tools" in responses_tools.value.message
    assert unknown_model.value.code == "model_not_found"
    for name, answer in posted.items():
        assert answer.status_code == 400, name
        assert set(answer.json()["error"]) == {"message", "type", "param", "code"}, name
        assert answer.json()["error"]["type"] == "invalid_request_error", name
    assert posted["unknown"].json()["error"]["param"] == "colour"
    assert posted["type"].json()["error"]["param"] == "stream"
    assert "not JSON" in posted["json"].json()["error"]["message"]
    assert posted["part"].json()["error"]["param"] == "messages[0].content[0].type"
    assert "own tools" in posted["tool_msg"].json()["error"]["message"]
    assert "last" in posted["last"].json()["error"]["message"]
    assert get.status_code == 405 and get.headers["allow"] == "POST"
    assert nowhere.status_code == 404 and "Invalid URL" in nowhere.json()["error"]["message"]
    assert model.requests == []  # nothing ran


def test_a_failed_run_is_a_server_error_not_retried_and_an_error_event_when_streamed() -> None:
    model = ScriptedChatModel([ModelError("the provider is down"), ModelError("still down")])
    with serving(openai_app(Agent(model), model_name="m")) as url:
        sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=2)
        with pytest.raises(openai.InternalServerError) as failed:
            sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.APIError) as streamed:
            list(
                sdk.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}], stream=True
                )
            )
    assert "the provider is down" in failed.value.message
    assert "still down" in streamed.value.message
    assert len(model.requests) == 2  # the SDK did not retry the failed run (x-should-retry: false)


class SlowThenQuick:
    """Streams its first answer forever (until cancelled), answers later requests at once."""

    model_name = "slow-then-quick"

    def __init__(self) -> None:
        self.endless = EndlessModel()
        self.requests: list[ChatRequest] = []

    async def chat(self, request: ChatRequest) -> ChatResponse:
        raise NotImplementedError

    async def stream(self, request: ChatRequest) -> Any:
        self.requests.append(request)
        if len(self.requests) == 1:
            async for event in self.endless.stream(request):
                yield event
            return
        async for event in ScriptedChatModel(["back again"]).stream(request):
            yield event


@pytest.mark.parametrize("streamed", [True, False])
def test_client_disconnect_cancels_the_run_and_memory_stays_valid(streamed: bool) -> None:
    model = SlowThenQuick()
    agent = Agent(model, memory=MessageWindowChatMemory.provider(20))
    with serving(openai_app(agent, model_name="m")) as url:
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": "go"}],
            "user": "u",
            "stream": streamed,
        }
        if streamed:
            with httpx2.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
                for line in response.iter_lines():
                    if "tick" in line:
                        break  # the client goes away mid-answer
        else:
            with pytest.raises(openai.APITimeoutError):
                openai.OpenAI(
                    base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=0.5
                ).chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}], user="u")
        assert model.endless.cancelled.wait(10), "the run was not cancelled when the client went away"
        again = client(url).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "still there?"}], user="u"
        )
    assert again.choices[0].message.content == "back again"
    # The cancelled round left nothing half-done in the memory: the next request's history is valid.
    history = model.requests[1].messages
    assert isinstance(history[-1], UserMessage) and history[-1].text == "still there?"
    assert all(not isinstance(m, AiMessage) or not m.tool_execution_requests for m in history)


def test_node_openai_client_chat_and_responses_streamed_and_not() -> None:
    model = ScriptedChatModel(
        [
            AiMessage("Let me add.", [ToolExecutionRequest("c1", "add", '{"a": 2, "b": 3}')]),
            "The sum is 5.",
            "Plain answer.",
            "Streamed answer here.",
            "Response answer.",
            "Streamed response answer.",
        ],
        token_usage=TokenUsage(3, 2),
    )
    with serving(openai_app(Agent(model, tools=[add]), api_keys="node-key", model_name="m")) as url:
        out = run_node("openai_run.mjs", f"{url}/v1", [{"key": "node-key"}])
    assert out["models"] == ["m"]
    assert out["chat"]["content"] == "Let me add.\n\nThe sum is 5."
    assert out["chat"]["usage"]["total_tokens"] == 10
    assert out["chat2"] == "Plain answer."
    assert (
        out["chatStream"]["text"] == "Streamed answer here."
        and out["chatStream"]["usage"]["total_tokens"] == 5
    )
    assert out["response"] == "Response answer."
    assert out["responseStream"]["text"] == "Streamed response answer."
    assert out["responseStream"]["last"] == "response.completed"
    assert out["badKey"] == 401 and out["tools"]["status"] == 400


def test_openai_app_options_are_checked() -> None:
    from agentloop import IllegalConfigurationError

    with pytest.raises(IllegalConfigurationError, match="api_keys"):
        openai_app(Agent(ScriptedChatModel([])), api_keys=[""])
    with pytest.raises(IllegalConfigurationError, match="Agent"):
        openai_app(object())  # type: ignore[arg-type]
    assert openai_app(Agent(ScriptedChatModel([]), name="helper")).model_name == "helper"


@tool("Sends an email", requires_approval=True)
def send_email(to: str) -> str:
    return f"sent to {to}"


def test_a_run_paused_for_approval_says_the_api_cannot_carry_it() -> None:
    ask = AiMessage(None, [ToolExecutionRequest("c1", "send_email", '{"to": "ada@example.com"}')])
    model = ScriptedChatModel([ask, ask])
    with serving(openai_app(Agent(model, tools=[send_email]), model_name="m")) as url:
        with pytest.raises(openai.InternalServerError) as plain:
            client(url).chat.completions.create(model="m", messages=[{"role": "user", "content": "mail"}])
        events = list(client(url).responses.create(model="m", input="mail", stream=True))
    assert "approval" in plain.value.message and "vercel_ai_app" in plain.value.message
    assert events[-1].type == "response.failed"
    assert "approval" in events[-1].response.error.message  # type: ignore[union-attr]


async def test_mounted_under_a_prefix_in_starlette() -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    app = Starlette(
        routes=[Mount("/openai", app=openai_app(Agent(ScriptedChatModel(["mounted"])), model_name="m"))]
    )
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))
    sdk = openai.AsyncOpenAI(base_url="http://app/openai/v1", api_key="x", http_client=http, max_retries=0)
    async with sdk:
        answer = await sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        models = await sdk.models.list()
    assert answer.choices[0].message.content == "mounted" and [m.id for m in models.data] == ["m"]
