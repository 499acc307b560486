"""Tool-use eval for the embedded local model: does it call the right tools, with the right arguments, and
answer from their results?

    python benchmarks/local_eval.py                      # the embedded default (1.5B), every prompt
    python benchmarks/local_eval.py --only parallel,none --threads 2
    python benchmarks/local_eval.py --model local:qwen2.5-coder-0.5b --out benchmarks/local_eval_0_5b
    python benchmarks/local_eval.py --model local:/path/to/other.gguf
    python benchmarks/local_eval.py --set heldout --out benchmarks/local_eval_heldout_1_5b   # the 58 held out
    python benchmarks/local_eval.py --set heldout --check-calls off   # LocalChatModel(check_calls=False)
    python benchmarks/local_eval.py --set heldout2 --out benchmarks/local_eval_heldout2_1_5b  # 30 more
    nox -s eval

Each prompt runs through a real `Agent` (the runtime-owned tool protocol, the tool loop, the answer pass)
against five deterministic tools: weather (unit enum), a calculator (operation enum), unit conversion, an
employee directory (optional field enum) and the time in a time zone (a fixed clock, so answers are
checkable). Three scores, each over the prompts it applies to:

* tool decision: the distinct calls made have exactly the expected tool names (none for "no tool" prompts);
* arguments: every expected call was made with the expected arguments (tool prompts only);
* answer: the final text contains the expected facts (the tools' results) and is plain: no code fence
  unless code was asked for, no `\\boxed`, at most 600 characters.

Writes `benchmarks/local_eval.json` (every prompt: calls, answer, time) and `benchmarks/local_eval.md`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo

import anyio

from agentloop import Agent, P, ToolSearch, tool
from agentloop.models import ChatModel, LocalChatModel

HERE = Path(__file__).parent

# -- the tools ---------------------------------------------------------------------------------------------

WEATHER_C = {
    "tokyo": (20, "clear skies"),
    "paris": (15, "light rain"),
    "london": (10, "overcast"),
    "new york": (25, "sunny"),
    "sydney": (30, "sunny"),
    "cairo": (35, "hot and dry"),
    "oslo": (-5, "snow"),
    "lima": (20, "cloudy"),
    "berlin": (5, "windy"),
}

EMPLOYEES = {
    "maria gonzalez": {
        "title": "Head of Sales",
        "office": "Madrid",
        "email": "maria.gonzalez@example.com",
        "phone": "+34 91 555 2041",
    },
    "kenji watanabe": {
        "title": "Staff Engineer",
        "office": "Osaka",
        "email": "kenji.watanabe@example.com",
        "phone": "+81 6 5550 7788",
    },
    "aisha okafor": {
        "title": "Product Manager",
        "office": "Lagos",
        "email": "aisha.okafor@example.com",
        "phone": "+234 1 555 0142",
    },
    "lars nilsson": {
        "title": "Finance Director",
        "office": "Stockholm",
        "email": "lars.nilsson@example.com",
        "phone": "+46 8 555 3190",
    },
}

NOW = dt.datetime(2026, 3, 14, 9, 30, tzinfo=dt.timezone.utc)  # a fixed clock: answers are checkable

FACTORS = {  # to a base unit per dimension
    "kilometers": ("length", 1000.0),
    "miles": ("length", 1609.344),
    "meters": ("length", 1.0),
    "feet": ("length", 0.3048),
    "kilograms": ("mass", 1.0),
    "pounds": ("mass", 0.45359237),
}
Unit = Literal["kilometers", "miles", "meters", "feet", "kilograms", "pounds"]


@tool("Current weather in a city")
def get_weather(
    city: Annotated[str, P("City name, e.g. Paris")],
    unit: Annotated[Literal["celsius", "fahrenheit"], P("Temperature unit")] = "celsius",
) -> str:
    found = WEATHER_C.get(city.strip().lower())
    if found is None:
        raise ValueError(f"no weather data for {city!r}")
    celsius, sky = found
    if unit == "fahrenheit":
        return f"{city.strip()}: {celsius * 9 / 5 + 32:g}°F, {sky}"
    return f"{city.strip()}: {celsius}°C, {sky}"


@tool("Calculator: adds, subtracts, multiplies, divides or raises a to the power b")
def calculate(
    operation: Literal["add", "subtract", "multiply", "divide", "power"], a: float, b: float
) -> str:
    if operation == "add":
        value = a + b
    elif operation == "subtract":
        value = a - b
    elif operation == "multiply":
        value = a * b
    elif operation == "divide":
        value = a / b
    else:
        value = a**b
    return f"{value:g}" if abs(value) < 1e15 else str(value)


@tool("Converts a length or a mass from one unit to another")
def convert_units(value: float, from_unit: Unit, to_unit: Unit) -> str:
    source, target = FACTORS[from_unit], FACTORS[to_unit]
    if source[0] != target[0]:
        raise ValueError(f"cannot convert {source[0]} ({from_unit}) to {target[0]} ({to_unit})")
    converted = value * source[1] / target[1]
    return f"{value:g} {from_unit} = {converted:.2f} {to_unit}"


@tool("Looks up an employee in the company directory by name")
def lookup_employee(
    name: Annotated[str, P("The employee's full name")],
    field: Annotated[
        Literal["title", "office", "email", "phone"] | None,
        P("One field to return; omit for the whole record"),
    ] = None,
) -> str:
    record = EMPLOYEES.get(" ".join(name.lower().split()))
    if record is None:
        raise ValueError(f"no employee named {name!r}")
    if field is not None:
        return f"{name}: {field} = {record[field]}"
    return f"{name}: " + ", ".join(f"{key} {value}" for key, value in record.items())


@tool("Current local date and time in a time zone")
def time_in(timezone: Annotated[str, P("IANA time zone name, e.g. Europe/Paris or America/Chicago")]) -> str:
    try:
        zone = ZoneInfo(timezone.strip())
    except (KeyError, ValueError) as exc:
        raise ValueError(f"unknown time zone {timezone!r}; use an IANA name like Asia/Tokyo") from exc
    return NOW.astimezone(zone).strftime(f"%Y-%m-%d %H:%M ({timezone.strip()})")


TOOLS = [get_weather, calculate, convert_units, lookup_employee, time_in]

# -- the prompts -------------------------------------------------------------------------------------------

ABSENT = object()  # an optional argument that must be omitted or equal the default


@dataclass(frozen=True)
class Call:
    """An expected call: each argument is a value, a tuple of accepted values, or (value, ABSENT)."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    kind: str  # one | parallel | none | args
    prompt: str
    calls: tuple[Call, ...] = ()
    answer: tuple[Any, ...] = ()  # each item: a string, or a tuple of alternatives; all items must appear
    code: bool = False  # code was asked for: a code fence is fine


def W(city: str, unit: Any = ("celsius", ABSENT)) -> Call:
    return Call("get_weather", {"city": city, "unit": unit})


def C(operation: str, a: float, b: float) -> Call:
    return Call("calculate", {"operation": operation, "a": a, "b": b})


def U(value: float, src: str, dst: str) -> Call:
    return Call("convert_units", {"value": value, "from_unit": src, "to_unit": dst})


def E(name: str, field_: Any = ABSENT) -> Call:
    return Call("lookup_employee", {"name": name, "field": field_})


def T(zone: str) -> Call:
    return Call("time_in", {"timezone": zone})


CASES: list[Case] = [
    # one tool, stated plainly
    Case("one", "What's the weather in Tokyo in fahrenheit?", (W("Tokyo", "fahrenheit"),), ("68",)),
    Case("one", "Multiply 17 by 23", (C("multiply", 17, 23),), ("391",)),
    Case("one", "How warm is it in Paris right now?", (W("Paris"),), ("15",)),
    Case("one", "Is it raining in Paris?", (W("Paris"),), (("rain", "Rain"),)),
    Case("one", "What is 1234 plus 5678?", (C("add", 1234, 5678),), ("6912",)),
    Case("one", "Divide 100 by 8.", (C("divide", 100, 8),), ("12.5",)),
    Case("one", "What is 2 to the power of 10?", (C("power", 2, 10),), ("1024",)),
    Case("one", "How many miles is 10 kilometers?", (U(10, "kilometers", "miles"),), ("6.21",)),
    Case("one", "Convert 5 pounds to kilograms", (U(5, "pounds", "kilograms"),), ("2.27",)),
    Case("one", "What time is it in Tokyo?", (T("Asia/Tokyo"),), ("18:30",)),
    Case("one", "What's the current time in London?", (T("Europe/London"),), ("09:30",)),
    Case(
        "one",
        "What is Maria Gonzalez's job title?",
        (E("Maria Gonzalez", ("title", ABSENT)),),
        ("Head of Sales",),
    ),
    Case(
        "one",
        "Which office does Kenji Watanabe work in?",
        (E("Kenji Watanabe", ("office", ABSENT)),),
        ("Osaka",),
    ),
    Case("one", "Subtract 457 from 1000", (C("subtract", 1000, 457),), ("543",)),
    Case("one", "I'm flying to Cairo tomorrow. What's the weather like there?", (W("Cairo"),), ("35",)),
    Case(
        "one",
        "Give me Aisha Okafor's email address.",
        (E("Aisha Okafor", ("email", ABSENT)),),
        ("aisha.okafor@example.com",),
    ),
    # two tools (or one tool twice) in parallel
    Case("parallel", "What's the weather in Paris and in London?", (W("Paris"), W("London")), ("15", "10")),
    Case(
        "parallel",
        "Multiply 12 by 7, and also add 300 and 45.",
        (C("multiply", 12, 7), C("add", 300, 45)),
        ("84", "345"),
    ),
    Case(
        "parallel",
        "What's the weather in Oslo, and what time is it in Sydney?",
        (W("Oslo"), T("Australia/Sydney")),
        ("-5", "20:30"),
    ),
    Case(
        "parallel",
        "Convert 3 miles to kilometers and 20 kilograms to pounds.",
        (U(3, "miles", "kilometers"), U(20, "kilograms", "pounds")),
        ("4.83", "44.09"),
    ),
    Case(
        "parallel",
        "What are the phone numbers of Lars Nilsson and Maria Gonzalez?",
        (E("Lars Nilsson", ("phone", ABSENT)), E("Maria Gonzalez", ("phone", ABSENT))),
        ("555 3190", "555 2041"),
    ),
    Case(
        "parallel",
        "What time is it in New York and in Tokyo?",
        (T("America/New_York"), T("Asia/Tokyo")),
        (("05:30", "5:30"), ("18:30", "6:30")),
    ),
    Case(
        "parallel",
        "Weather in Berlin in celsius and in New York in fahrenheit, please.",
        (W("Berlin", ("celsius", ABSENT)), W("New York", "fahrenheit")),
        ("5", "77"),
    ),
    Case(
        "parallel",
        "How is the weather in Sydney, and how many feet is 100 meters?",
        (W("Sydney"), U(100, "meters", "feet")),
        ("30", "328.08"),
    ),
    # no tool at all
    Case("none", "Tell me a short joke about cats.", (), ()),
    Case("none", "What is the capital of France?", (), ("Paris",)),
    Case("none", "Who wrote Romeo and Juliet?", (), ("Shakespeare",)),
    Case("none", "Hi! How are you today?", (), ()),
    Case("none", "What does HTTP stand for?", (), (("Hypertext", "HyperText"),)),
    Case("none", "Translate 'thank you' into Spanish.", (), ("gracias",)),
    Case("none", "Write a haiku about autumn leaves.", (), ()),
    Case("none", "Write a Python function that reverses a string.", (), ("def ",), code=True),
    Case("none", "What is the chemical symbol for gold?", (), ("Au",)),
    Case("none", "Name three primary colors.", (), (("red", "Red"),)),
    Case("none", "Thanks, that's all I needed!", (), ()),
    # arguments to extract: decimals, negatives, big numbers, names, enums, optional parameters
    Case("args", "What is 3.75 times -4?", (C("multiply", 3.75, -4),), ("-15",)),
    Case("args", "Calculate 1,250,000 divided by 500", (C("divide", 1250000, 500),), ("2500",)),
    Case("args", "How heavy is 72.5 kg in pounds?", (U(72.5, "kilograms", "pounds"),), ("159.83",)),
    Case("args", "Convert 26.2 miles to kilometers.", (U(26.2, "miles", "kilometers"),), ("42.16",)),
    Case("args", "Temperature in Lima, fahrenheit please", (W("Lima", "fahrenheit"),), ("68",)),
    Case(
        "args", "What's the phone number of kenji watanabe?", (E("Kenji Watanabe", "phone"),), ("5550 7788",)
    ),
    Case(
        "args",
        "Pull up the full directory record for Aisha Okafor.",
        (E("Aisha Okafor", ABSENT),),
        ("Lagos",),
    ),
    Case("args", "What time is it in Kolkata? (time zone Asia/Kolkata)", (T("Asia/Kolkata"),), ("15:00",)),
    Case("args", "Raise 3 to the 4th power", (C("power", 3, 4),), ("81",)),
    Case(
        "args",
        "How many feet tall is a 8848 meter mountain?",
        (U(8848, "meters", "feet"),),
        (("29028", "29,028", "29027"),),
    ),
]

# -- scoring -----------------------------------------------------------------------------------------------


def _same(expected: Any, actual: Any) -> bool:
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        return isinstance(actual, (int, float)) and abs(float(actual) - expected) < 1e-6
    if isinstance(expected, str):
        return isinstance(actual, str) and " ".join(actual.lower().split()) == expected.lower()
    return bool(expected == actual)


def _argument_ok(expected: Any, present: bool, actual: Any) -> bool:
    options = expected if isinstance(expected, tuple) else (expected,)
    return any(
        (option is ABSENT and not present) or (present and _same(option, actual)) for option in options
    )


def call_matches(expected: Call, name: str, args: dict[str, Any]) -> bool:
    if name != expected.name:
        return False
    if set(args) - set(expected.args):
        return False
    return all(_argument_ok(value, key in args, args.get(key)) for key, value in expected.args.items())


_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")


def answer_problems(case: Case, text: str) -> list[str]:
    problems = []
    plain = _THOUSANDS.sub("", text)
    if not text.strip():
        problems.append("empty")
    for item in case.answer:
        options = item if isinstance(item, tuple) else (item,)
        if not any(option.lower() in plain.lower() for option in options):
            problems.append(f"missing {options[0]!r}")
    if "```" in text and not case.code:
        problems.append("code fence")
    if "\\boxed" in text:
        problems.append("\\boxed")
    if len(text) > 600:
        problems.append(f"{len(text)} chars")
    return problems


@dataclass
class Outcome:
    kind: str
    prompt: str
    calls: list[list[Any]]
    answer: str
    decision_ok: bool
    arguments_ok: bool | None
    answer_ok: bool
    answer_problems: list[str]
    seconds: float
    output_tokens: int
    error: str | None = None


async def run_case(agent: Agent, case: Case) -> Outcome:
    started = time.perf_counter()
    calls: list[tuple[str, dict[str, Any]]] = []
    answer = ""
    tokens = 0
    error = None
    try:
        result = await agent.chat(case.prompt)
        seen = set()
        for execution in result.tool_executions:
            request = execution.request
            if request.name == "search_tools":  # ToolSearch's own tool (--tool-search): not a decision
                continue
            try:
                args = json.loads(request.arguments or "{}")
            except ValueError:
                args = {"<unparsed>": request.arguments}
            key = (request.name, json.dumps(args, sort_keys=True))
            if key not in seen:
                seen.add(key)
                calls.append((request.name, args))
        answer = result.content or ""
        tokens = result.token_usage.output_tokens if result.token_usage else 0
    except Exception as exc:  # a failed prompt scores zero, the run goes on
        error = f"{type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - started
    decision_ok = error is None and Counter(name for name, _ in calls) == Counter(c.name for c in case.calls)
    arguments_ok = None
    if case.calls:
        arguments_ok = error is None and all(
            any(call_matches(expected, name, args) for name, args in calls) for expected in case.calls
        )
    problems = answer_problems(case, answer) if error is None else [error]
    return Outcome(
        case.kind,
        case.prompt,
        [[name, args] for name, args in calls],
        answer,
        decision_ok,
        arguments_ok,
        not problems,
        problems,
        round(seconds, 3),
        tokens,
        error,
    )


def summarize(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    def rate(values: list[bool]) -> float:
        return round(sum(values) / len(values), 3) if values else 1.0

    by_kind: dict[str, Any] = {}
    for kind in dict.fromkeys(o.kind for o in outcomes):
        group = [o for o in outcomes if o.kind == kind]
        by_kind[kind] = {
            "prompts": len(group),
            "decision": rate([o.decision_ok for o in group]),
            "arguments": rate([o.arguments_ok for o in group if o.arguments_ok is not None]),
            "answer": rate([o.answer_ok for o in group]),
            "median_seconds": round(statistics.median(o.seconds for o in group), 2),
        }
    seconds = [o.seconds for o in outcomes]
    return {
        "prompts": len(outcomes),
        "decision": rate([o.decision_ok for o in outcomes]),
        "arguments": rate([o.arguments_ok for o in outcomes if o.arguments_ok is not None]),
        "answer": rate([o.answer_ok for o in outcomes]),
        "median_seconds": round(statistics.median(seconds), 2),
        "mean_seconds": round(statistics.fmean(seconds), 2),
        "total_seconds": round(sum(seconds), 1),
        "by_kind": by_kind,
    }


def markdown(meta: dict[str, Any], summary: dict[str, Any], outcomes: Sequence[Outcome]) -> str:
    lines = [
        "# Local model tool-use eval",
        "",
        f"Model `{meta['model']}`, prompts: {meta.get('set', 'dev')}, check_calls "
        f"{meta.get('check_calls', 'off')}, {meta.get('tools', '5 tools')}, threads {meta['threads']}, "
        f"{meta['when']}, "
        f"load average at start {meta['load_average']}. Written by `benchmarks/local_eval.py`.",
        "",
        "| prompts | tool decision | arguments | answer | median s/prompt | total s |",
        "|---|---|---|---|---|---|",
        f"| all {summary['prompts']} | {summary['decision']:.0%} | {summary['arguments']:.0%} | "
        f"{summary['answer']:.0%} | {summary['median_seconds']} | {summary['total_seconds']} |",
    ]
    for kind, row in summary["by_kind"].items():
        lines.append(
            f"| {kind} ({row['prompts']}) | {row['decision']:.0%} | {row['arguments']:.0%} | "
            f"{row['answer']:.0%} | {row['median_seconds']} | |"
        )
    lines += ["", "## Misses", ""]
    for o in outcomes:
        if o.decision_ok and o.arguments_ok is not False and o.answer_ok:
            continue
        calls = "; ".join(f"{name}({json.dumps(args)})" for name, args in o.calls) or "no call"
        flags = [
            f
            for f, ok in (("decision", o.decision_ok), ("arguments", o.arguments_ok), ("answer", o.answer_ok))
            if ok is False
        ]
        lines.append(
            f"- **{o.prompt}** ({', '.join(flags)}): {calls} -> {o.answer[:160]!r} {o.answer_problems}"
        )
    return "\n".join(lines) + "\n"


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model",
        default="local",
        help="'local' (the embedded default), 'local:qwen2.5-coder-0.5b' or 'local:<gguf path>'",
    )
    parser.add_argument("--threads", type=int, default=None, help="n_threads (default: the model's default)")
    parser.add_argument(
        "--set",
        default="dev",
        choices=["dev", "heldout", "heldout2", "all"],
        help="dev: the 45 prompts of earlier rounds (tuning looks at these); heldout, heldout2: "
        "local_eval_heldout.py's two sets",
    )
    parser.add_argument(
        "--check-calls", default="on", choices=["on", "off"], help="LocalChatModel(check_calls=)"
    )
    parser.add_argument("--only", default="", help="comma-separated kinds: one,parallel,none,args")
    parser.add_argument("--grep", default="", help="only prompts containing this text")
    parser.add_argument("--out", default=str(HERE / "local_eval"), help="output path without extension")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument(
        "--tool-search",
        type=int,
        default=0,
        metavar="N",
        help="hide the tools among N distractors behind ToolSearch (BM25, top_k=5): benchmark 6b",
    )
    args = parser.parse_args(argv)

    path = args.model.partition(":")[2] or None
    model: ChatModel = LocalChatModel(
        path, n_threads=args.threads, progress=False, check_calls=args.check_calls == "on"
    )
    from local_eval_heldout import HELDOUT, HELDOUT_2  # the held-out prompts (import this module's helpers)

    sets = {"dev": CASES, "heldout": HELDOUT, "heldout2": HELDOUT_2, "all": CASES + HELDOUT + HELDOUT_2}
    chosen = sets[args.set]
    cases = [c for c in chosen if not args.only or c.kind in args.only.split(",")]
    cases = [c for c in cases if args.grep.lower() in c.prompt.lower()]
    tools: Any = TOOLS
    if args.tool_search:
        from context import distractors  # benchmarks/context.py: the same distractors as benchmark 6b

        tools = [ToolSearch([*TOOLS, *distractors(args.tool_search - len(TOOLS))], top_k=5)]
    agent = Agent(model, tools=tools, max_tool_rounds=4 if args.tool_search else 3)
    load_started = time.perf_counter()
    await model.load()  # type: ignore[attr-defined]
    load_seconds = time.perf_counter() - load_started
    meta = {
        "model": args.model,
        "set": args.set,
        "check_calls": args.check_calls,
        "tools": f"ToolSearch over {args.tool_search} tools" if args.tool_search else f"{len(TOOLS)} tools",
        "threads": args.threads or "default",
        "when": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "cpus": os.cpu_count(),
        "load_seconds": round(load_seconds, 2),
    }
    outcomes = []
    try:
        for index, case in enumerate(cases, 1):
            outcome = await run_case(agent, case)
            outcomes.append(outcome)
            if not args.quiet:
                marks = "".join(
                    "." if ok is not False else x
                    for ok, x in (
                        (outcome.decision_ok, "D"),
                        (outcome.arguments_ok, "A"),
                        (outcome.answer_ok, "T"),
                    )
                )
                calls = "; ".join(f"{n}({json.dumps(a)})" for n, a in outcome.calls) or "-"
                print(
                    f"[{index:2}/{len(cases)}] {marks} {outcome.seconds:5.1f}s {case.prompt[:50]!r}: {calls} "
                    f"-> {outcome.answer[:100]!r} {outcome.answer_problems or ''}",
                    flush=True,
                )
    finally:
        await model.aclose()  # type: ignore[attr-defined]
    summary = summarize(outcomes)
    Path(args.out + ".json").write_text(
        json.dumps({"meta": meta, "summary": summary, "outcomes": [asdict(o) for o in outcomes]}, indent=1)
    )
    Path(args.out + ".md").write_text(markdown(meta, summary, outcomes))
    print(
        f"\n{summary['prompts']} prompts: decision {summary['decision']:.0%}, "
        f"arguments {summary['arguments']:.0%}, answer {summary['answer']:.0%}; "
        f"median {summary['median_seconds']} s/prompt, total "
        f"{summary['total_seconds']} s (load {meta['load_seconds']} s, load average {meta['load_average']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
