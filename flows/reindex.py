"""The ``reindex`` flow: discover -> chunk -> cache lookup -> embed misses -> build, verify, swap.

Works with a Prefect server (deployments, the UI) and without one (``memory-core index``
runs it in-process). Parameters are a validated model, so the UI renders a form; API keys
are never parameters: they come from the environment or the config file.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

from prefect import flow, get_run_logger
from prefect.futures import PrefectFuture, as_completed
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import quote
from pydantic import BaseModel, ConfigDict, Field

from memory_core import pipeline
from memory_core.config import Settings, load_settings
from memory_core.store import IndexLock, remove_stale_temp_files
from tasks.stages import (
    build_task,
    cache_lookup_task,
    chunk_task,
    discover_task,
    embed_group_task,
    provider_for,
    settings_json,
)


class ReindexParams(BaseModel):
    """What a reindex run may be told. Unset fields come from the config file and defaults."""

    model_config = ConfigDict(extra="forbid")

    workspace: str | None = Field(default=None, description="Workspace folder with MEMORY.md and memory/")
    index_path: str | None = Field(default=None, description="Index file (default <workspace>/.memory-core/index.sqlite)")
    config_file: str | None = Field(default=None, description="A memory-core TOML config file")
    provider: Literal["auto", "local", "openai", "gemini", "voyage", "none"] | None = None
    model: str | None = None
    full: bool = Field(default=False, description="Rebuild everything (vectors still come from the cache)")
    extra_paths: list[str] | None = None
    sources: list[Literal["memory", "sessions"]] | None = None
    embed_concurrency: int = Field(default=4, ge=1, le=64, description="Embedding requests in flight")

    def to_settings(self) -> Settings:
        overrides: dict[str, Any] = {
            "workspace": self.workspace, "index_path": self.index_path, "provider": self.provider,
            "model": self.model, "extra_paths": self.extra_paths, "sources": self.sources,
        }
        return load_settings(self.config_file, overrides)


def _run_name() -> str:
    from prefect.runtime import flow_run

    params = flow_run.parameters.get("params") or {}
    if isinstance(params, BaseModel):
        params = params.model_dump()
    index = params.get("index_path") or "index"
    ws = params.get("workspace") or ""
    name = Path(index).stem if params.get("index_path") else (Path(ws).name or "workspace")
    mode = "full" if params.get("full") else "incremental"
    return f"reindex-{name}-{mode}"


def embed_misses(settings: Settings, misses: pipeline.MissResult, cache: Any, *, concurrency: int,
                 progress: Any = None) -> dict[str, int]:
    """Submit one embed task per request group, at most ``2 x concurrency`` in flight, and
    commit each result to the cache as it completes."""
    provider, _ = provider_for(settings)
    blob = settings_json(settings)
    stats = {"requests": 0, "embedded": 0, "tokens": 0}
    limit = 2 if provider.name == "local" else max(1, concurrency) * 2
    inflight: dict[PrefectFuture[Any], pipeline.EmbedGroup] = {}

    def collect(block_until: int) -> None:
        while len(inflight) > block_until:
            fut = next(as_completed(list(inflight)))
            group = inflight.pop(fut)
            hashes, vectors = fut.result()
            pipeline.store_vectors(cache, hashes, vectors)
            stats["requests"] += 1
            stats["embedded"] += len(hashes)
            stats["tokens"] += group.tokens
            if progress:
                progress("embed", stats["embedded"], misses.misses)

    for group in pipeline.iter_embed_groups(misses, provider):
        fut = embed_group_task.submit(blob, quote(group), provider.name, group.index)
        inflight[fut] = group
        collect(limit)
    collect(0)
    return stats


@flow(name="reindex", flow_run_name=_run_name, task_runner=ThreadPoolTaskRunner(max_workers=4),
      validate_parameters=True, log_prints=False)
def reindex(params: ReindexParams | None = None) -> dict[str, Any]:
    """Bring the index up to date with the sources (incremental unless ``full``)."""
    params = params or ReindexParams()
    logger = get_run_logger()
    settings = params.to_settings()
    pipeline.preflight(settings)
    provider, reason = provider_for(settings)
    index_name = settings.index_file.stem
    timer = pipeline.Timer()
    t_start = time.perf_counter()
    logger.info("provider %s / %s (%s); index %s", provider.name, provider.model, reason, settings.index_file)
    with IndexLock(settings.index_file, wait=settings.lock.wait, timeout_s=settings.lock.timeout_s):
        remove_stale_temp_files(settings.index_file)
        with timer.stage("discover"):
            plan = discover_task(settings, index_name, params.full)
        chunks = misses = embed = built = None
        try:
            if not plan.nothing_to_do:
                with timer.stage("chunk"):
                    chunks = chunk_task(plan, settings, index_name, len(plan.to_index))
                with timer.stage("cache"):
                    misses = cache_lookup_task(plan, chunks, settings, index_name)
                cache = pipeline.open_cache(settings, provider, plan)
                try:
                    with timer.stage("embed"):
                        embed = embed_misses(settings, misses, cache, concurrency=params.embed_concurrency) \
                            if cache is not None else {}
                finally:
                    if cache is not None:
                        cache.close()
                with timer.stage("build"):
                    built = build_task(plan, chunks, settings, index_name)
        finally:
            pipeline.cleanup_workdir(plan)
    summary = pipeline.summarize(plan, provider, reason, chunks=chunks, misses=misses, embed=embed, built=built,
                                 timings=timer.times)
    summary.stage_seconds["total"] = round(time.perf_counter() - t_start, 3)
    for line in summary.lines():
        logger.info("%s", line)
    return summary.to_dict()


if __name__ == "__main__":  # pragma: no cover
    import sys

    print(reindex(ReindexParams(workspace=sys.argv[1] if len(sys.argv) > 1 else None)))
