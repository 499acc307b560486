"""`python -m agentloop.mcp serve module:object [--http HOST:PORT]`: agentloop tools as an MCP server."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

import anyio

from .. import IllegalConfigurationError
from ._server import parse_address, serve

__all__ = ["main"]


def load(reference: str) -> Any:
    """The object named by "module:attribute" (the attribute may be dotted), imported from the current
    directory too."""
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise IllegalConfigurationError(
            f"expected module:object (e.g. myapp.tools:toolbox), got {reference!r}"
        )
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise IllegalConfigurationError(f"{module_name} has no attribute {attribute!r}") from None
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agentloop.mcp", description="Serve agentloop tools over MCP."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve_command = commands.add_parser("serve", help="serve the tools of module:object")
    serve_command.add_argument(
        "target", help="module:object: @tool functions, an object with @tool methods, an Agent, or a list"
    )
    serve_command.add_argument(
        "--http", metavar="HOST:PORT", help="streamable HTTP at http://HOST:PORT/mcp (default: stdio)"
    )
    serve_command.add_argument("--name", default="agentloop", help="the server's name (default: agentloop)")
    args = parser.parse_args(argv)
    try:
        if args.http is not None:
            parse_address(args.http)
        tools = load(args.target)
    except IllegalConfigurationError as exc:
        parser.error(str(exc))
    try:
        anyio.run(lambda: serve(tools, http=args.http, name=args.name))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
