"""mkdocs hooks for the documentation site (`nox -s docs`).

- The benchmark plots, which live beside the benchmarks that draw them, are published under `images/`
  without a copy in the repository.
- A ```python no-run fence (tests/project/test_docs.py's mark for a signature listing that is shown, not run)
  is
  rendered as a plain python block: Markdown's fences take no such word after the language.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent
PLOTS = {"images/scale.png": ROOT / "benchmarks" / "scale.png"}


def on_files(files: Files, config: Any) -> Files:
    """Adds each benchmark plot to the site's files."""
    for uri, path in PLOTS.items():
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


NO_RUN = re.compile(r"^(\s*)```python no-run$", flags=re.MULTILINE)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """The page's Markdown with its no-run fences made plain python fences."""
    return NO_RUN.sub(r"\1```python", markdown)
