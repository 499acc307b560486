"""Context kept in bounds (issue 35), measured: `python benchmarks/context.py [--json out.json]`.

(a) A 200-turn conversation with a tool round every third turn (each result about 350 tokens), on a scripted
model, under four settings: all history, `MessageWindowChatMemory(40)`, `Compaction(6000, keep_last=10)`,
and Compaction with `ClearToolResults(keep_last=3)`. Per request: the input tokens sent (tiktoken
o200k_base, as gpt-4o counts them) and the cache-stable prefix (the tokens of the leading messages it
shares with the request before it: what a provider's prompt cache can reuse).

(b) Tool selection among 300 tools on a scripted model: 20 tasks, each needing one of 20 real tools hidden
among 280 distractors. All tools in the prompt vs `ToolSearch(top_k=5)`: the tool-definition tokens sent
per request, and how often the needed tool is among those the search offers (BM25 over names,
descriptions and parameters; the task's own wording as the query).

Deterministic: no network, no clock in the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import itertools

from agentloop import (
    Agent,
    AiMessage,
    ChatMessage,
    ChatRequest,
    MessageWindowChatMemory,
    TokenCount,
    Tool,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolSearch,
    ToolSpecification,
    UserMessage,
    count_tokens,
    tool,
)
from agentloop.middleware import ClearToolResults, Compaction
from agentloop.models import OpenAIChatModel
from agentloop.testing import FunctionChatModel

COUNTER = OpenAIChatModel("gpt-4o", base_url="http://127.0.0.1:9/v1", api_key="unused")  # counts, never calls
SYSTEM = "You are a support agent for an online shop. Be precise and cite order ids."


@tool
def order_status(order_id: str) -> str:
    """Looks up an order: its items, shipping state and history."""
    lines = [f"order {order_id}: 3 items, shipped"]
    lines += [f"event {n}: parcel scanned at depot {n * 7 % 13} (ok)" for n in range(40)]
    return "\n".join(lines)


class _CountingModel(FunctionChatModel):
    """A scripted model that counts its requests as gpt-4o does (tiktoken), as an OpenAI model would."""

    async def count_tokens(self, request: ChatRequest) -> TokenCount:
        return await count_tokens(COUNTER, request)


def _shop_model(requests: list[ChatRequest]) -> FunctionChatModel:
    def answer(messages: list[ChatMessage], tools: Any, request: ChatRequest) -> AiMessage:
        requests.append(request)
        last = messages[-1]
        if isinstance(last, UserMessage) and last.text.startswith("Where is order"):
            order = last.text.split()[3].rstrip("?")
            call = ToolExecutionRequest(None, "order_status", json.dumps({"order_id": order}))
            return AiMessage(tool_execution_requests=[call])
        return AiMessage("Noted. " + "Here is what I found and what I suggest next. " * 6)

    return _CountingModel(answer)


def _summarizer(calls: list[int]) -> FunctionChatModel:
    def answer(messages: list[ChatMessage], tools: Any) -> str:
        calls.append(1)
        return "Customer notes: " + "order ids asked about, their states, preferences stated. " * 12

    return FunctionChatModel(answer)


def _turn(n: int) -> str:
    if n % 3 == 0:
        return f"Where is order A{n:04d}?"
    return f"Turn {n}: " + "I have a question about my account and a previous purchase. " * 3


async def _tokens(request: ChatRequest) -> int:
    return (await count_tokens(COUNTER, request)).tokens


async def _prefix_tokens(previous: ChatRequest, current: ChatRequest) -> int:
    """Tokens of the leading messages `current` shares with `previous` (and the same tools)."""
    if previous.tool_specifications != current.tool_specifications:
        return 0
    shared: list[ChatMessage] = []
    for old, new in zip(previous.messages, current.messages, strict=False):
        if old != new:
            break
        shared.append(new)
    if not shared:
        return 0
    return await _tokens(ChatRequest(shared, current.tool_specifications))


async def conversation(setting: str, turns: int = 200) -> dict[str, Any]:
    requests: list[ChatRequest] = []
    summaries: list[int] = []
    middleware: list[Any] = []
    window = 100_000
    if setting == "window":
        window = 40
    if setting.startswith("compaction"):
        middleware.append(Compaction(6000, keep_last=10, summarizer=_summarizer(summaries)))
    if setting == "compaction+clear":
        middleware.append(ClearToolResults(keep_last=3, min_tokens=100))
    agent = Agent(
        _shop_model(requests),
        tools=[order_status],
        system_message=SYSTEM,
        memory=MessageWindowChatMemory.provider(window),
        middleware=middleware,
    )
    for n in range(turns):
        await agent.chat(_turn(n), memory_id="c")
    sent = [await _tokens(r) for r in requests]
    prefixes = [await _prefix_tokens(a, b) for a, b in itertools.pairwise(requests)]
    shares = [p / t for p, t in zip(prefixes, sent[1:], strict=True)]
    return {
        "setting": setting,
        "requests": len(requests),
        "max_tokens": max(sent),
        "mean_tokens": round(statistics.fmean(sent)),
        "last_tokens": sent[-1],
        "total_tokens": sum(sent),
        "median_prefix_tokens": round(statistics.median(prefixes)),
        "median_prefix_share": round(statistics.median(shares), 3),
        "summaries": len(summaries),
    }


# -- (b) tool selection among 300 tools ----------------------------------------------------------------------

REAL = [
    (
        "convert_currency",
        "Converts an amount of money between two currencies at today's rate.",
        "how much is 20 euros in yen",
    ),
    (
        "create_calendar_event",
        "Creates an event in the user's calendar with a title, start and end.",
        "put a dentist appointment in my calendar for friday",
    ),
    ("send_email", "Sends an email message to one or more recipients.", "email the report to alice"),
    (
        "get_weather_forecast",
        "Gets the weather forecast for a city for the coming days.",
        "will it rain in oslo tomorrow",
    ),
    (
        "translate_text",
        "Translates text from one language into another.",
        "translate this sentence into german",
    ),
    ("book_flight", "Books a flight between two airports on a date.", "book me a flight from paris to rome"),
    ("track_parcel_delivery", "Tracks a parcel delivery by its tracking number.", "where is my parcel 1Z999"),
    (
        "set_timer",
        "Sets a countdown timer that rings after a number of minutes.",
        "set a timer for ten minutes",
    ),
    (
        "search_restaurants",
        "Finds restaurants near a place by cuisine and price.",
        "find a cheap thai restaurant nearby",
    ),
    (
        "get_stock_price",
        "Gets the latest stock price of a company by its ticker symbol.",
        "what is apple's share price",
    ),
    ("play_music", "Plays a song, album or artist on the speakers.", "play some jazz music"),
    (
        "reset_password",
        "Starts a password reset for a user account and sends the link.",
        "i forgot my password, reset it",
    ),
    (
        "calculate_mortgage",
        "Calculates the monthly payment of a mortgage loan.",
        "monthly payment on a 300k mortgage over 25 years",
    ),
    (
        "order_groceries",
        "Orders groceries from the supermarket for delivery.",
        "order milk and eggs for delivery",
    ),
    (
        "check_bank_balance",
        "Returns the balance of the user's bank accounts.",
        "how much money is in my account",
    ),
    ("define_word", "Gives the dictionary definition of a word.", "what does ephemeral mean"),
    ("turn_on_lights", "Turns on the smart lights in a room.", "switch on the lights in the kitchen"),
    ("get_news_headlines", "Gets today's news headlines on a topic.", "latest headlines about football"),
    (
        "file_expense_report",
        "Files an expense report with receipts for reimbursement.",
        "submit my taxi receipt for reimbursement",
    ),
    (
        "schedule_meeting_room",
        "Reserves a meeting room in the office for a time slot.",
        "reserve a conference room at 3pm",
    ),
]


_STRING = {"type": "string"}


def _tools_300() -> list[Tool]:
    made = [
        Tool(
            ToolSpecification(
                name, description, {"type": "object", "properties": {"input": {"type": "string"}}}
            ),
            lambda request, ctx: "ok",
        )
        for name, description, _ in REAL
    ]
    return made + distractors(300 - len(made))


def distractors(n: int) -> list[Tool]:
    """`n` tools about record systems (invoices, tickets, printers...) that no task needs."""
    made: list[Tool] = []
    nouns = [
        "invoice",
        "ticket",
        "repository",
        "printer",
        "playlist",
        "recipe",
        "contract",
        "warehouse",
        "employee",
        "vehicle",
        "server",
        "survey",
        "coupon",
        "shipment",
    ]
    verbs = ["list", "archive", "rename", "share", "delete", "export", "audit", "merge", "clone", "lock"]
    i = 0
    while len(made) < n:
        noun, verb = nouns[i % len(nouns)], verbs[(i // len(nouns)) % len(verbs)]
        made.append(
            Tool(
                ToolSpecification(
                    f"{verb}_{noun}_{i}",
                    f"{verb.capitalize()}s {noun} records in the {noun} management system, variant {i}.",
                    {"type": "object", "properties": {f"{noun}_id": {"type": "string"}}},
                ),
                lambda request, ctx: "ok",
            )
        )
        i += 1
    return made


async def selection() -> dict[str, Any]:
    tools = _tools_300()
    search = ToolSearch(tools, top_k=5)
    hits = sum(1 for name, _, task in REAL if name in search.rank(task))
    top1 = sum(1 for name, _, task in REAL if search.rank(task)[:1] == [name])
    all_specs = tuple(t.specification for t in tools)
    empty = await _tokens(ChatRequest([UserMessage("x")]))
    everything = await _tokens(ChatRequest([UserMessage("x")], all_specs)) - empty

    # One task end to end with ToolSearch: the requests' tool tokens before and after the search.
    seen: list[ChatRequest] = []
    name, _, task = REAL[0]

    def answer(messages: list[ChatMessage], offered: Any, request: ChatRequest) -> AiMessage:
        seen.append(request)
        last = messages[-1]
        if isinstance(last, UserMessage):
            call = ToolExecutionRequest(None, "search_tools", json.dumps({"query": task}))
            return AiMessage(tool_execution_requests=[call])
        if isinstance(last, ToolExecutionResultMessage) and last.tool_name == "search_tools":
            return AiMessage(tool_execution_requests=[ToolExecutionRequest(None, name, '{"input": "x"}')])
        return AiMessage("done")

    await Agent(FunctionChatModel(answer), tools=[search]).chat(task)
    with_search = [
        await _tokens(ChatRequest([UserMessage("x")], r.tool_specifications)) - empty for r in seen
    ]
    return {
        "tools": len(tools),
        "tasks": len(REAL),
        "needed_tool_in_top5": hits,
        "needed_tool_first": top1,
        "tool_tokens_all_in_prompt": everything,
        "tool_tokens_with_search_per_request": with_search,
    }


async def main() -> dict[str, Any]:
    rows = [await conversation(s) for s in ("all history", "window", "compaction", "compaction+clear")]
    return {"conversation": rows, "selection": await selection()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    options = parser.parse_args()
    figures = anyio.run(main)
    print(json.dumps(figures, indent=2))
    if options.json:
        options.json.write_text(json.dumps(figures, indent=2) + "\n")
