"""Prefect tasks: thin wrappers, one per pipeline stage, over :mod:`memory_core.pipeline`.

Never a task per chunk or per file: one task per stage, plus one per embedding request
group (a few hundred at most for any corpus). Task inputs are small (settings, a plan, the
path of a Parquet file in the run's work directory) and wrapped in ``quote`` where large, so
Prefect does not walk them. ``NO_CACHE`` everywhere: these tasks touch files and clients.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from memory_core import pipeline
from memory_core.config import Settings
from memory_core.embeddings.base import EmbeddingProvider
from memory_core.embeddings.registry import create_provider
from memory_core.errors import MemoryCoreError


@functools.lru_cache(maxsize=8)
def _provider_for(settings_json: str) -> tuple[EmbeddingProvider, str]:
    """One provider per process and configuration (threads share it; Dask workers build their own)."""
    return create_provider(Settings.model_validate_json(settings_json))


def provider_for(settings: Settings) -> tuple[EmbeddingProvider, str]:
    return _provider_for(settings_json(settings))


def settings_json(settings: Settings) -> str:
    """Settings with secrets, for building the provider in this or a worker process.

    Passed to embed tasks as an argument (never a flow parameter, never logged or persisted:
    results are not persisted and task inputs are recorded by reference)."""
    return settings.private_json()


def _logger() -> logging.Logger | logging.LoggerAdapter[logging.Logger]:
    try:
        return get_run_logger()
    except Exception:
        return logging.getLogger("memory_core.tasks")


@task(name="discover", task_run_name="discover-{index_name}", cache_policy=NO_CACHE)
def discover_task(settings: Settings, index_name: str, full: bool) -> pipeline.RunPlan:
    provider, reason = provider_for(settings)
    plan = pipeline.discover_stage(settings, provider, reason, full=full)
    c = plan.counts
    _logger().info(
        "discovered %d files: %d new, %d changed, %d unchanged, %d removed%s",
        c["scanned"], c["new"], c["changed"], c["unchanged"], c["removed"],
        f"; full rebuild ({plan.full_reason})" if plan.full else "",
    )
    for w in plan.warnings:
        _logger().warning("%s", w)
    return plan


@task(name="chunk", task_run_name="chunk-{index_name}-{n_files}-files", cache_policy=NO_CACHE)
def chunk_task(plan: pipeline.RunPlan, settings: Settings, index_name: str, n_files: int) -> pipeline.ChunkResult:
    provider, _ = provider_for(settings)
    res = pipeline.chunk_stage(plan, settings, provider)
    _logger().info("chunked %d files into %d chunks (%d unique)", len(res.files), res.chunks, res.unique_hashes)
    for w in res.warnings:
        _logger().warning("%s", w)
    return res


@task(name="cache-lookup", task_run_name="cache-lookup-{index_name}", cache_policy=NO_CACHE)
def cache_lookup_task(plan: pipeline.RunPlan, chunks: pipeline.ChunkResult, settings: Settings,
                      index_name: str) -> pipeline.MissResult:
    provider, _ = provider_for(settings)
    cache = pipeline.open_cache(settings, provider, plan)
    try:
        res = pipeline.cache_lookup_stage(plan, chunks, cache, provider)
    finally:
        if cache is not None:
            cache.close()
    _logger().info("cache: %d hits, %d misses to embed", res.hits, res.misses)
    return res


def _retry_unless_final(task: Any, task_run: Any, state: Any) -> bool:
    """Retry an embed group once for unexpected faults (a lost worker, a bug in a client
    library), not for a ProviderError: the provider layer already retried it, with backoff."""
    return not isinstance(getattr(state, "data", None), MemoryCoreError)


@task(name="embed", task_run_name="embed-{provider_name}-group-{group_index}", cache_policy=NO_CACHE,
      retries=1, retry_delay_seconds=5, retry_condition_fn=_retry_unless_final)
def embed_group_task(settings_blob: str, group: pipeline.EmbedGroup, provider_name: str,
                     group_index: int) -> tuple[list[str], Any]:
    """Embed one request group. Pure: returns vectors; the flow caches them as they arrive."""
    provider, _ = _provider_for(settings_blob)
    return pipeline.embed_group(provider, group)


@task(name="build-verify-swap", task_run_name="build-{index_name}", cache_policy=NO_CACHE)
def build_task(plan: pipeline.RunPlan, chunks: pipeline.ChunkResult, settings: Settings,
               index_name: str) -> dict[str, Any]:
    provider, _ = provider_for(settings)
    cache = pipeline.open_cache(settings, provider, plan)
    try:
        built = pipeline.build_stage(plan, chunks, cache, provider)
        if cache is not None:
            cache.evict(settings.cache.max_entries)
    finally:
        if cache is not None:
            cache.close()
    c = built["counts"]
    _logger().info("swapped in %s: %d files, %d chunks, %d vectors", plan.index_path, c["files"], c["chunks"], c["vectors"])
    return built
