"""mypy infers `Result[Invoice]` from `output_type=Invoice`: tests/typing/output_types.py is type-checked
(strict) and every `assert_type` in it must hold."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def test_mypy_infers_the_output_types(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api", reason="pip install mypy")
    stdout, stderr, status = api.run(
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
    assert status == 0, stdout + stderr
