"""Web chat UIs for an agent: the two protocols browser chat UIs speak, served as ASGI apps.

- `vercel_ai_app(agent)`: the Vercel AI SDK's UI message stream, for `useChat` (`ai` package).
- `ag_ui_app(agent)`: AG-UI events, for CopilotKit and other AG-UI clients (`@ag-ui/client`).
- `openai_app(agent)`: the OpenAI API (Chat Completions, Responses, models), for any OpenAI client or SDK.
- `vercel_ai_events(stream)` / `ag_ui_events(stream, ...)`: the encoded events of a `TokenStream`, for
  frameworks other than ASGI.

The apps are plain ASGI: mount them in FastAPI or Starlette, or run them with uvicorn
(the `web` extra). Nothing here is imported by `import agentloop`. See docs/web.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._ag_ui import AG_UI_HEADERS, ag_ui_events
from ._ag_ui_app import ag_ui_app
from ._asgi import UIApp, UIRequest
from ._openai_app import OpenAIApp, openai_app
from ._runs import InMemoryPausedRuns, PausedRuns
from ._vercel import VERCEL_AI_HEADERS, vercel_ai_events
from ._vercel_app import vercel_ai_app

__all__ = [
    "AG_UI_HEADERS",
    "VERCEL_AI_HEADERS",
    "InMemoryPausedRuns",
    "OpenAIApp",
    "PausedRuns",
    "UIApp",
    "UIRequest",
    "ag_ui_app",
    "ag_ui_events",
    "openai_app",
    "vercel_ai_app",
    "vercel_ai_events",
]

if not TYPE_CHECKING:  # at run time only: to mypy, this module's names stay exactly the ones above

    def __getattr__(name: str) -> object:
        """A name this module does not have: the error says which public module has it."""
        from .._hints import missing_name

        raise missing_name(__name__, name)
