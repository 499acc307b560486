"""Human approval of tool calls: a console yes/no, asked inline, then a paused invocation resumed later.

python examples/approval.py                           # asks you at the console
APPROVAL_ANSWERS=y,y,n python examples/approval.py    # answers given up front (what nox -s examples does)

Without a console (stdin is not a terminal) the answers are read from stdin, one per line; a missing answer
is a no.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter
from collections.abc import Iterator

import anyio

from agentloop import (
    Agent,
    AiMessage,
    Denied,
    FinishReason,
    InMemoryChatMemoryStore,
    MessageWindowChatMemory,
    PendingApproval,
    ToolApprovalRequest,
    ToolContext,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    tool,
)
from agentloop.testing import FunctionChatModel

RUNS: Counter[str] = Counter()  # what really ran, to check that nothing ran twice or unapproved


def over_100(request: ToolApprovalRequest, ctx: ToolContext) -> bool:
    return bool(request.args.get("amount", 0) > 100)  # small payments need nobody's approval


@tool("Transfers money to someone", requires_approval=over_100)
def transfer(to: str, amount: int) -> str:
    RUNS[f"transfer {to} {amount}"] += 1
    return f"Sent {amount} EUR to {to}"


@tool("Deletes a file", requires_approval=True)
async def delete_file(path: str) -> str:
    RUNS[f"delete {path}"] += 1
    return f"Deleted {path}"


# -- the person ---------------------------------------------------------------------------------------------


def _answers() -> Iterator[str] | None:
    """Answers given up front (APPROVAL_ANSWERS, or stdin when it is not a terminal); None: ask a person."""
    given = os.environ.get("APPROVAL_ANSWERS")
    if given is not None:
        return iter(given.split(","))
    if not sys.stdin.isatty():
        return iter(sys.stdin.read().split())
    return None


ANSWERS: Iterator[str] | None = None  # set when run as a script; None: ask at the console
_one_prompt_at_a_time = threading.Lock()  # a sync handler runs in a worker thread per gated call


def ask(question: str) -> bool:
    with _one_prompt_at_a_time:
        if ANSWERS is None:
            answer = input(f"{question} [y/N] ")
        else:
            answer = next(ANSWERS, "n")
            print(f"{question} [y/N] {answer}")
    return answer.strip().lower() in ("y", "yes")


def console_approval(request: ToolApprovalRequest) -> bool | Denied:
    """The inline handler: the loop waits for it while the response's other calls go on."""
    if ask(f"Allow {request.tool_name}({request.arguments})?"):
        return True
    return Denied(f"The user refused {request.tool_name}; do not retry it.")


# -- the model (offline): asks for tools, then sums up what it was told -------------------------------------


def model_for(*requests: ToolExecutionRequest) -> FunctionChatModel:
    def answer(messages: list[object], tools: object) -> AiMessage | str:
        results = [m for m in messages if isinstance(m, ToolExecutionResultMessage)]
        if not results or not isinstance(messages[-1], ToolExecutionResultMessage):
            return AiMessage(tool_execution_requests=list(requests))
        latest = results[-len(requests) :]
        return "Summary: " + "; ".join(r.text + (" (refused)" if r.is_error else "") for r in latest)

    return FunctionChatModel(answer)


STORE = InMemoryChatMemoryStore()  # paused rounds are recorded here too: a round resumes once


def build_agent(model: FunctionChatModel, *, inline: bool) -> Agent:
    return Agent(
        model,
        tools=[transfer, delete_file],
        memory=MessageWindowChatMemory.provider(50, store=STORE),
        approval_handler=console_approval if inline else None,
    )


async def main() -> None:
    # 1. Inline: the handler is asked about the big transfer; the small one runs at once.
    rent = ToolExecutionRequest("t1", "transfer", '{"to": "landlord", "amount": 1200}')
    coffee = ToolExecutionRequest("t2", "transfer", '{"to": "cafe", "amount": 4}')
    result = await build_agent(model_for(rent, coffee), inline=True).chat(
        "Pay rent and my coffee", memory_id="me"
    )
    print(result.content, "\n")
    assert RUNS["transfer cafe 4"] == 1 and RUNS["transfer landlord 1200"] <= 1

    # 2. Paused: no handler, so the invocation ends and its state is stored until someone decides.
    report = ToolExecutionRequest("d1", "delete_file", '{"path": "/tmp/report.txt"}')
    gift = ToolExecutionRequest("t3", "transfer", '{"to": "bob", "amount": 250}')
    paused = await build_agent(model_for(report, gift), inline=False).chat(
        "Clean up, pay bob", memory_id="me"
    )
    assert paused.finish_reason is FinishReason.APPROVAL_REQUIRED and paused.pending is not None
    row = paused.pending.to_json()  # a database row, a queue message...
    print(f"Paused; {len(paused.pending.requests)} calls wait ({len(row)} bytes of JSON stored)")

    # ...later, possibly in another process, with an agent built the same way:
    pending = PendingApproval.from_json(row)
    decisions: dict[str, bool | Denied] = {
        r.call_id: ask(f"Allow {r.tool_name}({r.arguments})?") for r in pending.requests
    }
    resumed = await build_agent(model_for(report, gift), inline=False).resume(pending, decisions)
    print(resumed.content)
    for r in pending.requests:
        ran = (
            RUNS[f"delete {r.args.get('path')}"] + RUNS[f"transfer {r.args.get('to')} {r.args.get('amount')}"]
        )
        assert ran == (1 if decisions[r.call_id] is True else 0), r  # approved: once; refused: never


if __name__ == "__main__":
    ANSWERS = _answers()
    anyio.run(main)
