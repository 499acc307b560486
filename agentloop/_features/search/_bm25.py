"""BM25 ranking over short documents (tool names, descriptions, parameters), offline and dependency-free."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

__all__ = ["BM25", "terms"]

_WORD = re.compile(r"[A-Za-z][a-z]*|[a-z]+|\d+")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "in",
        "is",
        "it",
        "of",
        "on",
        "or",
        "the",
        "to",
        "with",
        "this",
        "that",
    ]
)


def terms(text: str) -> list[str]:
    """Lower-case words of `text`, split at snake_case, camelCase, kebab-case and digits; stop words and
    a plural "s" dropped ("getWeatherReports" -> get, weather, report)."""
    words = []
    for match in _WORD.finditer(text):
        word = match.group().lower()
        if word in _STOP:
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        words.append(word)
    return words


class BM25:
    """Okapi BM25 (k1=1.2, b=0.75) over `documents` (each a list of terms)."""

    def __init__(self, documents: Sequence[list[str]], *, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.counts = [Counter(doc) for doc in documents]
        self.lengths = [len(doc) for doc in documents]
        self.average = (sum(self.lengths) / len(documents)) if documents else 0.0
        frequency: Counter[str] = Counter()
        for counts in self.counts:
            frequency.update(counts.keys())
        n = len(documents)
        self.idf = {term: math.log(1 + (n - df + 0.5) / (df + 0.5)) for term, df in frequency.items()}

    def scores(self, query: list[str]) -> list[float]:
        """Each document's score for `query` (0 when it shares no term)."""
        result = []
        for counts, length in zip(self.counts, self.lengths, strict=True):
            score = 0.0
            norm = self.k1 * (1 - self.b + self.b * length / self.average) if self.average else self.k1
            for term in query:
                tf = counts.get(term)
                if tf:
                    score += self.idf[term] * tf * (self.k1 + 1) / (tf + norm)
            result.append(score)
        return result
