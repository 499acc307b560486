"""LangChain 1.x `create_agent` on `ChatOpenAI`; text from `astream(stream_mode="messages")`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx2
import openai
from langchain.agents import create_agent
from langchain_core.messages import AIMessageChunk, ToolMessage
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI

from contenders import Outcome

LABEL = "langchain (create_agent)"
PACKAGES = ("langchain", "langchain-core", "langchain-openai", "langgraph", "openai", "pydantic")


class Contender:
    def __init__(self, base_url: str, get_value: Callable[[str], Awaitable[str]]) -> None:
        self._http = openai.DefaultAsyncHttpx2Client(
            limits=httpx2.Limits(max_connections=None, max_keepalive_connections=100)
        )
        model = ChatOpenAI(
            model="gpt-4o-mini",
            base_url=base_url,
            api_key="bench",
            streaming=True,
            stream_usage=True,
            http_async_client=self._http,
        )
        self._agent = create_agent(model, tools=[StructuredTool.from_function(coroutine=get_value)])

    async def session(self, question: str, on_delta: Callable[[str], None]) -> Outcome:
        executions = 0
        output_tokens = 0
        inputs = {"messages": [{"role": "user", "content": question}]}
        async for message, _metadata in self._agent.astream(inputs, stream_mode="messages"):
            if isinstance(message, AIMessageChunk):
                text = message.text
                if text:
                    on_delta(text)
                if message.usage_metadata:
                    output_tokens += message.usage_metadata["output_tokens"]
            elif isinstance(message, ToolMessage):
                executions += 1
        return Outcome(executions, output_tokens)

    async def aclose(self) -> None:
        await self._http.aclose()
