"""What a `Result` prices its model calls with (`PriceSource`), and the sum it reads as `Result.cost`.

Where prices come from (a user's function, genai-prices) is the pricing feature's business
(`_features/pricing.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Union

from ._messages import ChatResponse, TokenUsage

__all__ = ["PriceSource", "Pricing", "cost_of"]

Pricing = Callable[[TokenUsage, Union[str, None], Union[str, None]], Union[float, Decimal, None]]
"""`pricing(usage, model, provider) -> cost in US dollars` of one model call; None when unknown."""

PriceSource = tuple[Pricing, Union[str, None], Union[str, None]]
"""What a `Result` prices its calls with: the function, the provider's name, the model's name."""


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
