"""A small MCP server written with the mcp SDK: the server `mcp_tools.py` connects to.

Run on its own: `python examples/mcp_server.py` (stdio). Any MCP client can use it.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel

server = MCPServer("library")

BOOKS = {
    "dune": ("Frank Herbert", 1965),
    "neuromancer": ("William Gibson", 1984),
    "the left hand of darkness": ("Ursula K. Le Guin", 1969),
}


class Book(BaseModel):
    title: str
    author: str
    year: int


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def find_book(title: str) -> Book:
    """Looks a book up by its title."""
    found = BOOKS.get(title.lower())
    if found is None:
        raise ValueError(f"no book called {title!r}")
    return Book(title=title, author=found[0], year=found[1])


@server.tool(name="catalog.count", annotations=ToolAnnotations(read_only_hint=True))
def count() -> int:
    """How many books the library holds."""
    return len(BOOKS)


if __name__ == "__main__":
    server.run("stdio")
