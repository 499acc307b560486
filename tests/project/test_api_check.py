"""api/check.py (`nox -s api`): a breaking change of the public API fails unless CHANGELOG.md's
[Unreleased] announces it; moving private modules is no change."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from api import check

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the package where `Agent.ask_sync` is gone and `chat`'s `memory_id` is renamed."""
    root = tmp_path_factory.mktemp("broken")
    shutil.copytree(ROOT / "agentloop", root / "agentloop", ignore=shutil.ignore_patterns("__pycache__"))
    agent = next(path for path in (root / "agentloop").rglob("*.py") if "\nclass Agent(" in path.read_text())
    source = agent.read_text().replace("    def ask_sync(", "    def ask_sync_renamed(")
    implementation = source.rindex("    async def chat(")  # after its @overload stubs
    cut = source.index("        memory_id: Any = None,", implementation)
    agent.write_text(
        source[:cut]
        + "        memory_key: Any = None,"
        + source[cut + len("        memory_id: Any = None,") :]
    )
    return root


def changelog(tmp_path: Path, removed: str, changed: str = "") -> Path:
    path = tmp_path / "CHANGELOG.md"
    path.write_text(
        "# Changelog\n\n## [Unreleased]\n\n### Added\n\n- `agentloop.Agent.chat` got faster\n\n"
        f"### Changed\n\n{changed}\n\n### Removed\n\n{removed}\n\n## [0.1.0] - 2026-11-01\n\n"
        "### Removed\n\n- `agentloop.Agent`\n"
    )
    return path


def test_the_current_code_matches_the_record_with_no_unannounced_break() -> None:
    _, unannounced = check.compare(check.public_api(), check.recorded())
    assert unannounced == [], [check.describe(change) for change in unannounced]


def test_a_removed_method_and_a_renamed_parameter_fail_unless_announced(broken: Path, tmp_path: Path) -> None:
    current = check.public_api(broken)
    # Named only under Added, and under an older release: not announced.
    _, unannounced = check.compare(current, check.recorded(), changelog(tmp_path, removed=""))
    found = {check.describe(change) for change in unannounced}
    assert any(text.startswith("agentloop.Agent.ask_sync:") for text in found), found
    assert any(text.startswith("agentloop.Agent.chat:") and "memory_id" in text for text in found), found
    # Mentioned only under Added, or under an older release: still not announced.
    announced = changelog(
        tmp_path, removed="- `agentloop.Agent.ask_sync`", changed="- `agentloop.Agent.chat`"
    )
    assert check.compare(current, check.recorded(), announced)[1] == []
    # A parent's path announces its members.
    assert (
        check.compare(current, check.recorded(), changelog(tmp_path, removed="- `agentloop.Agent`"))[1] == []
    )
