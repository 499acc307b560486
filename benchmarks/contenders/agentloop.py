"""agentloop: `Agent` + `OpenAIChatModel`, defaults; text deltas from `async for token in stream`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from agentloop import Agent, tool
from agentloop.models import OpenAIChatModel
from contenders import Outcome

LABEL = "agentloop"
PACKAGES = ("agentloop-runtime", "httpx2", "msgspec", "pydantic", "anyio")


_tools: dict[object, object] = {}  # a function becomes a tool once; every Contender of this process shares it


class Contender:
    def __init__(self, base_url: str, get_value: Callable[[str], Awaitable[str]]) -> None:
        if get_value not in _tools:
            _tools[get_value] = tool(get_value)
        self._model = OpenAIChatModel(model="gpt-4o-mini", base_url=base_url, api_key="bench")
        self._agent = Agent(self._model, tools=[_tools[get_value]])

    async def session(self, question: str, on_delta: Callable[[str], None]) -> Outcome:
        stream = self._agent.stream(question)
        async for token in stream:
            on_delta(token)
        result = stream.result
        usage = result.token_usage
        return Outcome(len(result.tool_executions), usage.output_tokens if usage is not None else None)

    async def aclose(self) -> None:
        await self._model.aclose()
