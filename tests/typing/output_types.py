"""Checked by mypy (tests/features/output/test_output_typing.py), never run: what the type checker infers for
structured
output. Each `assert_type` fails the check when the inferred type differs."""

from __future__ import annotations

from typing import Literal

import pydantic
from typing_extensions import assert_type

from agentloop import Agent, ChatMessage, Result, TokenStream
from agentloop.testing import TestModel


class Invoice(pydantic.BaseModel):
    customer: str
    total: float


async def inferred() -> None:
    text_agent = Agent(TestModel())
    assert_type(text_agent, Agent[str])
    assert_type(await text_agent.chat("hi"), Result[str])
    assert_type((await text_agent.chat("hi")).output, str)

    invoices = Agent(TestModel(), output_type=Invoice)
    assert_type(invoices, Agent[Invoice])
    result = await invoices.chat("extract")
    assert_type(result, Result[Invoice])
    assert_type(result.output, Invoice)
    assert_type(result.content, str | None)

    assert_type(await text_agent.chat("n?", output_type=int), Result[int])
    assert_type(await invoices.chat("many?", output_type=list[Invoice]), Result[list[Invoice]])
    assert_type(Agent(TestModel(), output_type=list[int]), Agent[list[int]])
    assert_type(Agent(TestModel(), output_type=Literal["spam", "ham"]), Agent[str])

    stream = invoices.stream("extract")
    assert_type(stream, TokenStream[Invoice])
    async for partial in stream.outputs():
        assert_type(partial, Invoice)
    assert_type(stream.result, Result[Invoice])
    assert_type(text_agent.stream("hi", output_type=float), TokenStream[float])


def blocking() -> None:
    """The sync API has the same overloads as chat(): `chat_sync(..., output_type=T)` is a `Result[T]`."""
    text_agent = Agent(TestModel())
    assert_type(text_agent.chat_sync("hi"), Result[str])
    assert_type(text_agent.chat_sync("extract", output_type=Invoice).output.customer, str)
    assert_type(text_agent.chat_sync("n?", output_type=int, message_history=[]), Result[int])

    invoices = Agent(TestModel(), output_type=Invoice)
    result = invoices.chat_sync("extract", timeout=5.0)
    assert_type(result, Result[Invoice])
    assert_type(result.new_messages, list[ChatMessage])
    if result.pending is not None:
        assert_type(invoices.resume_sync(result.pending, {}), Result[Invoice])
