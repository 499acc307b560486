"""Command line: `python -m agentloop demo [question] [--model MODEL] [--threads N]`, `--version`, `--help`.

Each command lives in its own module with a `main(argv) -> int` that builds its own argparse parser (see
`_demo.py`); failures print one line and exit 1 (`--verbose`: the traceback too), through `_cli.run_command`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

USAGE = """\
usage: python -m agentloop [--version] COMMAND [options]

commands:
  demo    run an agent with real tools, streaming tokens and tool events
          (embedded local model by default: pip install 'agentloop-runtime[local]')

python -m agentloop COMMAND --help shows a command's options."""


def _demo(argv: list[str]) -> int:
    from ._demo import main

    return main(argv)


COMMANDS: dict[str, Callable[[list[str]], int]] = {"demo": _demo}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in {"-h", "--help"}:
        print(USAGE)
        return 0 if args else 2
    if args[0] in {"-V", "--version"}:
        from . import __version__

        print(f"agentloop {__version__} (Python {sys.version.split()[0]})")
        return 0
    command = COMMANDS.get(args[0])
    if command is None:
        print(f"unknown command {args[0]!r}; try: python -m agentloop demo (or --help)", file=sys.stderr)
        return 2
    return command(args[1:])


if __name__ == "__main__":
    sys.exit(main())
