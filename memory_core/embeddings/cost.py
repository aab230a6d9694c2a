"""The run's cost estimate: tokens sent through sync and batch calls, at the provider's prices.

Prices are USD per 1M input tokens at the provider's standard (sync) price, stated by each
provider class (``EmbeddingProvider.sync_prices``, by model, ``"*"`` for every model; checked
2026-07 against the providers' pricing pages and shared/reference/provider-apis.md); the batch
price is that times ``1 - batch_discount`` (also a class fact: OpenAI and Gemini 50 %, Voyage
33 %). Free-tier tokens are not taken into account.

Prices change: ``[batch] prices = {"openai/text-embedding-3-small" = 0.02}`` and
``batch_discount = {openai = 0.5}`` in the config override or extend the classes' figures
(``"provider/*"`` sets a provider-wide price). Token counts are the same estimates the
request planner uses (about 4 characters a token), so the figures are estimates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memory_core.config import Settings
from memory_core.embeddings.batch_types import Cost

if TYPE_CHECKING:
    from memory_core.embeddings.base import EmbeddingProvider

PRICES_CHECKED = "2026-07"


def _class_of(provider: str) -> type[EmbeddingProvider] | None:
    from memory_core.embeddings.catalog import provider_class

    return provider_class(provider)


def sync_price(settings: Settings, provider: str, model: str) -> float | None:
    """USD per 1M tokens through sync calls, or None when neither the config nor the provider
    class states one. The config's table wins over the class (``"provider/model"``, then
    ``"provider/*"``); then the class's price for the model, then its ``"*"``."""
    overrides = settings.batch.prices
    for key in (f"{provider}/{model}", f"{provider}/*"):
        if key in overrides:
            return float(overrides[key])
    stated: dict[str, float] = getattr(_class_of(provider), "sync_prices", None) or {}
    for key in (model, "*"):
        if key in stated:
            return float(stated[key])
    return None


def batch_discount(settings: Settings, provider: str) -> float:
    if provider in settings.batch.batch_discount:
        return float(settings.batch.batch_discount[provider])
    return float(getattr(_class_of(provider), "batch_discount", 0.0))


def estimate_cost(settings: Settings, provider: str, model: str, *, tokens_sync: int,
                  tokens_batch: int, tokens_unusable: int = 0) -> Cost:
    """Estimated cost of the tokens sent, and the saving against sending them all through sync.

    ``tokens_unusable`` (of ``tokens_batch``): lines a job returned and the provider billed, but
    with a vector that could not be used (they were sent again through sync calls): spent, but
    not part of what an all-sync run would have sent."""
    price = sync_price(settings, provider, model)
    discount = batch_discount(settings, provider)
    out = Cost(currency="USD", provider=provider, model=model, tokens_sync=int(tokens_sync),
               tokens_batch=int(tokens_batch), sync_per_mtok=price, batch_discount=discount,
               prices_checked=PRICES_CHECKED, priced=price is not None)
    if price is None:
        return out
    batch_price = price * (1 - discount)
    cost = (tokens_sync * price + tokens_batch * batch_price) / 1e6
    sync_only = (tokens_sync + max(0, tokens_batch - tokens_unusable)) * price / 1e6
    saving = sync_only - cost
    out.batch_per_mtok = round(batch_price, 6)
    out.estimated_usd = round(cost, 6)
    out.sync_only_usd = round(sync_only, 6)
    out.saving_usd = round(saving, 6)
    out.saving_pct = round(100 * saving / sync_only, 1) if sync_only else 0.0
    return out


def cost_line(cost: Cost | None) -> str:
    """One human line for the run summary."""
    if cost is None:
        return ""
    toks = f"tokens sync {cost.tokens_sync:,}, batch {cost.tokens_batch:,}"
    if not cost.priced:
        return f"cost: {toks}; no price for {cost.provider}/{cost.model} (set batch.prices)"
    return (f"cost: {toks}; estimated ${cost.estimated_usd:.4f} vs ${cost.sync_only_usd:.4f} all-sync"
            f" (saved ${cost.saving_usd:.4f}, {cost.saving_pct}%; prices of {cost.prices_checked})")
