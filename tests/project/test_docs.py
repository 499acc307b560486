"""Every ```python snippet of docs/*.md runs, file by file, in order, as a reader would paste them.

Convention: a block fenced as ```python runs (top-level `await` allowed, one namespace per page, like the
README's); a block fenced as ```python no-run shows an API's shape rather than code to paste (a signature
listing) and is skipped. Keep those rare: anything a user could run must run here.
Snippets that would need a provider's API key run against agentloop's fake provider servers instead (the
test sets dummy OPENAI_API_KEY / ANTHROPIC_API_KEY values, which only those local servers ever see).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.snippets import run_snippets

DOCS = Path(__file__).resolve().parents[2] / "docs"
FENCE = re.compile(r"^```python( no-run)?\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
PAGES = sorted(path.name for path in DOCS.glob("*.md"))
# What each page's snippets must print: proof that they ran, not just compiled.
EXPECTED = {
    "architecture.md": ["5. ['add#0 round 1: ok', 'add#1 round 1: failed']"],
    "abc.md": ["True\nHELLO THERE", "True\n['first', 'FIRST', 'second', 'SECOND']", "model calls: 1"],
    "context.md": [
        "TokenCount(tokens=9, exact=True)",
        "anthropic",
        "stopped: max_request_tokens True",
        "The user is Ada; she is planning a trip to Lisbon.",
        "6 messages sent; 16 kept in memory",
        "read_file call (255 tokens) was cleared",
        "first 200 are shown",
        "['convert_currency']",
        "created Dentist",
        "['search_tools'], ['search_tools', 'create_calendar_event']",
        "Booked.\n[('convert_currency', True), ('create_calendar_event', True), "
        "('tool_search_tool_bm25', None)]",
        "['server_tool_use', 'tool_search_tool_result', 'tool_use']",
    ],
    "durable.md": ["Paid. ['charged 9.5 for 42']"],
    "guide-streaming.md": [
        '"args": {"to": "ada@example.com", "text": "5"}}]}',
        'event: tool_start\ndata: {"call": "e1", "name": "send_email"}',
        'event: approval_required\ndata: {"run": "r1", "calls": [{"call": "e1", "name": "send_email"',
        'event: tool_result\ndata: {"call": "e1", "result": "sent to ada@example.com"}',
        'event: token\ndata: "Sent"',
        'event: done\ndata: {"text": "Sent it."}',
    ],
    "guide-workers.md": ["message 3 seen"],
    "guide-production.md": [
        "stopped: ",
        "tripped: no secrets",
        "the consumer saw: \n",  # held until checked: nothing of the blocked answer
        "stored: 0 messages",
        "stopped after True",
    ],
    "guide-testing.md": [
        "['order_status'] True",
        "['The ', 'sum ', 'is 4', '2.']",
        "2 model calls",
        "Hello! after 2 requests",
    ],
    "local-model.md": ["Paris"],
    "middleware.md": [
        "tool add -> 3",
        "['Paris.']",
        "['My card is [card]']",
        "secrets -> asks for a password",
        "max_requests 1 2\n3",
        "city='Rome' celsius=21.0 1",
        "ROME STOP 14",
        "APPROVAL_REQUIRED waiting for a person\nPaid 5.",
        '{"add":"3"} 2',
        "CANCELLED two rounds are enough 2",
        "CANCELLED the user pressed stop ['long_report'] {}",
    ],
    "models.md": [
        "echo: Hi",
        "one two ",
        "Hello!",
        "retry after 1.0 s",
        "Sunny in Paris.",
        "['message', 'reasoning', 'function_call', 'function_call_output']",
        "A cat.",
        "['text', 'image_url']",
        "Bonjour!",
        "Sunny in Rome.",
        "['functionCall', 'thoughtSignature']",
        "Hello from Bedrock.",
    ],
    "runtime.md": [
        "4 messages added",
        "You asked what 2 + 3 is, Ada.",
        "tokens: 2 + 3 = 5.",
        "tool add -> 5.0",
        "sent 3 chunks; the invocation was stopped and waited for",
        "customer 42: Ada, tier gold",
        "True Ada pressed Stop",
    ],
    "tools.md": [
        "add",
        "get_weather",
        "True '" + "next Monday' is not a date",
        "False Room booked for 2026-11-30",
        "index_documents: 1/3 document 1 of 3",
        "draft so far: 'Notes on tides'",
        "started build_report\nI started the report; ask me anything meanwhile. running\nfinished True\n"
        "Revenue was up 4% in Q3.",
    ],
}

# Pages whose snippets need a server and run in their own test, with that server started.
ELSEWHERE = {
    "memory.md": "tests/features/memory/test_docs_memory.py",  # a real redis-server
    "approval.md": "tests/features/approval/test_approval.py",
    "mcp.md": "tests/integrations/test_mcp.py",  # MCP SDK servers
    "observability.md": "tests/features/tracing/test_otel.py",  # the OpenTelemetry SDK's in-memory exporter
    "output.md": "tests/features/output/test_output_docs.py",
    "web.md": "tests/integrations/test_ui.py",  # agentloop.ui's apps, in process
    # a real redis-server; a2a-sdk's server on asyncio
    "serving.md": "tests/integrations/test_serving_docs.py",
}


def snippets(page: str) -> list[tuple[bool, str]]:
    """(runs, code) for each python block of `page`."""
    return [(not no_run, code) for no_run, code in FENCE.findall((DOCS / page).read_text())]


def test_every_page_is_checked_and_no_run_blocks_are_rare() -> None:
    blocks = [block for page in PAGES for block in snippets(page)]
    assert set(EXPECTED) | set(ELSEWHERE) == {page for page in PAGES if snippets(page)}
    root = DOCS.parent
    for page, test in ELSEWHERE.items():
        source = (root / test).read_text()
        assert f"docs/{page}" in source or f'"{page}"' in source, f"{test} does not run docs/{page}"
    assert sum(not runs for runs, _ in blocks) <= 2  # signature listings only


@pytest.mark.parametrize(
    "page",
    [pytest.param(p, marks=pytest.mark.local_model) if p == "local-model.md" else p for p in EXPECTED],
)
async def test_doc_snippets_run(page: str, anyio_backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if page == "durable.md" and anyio_backend != "asyncio":
        pytest.skip("DBOS runs on asyncio only, as docs/durable.md says")
    # Pages show models configured from the environment: give them keys that only the fake servers see.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-docs-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-docs-test")
    for variable in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    namespace: dict[str, object] = {"__name__": f"docs_{page[:-3].replace('-', '_')}"}
    printed = await run_snippets([block for runs, block in snippets(page) if runs], page, namespace)
    for expected in EXPECTED[page]:
        assert expected in printed, f"{page}: {expected!r} not printed; got {printed!r}"
