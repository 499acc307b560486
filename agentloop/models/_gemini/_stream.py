"""One event of `streamGenerateContent?alt=sse` read as a chunk: undecodable data is a `BadResponseError`,
an error the API sent inside the stream the `ModelError` it describes."""

from __future__ import annotations

import msgspec

from .._http import ProviderClient, ServerSentEvent
from ._shapes import Chunk, chunk_decoder

__all__ = ["read_chunk"]


def read_chunk(http: ProviderClient, sse: ServerSentEvent, request_id: str | None) -> Chunk:
    """The chunk `sse` carries; raises when it cannot be read or reports an error."""
    try:
        chunk = chunk_decoder.decode(sse.data)
    except (msgspec.DecodeError, RecursionError) as exc:  # RecursionError: too deep
        raise http.bad_response(
            f"unreadable stream chunk ({exc}): {sse.data[:200]!r}", request_id=request_id
        ) from None
    if chunk.error is not None:
        raise http.error_from_payload({"error": chunk.error}, request_id=request_id)
    return chunk
