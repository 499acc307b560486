"""Checked by mypy (tests/test_output_typing.py), never run: what the type checker infers for structured
output. Each `assert_type` fails the check when the inferred type differs."""

from __future__ import annotations

from typing import Literal

import pydantic
from typing_extensions import assert_type

from agentloop import Agent, Result, TokenStream
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
