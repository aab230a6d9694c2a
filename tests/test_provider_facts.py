"""Provider facts are class attributes, and a provider registered by an entry point is a
provider like the built-ins: the settings accept it, the registry builds it, the cost estimate
reads its prices, and the engine asks it (not its name) what it can do."""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import EntryPoint

import numpy as np
import pytest

from memory_core import plugins
from memory_core.config import Settings, resolve_redact_mode
from memory_core.embeddings import catalog
from memory_core.embeddings.base import EmbeddingProvider, NoProvider, compute_provider_key
from memory_core.embeddings.cost import batch_discount, estimate_cost, sync_price
from memory_core.embeddings.registry import create_provider, provider_names
from memory_core.errors import ProviderError
from memory_core.index.pipeline import LocalExecutor


class PluginProvider(EmbeddingProvider):
    """A third-party provider: one class, one entry point."""

    name = "plugin"
    model = "plug-1"
    dims = 8
    on_machine = True
    max_parallel_requests = 2
    sync_prices = {"plug-1": 1.5}  # noqa: RUF012
    batch_discount = 0.25

    def __init__(self, settings: Settings) -> None:
        self.model = settings.model or "plug-1"

    @property
    def provider_key(self) -> str:
        return compute_provider_key("plugin", self.model)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return np.ones((len(texts), 8), dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return np.ones(8, dtype=np.float32)


@pytest.fixture
def plugin(monkeypatch: pytest.MonkeyPatch):
    ep = EntryPoint("plugin", f"{__name__}:PluginProvider", catalog.ENTRY_POINT_GROUP)
    monkeypatch.setattr(plugins, "entry_points", lambda group: [ep] if group == catalog.ENTRY_POINT_GROUP else [])
    plugins._provider_entry_points.cache_clear()
    yield
    plugins._provider_entry_points.cache_clear()


def test_an_entry_point_provider_is_a_provider(plugin: None, tmp_path) -> None:
    assert provider_names() == ["auto", "local", "openai", "gemini", "voyage", "mistral", "plugin", "none"]
    settings = Settings(workspace=tmp_path, provider="plugin")
    provider, reason = create_provider(settings)
    assert isinstance(provider, PluginProvider) and reason == "configured"
    assert sync_price(settings, "plugin", "plug-1") == 1.5
    assert batch_discount(settings, "plugin") == 0.25
    assert estimate_cost(settings, "plugin", "plug-1", tokens_sync=1_000_000, tokens_batch=0).estimated_usd == 1.5
    assert resolve_redact_mode({"provider": "plugin"})["redact"] == "sessions"
    assert LocalExecutor(concurrency=4).parallelism(provider) == 2
    with pytest.raises(ProviderError, match="has no Batch API"):
        provider.batch_client()


def test_an_unregistered_provider_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="Input should be 'auto', 'local'"):
        Settings(workspace=tmp_path, provider="plugin")


def test_the_built_in_facts() -> None:
    classes = {n: catalog.provider_class(n) for n in provider_names() if n != "auto"}
    assert classes["none"] is NoProvider
    assert {n for n, c in classes.items() if c is not None and c.on_machine} == {"local", "none"}
    assert {n for n, c in classes.items() if c is not None and not c.has_vectors} == {"none"}
    assert {n for n, c in classes.items() if c is not None and c.supports_batch} == {"openai", "gemini", "voyage"}
    assert {n for n, c in classes.items() if c is not None and not c.batch_vectors_unit_length} == {"gemini"}
    assert {n: c.batch_discount for n, c in classes.items() if c is not None and c.batch_discount} == {
        "openai": 0.5, "gemini": 0.5, "voyage": 0.33}
    assert {n: c.max_parallel_requests for n, c in classes.items() if c is not None and c.max_parallel_requests} == {
        "local": 1}
    assert {n: (c.default_chunk_tokens, c.default_chunk_overlap) for n, c in classes.items() if c is not None} == {
        "local": (200, 40), "openai": (400, 80), "gemini": (400, 80), "voyage": (400, 80), "mistral": (400, 80),
        "none": (400, 80)}


def test_prices_as_before(tmp_path) -> None:
    """The figures the price table in batch/cost.py had, now stated by the classes."""
    s = Settings(workspace=tmp_path)
    assert [sync_price(s, p, m) for p, m in [
        ("openai", "text-embedding-3-small"), ("openai", "text-embedding-3-large"), ("openai", "text-embedding-ada-002"),
        ("gemini", "gemini-embedding-001"), ("voyage", "voyage-4-large"), ("voyage", "voyage-3.5-lite"),
        ("voyage", "voyage-code-3"), ("mistral", "mistral-embed"), ("local", "anything"), ("none", "none"),
        ("openai", "unknown-model"), ("fake", "instant")]] == [
        0.02, 0.13, 0.10, 0.15, 0.12, 0.02, 0.18, 0.10, 0.0, 0.0, None, None]
    over = Settings(workspace=tmp_path, batch={"prices": {"openai/*": 0.5, "voyage/voyage-4": 0.01},
                                                 "batch_discount": {"openai": 0.1}})
    assert sync_price(over, "openai", "text-embedding-3-small") == 0.5  # the config's table wins over the class
    assert sync_price(over, "openai", "unknown-model") == 0.5
    assert sync_price(over, "voyage", "voyage-4") == 0.01
    assert batch_discount(over, "openai") == 0.1 and batch_discount(over, "gemini") == 0.5
    assert batch_discount(over, "mistral") == 0.0


# -- the run summary's typed figures keep their JSON ------------------------------------------

def test_the_summary_json_keeps_its_shape(tmp_path) -> None:
    """batch, cost and fallback are dataclasses inside the library; ``to_dict`` gives the JSON the
    CLI, the flows, watch and MCP have always printed (same keys, same order; new keys only after
    them), and ``from_dict`` reads it back."""
    from memory_core.embeddings.batch_types import BatchFigures
    from memory_core.index.runtypes import Fallback, RunSummary

    s = Settings(workspace=tmp_path)
    priced = estimate_cost(s, "openai", "text-embedding-3-small", tokens_sync=10, tokens_batch=20)
    assert list(priced.to_dict()) == [
        "currency", "provider", "model", "tokens_sync", "tokens_batch", "sync_per_mtok", "batch_discount",
        "prices_checked", "priced", "batch_per_mtok", "estimated_usd", "sync_only_usd", "saving_usd", "saving_pct"]
    unpriced = estimate_cost(s, "openai", "nope", tokens_sync=10, tokens_batch=0).to_dict()
    assert "batch_per_mtok" not in unpriced and unpriced["priced"] is False and unpriced["saving_pct"] is None
    figures = BatchFigures(jobs_submitted=2, errors=["x"])
    assert list(figures.to_dict()) == [
        "mode", "jobs_submitted", "jobs_reattached", "jobs_collected", "jobs_failed", "jobs_timed_out",
        "jobs_cancelled", "jobs_pending", "pending_job_ids", "chunks_via_batch", "chunks_via_sync", "lines_failed",
        "requeued_chunks", "failure_points", "disabled", "disabled_reason", "errors", "chunks_left_to_sync", "seconds",
        # issue 39: what a run stopped in its jobs submitted (the earlier keys keep their order)
        "requests_submitted", "tokens_submitted", "stopped",
        # issue 39: transcript exchange vectors apart from the chunks
        "exchanges_via_batch", "exchanges_via_sync", "exchanges_left_to_sync",
        # the fourteenth session's audit (B3): tokens billed for unusable lines
        "tokens_unusable",
        # (B4): vectors a re-attached job stored for chunks the run no longer needs
        "surplus_via_batch",
        # (BP6): another live run's jobs on a shared cache file, waited for, and what they gave
        "jobs_of_other_runs", "chunks_from_other_runs"]
    assert BatchFigures.sync_only("sync (local has no Batch API)").to_dict() == {"mode": "sync (local has no Batch API)"}
    base = {"index_path": "i", "provider": "openai", "model": "m", "provider_reason": "r", "full": True,
            "full_reason": "f", "swapped": True}
    empty = RunSummary(**base).to_dict()
    assert empty["batch"] == {} and empty["cost"] == {} and empty["fallback"] == {}
    full = RunSummary(**base, batch=figures, cost=priced, fallback=Fallback("openai/m", "local/x", "HTTP 500"))
    d = full.to_dict()
    assert d["fallback"] == {"from": "openai/m", "to": "local/x", "reason": "HTTP 500"}
    assert list(d) == list(empty)
    assert RunSummary.from_dict(d) == full and RunSummary.from_dict(empty) == RunSummary(**base)
    sync_only = RunSummary(**base, batch=BatchFigures.sync_only("sync"))
    assert RunSummary.from_dict(sync_only.to_dict()) == sync_only


def test_batch_job_limits_are_the_providers_and_settings_only_lower_them(tmp_path) -> None:
    """A Batch API job's limits are a fact on the provider class (not on its client); ``[batch]
    max_*_per_job`` lowers them, never raises them."""
    from types import SimpleNamespace

    from memory_core.embeddings.batch_types import JobLimits
    from memory_core.index.batch_jobs import BatchContext

    batch_classes = [c for n in catalog.registered() if (c := catalog.provider_class(n)) and c.supports_batch]
    assert {c.name for c in batch_classes} == {"openai", "gemini", "voyage"}
    for cls in batch_classes:
        assert isinstance(cls.batch_limits, JobLimits) and cls.batch_limits.max_requests > 0, cls
    assert all(catalog.provider_class(n).batch_limits is None  # type: ignore[union-attr]
               for n in ("local", "mistral", "none"))
    openai = catalog.provider_class("openai")
    assert openai is not None and openai.batch_limits is not None
    limits = BatchContext.limits.fget  # type: ignore[attr-defined]
    plain = Settings(workspace=tmp_path, provider="openai")
    assert limits(SimpleNamespace(provider=openai, settings=plain)) == openai.batch_limits
    lowered = Settings(workspace=tmp_path, provider="openai", batch={"max_requests_per_job": 10, "max_bytes_per_job": 10**12})
    got = limits(SimpleNamespace(provider=openai, settings=lowered))
    assert got.max_requests == 10 and got.max_bytes == openai.batch_limits.max_bytes
