"""Saved prompt states: the KV cache of a tool prompt kept on disk, so the next process starts from it.

A tool-calling agent's first model call evaluates its whole tool prompt (the demo's 552 tokens: most of its
time on a CPU). The prompt is the same in every run of the same agent, so after a decision pass whose prompt
was evaluated afresh, llama.cpp's slot (its KV cache: the prompt's tokens and their state) is saved to a file
named after the model and the prompt's system message; a later `LocalChatModel` (another process) restores
it before its first call with that system message. llama.cpp then compares the restored tokens with the new
prompt and evaluates only what differs, so a stale or foreign file costs time, never correctness.

Saving and restoring are llama.cpp's own slot actions (`/slots/0?action=save|restore`), reached over the
in-process server's HTTP endpoint on 127.0.0.1, which only this process can use (a random API key). Files
live in `<cache>/prompts/` (about 16 MB for the demo's prompt); the newest `_KEEP` are kept.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["SavedPrompts", "count_prompt_tokens", "model_identity"]

_KEEP = 8  # files kept; the oldest beyond this are removed after each save
_SUFFIX = ".slot"
_TIMEOUT = 60.0  # seconds for one slot action (a save writes tens of MB)


class SavedPrompts:
    """Saves and restores the model's prompt state on disk, keyed by the model and a prompt's system message.

    Every method blocks (file and HTTP I/O): call them from a worker thread. Failures are swallowed: this is
    a cache, and a prompt that is not restored is evaluated as usual.
    """

    def __init__(self, directory: Path, model: str, address: str, api_key: str) -> None:
        self.directory = directory
        self._model = model
        self._address = address.removeprefix("http://").rstrip("/")
        self._api_key = api_key

    def key(self, messages: Sequence[dict[str, Any]]) -> str | None:
        """The file name for a prompt: a digest of the model and the prompt's system message (None: none)."""
        if not messages or messages[0].get("role") != "system":
            return None
        content = json.dumps([self._model, messages[0].get("content")], ensure_ascii=False)
        return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()[:40] + _SUFFIX

    def restore(self, key: str) -> bool:
        """Loads the saved state named `key` into the model's slot; False when there is none or it failed."""
        if not (self.directory / key).is_file():
            return False
        return self._action("restore", key)

    def save(self, key: str) -> bool:
        """Saves the slot's state as `key`, then removes the oldest files beyond `_KEEP`."""
        saved = self._action("save", key)
        try:
            files = sorted(self.directory.glob(f"*{_SUFFIX}"), key=lambda path: path.stat().st_mtime_ns)
            for old in files[:-_KEEP]:
                old.unlink(missing_ok=True)
        except OSError:
            pass
        return saved

    def _action(self, action: str, key: str) -> bool:
        host, _, port = self._address.rpartition(":")
        try:
            connection = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=_TIMEOUT)
            try:
                connection.request(
                    "POST",
                    f"/slots/0?action={action}",
                    json.dumps({"filename": key}),
                    {"Authorization": f"Bearer {self._api_key}", "Content-Type": "application/json"},
                )
                response = connection.getresponse()
                response.read()
                return response.status == 200
            finally:
                connection.close()
        except (OSError, ValueError, http.client.HTTPException):
            return False


def model_identity(path: Path) -> str:
    """What a saved state depends on: the model file (name, size, modification time)."""
    try:
        stat = path.stat()
    except OSError:
        return str(path)
    return f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}:{os.fspath(path)}"


def count_prompt_tokens(address: str, api_key: str, messages: Sequence[dict[str, Any]]) -> int:
    """The tokens of `messages` as the loaded model reads them: its chat template applied (llama.cpp's
    `/apply-template`), then its tokenizer (`/tokenize`), over the in-process server's loopback HTTP.
    Blocking: call it from a worker thread. Raises `OSError` / `ValueError` when the server cannot say."""
    host, _, port = address.removeprefix("http://").rstrip("/").rpartition(":")
    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
    connection = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=_TIMEOUT)
    try:
        prompt = _post(connection, "/apply-template", {"messages": list(messages)}, headers)["prompt"]
        tokens = _post(connection, "/tokenize", {"content": prompt, "add_special": True}, headers)["tokens"]
    finally:
        connection.close()
    if not isinstance(tokens, list):
        raise ValueError(f"llama.cpp's /tokenize answered without a token list: {tokens!r}")
    return len(tokens)


def _post(
    connection: http.client.HTTPConnection, path: str, body: dict[str, Any], headers: dict[str, str]
) -> Any:
    connection.request("POST", path, json.dumps(body, ensure_ascii=False).encode(), headers)
    response = connection.getresponse()
    data = response.read()
    if response.status != 200:
        raise ValueError(f"llama.cpp's {path} answered {response.status}: {data[:200]!r}")
    return json.loads(data)
