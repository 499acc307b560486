"""The offline examples run (in process, on both backends); each asserts its own outcome."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))


@pytest.mark.parametrize(
    "name", ["manual_loop", "immediate_return", "agents_as_tools", "testing_with_fakes", "tracing"]
)
async def test_example_runs(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    module = importlib.import_module(name)
    await module.main()
    assert capsys.readouterr().out.strip()


async def test_manual_loop_applies_the_immediate_return_rule() -> None:
    manual_loop = importlib.import_module("manual_loop")
    from agentloop import AiMessage, ReturnBehavior, ToolExecutionRequest, tool
    from agentloop.testing import ScriptedChatModel

    class ImmediateCustomerTools:
        @tool("Retrieve customer information", return_behavior=ReturnBehavior.IMMEDIATE)
        def get_customer_info(self, id: int) -> dict[str, object]:
            return {"id": id, "name": "Ada Lovelace"}

    # With an IMMEDIATE tool the same loop stops after the tools, without a second model call.
    calls = [ToolExecutionRequest("c1", "get_customer_info", '{"id": 42}')]
    model = ScriptedChatModel([AiMessage(tool_execution_requests=calls)])
    answer = await manual_loop.manual_loop(model, ImmediateCustomerTools())
    assert answer == '{"id":42,"name":"Ada Lovelace"}'
    assert len(model.requests) == 1
