"""What the provider test files share: the tools their requests offer, reading a model's stream, and a
TCP server on 127.0.0.1 for a test's own bytes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.abc import SocketStream

from agentloop import ChatResponse, ToolSpecification
from agentloop.models import BedrockChatModel, ModelEvent, ResponseComplete
from agentloop.testing import FakeBedrockServer

WEATHER = ToolSpecification(
    "get_weather",
    "Get the current weather in a given location",
    {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
)
TIME = ToolSpecification("get_time", None, {"type": "object", "properties": {}})


async def collect(
    events: AsyncIterator[ModelEvent], into: list[ModelEvent] | None = None
) -> list[ModelEvent]:
    """Every event of a stream (also appended to `into` as they arrive, for streams that fail midway)."""
    received = [] if into is None else into
    async for event in events:
        received.append(event)
    return received


def final(events: Sequence[ModelEvent]) -> ChatResponse:
    """The response a stream ended with, checking it ended with exactly one `ResponseComplete`."""
    last = events[-1]
    assert isinstance(last, ResponseComplete)
    assert sum(isinstance(e, ResponseComplete) for e in events) == 1
    return last.response


def bedrock_model(server: FakeBedrockServer, model_id: str, **options: Any) -> BedrockChatModel:
    """A `BedrockChatModel` for `model_id` pointed at `server`, signing with its credentials."""
    return BedrockChatModel(
        model_id,
        region=server.region,
        endpoint_url=server.base_url,
        aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key,
        **options,
    )


@asynccontextmanager
async def loopback_server(serve: Callable[[SocketStream], Awaitable[None]]) -> AsyncIterator[int]:
    """Serves each connection to 127.0.0.1 with `serve` while the block runs; gives the port."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, serve)
        try:
            yield listener.extra(anyio.abc.SocketAttribute.local_port)
        finally:
            group.cancel_scope.cancel()
