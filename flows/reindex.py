"""The ``reindex`` flow: discover -> chunk -> cache lookup -> embed misses -> build, verify, swap.

Works with a Prefect server (deployments, the UI) and without one (``memory-core index``
runs it in-process). Parameters are flat, validated and documented, so the UI renders a form
and ``prefect deployment run reindex/incremental --param full=true`` overrides one of them;
API keys are never parameters: they come from the environment or the config file.

One run holds the index's writer lock (``<index>.lock``, an exclusive flock) from discovery to
the swap. ``if_busy`` says what a run does when another run holds it: ``wait`` (up to
``lock.timeout_s``), ``skip`` (end at once in a Completed state named ``Skipped``: right for
scheduled runs, the next tick catches up) or ``fail``.

The ``backfill`` flow (flows/backfill.py) is the same run with batch mode on by default.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any, Literal

from prefect import flow, get_run_logger
from prefect.futures import PrefectFuture, as_completed
from prefect.states import Completed, State
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner
from prefect.utilities.annotations import quote
from pydantic import BaseModel, ConfigDict, Field

from flows import report
from flows.runners import RunnerChoice, make_embed_runner, runner_parallelism
from memory_core import pipeline
from memory_core.config import Settings, resolve_settings
from memory_core.embeddings.registry import fallback_settings
from memory_core.errors import ConfigError, IndexLockedError, ProviderError
from memory_core.store import IndexLock, recover_index, remove_stale_temp_files
from tasks.stages import (
    build_task,
    cache_lookup_task,
    chunk_task,
    discover_task,
    embed_group_task,
    provider_for,
    settings_json,
)

IfBusy = Literal["wait", "skip", "fail"]
NOTHING_TO_DO = "none (nothing to do)"  # where embedding ran, when discovery found nothing to do
ProviderChoice = Literal["auto", "local", "openai", "gemini", "voyage", "none"]
SourceChoice = Literal["memory", "sessions"]


class ReindexParams(BaseModel):
    """What a reindex run may be told. Unset fields come from the config file and defaults."""

    model_config = ConfigDict(extra="forbid")

    workspace: str | None = Field(default=None, description="Workspace folder with MEMORY.md and memory/")
    index_path: str | None = Field(default=None, description="Index file (default <workspace>/.memory-core/index.sqlite)")
    config_file: str | None = Field(default=None, description="A memory-core TOML config file")
    provider: ProviderChoice | None = None
    model: str | None = None
    full: bool = Field(default=False, description="Rebuild everything (vectors still come from the cache)")
    extra_paths: list[str] | None = None
    sources: list[SourceChoice] | None = None
    embed_concurrency: int = Field(default=4, ge=1, le=64, description="Embedding requests in flight")
    batch: bool | None = Field(default=None, description="Use the provider's Batch API (None: the config's batch.enabled)")
    force_sessions: bool = Field(default=False, description="Reindex every changed transcript, ignoring the delta thresholds")
    if_busy: IfBusy | None = Field(default=None, description="When another run holds the index: wait, skip or fail")
    task_runner: RunnerChoice = Field(default="threads", description="Where embedding requests run: threads or dask")
    dask_address: str | None = Field(default=None, description="Address of a running Dask scheduler (task_runner=dask)")
    dask_workers: int = Field(default=2, ge=1, le=256, description="Processes of the local Dask cluster (no address)")

    def to_settings(self) -> Settings:
        for name in ("workspace", "index_path", "config_file"):
            value = getattr(self, name)
            if isinstance(value, str) and "{{" in value:
                raise ConfigError(
                    f"parameter {name} is the unfilled template {value!r}: export the environment variable"
                    " before `prefect deploy`, or set the parameter on the deployment or the run"
                )
        # the one settings order (memory_core.config.resolve_settings): these parameters, the
        # environment, the config file, what the live index recorded, the defaults
        told: dict[str, Any] = {
            "workspace": self.workspace or None, "index_path": self.index_path or None, "provider": self.provider,
            "model": self.model, "extra_paths": self.extra_paths, "sources": self.sources,
        }
        if self.batch is not None:
            told["batch"] = {"enabled": self.batch}
        if self.force_sessions:
            told["sessions"] = {"delta_bytes": 0, "delta_messages": 0}
        return resolve_settings(told, config_file=self.config_file or None, told_by="flow parameter {}").settings

    def flow_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for calling the ``reindex``/``backfill`` flow with these parameters."""
        return self.model_dump(exclude_unset=True)


# -- names -----------------------------------------------------------------------------------

def _run_name() -> str:
    """``<flow>-<index name>-<incremental|full|sessions>[-batch]``, e.g. ``reindex-notes-incremental``."""
    from prefect.runtime import flow_run

    flow_name = flow_run.flow_name or "reindex"
    raw = dict(flow_run.parameters or {})
    try:
        params = ReindexParams.model_validate(raw)
        settings = params.to_settings()
        name, batch = report.index_label(settings), settings.batch.enabled
    except Exception:  # a bad parameter fails the run later, with a readable message
        name, batch = str(raw.get("workspace") or "index").rstrip("/").rsplit("/", 1)[-1], bool(raw.get("batch"))
    mode = "full" if raw.get("full") else "sessions" if raw.get("force_sessions") else "incremental"
    return f"{flow_name}-{report.slug(name)}-{mode}" + ("-batch" if batch else "")


# -- embedding -------------------------------------------------------------------------------

EmbedFn = Callable[..., dict[str, Any]]


def embed_misses(settings: Settings, misses: pipeline.MissResult, cache: Any, *, concurrency: int,
                 progress: pipeline.ProgressFn | None = None, runner: TaskRunner[Any] | None = None) -> dict[str, int]:
    """Submit one embed task per request group on ``runner`` (a bounded thread pool by default,
    or a Dask cluster), at most ``2 x parallelism`` in flight, and commit each result to the
    cache as it completes. The cache (SQLite) is only ever written here, on the flow's machine."""
    provider, _ = provider_for(settings)
    blob = settings_json(settings)
    stats = {"requests": 0, "embedded": 0, "tokens": 0}
    if misses.misses == 0:
        return stats
    own_runner = runner is None
    if runner is None:
        runner = ThreadPoolTaskRunner(max_workers=max(1, concurrency))
        runner.__enter__()
    try:
        threads = isinstance(runner, ThreadPoolTaskRunner)
        limit = 2 if (provider.name == "local" and threads) else 2 * runner_parallelism(runner, concurrency)
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

        try:
            for group in pipeline.iter_embed_groups(misses, provider):
                # quote() spares Prefect a walk over the texts; Dask treats tuples (quote is a
                # namedtuple) as task specs, so a cluster gets the group as it is.
                fut = runner.submit(embed_group_task, parameters={
                    "settings_blob": blob, "group": quote(group) if threads else group, "provider_name": provider.name,
                    "group_index": group.index,
                })
                inflight[fut] = group
                collect(limit)
            collect(0)
        except BaseException:
            for fut in inflight:  # do not start groups nobody will collect
                with contextlib.suppress(Exception):
                    fut.wrapped_future.cancel()  # type: ignore[attr-defined]
            raise
    finally:
        if own_runner:
            runner.__exit__(None, None, None)
    return stats


def resolve_embedder(settings: Settings) -> EmbedFn | None:
    """The Batch API embedder (``flows.batch.embed_misses_batch``) when batch mode is on."""
    if not settings.batch.enabled:
        return None
    try:
        from flows.batch import embed_misses_batch
    except ImportError as exc:
        raise ConfigError(
            "batch mode is on (batch.enabled / the batch parameter) but this installation has no Batch API"
            f" support (flows.batch.embed_misses_batch cannot be imported: {exc}); run with batch=false"
        ) from None
    return embed_misses_batch


def _has_open_batch_jobs(cache: Any) -> bool:
    from memory_core.batch.ledger import BatchLedger

    return bool(BatchLedger.for_cache(cache).open_jobs())


def embed_stage(params: ReindexParams, settings: Settings, misses: pipeline.MissResult, cache: Any,
                batch_embed: EmbedFn | None, progress: pipeline.ProgressFn, logger: Any) -> tuple[dict[str, Any], str]:
    """``pipeline.embed_stage`` as Prefect tasks: provider Batch API jobs when batch mode is on
    (also when only jobs of earlier runs are left to collect or cancel), else one task per
    request group on the chosen task runner. Returns (embed stats, where embedding ran)."""
    from memory_core.batch.cost import estimate_cost

    provider, _ = provider_for(settings)
    if cache is None or provider.name == "none":
        return {}, "none (keyword-only)"
    if batch_embed is not None and provider.supports_batch and (misses.misses or _has_open_batch_jobs(cache)):
        logger.info("embedding %d chunks through %s batch jobs", misses.misses, provider.name)
        return batch_embed(settings, misses, cache, progress=progress), "provider batch jobs"
    stats: dict[str, Any] = {"requests": 0, "embedded": 0, "tokens": 0}
    where = "none (everything in the cache)"
    if misses.misses:
        runner, where = make_embed_runner(params.task_runner, concurrency=params.embed_concurrency,
                                          dask_address=params.dask_address, dask_workers=params.dask_workers)
        logger.info("embedding %d chunks on %s", misses.misses, where)
        with runner:
            stats.update(embed_misses(settings, misses, cache, concurrency=params.embed_concurrency,
                                      progress=progress, runner=runner))
    stats["tokens_sync"], stats["tokens_batch"] = stats["tokens"], 0
    if settings.batch.enabled and not provider.supports_batch:
        stats["batch"] = {"mode": f"sync ({provider.name} has no Batch API)"}
    if provider.name != "local":  # a hosted provider: what this run cost
        stats["cost"] = estimate_cost(settings, provider.name, provider.model, tokens_sync=stats["tokens"],
                                      tokens_batch=0)
    return stats, where


# -- the run ---------------------------------------------------------------------------------

class _SwitchProvider(Exception):
    """The primary provider kept failing during the run: start over with the fallback."""

    def __init__(self, settings: Settings, reason: str, info: dict[str, Any]) -> None:
        super().__init__(info["reason"])
        self.settings, self.reason, self.info = settings, reason, info


def _acquire_lock(settings: Settings, if_busy: IfBusy, logger: Any) -> tuple[IndexLock | None, str]:
    """The writer lock, or (None, why) when busy and ``if_busy`` is ``skip``."""
    try:
        return IndexLock(settings.index_file, wait=False).acquire(), ""
    except IndexLockedError as exc:
        if if_busy == "skip":
            return None, str(exc)
        if if_busy == "fail":
            raise
        logger.warning("%s; waiting up to %.0f s for it to finish", exc, settings.lock.timeout_s)
    return IndexLock(settings.index_file, wait=True, timeout_s=settings.lock.timeout_s).acquire(), ""


def run_pipeline(params: ReindexParams, flow_name: str) -> dict[str, Any] | State[Any]:
    """The body shared by the ``reindex`` and ``backfill`` flows (``pipeline.run_index`` as tasks)."""
    logger = get_run_logger()
    t_start = time.perf_counter()
    notes_key = f"{flow_name}-{report.slug(str(params.workspace or 'index'))}-notes"
    fallbacks: list[str] = []
    warnings: list[str] = []
    try:
        settings = params.to_settings()
        notes_key = report.artifact_key(flow_name, settings, "notes")
        pipeline.preflight(settings)
        batch_embed = resolve_embedder(settings)
        provider, reason = provider_for(settings)
        if reason.startswith("fallback"):
            fallbacks.append(report.emit_fallback(settings, "provider", reason, **{
                "from": settings.provider, "to": f"{provider.name}/{provider.model}"}))
        label = report.index_label(settings)
        if_busy: IfBusy = params.if_busy or ("wait" if settings.lock.wait else "fail")
        logger.info("provider %s / %s (%s); index %s", provider.name, provider.model, reason, settings.index_file)
        lock, busy = _acquire_lock(settings, if_busy, logger)
        if lock is None:
            msg = f"skipped: {busy}; the next run will catch up"
            logger.info("%s", msg)
            summary = pipeline.RunSummary(
                index_path=str(settings.index_file), provider=provider.name, model=provider.model,
                provider_reason=reason, full=params.full, full_reason="", swapped=False, warnings=[msg])
            report.publish_notes(notes_key, report.notes_markdown(
                f"{flow_name} {label}: skipped", warnings=[], fallbacks=fallbacks, extra=[msg]), "skipped run")
            return Completed(name="Skipped", message=msg, data=summary.to_dict())
        run_settings = settings
        try:
            remove_stale_temp_files(settings.index_file)
            recover_index(settings.index_file)
            timer = pipeline.Timer()
            try:
                summary, built, where = _run_once(params, settings, flow_name, label, batch_embed, logger, timer,
                                                  fallback=None, fallbacks=fallbacks)
            except _SwitchProvider as sw:
                info = sw.info
                logger.warning("provider %s kept failing (%s); rebuilding in full with the fallback %s",
                               info["from"], info["reason"], info["to"])
                fallbacks.append(report.emit_fallback(settings, "provider", info["reason"], **{
                    "from": info["from"], "to": info["to"]}))
                run_settings = sw.settings
                summary, built, where = _run_once(params, run_settings, flow_name, label, resolve_embedder(run_settings),
                                                  logger, timer, fallback=info, fallbacks=fallbacks, reason=sw.reason)
        finally:
            lock.release()
        summary.stage_seconds["total"] = round(time.perf_counter() - t_start, 3)
        for line in summary.lines():
            logger.info("%s", line)
        warnings = list(summary.warnings)
        if where == NOTHING_TO_DO and not (warnings or fallbacks):
            # A run with nothing to do and nothing to say (every scheduled run between edits):
            # no artifacts, so each key's latest version stays the last run that did something.
            # The outcome is in the logs above and in the state's message.
            carried = summary.sessions_carried
            msg = f"nothing to do: {summary.files_unchanged} files unchanged" + (
                f", {carried} transcript(s) grew below the reindex delta" if carried else "")
            return Completed(message=msg, data=summary.to_dict())
        figures = report.run_figures(summary, run_settings, runner=where, built=built)
        report.publish_summary(report.artifact_key(flow_name, settings, "summary"), figures,
                               f"{flow_name} of {label}: {summary.outcome()}")
        report.publish_notes(notes_key, report.notes_markdown(
            f"{flow_name} {label}: warnings and errors", warnings=warnings, fallbacks=fallbacks),
            f"{len(warnings)} warnings, {len(fallbacks)} fallbacks")
        if built is not None:
            report.emit_swapped(settings, summary, built)
        return summary.to_dict()
    except Exception as exc:
        msg = f"{type(exc).__name__}: {exc}"
        logger.error("run failed: %s; the live index was left as it was", msg)
        report.publish_notes(notes_key, report.notes_markdown(
            f"{flow_name}: run failed", warnings=warnings, fallbacks=fallbacks, error=msg), "the run failed")
        raise


def _run_once(params: ReindexParams, settings: Settings, flow_name: str, label: str, batch_embed: EmbedFn | None,
              logger: Any, timer: pipeline.Timer, *, fallback: dict[str, Any] | None, fallbacks: list[str],
              reason: str | None = None) -> tuple[pipeline.RunSummary, dict[str, Any] | None, str]:
    """discover -> chunk -> cache lookup -> embed -> build/verify/swap, once, with ``settings``'
    provider. Raises _SwitchProvider when the provider keeps failing and a fallback is configured."""
    provider, why = provider_for(settings)
    reason = reason or why
    with timer.stage("discover"):
        plan = discover_task(settings, label, params.full or fallback is not None)
    if fallback is not None:
        plan.full_reason = pipeline.fallback_full_reason(fallback)
    chunks = misses = embed = built = None
    where = NOTHING_TO_DO
    try:
        if not plan.nothing_to_do:
            # quote(): the plan and the chunk result list every file; unquoted, Prefect walks them
            # twice per task (upstream futures, then resolving inputs): ~1.7 s a task at 10k files.
            with timer.stage("chunk"):
                chunks = chunk_task(quote(plan), settings, label, len(plan.to_index))
            with timer.stage("cache"):
                misses = cache_lookup_task(quote(plan), quote(chunks), settings, label)
            cache = pipeline.open_cache(settings, provider, plan)
            progress = report.ProgressReporter(report.artifact_key(flow_name, settings, "progress"))
            try:
                with timer.stage("embed"):
                    try:
                        embed, where = embed_stage(params, settings, misses, cache, batch_embed, progress, logger)
                    except ProviderError as exc:
                        switched = None if fallback is not None else pipeline.fallback_for_run(settings, provider, exc)
                        if switched is None:
                            raise
                        fb, fb_reason, info = switched
                        fb.close()
                        fb_settings = fallback_settings(settings, provider.name)
                        assert fb_settings is not None  # fallback_for_run found one
                        raise _SwitchProvider(fb_settings, fb_reason, info) from exc
                if misses.misses and not pipeline.batch_pending(embed):
                    progress("embed", misses.misses, misses.misses)
            finally:
                if cache is not None:
                    cache.close()
            if fallback is not None:
                embed["fallback"] = fallback
            disabled = (embed.get("batch") or {}).get("disabled")
            if disabled:
                why = (embed.get("batch") or {}).get("disabled_reason") or "batch mode switched off"
                fallbacks.append(report.emit_fallback(settings, "batch-to-sync", str(why),
                                                      chunks_via_sync=embed["batch"].get("chunks_via_sync", 0)))
            pending = pipeline.batch_pending(embed)
            if pending:
                logger.warning("%d batch job(s) still running (batch.wait = false): the index is not updated;"
                               " the next run collects them", pending)
            else:
                with timer.stage("build"):
                    built = build_task(quote(plan), quote(chunks), settings, label)
    finally:
        pipeline.cleanup_workdir(plan)
    summary = pipeline.summarize(plan, provider, reason, chunks=chunks, misses=misses, embed=embed, built=built,
                                 timings=timer.times)
    return summary, built, where


# -- the flow ----------------------------------------------------------------------------------

@flow(name="reindex", flow_run_name=_run_name, task_runner=ThreadPoolTaskRunner(max_workers=4),
      validate_parameters=True, log_prints=False)
def reindex(
    workspace: str | None = None,
    index_path: str | None = None,
    config_file: str | None = None,
    provider: ProviderChoice | None = None,
    model: str | None = None,
    full: bool = False,
    extra_paths: list[str] | None = None,
    sources: list[SourceChoice] | None = None,
    embed_concurrency: int = 4,
    batch: bool | None = None,
    force_sessions: bool = False,
    if_busy: IfBusy | None = None,
    task_runner: RunnerChoice = "threads",
    dask_address: str | None = None,
    dask_workers: int = 2,
) -> dict[str, Any]:
    """Bring a memory-core index up to date with its sources (incremental unless ``full``).

    Args:
        workspace: Workspace folder with MEMORY.md and memory/ (default: MEMORY_CORE_WORKSPACE, else the config file's).
        index_path: Index file (default: <workspace>/.memory-core/index.sqlite).
        config_file: memory-core TOML config file (default: MEMORY_CORE_CONFIG). API keys live there or in the environment.
        provider: Embedding provider; unset means the config file's choice.
        model: Embedding model; unset means the provider's default.
        full: Rebuild the whole index (vectors still come from the embedding cache).
        extra_paths: Extra Markdown files or folders to index.
        sources: Sources to index: memory and/or sessions (all runs writing one index must agree).
        embed_concurrency: Embedding requests in flight (threads, or Dask threads in total).
        batch: Embed through the provider's Batch API (cheaper, slower); unset means the config's batch.enabled.
        force_sessions: Reindex every changed transcript, ignoring the sessions delta thresholds.
        if_busy: When another run is writing this index: wait (up to lock.timeout_s), skip, or fail.
        task_runner: Where embedding requests run: threads (default) or dask.
        dask_address: Address of a running Dask scheduler, e.g. tcp://10.0.0.5:8786 (task_runner=dask).
        dask_workers: Worker processes of a local Dask cluster (task_runner=dask, no address).
    """
    params = ReindexParams(
        workspace=workspace, index_path=index_path, config_file=config_file, provider=provider, model=model,
        full=full, extra_paths=extra_paths, sources=sources, embed_concurrency=embed_concurrency, batch=batch,
        force_sessions=force_sessions, if_busy=if_busy, task_runner=task_runner, dask_address=dask_address,
        dask_workers=dask_workers)
    return run_pipeline(params, "reindex")  # type: ignore[return-value]


def run_reindex(params: ReindexParams) -> dict[str, Any]:
    """Run the reindex flow in this process (the CLI's ``--engine prefect``); returns the summary."""
    return reindex(**params.flow_kwargs())


if __name__ == "__main__":  # pragma: no cover
    import sys

    print(reindex(workspace=sys.argv[1] if len(sys.argv) > 1 else None))
