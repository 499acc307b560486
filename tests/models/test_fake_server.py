"""The loopback fake server: recording, scripted replies, keep-alive, and every injectable fault."""

from __future__ import annotations

import time

import anyio
import httpx2
import pytest

from agentloop import AiMessage, ChatResponse, FinishReason, TokenUsage, ToolExecutionRequest
from agentloop.models._http._sse import SSEDecoder
from agentloop.testing._fake_openai import FakeOpenAIServer
from agentloop.testing._fake_server import FakeServer, Reply, encode_sse, split_evenly, split_text


def read_into(response: httpx2.Response, sink: list[bytes]) -> None:
    """Appends each raw chunk of `response` to `sink` as it arrives (so what came before a failure shows)."""
    for chunk in response.iter_raw():
        sink.append(chunk)


def test_sync_use_records_requests_and_answers_in_order() -> None:
    with FakeServer(
        [Reply.json({"n": 1}), Reply.json({"n": 2}, status=201, headers=[("x-extra", "yes")])]
    ) as server:
        with httpx2.Client() as client:
            first = client.post(
                server.url("/a/b?x=1&y=two"), json={"hello": "world"}, headers={"X-Test": "t"}
            )
            second = client.get(server.url("/c"))
        assert first.json() == {"n": 1}
        assert (second.status_code, second.json(), second.headers["x-extra"]) == (201, {"n": 2}, "yes")
        one, two = server.requests
        assert (one.method, one.path, one.query) == ("POST", "/a/b", {"x": "1", "y": "two"})
        assert one.json == {"hello": "world"} and one.headers["x-test"] == "t"
        assert (two.method, two.path, two.json, two.body) == ("GET", "/c", None, b"")
        assert server.pending == 0


def test_keep_alive_reuses_one_connection_and_can_be_switched_off() -> None:
    with FakeServer([Reply.json({})] * 3) as server, httpx2.Client() as client:
        for _ in range(3):
            client.get(server.url("/"))
        assert server.connections_opened == 1
        assert [r.connection for r in server.requests] == [0, 0, 0]
    with FakeServer([Reply.json({})] * 3, keep_alive=False) as server, httpx2.Client() as client:
        for _ in range(3):
            client.get(server.url("/"))
        assert server.connections_opened == 3


def test_no_reply_left_gives_500_naming_the_request() -> None:
    with FakeServer() as server, httpx2.Client() as client:
        response = client.post(server.url("/v1/x"), json={})
        assert response.status_code == 500
        assert "no scripted reply left for POST /v1/x" in response.json()["error"]["message"]
        assert server.unanswered == server.requests


def test_callable_items_see_the_request_and_unrenderable_items_give_500() -> None:
    with FakeServer([lambda request: Reply.json({"echo": request.json}), object()]) as server:
        with httpx2.Client() as client:
            assert client.post(server.url("/"), json=[1, 2]).json() == {"echo": [1, 2]}
            broken = client.post(server.url("/"), json={})
        assert broken.status_code == 500
        assert "cannot send object items" in broken.json()["error"]["message"]


def test_add_rejects_unknown_fault_names() -> None:
    with pytest.raises(TypeError, match="unknown Reply fields"):
        FakeServer().add(Reply(), dissconnect=True)


def test_base_url_needs_a_running_server() -> None:
    server = FakeServer()
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.base_url


def test_chunks_are_streamed_one_by_one_with_delays() -> None:
    chunks = [b"one,", b"two,", b"three"]
    with FakeServer([Reply.stream(chunks, chunk_delay=0.05)]) as server, httpx2.Client() as client:
        started = time.monotonic()
        with client.stream("GET", server.url("/")) as response:
            received = list(response.iter_raw())
        elapsed = time.monotonic() - started
    assert received == chunks
    assert elapsed >= 0.15


def test_per_chunk_delays_and_slow_headers() -> None:
    reply = Reply.stream([b"a", b"b"], chunk_delay=(0.0, 0.2), headers_delay=0.2)
    with FakeServer([reply]) as server, httpx2.Client() as client:
        started = time.monotonic()
        with client.stream("GET", server.url("/")) as response:
            headers_at = time.monotonic() - started
            assert response.read() == b"ab"
        assert headers_at >= 0.2
        assert time.monotonic() - started >= 0.4


def test_slow_headers_trip_a_client_read_timeout() -> None:
    reply = Reply.json({}, headers=()).with_faults(headers_delay=1.0)
    with (
        FakeServer([reply]) as server,
        httpx2.Client(timeout=0.1) as client,
        pytest.raises(httpx2.ReadTimeout),
    ):
        client.get(server.url("/"))


def test_disconnect_after_chunks_cuts_the_body() -> None:
    received: list[bytes] = []
    with (
        FakeServer([Reply.stream([b"a", b"b", b"c"], disconnect_after_chunks=2)]) as server,
        httpx2.Client() as client,
        client.stream("GET", server.url("/")) as response,
        pytest.raises(httpx2.RemoteProtocolError),
    ):
        read_into(response, received)
    assert received == [b"a", b"b"]


def test_disconnect_after_bytes_cuts_inside_a_chunk_and_inside_a_plain_body() -> None:
    with (
        FakeServer(
            [
                Reply.stream([b"abc", b"defg"], disconnect_after_bytes=5),
                Reply.json({"long": "x" * 100}, headers=()).with_faults(disconnect_after_bytes=10),
            ]
        ) as server,
        httpx2.Client() as client,
    ):
        with client.stream("GET", server.url("/")) as response:
            received: list[bytes] = []
            with pytest.raises(httpx2.RemoteProtocolError):
                read_into(response, received)
        assert b"".join(received) == b"abcde"
        with pytest.raises(httpx2.RemoteProtocolError):
            client.get(server.url("/"))


def test_connection_reset_before_headers() -> None:
    with FakeServer([Reply.connection_reset()]) as server, httpx2.Client() as client:
        with pytest.raises((httpx2.RemoteProtocolError, httpx2.ReadError)):
            client.get(server.url("/"))
        assert len(server.requests) == 1


async def test_async_use_and_hold_open_until_the_client_leaves() -> None:
    reply = Reply.sse([encode_sse({"n": 1})], headers=()).with_faults(hold_open=True)
    async with FakeServer([reply]) as server:
        async with httpx2.AsyncClient() as client:
            async with client.stream("GET", server.url("/events")) as response:
                decoder = SSEDecoder()
                async for chunk in response.aiter_raw():
                    events = decoder.feed(chunk)
                    if events:
                        assert events[0].data == '{"n":1}'
                        break
            request = server.requests[0]
            with anyio.fail_after(5):
                await request.wait_disconnected()
        assert request.disconnected.is_set() and not request.completed.is_set()


async def test_stop_ends_held_streams() -> None:
    server = FakeServer([Reply.stream([b"x"], hold_open=True)]).start()
    async with httpx2.AsyncClient() as client, client.stream("GET", server.url("/")) as response:
        iterator = response.aiter_raw()
        assert await iterator.__anext__() == b"x"
        await anyio.to_thread.run_sync(server.stop)
        with pytest.raises(httpx2.RemoteProtocolError):
            await iterator.__anext__()
    assert server.open_connections == 0


def test_helpers() -> None:
    assert "".join(split_text("Hello  there,\nworld! ")) == "Hello  there,\nworld! "
    assert len(split_text("one two three")) == 3
    assert split_evenly('{"a": 1}', 3) == ['{"a', '": ', "1}"]
    assert split_evenly("", 3) == [""]
    assert encode_sse("a\nb", event="e", id="1") == b"event: e\nid: 1\ndata: a\ndata: b\n\n"


# -- FakeOpenAIServer ---------------------------------------------------------------------------------------


def _completion_request(**extra: object) -> dict[str, object]:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], **extra}


def test_openai_json_answer_with_usage_and_tool_calls() -> None:
    call = ToolExecutionRequest("call_9", "lookup", '{"q": "x"}')
    script = [
        ChatResponse(AiMessage("Hi", [call]), TokenUsage(11, 7), FinishReason.LENGTH, model="gpt-test"),
    ]
    with FakeOpenAIServer(script) as server, httpx2.Client() as client:
        response = client.post(server.url("/chat/completions"), json=_completion_request())
    body = response.json()
    assert response.headers["x-request-id"].startswith("req_")
    assert body["object"] == "chat.completion" and body["model"] == "gpt-test"
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["content"] == "Hi"
    assert choice["message"]["tool_calls"] == [
        {"id": "call_9", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
    ]
    assert body["usage"]["prompt_tokens"] == 11 and body["usage"]["total_tokens"] == 18


def test_openai_sse_answer_layout() -> None:
    calls = [ToolExecutionRequest("c1", "a", '{"x": 1}'), ToolExecutionRequest("c2", "b", '{"y": 22}')]
    with FakeOpenAIServer([AiMessage(tool_execution_requests=calls)]) as server, httpx2.Client() as client:
        payload = _completion_request(stream=True, stream_options={"include_usage": True})
        response = client.post(server.url("/chat/completions"), json=payload)
    assert response.headers["content-type"].startswith("text/event-stream")
    decoder = SSEDecoder()
    events = decoder.feed(response.content)
    assert events[-1].data == "[DONE]"
    import json

    chunks = [json.loads(e.data) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None, "refusal": None}
    first_call = chunks[1]["choices"][0]["delta"]["tool_calls"][0]
    assert first_call == {
        "index": 0,
        "id": "c1",
        "type": "function",
        "function": {"name": "a", "arguments": ""},
    }
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    assert all(c.get("usage", None) is None for c in chunks[:-1])


def test_openai_fake_validates_like_openai() -> None:
    bad = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
            {"role": "user", "content": "again"},
        ],
    }
    with FakeOpenAIServer(["never sent", "ok"]) as server, httpx2.Client() as client:
        response = client.post(server.url("/chat/completions"), json=bad)
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert "did not have response messages: c1" in error["message"]
        wrong_path = client.post(server.url("/completions"), json=_completion_request())
        assert wrong_path.status_code == 404


def test_openai_error_helper_format() -> None:
    with (
        FakeOpenAIServer(
            [FakeOpenAIServer.error(429, "Slow down", headers=[("retry-after", "3")])]
        ) as server,
        httpx2.Client() as client,
    ):
        response = client.post(server.url("/chat/completions"), json=_completion_request())
    assert response.status_code == 429
    assert response.headers["retry-after"] == "3"
    assert response.headers["x-request-id"].startswith("req_")
    assert response.json() == {
        "error": {"message": "Slow down", "type": "rate_limit_exceeded", "param": None, "code": None}
    }
