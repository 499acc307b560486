"""The API reference: every public name of every public module has a docstring and an entry on the site
(`nox -s docs` builds it with `mkdocs build --strict`; this test builds it too and looks for each entry)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import griffe
import pytest
import yaml

from agentloop._hints import PUBLIC_MODULES

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def reference_page(module: str) -> Path:
    return DOCS / "reference" / f"{module.rpartition('.')[2]}.md"


def public_names() -> list[tuple[str, str]]:
    return [(module, name) for module in PUBLIC_MODULES for name in importlib.import_module(module).__all__]


def test_every_public_module_has_a_reference_page_in_the_nav() -> None:
    config = (ROOT / "mkdocs.yml").read_text()
    for module in PUBLIC_MODULES:
        page = reference_page(module)
        assert f"::: {module}\n" in page.read_text(), f"{page} does not render {module}"
        assert f"reference/{page.name}" in config, f"mkdocs.yml's nav leaves out {page}"


def test_every_page_is_in_the_nav() -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)  # no !!python tags
    listed = set(re.findall(r"[\w/-]+\.md", repr(config["nav"])))
    pages = {str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md")}
    assert pages <= listed, f"pages missing from mkdocs.yml's nav: {sorted(pages - listed)}"


def test_every_public_name_has_a_docstring() -> None:
    package = griffe.load("agentloop", search_paths=[str(ROOT)], resolve_aliases=True, resolve_external=False)
    missing = []
    for module, name in public_names():
        found = package[module.removeprefix("agentloop").lstrip(".")] if module != "agentloop" else package
        target = found[name].final_target if found[name].is_alias else found[name]
        if target.docstring is None or not target.docstring.value.strip():
            missing.append(f"{module}.{name}")
    assert not missing, f"public names without a docstring: {missing}"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    out = tmp_path_factory.mktemp("site")
    build(load_config(str(ROOT / "mkdocs.yml"), site_dir=str(out), strict=True))
    return out


def test_the_site_has_an_entry_with_a_signature_for_every_public_name(site: Path) -> None:
    absent = []
    for module, name in public_names():
        html = (site / "reference" / reference_page(module).stem / "index.html").read_text()
        if f'id="{module}.{name}"' not in html:
            absent.append(f"{module}.{name}")
    assert not absent, f"not in the API reference: {absent}"
    agent = (site / "reference" / "agentloop" / "index.html").read_text()
    assert "max_tool_rounds" in agent  # Agent's signature, with its parameters
    testing = (site / "reference" / "testing" / "index.html").read_text()
    assert "chunk_size" in testing and "delay" in testing  # FunctionChatModel's options


def test_every_public_subpackage_is_known() -> None:
    # A new public subpackage (say agentloop.a2a) needs its place in agentloop._hints.PUBLIC_MODULES (which
    # the import hints, this reference and the API check read) and a page docs/reference/<name>.md.
    packages = {
        f"agentloop.{path.name}"
        for path in (ROOT / "agentloop").iterdir()
        if path.is_dir() and not path.name.startswith("_") and (path / "__init__.py").exists()
    } | {
        f"agentloop.{path.stem}"
        for path in (ROOT / "agentloop").glob("*.py")
        if not path.name.startswith("_")
    }
    assert packages == set(PUBLIC_MODULES) - {"agentloop"}
