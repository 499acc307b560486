"""A2A (the Agent2Agent protocol) for agentloop, both ways. Needs the `a2a` extra:
`pip install 'agentloop-runtime[a2a]'` (the `a2a-sdk` package, protocol 1.0; 0.3 clients are served too).

`a2a_app(agent, name=..., description=...)` serves an agent as an A2A server (an ASGI app: its agent card at
`/.well-known/agent-card.json`, JSON-RPC at `/`); `A2AAgent(url)` puts a remote A2A agent in another agent's
`tools=[...]`.
"""

from __future__ import annotations

_HINT = "pip install 'agentloop-runtime[a2a]'"

try:
    import a2a.types  # noqa: F401
except ImportError as exc:
    raise ImportError(f"agentloop.a2a needs the A2A SDK (the a2a-sdk package, 1.x): {_HINT}") from exc

from ._client import A2AAgent  # noqa: E402
from ._server import a2a_app  # noqa: E402

__all__ = ["A2AAgent", "a2a_app"]
