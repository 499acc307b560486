"""The package's layout is a contract: layers checked by import-linter, public objects named by their public
path, no private module named to users (docs/architecture.md)."""

from __future__ import annotations

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

ROOT = Path(__file__).resolve().parent.parent
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
