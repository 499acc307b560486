"""The package's layout is a contract: layers checked by import-linter, public objects named by their public
path, no private module named to users (docs/architecture.md)."""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import subprocess
import sys
import typing
from datetime import datetime, timezone
from pathlib import Path

import pytest

import agentloop

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "agentloop"
PUBLIC_PACKAGES = [
    "agentloop",
    "agentloop.abc",
    "agentloop.models",
    "agentloop.middleware",
    "agentloop.stores",
    "agentloop.testing",
    "agentloop.ui",
    "agentloop.mcp",
    "agentloop.otel",
    "agentloop.dbos",
    "agentloop.control",
]


def test_the_layers_hold() -> None:
    """`lint-imports` (the `[tool.importlinter]` layers contract in pyproject.toml) passes: values import
    nothing above them, then tools, models, memory, the runtime, features, the Agent, integrations."""
    command = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which(
        "lint-imports"
    )
    assert command is not None, "import-linter is not installed (it is in the test extra)"
    done = subprocess.run(
        [command, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 kept, 0 broken" in done.stdout


def test_few_private_modules_sit_at_the_top() -> None:
    flat = sorted(p.name for p in PACKAGE.glob("_*.py") if not p.name.startswith("__"))
    assert len(flat) <= 12, flat


TEST_FOLDERS = {
    "values",
    "tools",
    "runtime",
    "models",
    "local_model",
    "features",
    "integrations",
    "examples",
    "project",
    "reliability",
}


def test_each_test_module_lives_in_the_folder_of_what_it_checks() -> None:
    tests = ROOT / "tests"
    # The npm packages the web and MCP tests install are not ours, whatever their files are called.
    found = tests.rglob("test_*.py")
    modules = [path.relative_to(tests) for path in found if "node_modules" not in path.parts]
    flat = sorted(str(path) for path in modules if len(path.parts) == 1)
    assert not flat, f"move these into the folder of what they check ({sorted(TEST_FOLDERS)}): {flat}"
    folders = {path.parts[0] for path in modules}
    assert folders == TEST_FOLDERS, "a new test folder: add it here and to docs/architecture.md, 'The tests'"
    rounds = sorted(str(path) for path in modules if re.search(r"round_?\d", path.name))
    assert not rounds, f"name test files for what they check, not for a review round: {rounds}"


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_public_objects_report_their_public_module(package: str) -> None:
    """Every class and function a public package exports names a public module that holds it, as httpx,
    anyio and trio do: reprs, pickles and stored type names show what users import."""
    try:
        module = importlib.import_module(package)
    except ImportError as exc:  # an optional extra that is not installed
        pytest.skip(str(exc))
    checked = 0
    for name in module.__all__:
        value = getattr(module, name)
        if not isinstance(value, type) and not callable(getattr(value, "__code__", None)):
            continue  # constants and type aliases carry no module of their own
        home = value.__module__
        if home.split(".", 1)[0] != "agentloop":
            continue  # re-exported from another project
        assert not any(part.startswith("_") for part in home.split(".")), f"{package}.{name}: {home}"
        assert getattr(importlib.import_module(home), value.__name__) is value, f"{package}.{name}: {home}"
        checked += 1
    assert checked


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_published_classes_keep_their_annotations_resolvable(package: str) -> None:
    """Publishing moves `__module__`; the string annotations of each class (`from __future__ import
    annotations`) still resolve, so msgspec, pydantic and `typing.get_type_hints` keep working."""
    try:
        module = importlib.import_module(package)
    except ImportError as exc:
        pytest.skip(str(exc))
    for name in module.__all__:
        value = getattr(module, name)
        if isinstance(value, type) and value.__module__.startswith("agentloop"):
            typing.get_type_hints(value)  # raises NameError for an annotation that no longer resolves
    assert typing.get_type_hints(agentloop.Result)["tool_executions"] == list[agentloop.ToolExecution]


def test_stored_type_names_are_public_and_old_ones_read_as_today() -> None:
    from agentloop.stores import RecordedToolError, decode, encode

    execution = agentloop.ToolExecution(
        request=agentloop.ToolExecutionRequest("c1", "delete", "{}"),
        result="no",
        result_object=None,
        error=agentloop.ToolDeniedError("no", call_id="c1", tool_name="delete"),
        index=0,
        round=1,
        started_at=_JAN_1,
        finished_at=_JAN_1,
        duration=0.0,
        return_behavior=agentloop.ReturnBehavior.TO_LLM,
        is_error=True,
    )
    written = encode(execution)
    assert b'"type":"agentloop.ToolDeniedError"' in written
    for old, today in [
        ("agentloop._errors.ToolDeniedError", "agentloop.ToolDeniedError"),
        ("agentloop.mcp._results.MCPToolError", "agentloop.MCPToolError"),
        ("agentloop.mcp._toolset.MCPServerError", "agentloop.MCPServerError"),
        ("ValueError", "ValueError"),
        ("someapp.errors.Boom", "someapp.errors.Boom"),
    ]:
        read = decode(written.replace(b"agentloop.ToolDeniedError", old.encode()))
        assert isinstance(read.error, RecordedToolError)
        assert read.error.error_type == today


_JAN_1 = datetime(2026, 1, 1, tzinfo=timezone.utc)
_PRIVATE_NAME = re.compile(r"agentloop\._(?!_)\w+")


def test_no_private_module_is_named_to_users() -> None:
    """README, docs and examples never tell users to import `agentloop._anything` (file paths in the
    architecture notes, `agentloop/_values/...`, are where code lives, not names to import)."""
    files = [
        ROOT / "README.md",
        *sorted((ROOT / "docs").rglob("*.md")),
        *sorted((ROOT / "examples").rglob("*.py")),
    ]
    found = [
        f"{path.relative_to(ROOT)}:{number}: {match.group(0)}"
        for path in files
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for match in _PRIVATE_NAME.finditer(line)
    ]
    assert not found, "\n".join(found)


def test_every_public_error_is_defined_in_one_module_and_exported_at_the_top() -> None:
    """Every exception a public package exports is an `AgentLoopError` (or a builtin) defined in the errors
    module and importable as `agentloop.<Name>`, whichever package also re-exports it."""
    errors = importlib.import_module("agentloop._values._errors")
    for package in PUBLIC_PACKAGES:
        try:
            module = importlib.import_module(package)
        except ImportError:
            continue
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, BaseException):
                assert issubclass(value, agentloop.AgentLoopError), f"{package}.{name}"
                assert getattr(errors, name) is value, f"{package}.{name} is not defined in the errors module"
                assert name in agentloop.__all__ and getattr(agentloop, name) is value, f"{package}.{name}"


INTEGRATIONS = ["dbos", "otel", "ui", "a2a", "mcp", "stores", "control"]
"""The subpackages that integrate agentloop with another project or protocol: each is meant to be buildable
by a user, from agentloop's public API and the other project's public API."""

_MACHINERY = {"agentloop._public", "agentloop._hints"}
"""What every public package's `__init__` uses to publish its names and to name a missing extra."""

STILL_PRIVATE: dict[str, set[str]] = {
    "dbos": set(),
    "a2a": set(),
    "otel": {
        "agentloop._runtime._observe",
        "agentloop._runtime._seam",
        "agentloop._values._context",
        "agentloop._values._convert",
        "agentloop._values._errors",
        "agentloop._values._messages",
        "agentloop._values._records",
        "agentloop._values._result",
        "agentloop._values._spec",
        "agentloop._values._tool_events",
        "agentloop.models._base",
        "agentloop.models._retries",
        "opentelemetry.metrics._internal",
    },
    "ui": {"agentloop._api._control"},
    "mcp": {
        "agentloop._tools._execution",
        "agentloop._tools._tool",
        "agentloop._tools._toolset",
        "agentloop._values._content",
        "agentloop._values._context",
        "agentloop._values._convert",
        "agentloop._values._text",
    },
    "stores": {
        "agentloop._backend",
        "agentloop._memory._chat",
        "agentloop._values._codec",
        "agentloop._values._text",
        "agentloop._values._urls",
    },
    "control": {
        "agentloop._backend",
        "agentloop._values._codec",
        "agentloop._values._errors",
        "agentloop._values._messages",
    },
}
"""Private modules an integration still imports (issue 32: to be made public or replaced, never added to).
`agentloop.dbos` and `agentloop.a2a` import none. `agentloop.control` sits below `Agent` in the layers, so
it cannot take names from the `agentloop` package (which names `Agent`) and keeps its private imports."""


def _is_private(module: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in module.split("."))


def source_module(path: Path, node: ast.ImportFrom) -> str:
    """The absolute name of the module that `from ... import` in agentloop's file `path` reads from."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)  # ["agentloop", ..., module]
    start = parts[: len(parts) - node.level] if node.level else []  # a relative import: from its package
    return ".".join([*start, *([node.module] if node.module else [])])


def private_imports(package: str) -> set[str]:
    """The private modules (agentloop's outside `package`, or another project's) that the modules of
    `agentloop.<package>` import, read from their source (`from x import _y` counts `x._y`)."""
    found: set[str] = set()
    for path in (PACKAGE / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = source_module(path, node)
                modules = [module, *(f"{module}.{a.name}" for a in node.names if a.name.startswith("_"))]
            else:
                continue
            for module in modules:
                own = module.split(".")[:2] == ["agentloop", package]
                if _is_private(module) and not own and module not in _MACHINERY:
                    found.add(module)
    return found


@pytest.mark.parametrize("package", INTEGRATIONS)
def test_integrations_import_no_private_module_beyond_those_listed(package: str) -> None:
    """An integration is built on public seams: it imports no private module of agentloop or of the project
    it integrates, except those `STILL_PRIVATE` lists (none for `agentloop.dbos`). A new private import
    fails; one that went public must leave the list too, so the list only shrinks."""
    found = private_imports(package)
    added = sorted(found - STILL_PRIVATE[package])
    assert not added, (
        f"agentloop.{package} imports private modules {added}: use (or make) a public name "
        "(agentloop, agentloop.abc, agentloop.models, agentloop.stores, ...)"
    )
    assert not STILL_PRIVATE[package] - found, f"no longer imported, drop from STILL_PRIVATE: {package}"


def test_the_private_import_check_sees_private_imports() -> None:
    """The check above is not vacuous: it finds each form of a private import."""
    assert "agentloop._values._codec" in private_imports("stores")  # `from .._values._codec import ...`
    assert "agentloop._backend" in private_imports("control")  # `from .._backend import ...`
    assert "agentloop._tools._toolset" in private_imports("mcp")  # `from .._tools._toolset import ...`
    assert "opentelemetry.metrics._internal" in private_imports("otel")  # `from x import _internal`
    assert "agentloop._public" not in private_imports("dbos")  # the publishing machinery is allowed


def underscore_names_imported() -> list[str]:
    """Every `from <agentloop module> import _name` where `_name` is a name, not a module (file:line)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.module == "__future__":
                continue
            module = source_module(path, node)
            if not module.startswith("agentloop"):
                continue
            folder = ROOT.joinpath(*module.split("."))
            for alias in node.names:
                is_module = (folder / f"{alias.name}.py").exists() or (folder / alias.name).is_dir()
                if alias.name.startswith("_") and not alias.name.startswith("__") and not is_module:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {alias.name} from {module}")
    return found


def test_no_underscore_name_is_imported_across_modules() -> None:
    """A name with a leading underscore stays in its module: what another module needs is named without
    one (the module is private already). Importing a private module itself is how the layers work."""
    found = underscore_names_imported()
    assert not found, f"underscore names imported across modules (drop the underscore): {found}"


def test_the_underscore_check_sees_an_underscore_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above is not vacuous: a module importing another's `_name` is found."""
    package = tmp_path / "agentloop"
    package.mkdir()
    (package / "_a.py").write_text("_hidden = 1\n")
    (package / "_b.py").write_text("from ._a import _hidden\nfrom . import _a\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    assert underscore_names_imported() == ["agentloop/_b.py:1 _hidden from agentloop._a"]


def test_the_architecture_page_names_every_module() -> None:
    """docs/architecture.md says what every module is for: each is named there, by its name in backticks
    (`_loop`, `pricing`) or by its path (`agentloop/abc.py`, `_api/_agent_tool.py`)."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    unnamed = []
    for path in sorted((ROOT / "agentloop").rglob("*.py")):
        relative = str(path.relative_to(ROOT / "agentloop"))
        name = path.parent.name if path.stem == "__init__" else path.stem
        if f"`{name}" not in page and f"{name}/" not in page and relative not in page:
            unnamed.append(relative)
    assert not unnamed, f"say what these modules are for in docs/architecture.md: {unnamed}"
