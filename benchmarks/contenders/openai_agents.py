"""OpenAI Agents SDK: `Runner.run_streamed` on `OpenAIChatCompletionsModel`, tracing off, usage on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx2
import openai
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    ToolCallOutputItem,
    function_tool,
    set_tracing_disabled,
)
from openai.types.responses import ResponseTextDeltaEvent

from contenders import Outcome

LABEL = "openai-agents"
PACKAGES = ("openai-agents", "openai", "pydantic", "httpx2")

set_tracing_disabled(True)


class Contender:
    def __init__(self, base_url: str, get_value: Callable[[str], Awaitable[str]]) -> None:
        self._http = openai.DefaultAsyncHttpx2Client(
            limits=httpx2.Limits(max_connections=None, max_keepalive_connections=100)
        )
        client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", http_client=self._http)
        self._agent = Agent(
            name="bench",
            instructions=None,
            model=OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client),
            model_settings=ModelSettings(include_usage=True),
            tools=[function_tool(get_value)],
        )
        self._config = RunConfig(tracing_disabled=True)

    async def session(self, question: str, on_delta: Callable[[str], None]) -> Outcome:
        result = Runner.run_streamed(self._agent, question, run_config=self._config)
        async for event in result.stream_events():
            if event.type == "raw_response_event" and isinstance(event.data, ResponseTextDeltaEvent):
                on_delta(event.data.delta)
        executions = sum(isinstance(item, ToolCallOutputItem) for item in result.new_items)
        return Outcome(executions, result.context_wrapper.usage.output_tokens)

    async def aclose(self) -> None:
        await self._http.aclose()
