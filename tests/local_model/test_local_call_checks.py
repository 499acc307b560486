"""The checks on the embedded model's tool calls (`LocalChatModel(check_calls=True)`), without the model:
which calls count as grounded in the conversation, which arguments are put to the model as fit questions.
The model's side (a declined decision asked again, a misfit argument dropping a call) is tested with the
real 1.5B model in test_local_model_1_5b.py."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from agentloop import (
    AiMessage,
    ChatMessage,
    SystemMessage,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolSpecification,
    UserMessage,
)
from agentloop.models._local_checks import conversation_text, fit_questions, grounded, yes_probability

EMPLOYEE = ToolSpecification(
    "lookup_employee",
    "Looks up an employee in the company directory by name",
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "The employee's full name"},
            "field": {
                "anyOf": [{"enum": ["title", "office"], "type": "string"}, {"type": "null"}],
                "description": "One field to return",
            },
        },
        "required": ["name"],
    },
)
CALCULATE = ToolSpecification(
    "calculate",
    "Calculator",
    {
        "type": "object",
        "properties": {
            "operation": {"enum": ["add", "multiply", "power"], "type": "string"},
            "a": {"type": "number"},
            "b": {"type": "number"},
        },
    },
)
TIME_IN = ToolSpecification(
    "time_in",
    "Current local time in a time zone",
    {
        "type": "object",
        "properties": {"timezone": {"type": "string", "description": "IANA time zone name, e.g. Asia/Tokyo"}},
    },
)
NOW = ToolSpecification("now", "The current time in UTC", {"type": "object", "properties": {}})
UNIT = ToolSpecification(
    "set_unit",
    "Chooses the unit",
    {
        "type": "object",
        "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}, "loud": {"type": "boolean"}},
    },
)


def call(tool: str, **arguments: Any) -> ToolExecutionRequest:
    return ToolExecutionRequest(id="c1", name=tool, arguments=json.dumps(arguments))


@pytest.mark.parametrize(
    ("request_", "spec", "text", "expected"),
    [
        # invented values: nothing in the conversation
        (call("lookup_employee", name="John Doe", field="title"), EMPLOYEE, "Translate 'thank you'.", False),
        (call("calculate", operation="add", a=100, b=32), CALCULATE, "Boiling point of water in F?", False),
        (call("calculate", operation="multiply", a=60, b=1), CALCULATE, "Seconds in a minute?", False),
        # taken from the request: a word, a number (thousands separators, negatives, decimals)
        (call("lookup_employee", name="Kenji Watanabe"), EMPLOYEE, "What does kenji watanabe do?", True),
        (call("calculate", operation="multiply", a=1250000, b=500), CALCULATE, "1,250,000 by 500", True),
        (call("calculate", operation="multiply", a=3.75, b=-4), CALCULATE, "What is 3.75 times -4?", True),
        (call("calculate", operation="power", a=12, b=2), CALCULATE, "What is 12 squared?", True),
        # a time zone's words against the city the user named; punctuation around words does not matter
        (call("time_in", timezone="America/New_York"), TIME_IN, "Time in New York?", True),
        (call("time_in", timezone="Asia/Tokyo"), TIME_IN, "Is it evening in Tokyo yet?", True),
        # nothing chosen freely (no arguments, only enums and booleans): nothing to ground
        (call("now"), NOW, "Hello", None),
        (call("set_unit", unit="celsius", loud=True), UNIT, "Hello", None),
    ],
)
def test_a_call_is_grounded_when_a_free_argument_comes_from_the_conversation(
    request_: ToolExecutionRequest, spec: ToolSpecification, text: str, expected: bool | None
) -> None:
    assert grounded(request_, spec, text) is expected


def test_every_message_of_the_conversation_grounds_a_call_tool_results_included() -> None:
    first = call("lookup_employee", name="Kenji Watanabe", field="office")
    messages: list[ChatMessage] = [
        SystemMessage("You help the staff."),
        UserMessage("What's the weather where Kenji Watanabe works?"),
        AiMessage(tool_execution_requests=[first]),
        ToolExecutionResultMessage.from_request(first, "Kenji Watanabe: office = Osaka"),
    ]
    text = conversation_text(messages)
    weather = ToolSpecification(
        "get_weather", "Weather", {"type": "object", "properties": {"city": {"type": "string"}}}
    )
    assert grounded(call("get_weather", city="Osaka"), weather, text) is True  # from the tool's result
    assert grounded(call("get_weather", city="Kyoto"), weather, text) is False


def test_only_described_short_strings_chosen_freely_are_put_to_the_model() -> None:
    assert fit_questions(call("lookup_employee", name="Italy", field="title"), EMPLOYEE) == [
        'Is "Italy" the employee\'s full name? Answer yes or no.'
    ]
    assert fit_questions(call("time_in", timezone="Asia/Tokyo"), TIME_IN) == [
        'Is "Asia/Tokyo" IANA time zone name, e.g. Asia/Tokyo? Answer yes or no.'
    ]
    # numbers, enums, booleans, undescribed strings and free text longer than a name are not asked about
    assert fit_questions(call("calculate", operation="add", a=1, b=2), CALCULATE) == []
    assert fit_questions(call("set_unit", unit="celsius", loud=False), UNIT) == []
    undescribed = ToolSpecification("f", "", {"type": "object", "properties": {"q": {"type": "string"}}})
    assert fit_questions(call("f", q="Paris"), undescribed) == []
    assert fit_questions(call("lookup_employee", name="x" * 101), EMPLOYEE) == []
    # arguments that do not parse as an object give nothing to check (the runtime reports them as usual)
    unparsed = ToolExecutionRequest(id="c", name="lookup_employee", arguments="[1]")
    assert fit_questions(unparsed, EMPLOYEE) == []


def test_yes_probability_weighs_yes_against_no_in_any_case() -> None:
    top = [("yes", math.log(0.3)), (" Yes", math.log(0.1)), ("no", math.log(0.2)), ("maybe", math.log(0.4))]
    assert yes_probability(top) == pytest.approx(0.4 / 0.6)
    assert yes_probability([("maybe", 0.0)]) == 0.0  # neither answer among the top tokens: not a yes
