"""`ToolSearch`: the model sees `search_tools(query)` and the `always` tools; what a search finds joins the
requests of that invocation, after the tools already offered, so the provider's cached prefix stays."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import msgspec

from ..._runtime._seam import Middleware, ModelCall, NextModelCall
from ..._tools._tool import Tool
from ..._tools._toolset import resolve_tools
from ..._values._context import ToolContext
from ..._values._errors import IllegalConfigurationError
from ..._values._messages import ChatResponse, ToolExecutionRequest
from ..._values._spec import ToolSpecification
from ._bm25 import BM25, terms
from ._native import NATIVE_CHECK, deferred, has_deferred

__all__ = ["SearchTool", "ToolSearch", "search_filters"]

SEARCH_NAME = "search_tools"
_REMEMBERED = 1024  # invocations whose found tools are remembered (the newest)
_DESCRIPTION = (
    "Searches the tools you can use but do not see yet, by what they do (e.g. 'convert currency', "
    "'create calendar event'). The tools found become available to call right away."
)


class ToolSearch:
    """A large toolset behind a search: in `tools=[...]`, the model sees a `search_tools(query)` tool and
    the `always` tools; the `top_k` best matches of each search (BM25 over names, descriptions and
    parameters, offline) join the request for the rest of the invocation, appended after the tools already
    there, so the provider's prompt cache keeps its prefix. `always`: tools (or names of tools in `tools`)
    that are always offered.

    `native=True`: the provider searches instead (Anthropic's tool search tool, OpenAI Responses'
    `tool_search`): the tools not in `always` are sent deferred with the provider's search tool beside them,
    there is no `search_tools` tool, and the provider decides how many tools a search finds (`top_k` is not
    used). Other models refuse it with an `IllegalConfigurationError`.
    """

    def __init__(self, tools: Any, *, always: Any = (), top_k: int = 5, native: bool = False) -> None:
        if not isinstance(native, bool):
            raise IllegalConfigurationError(f"ToolSearch(native=...) must be True or False, got {native!r}")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise IllegalConfigurationError(f"ToolSearch(top_k=...) must be an int >= 1, got {top_k!r}")
        searchable = resolve_tools(tools)
        given = list(always) if isinstance(always, (list, tuple)) else [always]
        names = [a for a in given if isinstance(a, str)]
        unknown = [n for n in names if n not in searchable]
        if unknown:
            raise IllegalConfigurationError(
                f"ToolSearch(always=...): {unknown[0]!r} is not one of its tools "
                f"({', '.join(searchable.names)})"
            )
        self.always = resolve_tools([a for a in given if not isinstance(a, str)])
        self.top_k = top_k
        self.native = native
        self._tools = searchable
        self._hidden = frozenset(n for n in searchable.names if n not in names)
        self._specs = {s.name: s for s in searchable.specifications}
        self._names = list(searchable.names)
        self._index = BM25([terms(_document(s)) for s in searchable.specifications])
        self._found: OrderedDict[str, list[str]] = OrderedDict()
        self.tool = SearchTool(self)
        self.filter = _Filter(self)

    def __repr__(self) -> str:
        how = "native=True" if self.native else f"top_k={self.top_k}"
        return f"ToolSearch(tools={len(self._tools)}, always={len(self.always)}, {how})"

    def __agentloop_tools__(self) -> Iterator[Tool]:
        yield from self.always
        if self.native:  # the provider's search finds the deferred ones; no search_tools tool
            yield from (deferred(t) if t.name in self._hidden else t for t in self._tools)
            return
        yield from self._tools
        yield self.tool

    def rank(self, query: str) -> list[str]:
        """The names of the `top_k` tools best matching `query` (none that share no word with it)."""
        scores = self._index.scores(terms(query))
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        return [
            self._names[i] for i in order[: self.top_k] if scores[i] > 0 and self._names[i] in self._hidden
        ]

    def search(self, query: str, invocation_id: str) -> str:
        """Runs one search for an invocation: what the model reads back."""
        found = self.rank(query)
        if not found:
            return f"No tool matches {query!r}; try other words (what the tool would do, not its name)."
        known = self._found.setdefault(invocation_id, [])
        self._found.move_to_end(invocation_id)
        while len(self._found) > _REMEMBERED:
            self._found.popitem(last=False)
        known.extend(n for n in found if n not in known)
        lines = [f"- {n}: {_first_line(self._specs[n].description)}" for n in found]
        return (
            "These tools are now available to call:\n"
            + "\n".join(lines)
            + "\nCall the one that does the task now, with its arguments; search again only if none fits."
        )

    def visible(self, specs: Sequence[ToolSpecification], invocation_id: str) -> list[ToolSpecification]:
        """`specs` without the tools not found yet, then those found, in the order they were found."""
        found = self._found.get(invocation_id, [])
        shown = [s for s in specs if s.name not in self._hidden]
        present = {s.name: s for s in specs}
        return shown + [present[n] for n in found if n in present]


class SearchTool(Tool):
    """The `search_tools(query)` tool of one `ToolSearch`."""

    __slots__ = ("search",)

    def __init__(self, search: ToolSearch) -> None:
        spec = ToolSpecification(
            SEARCH_NAME,
            _DESCRIPTION,
            {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "What the tool should do"}},
                "required": ["query"],
                "additionalProperties": False,
            },
        )
        super().__init__(spec, self._run, source=f"ToolSearch of {len(search._tools)} tools")
        self.search = search

    def _run(self, request: ToolExecutionRequest, context: ToolContext) -> str:
        try:
            arguments = msgspec.json.decode(request.arguments or "{}")
        except msgspec.DecodeError:
            arguments = None
        query = arguments.get("query") if isinstance(arguments, dict) else None
        if not isinstance(query, str) or not query.strip():
            raise ValueError('search_tools takes {"query": "<what the tool should do>"}')
        return self.search.search(query, context.invocation_id)


class _Filter(Middleware):
    """Shows each model call only the tools its invocation may see."""

    allows_eager_tools = True  # it only narrows the request's tools; the response passes as it is

    def __init__(self, search: ToolSearch) -> None:
        self.search = search

    async def wrap_model_call(self, call: ModelCall, call_next: NextModelCall) -> ChatResponse:
        request = call.request
        specs = self.search.visible(request.tool_specifications, call.context.invocation_id)
        if len(specs) == len(request.tool_specifications):
            return await call_next(call)
        changed = msgspec.structs.replace(request, tool_specifications=specs)
        return await call_next(call.replace(request=changed))


def search_filters(tools: Iterable[Tool]) -> list[Middleware]:
    """The filters of the `ToolSearch`es whose search tool is among `tools`, and the check of the model
    when a native one's deferred tools are."""
    tools = list(tools)
    filters: list[Middleware] = [t.search.filter for t in tools if isinstance(t, SearchTool)]
    if has_deferred(tools):
        filters.append(NATIVE_CHECK)
    return filters


def _document(spec: ToolSpecification) -> str:
    """What a tool is found by: its name, description, parameter names and their descriptions."""
    parts = [spec.name, spec.name, spec.description or ""]  # the name counts twice
    properties = (spec.parameters or {}).get("properties") or {}
    for name, schema in properties.items():
        parts.append(name)
        if isinstance(schema, dict) and isinstance(schema.get("description"), str):
            parts.append(schema["description"])
    return " ".join(parts)


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else ""
