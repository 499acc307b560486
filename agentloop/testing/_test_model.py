"""`TestModel`: calls every tool on offer with schema-valid arguments, then reports what they returned."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Literal

import msgspec

from agentloop._values._messages import (
    AiMessage,
    ChatRequest,
    ChatResponse,
    TokenUsage,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
)
from agentloop.models._base import ModelEvent

from ._examples import example_arguments
from ._scripted import CallIds, Replay, Tokenizer, check_delay, make_tokenizer, to_response

__all__ = ["TestModel"]

_NO_TOOLS = "success (no tool calls)"


class TestModel:
    """A model for smoke-testing a tool set offline, no script needed.

    When the conversation does not end with tool results, it calls every offered tool once (or those named in
    `call_tools`), all in one response, with arguments generated from each tool's JSON schema
    (`example_arguments`; `seed` varies the values). When it ends with tool results, it answers with a JSON
    object `{"tool_name": "result text", ...}` of those results (a list when a tool was called several times),
    or with `final_text` if given. With no tool to call it answers `final_text` or "success (no tool calls)".
    `ToolChoice.NONE` stops it calling tools; `ToolChoice.tool(name)` limits it to that tool.
    A request with a `response_format` is answered with JSON generated from its schema instead of text.
    Every request is kept in `.requests`.
    """

    __test__ = False  # not a pytest test class, despite its name
    supports_response_format = True

    def __init__(
        self,
        *,
        call_tools: Literal["all"] | Sequence[str] = "all",
        seed: int = 0,
        final_text: str | None = None,
        token_usage: TokenUsage | None = None,
        delay: float = 0.0,
        chunk_size: int | None = None,
        tokenizer: Tokenizer | None = None,
        model_name: str = "test",
    ) -> None:
        if isinstance(call_tools, str) and call_tools != "all":
            raise ValueError(
                f"TestModel: call_tools must be 'all' or a list of tool names, got {call_tools!r}"
            )
        self.call_tools: Literal["all"] | tuple[str, ...] = (
            "all" if isinstance(call_tools, str) else tuple(call_tools)
        )
        self.seed = seed
        self.final_text = final_text
        self.requests: list[ChatRequest] = []
        self.model_name = model_name
        self._token_usage = token_usage
        self._replay = Replay(
            make_tokenizer(chunk_size, tokenizer, "TestModel"), check_delay(delay, "TestModel")
        )
        self._ids = CallIds()

    def _answer(self, request: ChatRequest) -> AiMessage:
        messages = request.messages
        results: list[ToolExecutionResultMessage] = []
        for message in reversed(messages):
            if type(message) is not ToolExecutionResultMessage:
                break
            results.append(message)
        format = request.response_format
        if format is not None and (results or not self._calls(request)):
            example = example_arguments(format.schema, seed=self.seed)
            return AiMessage(text=msgspec.json.encode(example).decode())
        if results:
            return AiMessage(text=self.final_text if self.final_text is not None else _summary(results[::-1]))
        calls = self._calls(request)
        if calls:
            return AiMessage(tool_execution_requests=tuple(calls))
        return AiMessage(text=self.final_text if self.final_text is not None else _NO_TOOLS)

    def _calls(self, request: ChatRequest) -> list[ToolExecutionRequest]:
        return [
            ToolExecutionRequest(
                None,
                spec.name,
                msgspec.json.encode(example_arguments(spec.parameters, seed=self.seed)).decode(),
            )
            for spec in request.tool_specifications
            if self._may_call(spec.name, request)
        ]

    def _may_call(self, name: str, request: ChatRequest) -> bool:
        choice = request.tool_choice
        if choice is not None and (
            choice.mode == "none" or (choice.mode == "tool" and choice.tool_name != name)
        ):
            return False
        return self.call_tools == "all" or name in self.call_tools

    def _respond(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        return to_response(
            self._answer(request),
            request,
            ids=self._ids,
            token_usage=self._token_usage,
            model_name=self.model_name,
            what="TestModel's answer",
        )

    async def chat(self, request: ChatRequest) -> ChatResponse:
        """Calls the offered tools, or summarises their results."""
        response = self._respond(request)
        await self._replay.pause()
        return response

    async def stream(self, request: ChatRequest) -> AsyncGenerator[ModelEvent, None]:
        """As `chat`, streamed."""
        response = self._respond(request)
        for event in self._replay.events(response):
            await self._replay.pause()
            yield event

    def __repr__(self) -> str:
        return f"TestModel(call_tools={self.call_tools!r}, seed={self.seed}, requests={len(self.requests)})"


def _summary(results: list[ToolExecutionResultMessage]) -> str:
    """`{"tool_name": "result", ...}` as JSON; a tool called several times maps to a list of results."""
    summary: dict[str, str | list[str]] = {}
    for result in results:
        previous = summary.get(result.tool_name)
        if previous is None:
            summary[result.tool_name] = result.text
        elif isinstance(previous, list):
            previous.append(result.text)
        else:
            summary[result.tool_name] = [previous, result.text]
    return msgspec.json.encode(summary).decode()
