"""Batch-API embedding inside the reindex flow: the library's coordinator, one Prefect task per
step of each job (``tasks/batch.py``), at most ``batch.concurrency`` jobs in flight.

Called from inside a flow run (it submits tasks to the flow's task runner)::

    stats = embed_misses_batch(settings, misses, cache)

``stats`` has the pipeline's embed keys (``requests``, ``embedded``, ``tokens``) plus
``tokens_sync``, ``tokens_batch``, ``batch`` and ``cost``; pass it to ``pipeline.summarize`` as
``embed``. When ``pipeline.batch_pending(stats)`` is non-zero (``batch.wait = false``) the cache
is incomplete: skip the build (the next run re-attaches and collects). A ``ProviderError``
means the sync calls that took over failed too: see ``pipeline.fallback_for_run``.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from prefect.futures import PrefectFuture, as_completed
from prefect.utilities.annotations import quote

from memory_core import pipeline
from memory_core.batch import jobs as J
from memory_core.batch.runner import BatchRun, ProgressFn
from memory_core.cache import EmbeddingCache
from memory_core.config import Settings
from tasks.batch import STEP_TASKS
from tasks.stages import embed_group_task, provider_for, settings_json


class PrefectOps:
    """Runs each job step as a Prefect task on the current flow's task runner."""

    def __init__(self, settings: Settings, cache: EmbeddingCache, workdir: str, *, sync_concurrency: int = 4,
                 progress: ProgressFn | None = None) -> None:
        self.settings = settings
        self.blob = settings_json(settings)
        self.cache = cache
        self.cache_path = str(cache.path)
        self.workdir = workdir
        self.provider, _ = provider_for(settings)
        self.sync_concurrency = sync_concurrency
        self.progress = progress
        self.outstanding: set[PrefectFuture[Any]] = set()

    def start(self, step: str, obj: Any, **kw: Any) -> PrefectFuture[Any]:
        name = f"{self.provider.name}-{obj.local_id}"
        fut = STEP_TASKS[step].submit(self.blob, self.cache_path, self.workdir, obj, name, **kw)
        self.outstanding.add(fut)
        return fut

    def wait_any(self, handles: list[Any]) -> list[Any]:
        done = next(as_completed(handles))
        return [done]

    def result(self, handle: Any) -> Any:
        self.outstanding.discard(handle)
        return handle.result()

    def sync_embed(self, misses: Any) -> dict[str, int]:
        """The chunks batch mode could not do, as sync request groups (one task each)."""
        stats = {"requests": 0, "embedded": 0, "tokens": 0}
        limit = max(1, self.sync_concurrency) * 2
        inflight: dict[PrefectFuture[Any], pipeline.EmbedGroup] = {}

        def collect(block_until: int) -> None:
            while len(inflight) > block_until:
                fut = next(as_completed(list(inflight)))
                group = inflight.pop(fut)
                hashes, vectors = fut.result()
                pipeline.store_vectors(self.cache, hashes, vectors)
                stats["requests"] += 1
                stats["embedded"] += len(hashes)
                stats["tokens"] += group.tokens
                if self.progress:
                    self.progress("embed", stats["embedded"], misses.misses)

        for group in pipeline.iter_embed_groups(misses, self.provider):
            inflight[embed_group_task.submit(self.blob, quote(group), self.provider.name, group.index)] = group
            collect(limit)
        collect(0)
        return stats

    def close(self) -> None:
        for fut in list(self.outstanding):  # on an error: let running steps end before returning
            with contextlib.suppress(Exception):
                fut.wait()
        self.outstanding.clear()


def embed_misses_batch(settings: Settings, misses: pipeline.MissResult, cache: EmbeddingCache, *,
                       progress: ProgressFn | None = None) -> dict[str, Any]:
    """Embed ``misses`` through the provider's Batch API, one Prefect task per job step.

    Must run inside a flow run. Returns the embed stats (see the module docstring).
    """
    provider, _ = provider_for(settings)
    workdir = os.path.dirname(misses.path)
    ctx = J.open_context(settings, provider, cache, workdir)
    ops = PrefectOps(settings, cache, workdir, progress=progress)
    return BatchRun(ctx, misses, ops, progress=progress).run()
