"""Checks on the embedded model's tool calls before any runs (`LocalChatModel(check_calls=True)`).

A small model calls a function for questions no function answers (`lookup_employee(name="Italy")` for "What
is the capital of Italy?", `calculate(add, 100, 32)` for the boiling point of water) and declines to call one
for live facts asked indirectly ("Is it evening in Tokyo yet?"). Two checks catch what the decision pass gets
wrong, measured on the held-out eval (benchmarks/local_eval.md):

* grounding: a call must take at least one of its freely chosen arguments (not an enum, not a boolean) from
  the conversation: a number that appears in it, or a string sharing a word with it. Invented values
  (`"John Doe"`, `123`) drop the call. Values the model knows from the world only ("the capital of France"
  -> `"Paris"`) drop it too: the cost of the rule, stated in docs/local-model.md.
* fit: every described string argument is put to the model as a yes/no question against its parameter's
  description (`Is "Italy" the employee's full name?`), one token each; a "no" drops the call.

Everything here is pure; the provider asks the questions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from .._values._messages import ChatMessage, ToolExecutionRequest
from .._values._spec import ToolSpecification
from ._local_tools import arguments_value

__all__ = ["YES_NO_GRAMMAR", "conversation_text", "fit_questions", "grounded", "yes_probability"]

YES_NO_GRAMMAR = 'root ::= "yes" | "no" | "Yes" | "No"'
"""A one-token answer to a fit question (llama.cpp GBNF)."""

_LONGEST_CHECKED = 100  # characters: longer strings (free text, queries) are not put to the model
_WORD = re.compile(r"[^\w.+-]+")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")


def conversation_text(messages: Sequence[ChatMessage]) -> str:
    """Every message's text, tool results included: what a call's arguments may be taken from."""
    return "\n".join(text for message in messages if (text := getattr(message, "text", None)))


def _arguments(call: ToolExecutionRequest) -> dict[str, Any]:
    value = arguments_value(call.arguments or "{}")
    return value if isinstance(value, dict) else {}


def _free(call: ToolExecutionRequest, spec: ToolSpecification) -> list[tuple[Any, dict[str, Any]]]:
    """The arguments the model chose freely, each with its parameter's schema."""
    properties = spec.parameters.get("properties") or {}
    chosen = []
    for name, value in _arguments(call).items():
        schema = properties.get(name) or {}
        options = [schema, *schema.get("anyOf", ())]
        if value is None or isinstance(value, bool) or any("enum" in o or "const" in o for o in options):
            continue
        if isinstance(value, (int, float, str)):
            chosen.append((value, schema))
    return chosen


def _words(text: str) -> set[str]:
    split = _WORD.split(text.lower().replace("/", " ").replace("_", " "))
    return {word for part in split if (word := part.strip(".+-"))}


def _numbers(text: str) -> set[float]:
    return {float(token) for token in _NUMBER.findall(_THOUSANDS.sub("", text))}


def grounded(call: ToolExecutionRequest, spec: ToolSpecification, text: str) -> bool | None:
    """Whether one of the call's free arguments comes from `text`; None when it has no free argument."""
    free = _free(call, spec)
    if not free:
        return None
    words: set[str] | None = None
    numbers: set[float] | None = None
    for value, _ in free:
        if isinstance(value, str):
            words = _words(text) if words is None else words
            if _words(value) & words:
                return True
        else:
            numbers = _numbers(text) if numbers is None else numbers
            if float(value) in numbers:
                return True
    return False


def fit_questions(call: ToolExecutionRequest, spec: ToolSpecification) -> list[str]:
    """One yes/no question per described string argument: does the value fit its description?"""
    questions = []
    for value, schema in _free(call, spec):
        description = schema.get("description")
        if not (isinstance(value, str) and 0 < len(value) <= _LONGEST_CHECKED):
            continue
        if isinstance(description, str) and (described := description.strip().rstrip(".")):
            if not described[:2].isupper():  # "The employee's name" -> "the ...", "IANA name" stays
                described = described[0].lower() + described[1:]
            questions.append(f'Is "{value}" {described}? Answer yes or no.')
    return questions


def yes_probability(top: Iterable[tuple[str, float]]) -> float:
    """P(yes) against P(no) from one token's top log-probabilities ((token, logprob) pairs)."""
    yes = no = 0.0
    for token, logprob in top:
        word = token.strip().lower()
        if word == "yes":
            yes += math.exp(logprob)
        elif word == "no":
            no += math.exp(logprob)
    return yes / (yes + no) if yes + no else 0.0
