"""An `Agent` in front of a fake provider (OpenAI or Anthropic) over real loopback sockets, with the
helpers to script faulty answers and to check what the agent made of them."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from agentloop import (
    Agent,
    AiMessage,
    MessageWindowChatMemory,
    Result,
    ToolExecutionRequest,
    UserMessage,
    tool,
)
from agentloop._values._messages import ChatMessage
from agentloop.models._anthropic import AnthropicChatModel
from agentloop.models._http import RetryPolicy, Timeouts
from agentloop.models._openai import OpenAIChatModel
from agentloop.testing import FakeAnthropicServer, FakeOpenAIServer, Reply
from agentloop.testing._fake_server import FakeServer, RecordedRequest

from ._support import PLANTED_KEY, Fault, Outcome, ToolProbe, invoke, seed_messages

PROVIDERS = ("openai", "anthropic")
MODES = ("chat", "stream")
FAST_RETRY = RetryPolicy(max_retries=2, initial_delay=0.001, max_delay=0.005, jitter=0.0)
TIMEOUTS = Timeouts(connect=5, read=5, write=5, pool=5, total=30)

QUESTION = "What's the weather in Paris and London?"
ANSWER = "It is sunny in Paris and in London today."
CALLS = AiMessage(
    tool_execution_requests=[
        ToolExecutionRequest("call_paris", "weather", '{"city": "Paris"}'),
        ToolExecutionRequest("call_london", "weather", '{"city": "London"}'),
    ]
)
_AUTH_HEADER = {"openai": "authorization", "anthropic": "x-api-key"}


def fake_server(provider: str, **options: Any) -> FakeServer:
    """The fake of `provider`; the Anthropic fake rejects any key but the planted one."""
    if provider == "openai":
        return FakeOpenAIServer(**options)
    return FakeAnthropicServer(api_key=PLANTED_KEY, **options)


@contextmanager
def shared(server: FakeServer, **attributes: Any) -> Iterator[FakeServer]:
    """A shared fake `server` with `attributes` (e.g. `argument_pieces`) set for one test, then restored."""
    saved = {name: getattr(server, name) for name in attributes}
    for name, value in attributes.items():
        setattr(server, name, value)
    try:
        yield server
    finally:
        for name, value in saved.items():
            setattr(server, name, value)


class Requests:
    """The requests a shared fake server received since this object was made (and its unanswered ones)."""

    def __init__(self, server: FakeServer) -> None:
        with server._lock:  # a failed test may have left scripted replies behind: start afresh
            server._queue.clear()
        self.server = server
        self._first = len(server.requests)
        self._unanswered = len(server.unanswered)

    def __len__(self) -> int:
        return len(self.server.requests) - self._first

    def __getitem__(self, index: int) -> RecordedRequest:
        return self.server.requests[self._first :][index]

    def __iter__(self) -> Any:
        return iter(self.server.requests[self._first :])

    @property
    def unanswered(self) -> list[RecordedRequest]:
        return self.server.unanswered[self._unanswered :]


def provider_model(provider: str, server: FakeServer, **options: Any) -> Any:
    """The real provider model, pointed at the fake, with the planted key and tiny retry delays."""
    options.setdefault("retry", FAST_RETRY)
    options.setdefault("timeout", TIMEOUTS)
    if provider == "openai":
        return OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key=PLANTED_KEY, **options)
    return AnthropicChatModel("claude-sonnet-4-5", base_url=server.base_url, api_key=PLANTED_KEY, **options)


def weather_tool(probe: ToolProbe) -> Any:
    @tool
    async def weather(city: str) -> str:
        """Current weather in a city."""
        await probe.run(city)
        return f"Sunny in {city}"

    return weather


class Scenario:
    """One agent with a weather tool and a seeded memory, talking to one fake provider in one mode."""

    def __init__(
        self, provider: str, mode: str, server: FakeServer, fault: Fault, **model_options: Any
    ) -> None:
        self.provider = provider
        self.mode = mode
        self.server = server
        self.requests = Requests(server)
        self.fault = fault
        self.model = provider_model(provider, server, **model_options)
        self.probe = ToolProbe()
        self.memory = MessageWindowChatMemory(200)
        self.agent = Agent(self.model, tools=[weather_tool(self.probe)], memory=self.memory)
        self.before: list[ChatMessage] = []
        self.stamps: list[float] = []  # wall-clock time each `timed` reply was rendered

    async def seed(self) -> None:
        await self.memory.add(seed_messages())
        self.before = await self.memory.messages()

    # -- scripting --------------------------------------------------------------------------------------

    def add(self, item: Any, **faults: Any) -> None:
        self.server.add(item, **faults)

    def error(self, status: int, message: str, headers: Iterable[tuple[str, str]] = ()) -> Reply:
        """An error answer in the provider's own format."""
        return type(self.server).error(status, message, headers=tuple(headers))  # type: ignore[attr-defined, no-any-return]

    def transformed(self, item: Any, change: Callable[[Reply], Reply]) -> Callable[[RecordedRequest], Reply]:
        """A scripted item: `item` rendered the way the fake renders it for the request, then changed."""

        def render(request: RecordedRequest) -> Reply:
            return change(self.server.render(item, request))

        return render

    def timed(self, item: Any) -> Callable[[RecordedRequest], Any]:
        """A scripted item that notes when it was rendered (wall clock)."""

        def render(request: RecordedRequest) -> Any:
            self.stamps.append(time.time())
            return item(request) if callable(item) else item

        return render

    # -- running ----------------------------------------------------------------------------------------

    async def run(self, message: str = QUESTION) -> Outcome:
        """One invocation in this scenario's mode; the error, if any, is returned rather than raised."""
        return await invoke(self.agent, self.mode, message)

    # -- expectations -----------------------------------------------------------------------------------

    async def expect_answer(self, outcome: Outcome, text: str | None, *, requests: int) -> Result[str]:
        """The invocation succeeded with `text`; memory gained exactly its messages, and stays valid."""
        assert outcome.error is None, f"expected an answer, got {outcome.error!r}"
        result = outcome.result
        assert result is not None
        assert result.content == text
        assert len(self.requests) == requests
        messages = await self.memory.messages()
        assert messages == [*self.before, *result.messages]
        assert result.messages[0] == UserMessage(QUESTION)
        self.fault.check_memory(messages)
        return result

    async def expect_error(
        self, outcome: Outcome, cls: type[BaseException], *phrases: str, requests: int
    ) -> BaseException:
        """The invocation failed with exactly `cls`, whose message says `phrases`; memory is unchanged."""
        error = outcome.error
        assert type(error) is cls, f"expected {cls.__name__}, got {error!r}"
        assert error is not None
        for phrase in phrases:
            assert phrase in str(error), f"{phrase!r} not in {str(error)!r}"
        assert len(self.requests) == requests
        messages = await self.memory.messages()
        assert messages == self.before, "the failed invocation changed memory"
        self.fault.check_memory(messages)
        assert not self.probe.still_running()
        return error

    def check_requests(self) -> None:
        """The planted key went out in the auth header only: never in a body or any other header."""
        auth = _AUTH_HEADER[self.provider]
        for request in self.requests:
            assert PLANTED_KEY in request.headers.get(auth, "")
            other = {k: v for k, v in request.headers.items() if k != auth}
            self.fault.scan(request.body.decode("utf-8", "replace"), repr(other), request.path)


def with_chunks(reply: Reply, chunks: Iterable[bytes]) -> Reply:
    return dataclasses.replace(reply, chunks=tuple(chunks))


def chunk_index(reply: Reply, marker: bytes, *, nth: int = 1) -> int:
    """The index of the `nth` chunk of `reply` that contains `marker`."""
    assert reply.chunks is not None
    found = [i for i, chunk in enumerate(reply.chunks) if marker in chunk]
    assert len(found) >= nth, f"{marker!r} is in {len(found)} chunks of {reply.chunks!r}"
    return found[nth - 1]


def replace_bytes(reply: Reply, old: bytes, new: bytes) -> Reply:
    """`reply` with `old` replaced by `new` in its body or chunks (`old` must occur)."""
    if reply.chunks is None:
        assert old in reply.body
        return dataclasses.replace(reply, body=reply.body.replace(old, new))
    assert any(old in c for c in reply.chunks), f"{old!r} not in the stream"
    return with_chunks(reply, (c.replace(old, new) for c in reply.chunks))


def is_text_event(chunk: bytes) -> bool:
    """A chunk carrying a piece of answer text (in either provider's stream format)."""
    return (b'"content":"' in chunk and b'"content":""' not in chunk) or b'"text_delta"' in chunk


def user_texts(request: RecordedRequest) -> list[str]:
    """Every text the request sends as the user's (to see what the model was told)."""
    texts: list[str] = []
    for message in (request.json or {}).get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            for block in content:
                if block.get("type") == "text":
                    texts.append(block["text"])
                elif block.get("type") == "tool_result":
                    texts.append(str(block.get("content", "")))
    return texts


def tool_results_sent(request: RecordedRequest) -> list[str]:
    """The tool results a request sends to the model, in order (either provider's format)."""
    results: list[str] = []
    for message in (request.json or {}).get("messages", []):
        if message.get("role") == "tool":
            results.append(message.get("content", ""))
        content = message.get("content")
        if isinstance(content, list):
            results += [str(b.get("content", "")) for b in content if b.get("type") == "tool_result"]
    return results
