"""What an invocation cost: a user's `pricing=` function, or the `genai-prices` package (extra `prices`:
`pip install "agentloop-runtime[prices]"`).

A price is worked out only when `Result.cost` is read, one model call at a time (prices depend on the call's
model and, for some models, on its size). `genai-prices` ships its price data in the package; importing it
takes about half a second, so an agent starts loading it in a background thread at its first invocation
(once per process) and never waits for it: only reading `Result.cost` needs it.

`Priced` is the feature on the seam: its `on_result` gives each Result what its cost is worked out from.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import threading
from typing import Any

from .._runtime._seam import Middleware
from .._values._cost import PriceSource, Pricing, cost_of
from .._values._errors import IllegalConfigurationError
from .._values._messages import TokenUsage
from .._values._result import Result

__all__ = [
    "PriceSource",
    "Priced",
    "Pricing",
    "PricingLike",
    "cost_of",
    "genai_prices",
    "load_prices",
    "resolve_pricing",
]

PricingLike = Pricing | bool | None
"""`Agent(pricing=...)`: a `Pricing` function; True: genai-prices (an error when it is not installed);
None (default): genai-prices when installed, else no cost; False: never a cost."""

_module: list[Any] = []  # genai_prices, once loaded
_installed: list[bool] = []
_loader: list[threading.Thread] = []


def _has_genai_prices() -> bool:
    if not _installed:
        _installed.append(importlib.util.find_spec("genai_prices") is not None)
    return _installed[0]


def genai_prices(usage: TokenUsage, model: str | None, provider: str | None) -> float | None:
    """The price of one call after the `genai-prices` data shipped with that package; None when it does not
    know the model. Loads the package on first use (`load_prices()` does it off the event loop)."""
    if not model:
        return None
    if not _module:
        _module.append(importlib.import_module("genai_prices"))
    prices = _module[0]
    wire = prices.Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
    )
    try:
        found = prices.calc_price(wire, model, provider_id=provider)
    except LookupError:
        if provider is None:
            return None
        try:  # a provider name genai-prices does not know (a self-hosted server): try by the model alone
            found = prices.calc_price(wire, model)
        except LookupError:
            return None
    return float(found.total_price)


def resolve_pricing(pricing: PricingLike) -> Pricing | None:
    """The function behind an `Agent(pricing=...)` setting (None: no cost)."""
    if pricing is None:
        return genai_prices if _has_genai_prices() else None
    if pricing is False:
        return None
    if pricing is True:
        if not _has_genai_prices():
            raise IllegalConfigurationError(
                "pricing=True uses the genai-prices package, which is not installed: "
                "pip install 'agentloop-runtime[prices]' (or pass your own pricing function)"
            )
        return genai_prices
    if not callable(pricing):
        raise IllegalConfigurationError(
            "pricing must be a function (usage, model, provider) -> cost in USD, True, False or None, got "
            f"{type(pricing).__name__}"
        )
    return pricing


def load_prices(pricing: Pricing | None) -> None:
    """Starts loading genai-prices in a background thread when `pricing` needs it (once per process): the
    invocation does not wait for it, and a `Result.cost` read meanwhile waits for the import to finish."""
    if pricing is genai_prices and not _module and not _loader:
        thread = threading.Thread(target=_load, name="agentloop-prices", daemon=True)
        _loader.append(thread)
        thread.start()


def _load() -> None:
    module = importlib.import_module("genai_prices")
    if not _module:
        _module.append(module)


class Priced(Middleware):
    """`Agent(pricing=...)` on the seam: the Result of every invocation carries what `Result.cost` prices its
    responses with (the pricing function, the model's provider and name)."""

    def __init__(self, pricing: Pricing, provider: str | None, model: str | None) -> None:
        self._source: PriceSource = (pricing, provider, model)

    def on_result(self, result: Result[Any]) -> Result[Any]:
        load_prices(self._source[0])  # what `Result.cost` reads, loaded (once) when a run has ended
        return dataclasses.replace(result, price_source=self._source)

    def __repr__(self) -> str:
        return f"Priced({self._source[1]!r}, {self._source[2]!r})"
