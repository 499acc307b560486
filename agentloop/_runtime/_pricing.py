"""What an invocation cost: a user's `pricing=` function, or the `genai-prices` package (extra `prices`:
`pip install "agentloop-runtime[prices]"`).

A price is worked out only when `Result.cost` is read, one model call at a time (prices depend on the call's
model and, for some models, on its size). `genai-prices` ships its price data in the package; importing it
takes about half a second, so an agent starts loading it in a background thread at its first invocation
(once per process) and never waits for it: only reading `Result.cost` needs it.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any, Union

from .._values._errors import IllegalConfigurationError
from .._values._messages import ChatResponse, TokenUsage

__all__ = [
    "PriceSource",
    "Pricing",
    "PricingLike",
    "cost_of",
    "genai_prices",
    "load_prices",
    "resolve_pricing",
]

Pricing = Callable[[TokenUsage, Union[str, None], Union[str, None]], Union[float, Decimal, None]]
"""`pricing(usage, model, provider) -> cost in US dollars` of one model call; None when unknown."""

PricingLike = Pricing | bool | None
"""`Agent(pricing=...)`: a `Pricing` function; True: genai-prices (an error when it is not installed);
None (default): genai-prices when installed, else no cost; False: never a cost."""

PriceSource = tuple[Pricing, Union[str, None], Union[str, None]]
"""What a `Result` prices its calls with: the function, the provider's name, the model's name."""

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


def cost_of(responses: Iterable[ChatResponse | None], source: PriceSource | None) -> float | None:
    """The summed cost of `responses` in US dollars; None when any call's price (or usage) is unknown."""
    if source is None:
        return None
    pricing, provider, model = source
    total = 0.0
    for response in responses:
        if response is None:
            continue
        if response.token_usage is None:
            return None
        price = pricing(response.token_usage, response.model or model, provider)
        if price is None:
            return None
        total += float(price)
    return total
