"""Price table and the run's cost estimate: tokens sent through sync and batch calls.

Prices are USD per 1M input tokens at the provider's standard (sync) price; the batch price is
that times ``1 - batch discount``. Built-in values, checked 2026-07 against the providers'
pricing pages (platform.openai.com/docs/pricing, ai.google.dev/gemini-api/docs/pricing,
docs.voyageai.com/docs/pricing) and the provider notes in shared/reference/provider-apis.md:

- OpenAI: text-embedding-3-small 0.02, text-embedding-3-large 0.13, ada-002 0.10; Batch API 50 % off.
- Gemini: gemini-embedding-001 0.15; Batch API 50 % off.
- Voyage: voyage-4-large 0.12, voyage-4 0.06, voyage-4-lite 0.02, voyage-3.5 0.06,
  voyage-3.5-lite 0.02, voyage-3-large / code-3 / context-3 0.18, finance-2 / law-2 /
  multilingual-2 0.12; Batch API 33 % off. (Free-tier tokens are not taken into account.)

Prices change: ``[batch] prices = {"openai/text-embedding-3-small" = 0.02}`` and
``batch_discount = {openai = 0.5}`` in the config override or extend the table
(``"provider/*"`` sets a provider-wide price). Token counts are the same estimates the
request planner uses (about 4 characters a token), so the figures are estimates.
"""

from __future__ import annotations

from typing import Any

from memory_core.config import Settings

DEFAULT_PRICES: dict[str, float] = {
    "openai/text-embedding-3-small": 0.02,
    "openai/text-embedding-3-large": 0.13,
    "openai/text-embedding-ada-002": 0.10,
    "gemini/gemini-embedding-001": 0.15,
    "voyage/voyage-4-large": 0.12,
    "voyage/voyage-4": 0.06,
    "voyage/voyage-4-lite": 0.02,
    "voyage/voyage-3.5": 0.06,
    "voyage/voyage-3.5-lite": 0.02,
    "voyage/voyage-3-large": 0.18,
    "voyage/voyage-code-3": 0.18,
    "voyage/voyage-context-3": 0.18,
    "voyage/voyage-finance-2": 0.12,
    "voyage/voyage-law-2": 0.12,
    "voyage/voyage-multilingual-2": 0.12,
    "local/*": 0.0,
    "none/*": 0.0,
}
DEFAULT_BATCH_DISCOUNT: dict[str, float] = {"openai": 0.5, "gemini": 0.5, "voyage": 0.33}
PRICES_CHECKED = "2026-07"


def sync_price(settings: Settings, provider: str, model: str) -> float | None:
    """USD per 1M tokens through sync calls, or None when the table has no price."""
    table = {**DEFAULT_PRICES, **settings.batch.prices}
    for key in (f"{provider}/{model}", f"{provider}/*"):
        if key in table:
            return float(table[key])
    from memory_core.embeddings.registry import provider_sync_price

    return provider_sync_price(provider, model)  # a provider class that states its own prices


def batch_discount(settings: Settings, provider: str) -> float:
    return float({**DEFAULT_BATCH_DISCOUNT, **settings.batch.batch_discount}.get(provider, 0.0))


def estimate_cost(settings: Settings, provider: str, model: str, *, tokens_sync: int,
                  tokens_batch: int) -> dict[str, Any]:
    """Estimated cost of the tokens sent, and the saving against sending them all through sync."""
    price = sync_price(settings, provider, model)
    discount = batch_discount(settings, provider)
    out: dict[str, Any] = {
        "currency": "USD", "provider": provider, "model": model, "tokens_sync": int(tokens_sync),
        "tokens_batch": int(tokens_batch), "sync_per_mtok": price, "batch_discount": discount,
        "prices_checked": PRICES_CHECKED,
    }
    if price is None:
        out.update({"priced": False, "estimated_usd": None, "sync_only_usd": None, "saving_usd": None,
                    "saving_pct": None})
        return out
    batch_price = price * (1 - discount)
    cost = (tokens_sync * price + tokens_batch * batch_price) / 1e6
    sync_only = (tokens_sync + tokens_batch) * price / 1e6
    saving = sync_only - cost
    out.update({
        "priced": True, "batch_per_mtok": round(batch_price, 6), "estimated_usd": round(cost, 6),
        "sync_only_usd": round(sync_only, 6), "saving_usd": round(saving, 6),
        "saving_pct": round(100 * saving / sync_only, 1) if sync_only else 0.0,
    })
    return out


def merge_costs(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One cost report over several (provider, model) parts, e.g. a primary and its fallback."""
    parts = [p for p in parts if p]
    if not parts:
        return {}
    if len(parts) == 1:
        return parts[0]
    priced = all(p.get("priced") for p in parts)
    total: dict[str, Any] = {
        "currency": "USD", "provider": "+".join(p["provider"] for p in parts),
        "model": "+".join(p["model"] for p in parts),
        "tokens_sync": sum(p["tokens_sync"] for p in parts), "tokens_batch": sum(p["tokens_batch"] for p in parts),
        "priced": priced, "parts": parts, "prices_checked": PRICES_CHECKED,
    }
    for k in ("estimated_usd", "sync_only_usd", "saving_usd"):
        total[k] = round(sum(p[k] for p in parts), 6) if priced else None
    total["saving_pct"] = (round(100 * total["saving_usd"] / total["sync_only_usd"], 1)
                           if priced and total["sync_only_usd"] else (0.0 if priced else None))
    return total


def cost_line(cost: dict[str, Any]) -> str:
    """One human line for the run summary."""
    if not cost:
        return ""
    toks = f"tokens sync {cost['tokens_sync']:,}, batch {cost['tokens_batch']:,}"
    if not cost.get("priced"):
        return f"cost: {toks}; no price for {cost['provider']}/{cost['model']} (set batch.prices)"
    return (f"cost: {toks}; estimated ${cost['estimated_usd']:.4f} vs ${cost['sync_only_usd']:.4f} all-sync"
            f" (saved ${cost['saving_usd']:.4f}, {cost['saving_pct']}%; prices of {cost['prices_checked']})")
