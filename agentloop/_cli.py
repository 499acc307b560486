"""What every `python -m agentloop` command shares: one line on failure, the traceback on `--verbose`."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from typing import TextIO

from ._values._errors import AgentLoopError

__all__ = ["add_common_arguments", "failure_line", "run_command"]


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Options every command takes (`--verbose`)."""
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="on failure, print the full traceback too"
    )


def failure_line(command: str, error: BaseException) -> str:
    """One line saying what failed and what to do: agentloop's own errors already say how to fix them; any
    other exception is named by its type and points at `--verbose`."""
    message = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, AgentLoopError):
        return f"{command} failed: {message}"
    return f"{command} failed: {type(error).__name__}: {message} (run again with --verbose for the traceback)"


def run_command(command: str, body: Callable[[], object], *, verbose: bool, err: TextIO | None = None) -> int:
    """Runs `body`; returns the exit code: 0, 1 on an error (reported as one line on `err`), 130 on Ctrl-C."""
    err = sys.stderr if err is None else err
    try:
        body()
    except KeyboardInterrupt:
        print(f"\n{command}: interrupted", file=err)
        return 130
    except Exception as error:
        if verbose:
            traceback.print_exception(type(error), error, error.__traceback__, file=err)
        print(failure_line(command, error), file=err)
        return 1
    return 0
