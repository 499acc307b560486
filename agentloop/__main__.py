"""Command line: `python -m agentloop demo [question] [--model MODEL] [--threads N]`."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in {"-h", "--help"}:
        print(
            "usage: python -m agentloop demo [question] [--model MODEL] [--threads N]\n\n"
            "  demo    run an agent with real tools, streaming tokens and tool events\n"
            "          (embedded local model by default: pip install 'agentloop[local]')"
        )
        return 0 if args else 2
    if args[0] == "demo":
        from ._demo import main as demo

        return demo(args[1:])
    print(f"unknown command {args[0]!r}; try: python -m agentloop demo", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
