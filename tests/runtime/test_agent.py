"""The Agent and its loop, awaited with `chat()` / `ask()` (non-streaming mode)."""

from __future__ import annotations

import functools
import math
from typing import Annotated, Any

import anyio
import pytest

from agentloop import (
    Agent,
    AiMessage,
    FinishReason,
    HallucinatedToolError,
    IllegalConfigurationError,
    InvocationTimeoutError,
    MessageWindowChatMemory,
    ReturnBehavior,
    SystemMessage,
    ToolContext,
    ToolExecutionResultMessage,
    ToolMemoryId,
    ToolRoundsExceededError,
    UserMessage,
    tool,
)
from agentloop.testing import FunctionChatModel, ScriptedChatModel
from tests.runtime_helpers import assert_valid_for_provider, calls


class Calculator:
    @tool("Sums 2 given numbers")
    def sum(self, a: float, b: float) -> float:
        return a + b

    @tool("Returns a square root of a given number")
    def square_root(self, x: float) -> float:
        return math.sqrt(x)


async def test_square_root_exchange_of_seed_002() -> None:
    model = ScriptedChatModel(
        [
            calls(("square_root", {"x": 475695037565})),
            "The square root of 475695037565 is 689706.486532.",
        ]
    )
    agent = Agent(model, tools=[Calculator()])
    result = await agent.chat("What is the square root of 475695037565?")

    assert result.content == "The square root of 475695037565 is 689706.486532."
    assert result.finish_reason is FinishReason.STOP
    [execution] = result.tool_executions
    assert execution.request.name == "square_root"
    assert float(execution.result) == pytest.approx(689706.486532, abs=1e-5)
    assert execution.result_object == pytest.approx(math.sqrt(475695037565))
    assert (execution.index, execution.round) == (0, 1)

    first, second = model.requests
    assert [s.name for s in first.tool_specifications] == ["sum", "square_root"]
    assert first.messages == (UserMessage("What is the square root of 475695037565?"),)
    assert isinstance(second.messages[1], AiMessage)
    assert second.messages[2] == ToolExecutionResultMessage(
        execution.request.id, "square_root", execution.result
    )
    assert len(result.intermediate_responses) == 1
    assert result.final_response is not None and result.final_response.text == result.content
    assert result.token_usage is not None
    assert result.token_usage.total_tokens == sum(
        r.token_usage.total_tokens or 0
        for r in [*result.intermediate_responses, result.final_response]
        if r.token_usage
    )


async def test_parallel_calls_run_concurrently_and_results_keep_call_order() -> None:
    finished: list[int] = []

    @tool
    async def slow(n: int, delay: float) -> int:
        await anyio.sleep(delay)
        finished.append(n)
        return n

    delays = [0.3, 0.1, 0.2, 0.0]
    model = ScriptedChatModel(
        [calls(*[("slow", {"n": i, "delay": d}) for i, d in enumerate(delays)]), "done"]
    )
    agent = Agent(model, tools=[slow])
    start = anyio.current_time()
    result = await agent.chat("go")
    elapsed = anyio.current_time() - start

    assert elapsed < 0.55  # sequential would take 0.6 s
    assert [e.result for e in result.tool_executions] == ["0", "1", "2", "3"]
    assert [e.index for e in result.tool_executions] == [0, 1, 2, 3]
    assert finished == [3, 1, 2, 0]  # completion order differs from call order
    results = [m for m in model.requests[1].messages if isinstance(m, ToolExecutionResultMessage)]
    assert [m.text for m in results] == ["0", "1", "2", "3"]


async def test_tool_error_reaches_the_model_and_the_loop_goes_on() -> None:
    @tool
    def divide(a: float, b: float) -> float:
        return a / b

    model = ScriptedChatModel([calls(("divide", {"a": 1, "b": 0})), "Cannot divide by zero."])
    result = await Agent(model, tools=[divide]).chat("1/0?")
    assert result.content == "Cannot divide by zero."
    [execution] = result.tool_executions
    assert execution.has_failed and isinstance(execution.error, ZeroDivisionError)
    sent = model.requests[1].messages[-1]
    assert isinstance(sent, ToolExecutionResultMessage) and sent.is_error
    assert "division by zero" in sent.text


async def test_invalid_arguments_are_reported_to_the_model() -> None:
    @tool
    def square(x: int) -> int:
        return x * x

    model = ScriptedChatModel([calls(("square", {"x": "many"})), calls(("square", {"x": 3})), "9"])
    result = await Agent(model, tools=[square]).chat("square")
    assert result.content == "9"
    first, second = result.tool_executions
    assert first.has_failed and "x" in first.result
    assert second.result == "9" and not second.has_failed


@pytest.mark.parametrize("mode", ["chat", "stream"])
async def test_an_unknown_tool_name_is_told_to_the_model_by_default(mode: str) -> None:
    model = ScriptedChatModel(
        [calls(("no_such_tool", {}), ("sum", {"a": 1, "b": 2})), calls(("sum", {"a": 2, "b": 2})), "4"]
    )
    agent = Agent(model, tools=[Calculator()], memory=MessageWindowChatMemory(10))
    if mode == "chat":
        result = await agent.chat("hi")
    else:
        stream = agent.stream("hi")
        async for _ in stream:
            pass
        result = stream.result
    assert result.content == "4"
    unknown, add, corrected = result.tool_executions
    sent = model.requests[1].messages[-2]  # the unknown call's result, then add's
    assert isinstance(sent, ToolExecutionResultMessage) and sent.is_error
    assert sent.text == (
        "There is no tool named 'no_such_tool'. The tools you can call: 'sum', 'square_root'. Call one of "
        "them by its exact name, or answer without a tool."
    )
    assert unknown.is_error and not unknown.has_failed  # answered, like any strategy's answer
    assert add.result == "3.0" and corrected.result == "4.0"
    assert len(await agent.memory.messages()) == 7  # type: ignore[union-attr]  # both rounds, whole


async def test_hallucinated_tool_name_raises_with_strategy_none_the_old_default() -> None:
    model = ScriptedChatModel([calls(("no_such_tool", {}))])
    agent = Agent(
        model, tools=[Calculator()], memory=MessageWindowChatMemory(10), hallucinated_tool_name_strategy=None
    )
    with pytest.raises(HallucinatedToolError, match="no_such_tool"):
        await agent.chat("hi")
    assert await agent.memory.messages() == []  # type: ignore[union-attr]


async def test_an_unknown_tool_with_no_tools_offered_says_to_answer_without() -> None:
    model = ScriptedChatModel([calls(("search", {})), "I cannot search."])
    result = await Agent(model).chat("find it")
    assert result.tool_executions[0].result == (
        "There is no tool named 'search', and no tools are available now: answer without a tool."
    )


def test_a_strategy_must_be_a_function_tell_model_or_none() -> None:
    with pytest.raises(IllegalConfigurationError, match="hallucinated_tool_name_strategy must be callable"):
        Agent(ScriptedChatModel([]), hallucinated_tool_name_strategy="ignore")  # type: ignore[arg-type]


async def test_hallucination_strategy_answers_the_model() -> None:
    model = ScriptedChatModel([calls(("no_such_tool", {})), "sorry"])
    agent = Agent(
        model,
        tools=[Calculator()],
        hallucinated_tool_name_strategy=lambda request: f"Error: there is no tool called {request.name}",
    )
    result = await agent.chat("hi")
    assert result.content == "sorry"
    sent = model.requests[1].messages[-1]
    assert isinstance(sent, ToolExecutionResultMessage)
    assert sent.text == "Error: there is no tool called no_such_tool"


async def test_round_limit() -> None:
    @tool
    def ping() -> str:
        return "pong"

    model = ScriptedChatModel([calls(("ping", {}))] * 3)
    agent = Agent(model, tools=[ping], max_tool_rounds=2, memory=MessageWindowChatMemory(50))
    with pytest.raises(ToolRoundsExceededError, match="max_tool_rounds=2") as caught:
        await agent.chat("loop forever")
    assert caught.value.max_tool_rounds == 2
    messages = await agent.memory.messages()  # type: ignore[union-attr]
    assert_valid_for_provider(messages)
    assert sum(isinstance(m, ToolExecutionResultMessage) for m in messages) == 2  # both completed rounds kept


async def test_immediate_return_and_ask() -> None:
    @tool(return_behavior=ReturnBehavior.IMMEDIATE)
    def cancel_booking(number: str) -> str:
        return f"Booking {number} cancelled"

    agent = Agent(
        ScriptedChatModel([calls(("cancel_booking", {"number": "123-456"}))]), tools=[cancel_booking]
    )
    result = await agent.chat("Cancel my booking 123-456")
    assert result.content is None
    assert result.finish_reason is FinishReason.TOOL_EXECUTION
    assert result.returned_immediately
    assert [e.result for e in result.tool_executions] == ["Booking 123-456 cancelled"]

    agent = Agent(ScriptedChatModel([calls(("cancel_booking", {"number": "1"}))]), tools=[cancel_booking])
    with pytest.raises(IllegalConfigurationError, match=r"chat\(|stream\("):
        await agent.ask("Cancel booking 1")


async def test_context_and_memory_id_reach_tools_and_model_cannot_spoof_them() -> None:
    seen: list[tuple[Any, Any, Any]] = []

    @tool
    def whoami(user: Annotated[str, ToolMemoryId], ctx: ToolContext) -> str:
        seen.append((user, ctx["tenant"], ctx.get("region")))
        return "ok"

    model = ScriptedChatModel([calls(("whoami", {"user": "mallory", "ctx": {"tenant": "evil"}})), "done"])
    agent = Agent(
        model,
        tools=[whoami],
        context={"tenant": "default", "region": "eu"},
        memory=MessageWindowChatMemory.provider(10),
    )
    await agent.chat("who am I?", memory_id="alice", context={"tenant": "acme"})
    assert seen == [("alice", "acme", "eu")]
    for request in model.requests:
        assert "acme" not in str(request)  # context is never sent to the model
        for spec in request.tool_specifications:
            assert spec.parameters.get("properties") == {}


async def test_memory_is_kept_per_id_and_sent_back() -> None:
    model = FunctionChatModel(lambda messages, tools: f"{len(messages)} messages")
    agent = Agent(
        model, memory=MessageWindowChatMemory.provider(10), system_message=lambda mid: f"User is {mid}"
    )
    assert (await agent.chat("hi", memory_id="a")).content == "2 messages"
    assert (await agent.chat("again", memory_id="a")).content == "4 messages"
    assert (await agent.chat("hi", memory_id="b")).content == "2 messages"
    first = model.requests[1].messages
    assert first[0] == SystemMessage("User is a")
    assert [type(m).__name__ for m in first] == ["SystemMessage", "UserMessage", "AiMessage", "UserMessage"]


async def test_per_call_tools_replace_default_tools() -> None:
    @tool
    def a() -> str:
        return "a"

    @tool
    def b() -> str:
        return "b"

    model = ScriptedChatModel(["x", "y"])
    agent = Agent(model, tools=[a])
    await agent.chat("1")
    await agent.chat("2", tools=[b])
    assert [s.name for s in model.requests[0].tool_specifications] == ["a"]
    assert [s.name for s in model.requests[1].tool_specifications] == ["b"]


async def test_duplicate_tool_names_are_rejected() -> None:
    @tool(name="same")
    def one() -> str:
        return "1"

    @tool(name="same")
    def two() -> str:
        return "2"

    with pytest.raises(IllegalConfigurationError, match="same"):
        Agent(ScriptedChatModel([]), tools=[one, two])


async def test_invocation_timeout_covers_tools_and_tools_see_remaining_time() -> None:
    remaining: list[float | None] = []

    @tool
    async def wait(ctx: ToolContext) -> str:
        remaining.append(ctx.remaining_time())
        await anyio.sleep(10)
        return "never"

    agent = Agent(ScriptedChatModel([calls(("wait", {}))]), tools=[wait], memory=MessageWindowChatMemory(10))
    with pytest.raises(InvocationTimeoutError, match=r"0\.2 s"):
        await agent.chat("wait", timeout=0.2)
    assert remaining and remaining[0] is not None and 0 < remaining[0] <= 0.2
    assert await agent.memory.messages() == []  # type: ignore[union-attr]


async def test_concurrent_invocations_on_one_memory_id_are_serialised() -> None:
    active = 0
    overlap = False

    async def answer(messages: list[Any], tools: list[Any]) -> AiMessage:
        nonlocal active, overlap
        active += 1
        overlap = overlap or active > 1
        await anyio.sleep(0.05)
        active -= 1
        return AiMessage(f"seen {len(messages)}")

    agent = Agent(FunctionChatModel(answer), memory=MessageWindowChatMemory.provider(100))
    results: list[str] = []

    async def one(i: int) -> None:
        result = await agent.chat(f"message {i}", memory_id="shared")
        results.append(result.content or "")

    async with anyio.create_task_group() as tg:
        for i in range(4):
            tg.start_soon(one, i)
    assert not overlap
    # Each invocation saw the previous ones' complete exchanges: 1, 3, 5, 7 messages.
    assert sorted(results) == ["seen 1", "seen 3", "seen 5", "seen 7"]


async def test_different_memory_ids_run_concurrently() -> None:
    started = anyio.Event()
    both = anyio.Event()
    count = 0

    async def answer(messages: list[Any], tools: list[Any]) -> str:
        nonlocal count
        count += 1
        if count == 2:
            both.set()
        with anyio.fail_after(5):
            await both.wait()
        started.set()
        return "ok"

    agent = Agent(FunctionChatModel(answer), memory=MessageWindowChatMemory.provider(10))
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(agent.chat, "x", memory_id="a"))
        tg.start_soon(functools.partial(agent.chat, "y", memory_id="b"))
    assert started.is_set()


async def test_agents_as_tools() -> None:
    @tool
    def lookup_statute(topic: str) -> str:
        return f"statute about {topic}"

    legal = Agent(
        ScriptedChatModel([calls(("lookup_statute", {"topic": "contracts"})), "Legal answer"]),
        tools=[lookup_statute],
        name="legal_expert",
        description="A legal expert",
    )
    medical = Agent(
        ScriptedChatModel(["Medical answer"]), name="medical_expert", description="A medical expert"
    )
    router_model = ScriptedChatModel(
        [calls(("legal_expert", {"request": "Can I break my lease?"})), "The expert says: Legal answer"]
    )
    router = Agent(router_model, tools=[legal, medical.as_tool(description="Medical questions")])
    result = await router.chat("Can I break my lease?")

    assert result.content == "The expert says: Legal answer"
    specs = {s.name: s for s in router_model.requests[0].tool_specifications}
    assert set(specs) == {"legal_expert", "medical_expert"}
    assert specs["medical_expert"].description == "Medical questions"
    assert specs["legal_expert"].parameters["required"] == ["request"]
    [outer] = result.tool_executions
    assert outer.result == "Legal answer"
    inner = outer.result_object
    assert [e.request.name for e in inner.tool_executions] == ["lookup_statute"]
    assert inner.tool_executions[0].result == "statute about contracts"


async def test_tool_provider_adds_tools_per_invocation() -> None:
    from agentloop import ToolProviderResult, ToolSpecification

    spec = ToolSpecification(
        "get_booking_details",
        "Returns booking details",
        {"type": "object", "properties": {"number": {"type": "string"}}},
    )
    asked: list[str] = []

    async def booking(request: Any, ctx: ToolContext) -> str:
        return "booking B-1: confirmed"

    def provider(request: Any) -> ToolProviderResult | None:
        asked.append(request.user_message.text)
        return ToolProviderResult([(spec, booking)]) if "booking" in request.user_message.text else None

    model = ScriptedChatModel(["no tools", calls(("get_booking_details", {"number": "B-1"})), "confirmed"])
    agent = Agent(model, tool_provider=provider)
    await agent.chat("hello")
    result = await agent.chat("my booking B-1?")
    assert result.tool_executions[0].result == "booking B-1: confirmed"
    assert model.requests[0].tool_specifications == ()
    assert [s.name for s in model.requests[1].tool_specifications] == ["get_booking_details"]
    assert asked == ["hello", "my booking B-1?"]  # once per invocation, not per model call


async def invoke(agent: Agent, mode: str, message: str = "go") -> Any:
    if mode == "chat":
        return await agent.chat(message)
    stream = agent.stream(message)
    async for _ in stream:
        pass
    return stream.result


@pytest.mark.parametrize("mode", ["chat", "stream"])
async def test_huge_results_are_cut_with_a_marker(mode: str) -> None:
    @tool
    def dump() -> str:
        return "x" * 5_000_000

    model = ScriptedChatModel([calls(("dump", {})), "ok"])
    result = await invoke(Agent(model, tools=[dump], max_tool_result_chars=1000), mode)
    sent = model.requests[1].messages[-1]
    assert isinstance(sent, ToolExecutionResultMessage)
    assert len(sent.text) < 1200
    assert sent.text.startswith("x" * 1000)
    assert "truncated: the result had 5,000,000 characters; the first 1,000 are shown" in sent.text
    assert result.tool_executions[0].result == sent.text


@pytest.mark.parametrize("mode", ["chat", "stream"])
async def test_calls_past_the_per_response_cap_get_an_error_result(mode: str) -> None:
    ran: list[int] = []

    @tool
    def work(n: int) -> int:
        ran.append(n)
        return n

    model = ScriptedChatModel([calls(*[("work", {"n": n}) for n in range(1000)]), "done"])
    memory = MessageWindowChatMemory(5000)
    agent = Agent(model, tools=[work], max_tool_calls_per_response=10, memory=memory)
    result = await invoke(agent, mode)
    assert sorted(ran) == list(range(10))
    assert len(result.tool_executions) == 1000
    skipped = result.tool_executions[10]
    assert skipped.has_failed and skipped.is_error
    assert "asked for 1000 tool calls and at most 10 run per response" in skipped.result
    assert_valid_for_provider(await memory.messages())


@pytest.mark.parametrize("mode", ["chat", "stream"])
async def test_missing_and_repeated_call_ids_are_replaced(mode: str) -> None:
    @tool
    def echo(n: int) -> int:
        return n

    from agentloop import ChatResponse, FinishReason, ToolExecutionRequest

    requests = [
        ToolExecutionRequest("dup", "echo", '{"n": 0}'),
        ToolExecutionRequest("dup", "echo", '{"n": 1}'),
        ToolExecutionRequest("", "echo", '{"n": 2}'),
    ]
    scripted = ChatResponse(
        AiMessage(tool_execution_requests=requests), finish_reason=FinishReason.TOOL_EXECUTION
    )
    model = ScriptedChatModel([scripted, "done"])
    memory = MessageWindowChatMemory(50)
    result = await invoke(Agent(model, tools=[echo], memory=memory), mode)
    ids = [e.request.id for e in result.tool_executions]
    assert ids[0] == "dup" and len(set(ids)) == 3 and all(ids)
    messages = await memory.messages()
    assert_valid_for_provider(messages)
    sent = model.requests[1].messages
    assert [m.id for m in sent if isinstance(m, ToolExecutionResultMessage)] == ids
    assert [r.id for r in sent[1].tool_execution_requests] == ids  # type: ignore[union-attr]
    assert [e.result for e in result.tool_executions] == ["0", "1", "2"]
