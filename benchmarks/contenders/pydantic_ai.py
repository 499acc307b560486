"""pydantic-ai: `Agent.run_stream_events` on `OpenAIChatModel` (OpenAIProvider), text from the part events."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx2
import openai
from pydantic_ai import (
    Agent,
    AgentRunResultEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    Tool,
)
from pydantic_ai.messages import ToolReturnPart
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from contenders import Outcome

LABEL = "pydantic-ai"
PACKAGES = ("pydantic-ai-slim", "openai", "pydantic", "httpx2")


class Contender:
    def __init__(self, base_url: str, get_value: Callable[[str], Awaitable[str]]) -> None:
        # Same pool as the SDK's default except unbounded connections (the idle-sessions test opens 1,000+).
        self._http = openai.DefaultAsyncHttpx2Client(
            limits=httpx2.Limits(max_connections=None, max_keepalive_connections=100)
        )
        client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", http_client=self._http)
        model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client))
        self._agent = Agent(model, tools=[Tool(get_value, takes_ctx=False)])

    async def session(self, question: str, on_delta: Callable[[str], None]) -> Outcome:
        result = None
        async with self._agent.run_stream_events(question) as events:
            async for event in events:
                if isinstance(event, PartDeltaEvent):
                    if isinstance(event.delta, TextPartDelta) and event.delta.content_delta:
                        on_delta(event.delta.content_delta)
                elif isinstance(event, PartStartEvent):
                    if isinstance(event.part, TextPart) and event.part.content:
                        on_delta(event.part.content)
                elif isinstance(event, AgentRunResultEvent):
                    result = event.result
        if result is None:
            raise RuntimeError("the run ended without a result event")
        executions = sum(
            isinstance(part, ToolReturnPart)
            for message in result.all_messages()
            for part in getattr(message, "parts", ())
        )
        return Outcome(executions, result.usage.output_tokens)

    async def aclose(self) -> None:
        await self._http.aclose()
