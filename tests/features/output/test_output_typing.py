"""mypy infers `Result[Invoice]` from `output_type=Invoice`: tests/typing/output_types.py is type-checked
(strict) and every `assert_type` in it must hold."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parents[2]


def test_mypy_infers_the_output_types(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api", reason="pip install mypy")
    limit = sys.getrecursionlimit()  # mypy raises it for the whole process; later tests rely on the default
    try:
        stdout, stderr, status = _run_mypy(api, tmp_path)
    finally:
        sys.setrecursionlimit(limit)
    assert status == 0, stdout + stderr


def _run_mypy(api: Any, tmp_path: Path) -> tuple[str, str, int]:
    return api.run(  # type: ignore[no-any-return]  # mypy.api is untyped here
        [
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path),
            "--python-version",
            "3.10",
            "--follow-imports",
            "silent",
            str(HERE / "typing" / "output_types.py"),
        ]
    )
