"""The tool decision alone, fast: each prompt's first (constrained) pass of the embedded model, no tool run and
no answer pass, with the probability the model gave to calling at the decision point.

    python benchmarks/local_decisions.py --set dev            # the 45 prompts tuning may look at
    python benchmarks/local_decisions.py --set heldout        # only to measure, never to tune on

For trying prompt and protocol changes before a full `local_eval.py` run (a few seconds a prompt instead of
tens). Prints one line per prompt and the decision rate per kind.
"""

from __future__ import annotations

import argparse
import math
import json
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).parent))

from local_eval import ABSENT, CASES, TOOLS, Case, E, T, W  # noqa: E402
from local_eval_heldout import HELDOUT  # noqa: E402

from agentloop import UserMessage  # noqa: E402
from agentloop.models import LocalChatModel  # noqa: E402
from agentloop._tools._toolset import tool_specifications_from  # noqa: E402
from agentloop.models._local_tools import render_protocol, tool_calls_schema  # noqa: E402


# Development prompts of the two new kinds (the held-out set has others): tuning looks at these.
DEV_EXTRA: list[Case] = [
    Case("live", "Is it sunny in Sydney today?", (W("Sydney"),)),
    Case("live", "Will I need sunglasses in New York today?", (W("New York"),)),
    Case("live", "How cold is it in Oslo?", (W("Oslo"),)),
    Case("live", "Is it hot in Lima right now?", (W("Lima"),)),
    Case("live", "Is it evening in Tokyo yet?", (T("Asia/Tokyo"),)),
    Case("live", "What's the date today in New York?", (T("America/New_York"),)),
    Case("live", "What does Kenji Watanabe do?", (E("Kenji Watanabe", ("title", ABSENT)),)),
    Case("related", "What is the capital of Italy?"),
    Case("related", "What is the boiling point of water in Fahrenheit?"),
    Case("related", "How many seconds are in a minute?"),
    Case("related", "How many meters are in a kilometer?"),
    Case("related", "What is the Pythagorean theorem?"),
    Case("related", "What is humidity?"),
    Case("related", "What does a Head of Sales do?"),
    Case("related", "Who painted the Mona Lisa?"),
    Case("related", "What is the tallest mountain in the world?"),
    Case("related", "How do I calculate the average of a list of numbers?"),
]


def complete(server: Any, payload: dict[str, Any]) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    done = threading.Event()

    def on_chunk(chunk: dict[str, Any]) -> bool:
        out.append(chunk)
        return False

    server.handle_chat_completions(payload, on_chunk)
    done.set()
    return out[-1]


def decision_probability(logprobs: list[dict[str, Any]]) -> float | None:
    """P(a call) at the decision token (the one after `"tool_calls":`): `[{` against `[]`, unconstrained."""
    text = ""
    for item in logprobs:
        if text.rstrip().endswith('"tool_calls":'):
            call = stop = 0.0
            for top in item["top_logprobs"]:
                token = top["token"].replace(" ", "").replace("\n", "")
                if token.startswith("[{"):
                    call += math.exp(top["logprob"])
                elif token.startswith("[]"):
                    stop += math.exp(top["logprob"])
            return call / (call + stop) if call + stop else None
        text += item["token"]
    return None


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--set", default="dev", choices=["dev", "heldout", "all"])
    parser.add_argument("--model", default="local")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--grep", default="")
    parser.add_argument("--tokens", action="store_true")
    parser.add_argument("--show", action="store_true", help="print each held-out prompt (after tuning)")
    args = parser.parse_args()
    cases: list[Case] = {"dev": CASES + DEV_EXTRA, "heldout": HELDOUT, "all": CASES + DEV_EXTRA + HELDOUT}[args.set]
    cases = [c for c in cases if args.grep.lower() in c.prompt.lower()]
    model = LocalChatModel(args.model.partition(":")[2] or None, n_threads=args.threads, progress=False)
    server = await model._ensure_server()
    specs = [spec for fn in TOOLS for spec in tool_specifications_from(fn)]
    schema = tool_calls_schema(specs, allow_no_call=True, max_calls=model.max_tool_calls)
    ok_by_kind: Counter[str] = Counter()
    all_by_kind: Counter[str] = Counter()
    started = time.perf_counter()
    for case in cases:
        messages = render_protocol([UserMessage(case.prompt)], specs, allow_no_call=True)
        payload = {
            "messages": messages,
            "temperature": 0,
            "max_tokens": 200,
            "logprobs": True,
            "top_logprobs": 8,
            "response_format": {"type": "json_schema", "json_schema": {"schema": schema}},
        }
        t0 = time.perf_counter()
        response = await anyio.to_thread.run_sync(complete, server, payload)
        seconds = time.perf_counter() - t0
        choice = response["choices"][0]
        text = choice["message"]["content"]
        try:
            names = Counter(call["name"] for call in json.loads(text)["tool_calls"])
        except (ValueError, KeyError, TypeError):
            names = Counter({"<unparsed>": 1})
        expected = Counter(call.name for call in case.calls)
        ok = names == expected
        if args.tokens:
            for item in (choice.get("logprobs") or {}).get("content") or []:
                print(repr(item["token"]), [(t["token"], round(t["logprob"], 2)) for t in item["top_logprobs"][:4]])
        p = decision_probability((choice.get("logprobs") or {}).get("content") or [])
        all_by_kind[case.kind] += 1
        ok_by_kind[case.kind] += ok
        text = " ".join(text.split())
        shown = text if len(text) < 140 else text[:137] + "..."
        p_text = f"{p:.3f}" if p is not None else "  -  "
        if args.set == "heldout" and not args.show:
            continue  # held out: only the rates are looked at while tuning
        print(f"{'.' if ok else 'D'} p(call)={p_text} {seconds:4.1f}s {case.kind:8} {case.prompt[:55]!r}: {shown}", flush=True)
    total = sum(ok_by_kind.values())
    print(
        f"\ndecisions {total}/{len(cases)} = {total / len(cases):.1%} in {time.perf_counter() - started:.0f} s; "
        + ", ".join(f"{k} {ok_by_kind[k]}/{n}" for k, n in all_by_kind.items())
    )
    await model.aclose()


if __name__ == "__main__":
    anyio.run(main)
