"""`report.py`: the tables of docs/reliability.md are rendered from a run's JSON, never from a failed run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .report import BEGIN, END, check, render, write


def summary(**changes: Any) -> dict[str, Any]:
    base = {
        "faults_tried": 3,
        "faults_passed": 3,
        "tasks_checked": 3,
        "tasks_leaked": 0,
        "connections_checked": 2,
        "connections_leaked": 0,
        "memories_checked": 4,
        "memories_invalid": 0,
        "cancellation_points": 19,
        "secrets": {"texts_scanned": 100, "log_records": 40, "leaks": 0},
    }
    return base | changes


def case(fault: str, provider: str, mode: str, passed: bool = True) -> dict[str, Any]:
    return {
        "nodeid": f"t::{fault}[{provider}-{mode}]",
        "category": "wire",
        "fault": fault,
        "expected": "retried | answered",
        "provider": provider,
        "mode": mode,
        "backend": "asyncio",
        "passed": passed,
    }


def test_the_tables_group_cases_by_fault_and_give_the_totals() -> None:
    report = {
        "summary": summary(),
        "faults": [
            case("500 once", "openai", "chat"),
            case("500 once", "anthropic", "stream"),
            case("reset", "openai", "chat"),
        ],
    }
    tables = render(report)
    assert "| 500 once | retried \\| answered | Anthropic, OpenAI | chat, stream | asyncio | 2/2 |" in tables
    assert "| reset | retried \\| answered | OpenAI | chat | asyncio | 1/1 |" in tables
    assert "| tasks leaked | 0 (in 3 checks) |" in tables and "| cancellation points swept | 19 |" in tables
    assert check(report) == []


def test_a_failed_or_leaking_run_is_not_published() -> None:
    report = {
        "summary": summary(tasks_leaked=1, secrets={}),
        "faults": [case("reset", "openai", "chat", passed=False)],
    }
    assert check(report) == [
        "t::reset[openai-chat] failed",
        "tasks_leaked: 1",
        "the secret scan did not run (run the whole tests/reliability package)",
    ]


def test_writing_replaces_only_the_generated_part(tmp_path: Path) -> None:
    document = tmp_path / "reliability.md"
    document.write_text(f"# Title\n\nprose\n\n{BEGIN}\n\nold tables\n\n{END}\n\nmore prose\n")
    write(document, "| new |\n")
    assert document.read_text() == f"# Title\n\nprose\n\n{BEGIN}\n\n| new |\n\n{END}\n\nmore prose\n"
