"""`A2AAgent`: a remote A2A agent as a tool of a local agent (a `ToolSource`), its answer streamed.

The tool takes one string argument, `request`, sends it as a user message with a2a-sdk's client (streaming
when the remote card says it can) and returns the remote answer's text. Each chunk of the answer is
reported as the call's progress (`ctx.report_progress`), so whoever watches the tool (an MCP client of
ours today) sees it arrive. Each call starts a new remote conversation: the remote agent keeps no memory
between calls unless `context_id=` says which conversation a call belongs to.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import msgspec
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import AgentCard, Message, Part, Role, SendMessageRequest, TaskState

from .. import (
    IllegalConfigurationError,
    Tool,
    ToolArgumentsError,
    ToolContext,
    ToolExecutionError,
    ToolExecutionRequest,
    ToolSpecification,
)

__all__ = ["A2AAgent"]

_FAILED = {
    TaskState.TASK_STATE_FAILED: "failed",
    TaskState.TASK_STATE_REJECTED: "rejected the request",
    TaskState.TASK_STATE_CANCELED: "was cancelled",
    TaskState.TASK_STATE_INPUT_REQUIRED: "needs more input",
    TaskState.TASK_STATE_AUTH_REQUIRED: "needs authorization",
}


def _tool_name(name: str) -> str:
    """A name providers accept for a tool (letters, digits, `_` and `-`, at most 64)."""
    cleaned = re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_") or "a2a_agent"
    return cleaned[:64]


class A2AAgent:
    """A remote A2A agent at `url`, usable in `tools=[...]` as one tool that asks it a question.

    `name` / `description` name the tool; when either is missing they come from the remote agent card,
    fetched once (`await fetch_card()` beforehand in async code; else it is fetched, blocking, when the
    tools are resolved). `context_id(ctx) -> str | None` picks the remote conversation of a call (default:
    a new one per call). `http_client`: an `httpx.AsyncClient` to send through (headers, auth); `timeout`
    bounds each HTTP request of a call.
    """

    def __init__(
        self,
        url: str,
        *,
        name: str | None = None,
        description: str | None = None,
        context_id: Callable[[ToolContext], str | None] | None = None,
        http_client: httpx.AsyncClient | None = None,
        timeout: float = 60.0,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise IllegalConfigurationError(f"A2AAgent(url=...) must be an http(s) URL, got {url!r}")
        self.url = url.rstrip("/")
        self.name = name
        self.description = description
        self.context_id = context_id
        self.timeout = timeout
        self._http_client = http_client
        self._card: AgentCard | None = None

    def __repr__(self) -> str:
        return f"A2AAgent({self.url!r})"

    async def fetch_card(self) -> AgentCard:
        """The remote agent card (fetched once, then kept)."""
        if self._card is None:
            if self._http_client is not None:
                self._card = await A2ACardResolver(self._http_client, self.url).get_agent_card()
            else:
                async with httpx.AsyncClient(timeout=self.timeout) as client:
                    self._card = await A2ACardResolver(client, self.url).get_agent_card()
        return self._card

    def _card_now(self) -> AgentCard:
        """The card, fetched with a blocking request when no `fetch_card()` ran (tools are resolved in
        sync code)."""
        if self._card is None:
            from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
            from google.protobuf.json_format import ParseDict  # type: ignore[import-untyped]

            try:
                reply = httpx.get(self.url + AGENT_CARD_WELL_KNOWN_PATH, timeout=self.timeout)
                reply.raise_for_status()
                self._card = ParseDict(reply.json(), AgentCard(), ignore_unknown_fields=True)
            except (httpx.HTTPError, ValueError) as error:
                raise IllegalConfigurationError(
                    f"{self!r}: cannot read the remote agent card ({type(error).__name__}: {error}); check "
                    "the URL and that the agent is up, or give name= and description="
                ) from None
        return self._card

    async def stream(self, request: str, *, context_id: str | None = None) -> AsyncIterator[str]:
        """Sends `request` to the remote agent and yields its answer's text as it comes. Raises
        `ToolExecutionError` when the remote task fails, is rejected or cancelled, or waits for input."""
        card = await self.fetch_card()
        owned = self._http_client is None
        http = self._http_client or httpx.AsyncClient(timeout=self.timeout)
        try:
            client = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
            message = Message(
                role=Role.ROLE_USER,
                message_id=uuid.uuid4().hex,
                parts=[Part(text=request)],
                context_id=context_id,
            )
            async for event in client.send_message(SendMessageRequest(message=message)):
                for text in self._texts(event):
                    yield text
        finally:
            if owned:
                await http.aclose()

    def _texts(self, event: Any) -> list[str]:
        """The answer text an event carries; the failure of a task that ended without answering."""
        if event.HasField("message"):
            return [part.text for part in event.message.parts if part.text]
        if event.HasField("artifact_update"):
            return [part.text for part in event.artifact_update.artifact.parts if part.text]
        status = None
        if event.HasField("status_update"):
            status = event.status_update.status
        elif event.HasField("task"):
            status = event.task.status
            if status.state == TaskState.TASK_STATE_COMPLETED and not event.task.artifacts:
                return [p.text for p in status.message.parts if p.text]
        if status is not None and status.state in _FAILED:
            said = " ".join(part.text for part in status.message.parts if part.text)
            raise ToolExecutionError(
                f"The remote agent at {self.url} {_FAILED[status.state]}" + (f": {said}" if said else "")
            )
        return []

    def as_tool(self) -> Tool:
        """The remote agent as one tool taking `request` (a string), answering with its text."""
        card = None if self.name and self.description else self._card_now()
        name = _tool_name(self.name or (card.name if card else ""))
        description = self.description or (card.description if card else "") or f"The A2A agent at {self.url}"
        specification = ToolSpecification(
            name=name,
            description=description,
            parameters={
                "type": "object",
                "properties": {"request": {"type": "string", "description": "What to ask the agent"}},
                "required": ["request"],
            },
        )

        async def run(call: ToolExecutionRequest, ctx: ToolContext) -> str:
            try:
                arguments = msgspec.json.decode(call.arguments or "{}")
            except (msgspec.DecodeError, RecursionError) as error:
                raise ToolArgumentsError(f"Invalid JSON arguments for tool '{name}': {error}") from None
            text = arguments.get("request") if isinstance(arguments, dict) else None
            if not isinstance(text, str) or not text:
                raise ToolArgumentsError(f"Tool '{name}' needs a non-empty string argument 'request'")
            conversation = self.context_id(ctx) if self.context_id is not None else None
            chunks: list[str] = []
            async for chunk in self.stream(text, context_id=conversation):
                chunks.append(chunk)
                await ctx.report_progress(len(chunks), None, chunk)
            return "".join(chunks)

        return Tool(specification, run)

    def __agentloop_tools__(self) -> list[Tool]:
        """In another agent's `tools=`, the remote agent is one tool (`as_tool()`)."""
        return [self.as_tool()]
