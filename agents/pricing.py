"""What a model's tokens cost, for the AgentCall events of a session.

US dollars per million tokens (input, output), from Anthropic's models overview. Cache writes
cost 1.25 times the input price (five-minute cache) and cache reads a tenth of it. A model not
listed is reported with a cost of 0 and its tokens, which are always recorded.
"""

from __future__ import annotations

PRICES: dict[str, tuple[float, float]] = {
    "claude-fable-5": (10.0, 50.0),
    "claude-opus-5-5": (4.0, 20.0),
    "claude-opus-5": (5.0, 25.0),
    "claude-sonnet-5-5": (2.0, 10.0),
    "claude-sonnet-5": (2.0, 10.0),
    "claude-haiku-4-5": (1.0, 5.0),
    "claude-opus-4-6": (5.0, 25.0),
    "claude-opus-4-5": (5.0, 25.0),
    "claude-sonnet-4-6": (3.0, 15.0),
    "claude-sonnet-4-5": (3.0, 15.0),
}
CACHE_WRITE = 1.25
CACHE_READ = 0.1


def price(model: str) -> tuple[float, float] | None:
    """(input, output) dollars per million tokens; dated snapshots match their model's prefix."""
    best = None
    for name, p in PRICES.items():
        if (model == name or model.startswith(name + "-")) and (best is None or len(name) > len(best[0])):
            best = (name, p)
    return best[1] if best else None


def cost_usd(model: str, input_tokens: int, output_tokens: int, cache_read: int = 0, cache_write: int = 0) -> float:
    """The cost of one call; 0 for a model whose price is not known here."""
    p = price(model)
    if p is None:
        return 0.0
    inp, out = p
    total = input_tokens * inp + cache_write * inp * CACHE_WRITE + cache_read * inp * CACHE_READ + output_tokens * out
    return round(total / 1e6, 6)
