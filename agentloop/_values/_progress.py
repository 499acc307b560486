"""`GenerationProgress`: how far one model call got. A model event (`agentloop.models`) and the payload of the
`ModelProgress` stream event, so it lives in the values layer both import."""

from __future__ import annotations

import msgspec

__all__ = ["GenerationProgress"]


class GenerationProgress(msgspec.Struct, frozen=True, gc=False):
    """How far one model call got, from models that report it (the local model): first while it reads the
    prompt, then for each token it generates that no other event shows (a tool-call decision being written).

    `prompt_processed` of `prompt_tokens` prompt tokens are read so far, `cached_tokens` of them reused from
    the prompt cache (no work); `generated_tokens` counts the tokens written so far. A consumer that does not
    know this event ignores it: it carries nothing the response does not also hold.
    """

    prompt_processed: int
    prompt_tokens: int
    cached_tokens: int = 0
    generated_tokens: int = 0
