"""The orchestrator: one reindex run, decided here and run by an executor.

    lock -> clean up -> discover -> [Batch API jobs] -> stream: chunk, look up, embed, write -> verify -> publish

:func:`run_index` decides everything about a run: which files, which chunks, sync requests or
Batch API jobs (with the failure limit that hands the rest to sync requests), which provider
(and the switch to the fallback), how the result is published. An :class:`~memory_core.index.runtypes.Executor`
does the work: :class:`LocalExecutor` in this process (the CLI, watch, tests), or
``flows.executor.PrefectExecutor``, which runs the same steps as Prefect tasks (a task per stage,
per embedding request group, per batch job step) on threads or a Dask cluster. Speed, memory,
crash and cancel behaviour are the orchestrator's, so both executors have the same ones.

Whatever ends a run, every vector that was received is in the embedding cache (each response is
committed as it arrives), the live index is whole (a new file swapped in, or one transaction),
and the exception that ends it carries a partial :class:`RunSummary` (``exc.run_summary``)
saying what was done and cached. Once the new index is live the run is published: a stop in the
steps after it (the cache trim, qmd) skips them and still ends the run, carrying the run's whole
summary (``swapped``, ``stopped``, ``cut_short``); a failure there is a warning of the run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np

from memory_core.config import Settings
from memory_core.embeddings.base import EmbeddingProvider
from memory_core.embeddings.batch_types import BatchFigures, EarlierJobs
from memory_core.embeddings.retry import abandoned_when
from memory_core.errors import IndexLockedError, ProviderError, RunCancelled
from memory_core.index import run_stops
from memory_core.index.run_stops import stops_held
from memory_core.index.runtypes import (
    EMBED_CONCURRENCY,
    BuildResult,
    ChunkResult,
    EmbedCounts,
    EmbedStats,
    Executor,
    Fallback,
    JobOps,
    Progress,
    ProgressFn,
    RunPlan,
    RunSummary,
    embed_parallelism,
    is_stop,
)
from memory_core.index.stages import (
    Timer,
    cleanup_workdir,
    collect_misses,
    cost_so_far,
    discover_stage,
    embed_stats,
    ensure_workdir,
    fallback_for_run,
    open_cache,
    preflight,
    remove_stale_workdirs,
    store_vectors,
    summarize,
    trim_cache,
)
from memory_core.index.streaming import Built, stream_index
from memory_core.index.writer import remove_stale_temp_files
from memory_core.storage.cache import EmbeddingCache
from memory_core.storage.store import IndexLock, recover_index

__all__ = ["IfBusy", "LocalExecutor", "Progress", "ProgressFn", "RunCancelled", "RunSummary", "run_index"]

log = logging.getLogger("memory_core.index.pipeline")
# marks a log record that repeats one of the run's warnings (they are in the summary too):
# `memory-core index` prints them once, after the summary
RUN_WARNING = "memory_core_run_warning"

T = TypeVar("T")
IfBusy = Literal["wait", "skip", "fail"]


# Steps after a publish that a stop cuts short (RunSummary.cut_short)
CUT_TRIM = "trimming the embedding cache of the vectors the new index holds (the next run that publishes does it)"
CUT_QMD = "bringing qmd up to date (searches answer from the builtin index until a run does it)"


def stop_word(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    if isinstance(exc, RunCancelled):
        return exc.why
    if isinstance(exc, SigtermStop):
        return str(exc)
    if type(exc).__name__ == "TerminationSignal":  # Prefect's: a signal sent to the process, not a cancel
        sig = getattr(exc, "signal", None)
        return f"stopped by {signal.Signals(sig).name}" if isinstance(sig, int) else "stopped by a signal"
    if type(exc).__name__ == "CancelledRun":
        return "cancelled"
    return "stopped"


def stopped_after_publish(exc: BaseException, summary: RunSummary, cut_short: list[str]) -> None:
    """``summary`` (whole: the run published) says what stopped it and what it cut short, and
    goes with the stop (``exc.run_summary``)."""
    summary.stopped = stop_word(exc)
    summary.cut_short = list(dict.fromkeys([*summary.cut_short, *cut_short]))
    exc.run_summary = summary  # type: ignore[attr-defined]


# -- the in-process executor ------------------------------------------------------------------

def embed_and_store(provider: EmbeddingProvider, cache: EmbeddingCache, hashes: list[str],
                    texts: list[str]) -> np.ndarray:
    """One request group: embed, then commit the vectors to the cache before anything else."""
    vectors = np.ascontiguousarray(provider.embed_documents(texts), dtype="<f4")
    store_vectors(cache, hashes, vectors)
    return vectors


class LocalExecutor:
    """Runs a run's work in this process: embedding requests on a bounded thread pool
    (``concurrency`` threads; one for the local model, whose torch code uses every core and
    releases the GIL, so it overlaps the chunking and writing), Batch API job steps on
    :class:`memory_core.index.batch_runner.LocalOps`, stages as plain calls."""

    def __init__(self, concurrency: int = EMBED_CONCURRENCY) -> None:
        self.concurrency = max(1, concurrency)
        self.pool: ThreadPoolExecutor | None = None
        self.stopping = threading.Event()  # abandon(): the run's requests stop waiting on the provider

    def bind(self, settings: Settings) -> None:
        """The settings of the run (or of its fallback provider) about to start."""
        if self.stopping.is_set():
            self.stopping = threading.Event()  # (the abandoned requests keep the old one)

    def parallelism(self, provider: EmbeddingProvider) -> int:
        return embed_parallelism(provider, self.concurrency)

    def describe(self, provider: EmbeddingProvider) -> str:
        n = self.parallelism(provider)
        return f"this process ({n} thread{'s' if n > 1 else ''})"

    def embed(self, provider: EmbeddingProvider, cache: EmbeddingCache, hashes: list[str], texts: list[str],
              index: int) -> Future[np.ndarray]:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=self.parallelism(provider), thread_name_prefix="embed")
        return self.pool.submit(self._embed, self.stopping, provider, cache, hashes, texts)

    @staticmethod
    def _embed(stopping: threading.Event, provider: EmbeddingProvider, cache: EmbeddingCache, hashes: list[str],
               texts: list[str]) -> np.ndarray:
        with abandoned_when(stopping):
            return embed_and_store(provider, cache, hashes, texts)

    def hold(self) -> None:  # a request of this pool not started is cancelled (close() cancels them)
        pass

    def abandon(self) -> None:
        self.stopping.set()

    def stage(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        return fn(*args)

    def batch_ops(self, ctx: Any, progress: Callable[[str, int, int], None] | None) -> JobOps:
        from memory_core.index.batch_runner import LocalOps

        return LocalOps(ctx, workers=ctx.settings.batch.concurrency)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


# -- the orchestrator ---------------------------------------------------------------------------

class _SwitchProvider(Exception):
    """The primary kept failing during the run; run again with the fallback."""

    def __init__(self, provider: EmbeddingProvider, reason: str, info: Fallback, settings: Settings) -> None:
        super().__init__(info.reason)
        self.provider, self.reason, self.info, self.settings = provider, reason, info, settings


def acquire_lock(settings: Settings, if_busy: IfBusy) -> tuple[IndexLock | None, str]:
    """The index's writer lock, or (None, why) when another run holds it and ``if_busy`` is ``skip``."""
    try:
        return IndexLock(settings.index_file, wait=False).acquire(), ""
    except IndexLockedError as exc:
        if if_busy == "skip":
            return None, str(exc)
        if if_busy == "fail":
            raise
        log.warning("%s; waiting up to %.0f s for it to finish", exc, settings.lock.timeout_s)
    return IndexLock(settings.index_file, wait=True, timeout_s=settings.lock.timeout_s).acquire(), ""


@contextlib.contextmanager
def _sigterm_cancels() -> Iterator[None]:
    """SIGTERM ends the run like Ctrl-C: the stack unwinds, the partial summary is written, the
    live index stays as it was (or, a stop after the publish, is the new one, and the summary
    says so: :func:`stopped_after_publish`). Only where nobody else handles it (Prefect installs
    its own handler in a flow run, which raises its TerminationSignal the same way), or where
    :func:`command_stops` does (``memory-core index``), which hands the run's SIGTERM to this.
    Entered as the run takes its lock, before it writes anything: a stop that came before and
    that something on the way swallowed (:func:`stop_came`) ends the run here."""
    came = run_stops.command_pending()
    if came is not None:
        raise _stop_of(came)
    run_stops.check()
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None, _sigterm_stop):
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        # noted first: an ``except Exception`` on the way may take the RunCancelled for an error of
        # its own (the local model's tokenizer fallback did, and the run ended with its
        # AttributeError: exit 1, a traceback); :func:`command_stops` then says the stop
        stop_came(signum)
        raise RunCancelled("stopped by SIGTERM")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# (SigtermStop, _sigterm_stop and command_stops live in run_stops, light enough for every command)
SigtermStop = run_stops.SigtermStop
_sigterm_stop = run_stops.sigterm_stop
command_stops = run_stops.command_stops
stop_came = run_stops.note
"""A stop came (our SIGTERM handlers note it as they raise it): see :func:`run_stops.note`. The run
then ends as it takes its lock (:func:`_sigterm_cancels`), :func:`command_stops` says the error the
command ends with as this stop, and every open run ends at its next :func:`run_stops.check`."""

_stop_of = run_stops.stop_of


def check_index_folder(index_path: str | os.PathLike[str] | None) -> None:
    """One rule for a path a person typed (``--index``, a flow's ``index_path`` parameter, and
    ``export``'s output): its folder must exist, so a typo is refused, not created
    (``index --index /no/such/dir/idx.sqlite`` created the folders without a word, where
    ``export`` refused a missing one). Folders memory-core derives itself are created:
    ``<workspace>/.memory-core/``, an agent's index from the ``[agents]`` templates."""
    from memory_core.errors import PathError

    if not index_path:
        return
    idx = Path(os.path.abspath(os.path.expanduser(os.fspath(index_path))))
    if not idx.parent.is_dir():
        raise PathError(f"directory not found: {idx.parent} (the folder of the index {idx}); create it first,"
                        " or fix the path")


def run_index(settings: Settings, *, full: bool = False, provider: EmbeddingProvider | None = None,
              reason: str = "", progress: ProgressFn | None = None, concurrency: int = EMBED_CONCURRENCY,
              executor: Executor | None = None, if_busy: IfBusy | None = None,
              only_paths: Collection[str] | None = None, cancel: run_stops.Cancel | None = None,
              re_embed: bool = False) -> RunSummary:
    """Run one reindex. Raises MemoryCoreError subclasses on failure (with ``run_summary``).

    ``executor``: who does the work (default: :class:`LocalExecutor` with ``concurrency``
    threads). ``if_busy``: what to do when another run holds the index's writer lock: ``wait``
    (up to ``lock.timeout_s``), ``skip`` (return a summary with ``skipped`` set) or ``fail``;
    default from ``lock.wait``. ``progress`` is called with a :class:`Progress` as the run goes.
    ``only_paths``: an incremental run given every path that changed since the last complete
    run (a watcher's events) looks at those only (see :func:`memory_core.index.stages.discover_stage`);
    a full rebuild, and the fallback provider's rebuild, scan everything. ``cancel``: the run's
    stop from another thread (its owner sets it; the run ends with RunCancelled, as by SIGTERM:
    :mod:`memory_core.index.run_stops`). ``re_embed``: a full rebuild that embeds every chunk
    again through sync requests, reading no vector from the cache or the live index; the fresh
    vectors replace the cached ones, and after the publish the cache drops the model's others.

    Embedding goes through the provider's Batch API when ``batch.enabled`` (see
    :mod:`memory_core.batch`). If the provider keeps failing and ``settings.fallback`` is set,
    the run starts over with the fallback provider as a full rebuild (what the primary already
    returned stays in the cache), and the summary's ``fallback`` says so and why.
    """
    from memory_core.embeddings.registry import create_provider

    preflight(settings)
    if provider is None:
        provider, reason = create_provider(settings)
    own = executor is None
    ex: Executor = executor if executor is not None else LocalExecutor(concurrency)
    timer = Timer()
    done: list[RunSummary] = []  # the run's summary once it has one (a stop after it: the summary goes with it)
    try:
        with run_stops.run_scope(cancel):  # a stop lost on the way (raised in a finalizer) still ends the run
            return _run_locked(settings, provider, reason, ex, own, timer, done, full=full, progress=progress,
                               if_busy=if_busy, only_paths=only_paths, re_embed=re_embed)
    except BaseException as exc:
        if done and done[0].swapped and getattr(exc, "run_summary", None) is None:
            if is_stop(exc):  # after the run's last step: nothing was cut short
                stopped_after_publish(exc, done[0], [])
            else:  # a failure closing the run (the lock, the executor): the index is published all the same
                log.warning("after the new index was published: %s", exc)
                return done[0]
        raise


def _run_locked(settings: Settings, provider: EmbeddingProvider, reason: str, ex: Executor, own: bool, timer: Timer,
                done: list[RunSummary], *, full: bool, progress: ProgressFn | None, if_busy: IfBusy | None,
                only_paths: Collection[str] | None, re_embed: bool = False) -> RunSummary:
    index_path = settings.index_file
    try:
        lock, busy = acquire_lock(settings, if_busy or ("wait" if settings.lock.wait else "fail"))
        if lock is None:
            msg = f"{busy}; the next run will catch up"
            log.info("skipped: %s", msg)
            return RunSummary(index_path=str(index_path), provider=provider.name, model=provider.model,
                              provider_reason=reason, full=full, full_reason="", swapped=False, skipped=msg)
        made: EmbeddingProvider | None = None  # a provider this run made for the index as built now
        try:
            with _sigterm_cancels():
                remove_stale_temp_files(index_path)
                remove_stale_workdirs(index_path)
                recover_index(index_path)
                settings, made = _as_built_now(settings, provider)
                if made is not None:
                    provider, reason = made, "as the index was built"
                try:
                    summary = _index_once(settings, provider, reason, ex, full=full, fallback=None, timer=timer,
                                          on_progress=progress, only_paths=only_paths, done=done, re_embed=re_embed)
                except _SwitchProvider as sw:
                    log.warning("provider %s failed (%s); rebuilding with the fallback %s", sw.info.primary,
                                sw.info.reason, sw.info.to)
                    summary = _index_once(sw.settings, sw.provider, sw.reason, ex, full=True, fallback=sw.info,
                                          timer=timer, on_progress=progress, done=done, re_embed=re_embed)
                if not done:  # (a published run's summary is in it already: _index_once put it there)
                    done.append(summary)
                if settings.backend == "qmd":
                    try:
                        _qmd_phase(settings, ex, timer, summary)
                    except BaseException as exc:
                        if not summary.swapped:
                            raise
                        if is_stop(exc):
                            stopped_after_publish(exc, summary, [CUT_QMD])
                            raise
                        summary.warnings.append(f"qmd was not brought up to date ({type(exc).__name__}: {exc});"
                                                " searches answer from the builtin index until a run does it")
                        log.warning("%s", summary.warnings[-1])
                return summary
        finally:
            lock.release()
            if made is not None:
                with contextlib.suppress(Exception):
                    made.close()
    finally:
        if own:
            ex.close()


def _as_built_now(settings: Settings, provider: EmbeddingProvider) -> tuple[Settings, EmbeddingProvider | None]:
    """Once the writer lock is held: ``settings`` with what it was not told taken from the live
    index as it is now (:func:`memory_core.storage.indexmeta.as_built`), and a provider made for
    them when the index's provider changed (None: ``provider`` stays). A run resolves its settings
    before it waits for the lock; another run holding it may rebuild the index meanwhile
    (``index --sessions``, another provider), and the waiting run, told nothing, rebuilt it back
    (``full: sources changed from [memory, sessions] to [memory]``): its transcripts gone."""
    from memory_core.storage.indexmeta import PROVIDER_KEYS, as_built_now

    fresh, changed = as_built_now(settings)
    if not changed:
        return settings, None
    log.info("the index was rebuilt by another run since these settings were read; keeping it as built: %s",
             ", ".join(changed))
    if not any(k in PROVIDER_KEYS for k in changed):
        return fresh, None
    from memory_core.embeddings.registry import create_provider

    made, _ = create_provider(fresh)
    return fresh, made


def _pending_renewal(settings: Settings, provider: EmbeddingProvider) -> str | None:
    """When (UTC, to the minute) a re-embed of this index began that no run published, or None:
    a plain run then goes on with it. Otherwise it took the live index's old vectors, the ones the
    re-embed was asked to replace, and its trim dropped the fresh ones the stopped re-embed had
    received, so the re-embed run again paid for all of them (the thirty-ninth session's audit G2)."""
    if not (settings.cache.enabled and provider.has_vectors):
        return None
    from memory_core.storage.cache import renewal_pending

    since = renewal_pending(settings.cache_file, provider.name, provider.model, provider.provider_key,
                            settings.index_file, legacy_keys=provider.legacy_provider_keys)
    if since is None:
        return None
    import datetime as _dt

    return _dt.datetime.fromtimestamp(since / 1000, _dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _index_once(settings: Settings, provider: EmbeddingProvider, reason: str, ex: Executor, *, full: bool,
                fallback: Fallback | None, timer: Timer, on_progress: ProgressFn | None,
                only_paths: Collection[str] | None = None, done: list[RunSummary] | None = None,
                re_embed: bool = False) -> RunSummary:
    """One run's stages, discovery to the summary. ``done`` gets a published run's summary while
    stops are still held (:func:`stops_held`), so a stop that lands on the way out of this
    function, before the caller has it, still finds the summary of the publish it follows."""
    ex.bind(settings)
    continuing = None if re_embed else _pending_renewal(settings, provider)
    re_embed = re_embed or continuing is not None
    full = full or fallback is not None or re_embed
    with timer.stage("discover"):
        if only_paths is None or full:
            plan: RunPlan = ex.stage("discover", discover_stage, settings, provider, reason, full)
        else:
            plan = ex.stage("discover", discover_stage, settings, provider, reason, full, frozenset(only_paths))
    run_stops.check()
    if plan.hinted_paths is not None:
        log.info("discovery: %d changed path(s) looked at, %d indexed files taken as recorded", plan.hinted_paths,
                 plan.counts["unchanged"])
    elif plan.hint_fallback:
        log.info("discovery: scanned every source (%s)", plan.hint_fallback)
    if fallback is not None:
        plan.full_reason = fallback.full_reason()
    plan.re_embed = re_embed and provider.has_vectors
    if continuing is not None:
        plan.warnings.append(f"continuing the re-embed begun {continuing} (index --re-embed), which was stopped"
                             " before it published: every chunk is embedded again, and what it received is"
                             " not paid for twice")
    if plan.re_embed and settings.batch.enabled and provider.supports_batch:
        plan.warnings.append("--re-embed embeds through sync requests: the Batch API is not used for it")
    for w in plan.warnings:
        log.warning("%s", w, extra={RUN_WARNING: True})
    if plan.nothing_to_do:
        return summarize(plan, provider, reason, chunks=None, from_cache=0, embed=None, built=None,
                         timings=timer.times, embedded_on="nowhere (nothing to do)")
    progress = Progress(files_total=len(plan.to_index), bytes_total=sum(f.size for f in plan.to_index))
    # (after the no-op return: the Prefect executor starts its task runner, a Dask cluster too, here)
    embedded_on = ex.describe(provider) if provider.has_vectors else "nowhere (keyword-only)"

    def report(p: Progress) -> None:
        p.cost_usd = cost_so_far(settings, provider, p.tokens)
        if p.tokens_batch and p.cost_usd is not None:  # batch jobs' tokens, at the batch price
            from memory_core.embeddings.cost import estimate_cost

            p.cost_usd = estimate_cost(settings, provider.name, provider.model, tokens_sync=p.tokens,
                                       tokens_batch=p.tokens_batch).estimated_usd
        if on_progress is not None:
            on_progress(p)

    chunks: ChunkResult | None = None
    built: BuildResult | None = None
    batch: tuple[EmbedCounts, BatchFigures] | None = None
    earlier = EarlierJobs()  # what a run not in Batch API mode did with earlier runs' open jobs
    embed = EmbedStats()
    from_cache = ex_from_cache = 0  # chunks, and transcript exchange vectors (batch mode: before the jobs)
    cache = None
    batch_run: list[Any] = []  # the Batch API coordinator of this run, for a partial summary
    published: list[Built] = []  # the build's result, the moment its index is live (stream_index)
    trimmed = False
    stop: BaseException | None = None  # a stop after the publish: raised once the summary is whole
    # once the index is published, stops wait while the run's summary is assembled (a second
    # Ctrl-C there escaped without it): held, then the first such is delivered with the summary
    tail = contextlib.ExitStack()
    late: list[int] = []
    try:
        cache = open_cache(settings, provider, plan)
        try:
            if cache is not None and settings.batch.enabled and provider.supports_batch and not plan.re_embed:
                with timer.stage("batch"):
                    batch, from_cache, ex_from_cache = _batch_phase(plan, settings, provider, cache, ex, progress, report,
                                                     batch_run)
                if batch is not None:
                    embedded_on = f"provider batch jobs, then {embedded_on} for what they left"
                    plan.meta["batch"] = batch_state(settings, batch[1])  # status shows it
            elif cache is not None and provider.supports_batch and _has_open_jobs(cache):
                with timer.stage("batch"):
                    earlier = _earlier_jobs(plan, settings, provider, cache, ex)
                for note in earlier.notes(plan.re_embed):
                    plan.warnings.append(note)
                    log.warning("%s", note, extra={RUN_WARNING: True})
            pending = batch[1].jobs_pending if batch else 0
            if pending:
                log.warning("%d batch job(s) still running (batch.wait = false): the index is not updated;"
                            " the next run collects them", pending)
            else:
                with timer.stage("index"):
                    chunks, hits, stream, built = ex.stage("build", stream_index, plan, settings, provider, cache, ex,
                                                           progress, report, published)
                if batch is None:
                    from_cache = hits
            if cache is not None:
                embed = embed_stats(settings, provider, stream if chunks is not None else EmbedCounts(), batch,
                                    tokens_earlier=earlier.tokens)
        except ProviderError as exc:
            switched = None if fallback is not None else fallback_for_run(settings, provider, exc)
            if switched is None:
                raise
            from memory_core.embeddings.registry import fallback_settings

            fb_settings = fallback_settings(settings, provider.name) or settings
            raise _SwitchProvider(*switched, settings=fb_settings) from exc
        if fallback is not None:
            embed.fallback = fallback
        if built is not None and cache is not None and settings.cache.enabled:
            cache.close_live()  # they read the file the run just replaced (or edited): done with them
            with timer.stage("trim-cache"):
                trim_cache(settings, cache, Path(plan.index_path))
            cache.evict(settings.cache.max_entries)
        trimmed = True
    except _SwitchProvider:
        raise
    except BaseException as exc:
        if built is None and published:  # it came right after the publish, in the build stage
            chunks, hits, stream, built = published[0]
            if batch is None:
                from_cache = hits
            if cache is not None:
                embed = embed_stats(settings, provider, stream, batch, tokens_earlier=earlier.tokens)
            if fallback is not None:
                embed.fallback = fallback
        if built is None:  # nothing was published: a partial summary goes with the error
            if batch is None:  # the streamed build's lookups so far (batch mode: the hits before the jobs)
                from_cache = progress.cache_hits
            _attach_partial_summary(exc, plan, provider, reason, progress, timer, embedded_on, from_cache,
                                    settings=settings, batch=batch, batch_run=batch_run[0] if batch_run else None)
            raise
        # The index is published: the run is done, whatever the steps after it met. A stop skips
        # them and still ends the run, with the whole summary (it said "the live index was left
        # as it was" while the new file was live); a failure there is a warning.
        if is_stop(exc):
            stop = exc
        else:
            what = str(exc).replace("; the live index was left as it was", "") or type(exc).__name__
            plan.warnings.append(f"after the new index was published: {what}; the embedding cache may keep vectors"
                                 " the index holds until the next run trims them")
            log.warning("%s", plan.warnings[-1], extra={RUN_WARNING: True})
    finally:
        if built is not None:
            late = tail.enter_context(stops_held(redeliver=False))
        try:
            if cache is not None:
                cache.close()
            cleanup_workdir(plan)
        except BaseException:
            tail.close()
            raise
    with tail:
        summary = summarize(plan, provider, reason, chunks=chunks, from_cache=from_cache, embed=embed, built=built,
                            timings=timer.times, embedded_on=embedded_on)
        if chunks is not None:  # transcript exchange vectors, apart from the chunks
            summary.exchanges_embedded = stream.exchanges + (batch[0].exchanges if batch is not None else 0)
            # in batch mode the build finds the jobs' vectors in the cache: what was there before them counts
            summary.exchanges_from_cache = ex_from_cache if batch is not None else stream.exchanges_cached
        for w in summary.warnings:
            if w not in plan.warnings:
                log.warning("%s", w, extra={RUN_WARNING: True})
        if done is not None and built is not None:
            done.append(summary)
        if stop is not None:  # a stop held meanwhile is the same stop: the run ends by this one
            cut = ([] if trimmed or cache is None or not settings.cache.enabled else [CUT_TRIM]) + \
                ([CUT_QMD] if settings.backend == "qmd" else [])
            stopped_after_publish(stop, summary, cut)
            log.warning("%s", summary.stop_note(), extra={RUN_WARNING: True})  # the CLI says it in its own line
            raise stop
    if late or (built is not None and run_stops.pending() is not None):
        # a stop that came while the published run's summary was assembled, or one lost on the way
        # after the publish (in the cache trim: raised in a finalizer): it goes with the summary
        try:
            if late:
                signal.raise_signal(late[0])  # its own handler: KeyboardInterrupt, RunCancelled, Prefect's
            run_stops.check()
        except BaseException as exc:
            if is_stop(exc):
                stopped_after_publish(exc, summary, [CUT_QMD] if settings.backend == "qmd" else [])
                log.warning("%s", summary.stop_note(), extra={RUN_WARNING: True})
            raise
    return summary


def _qmd_phase(settings: Settings, ex: Executor, timer: Timer, summary: RunSummary) -> None:
    """``backend = "qmd"``: bring qmd's collections up to date beside the builtin index
    (``qmd update``; ``qmd embed`` too when searches use qmd's vectors). A qmd failure never
    fails the run: searches answer from the builtin index until qmd works (memory_core.query.qmd)."""
    from memory_core.index.qmd import qmd_embed, qmd_update

    steps = [("qmd-update", qmd_update)]
    if settings.qmd.search_mode != "search":  # BM25 needs no vectors
        steps.append(("qmd-embed", qmd_embed))
    for name, fn in steps:
        with timer.stage(name):
            res = ex.stage(name, fn, settings)
        summary.stage_seconds[name] = round(timer.times[name], 3)
        run_stops.check()  # a stop lost in the step (a Prefect task's thread cannot see the main thread's)
        if not res.ok:
            summary.qmd_failed = f"qmd {res.command} failed ({res.error})"
            summary.warnings.append(f"{summary.qmd_failed}; searches answer from the builtin index until it works")
            log.warning("%s", summary.warnings[-1])
            return


def batch_state(settings: Settings, figures: BatchFigures) -> dict[str, object]:
    """What ``status`` says about the last run's Batch API jobs (recorded in the index's meta)."""
    errors = figures.errors
    return {"failure_points": figures.failure_points, "failure_limit": settings.batch.failure_limit,
            "switched_to_sync": bool(figures.disabled), "reason": figures.disabled_reason,
            "jobs_submitted": figures.jobs_submitted, "jobs_failed": figures.jobs_failed,
            "jobs_pending": figures.jobs_pending, "last_error": errors[-1] if errors else ""}


def _has_open_jobs(cache: EmbeddingCache) -> bool:
    from memory_core.index.batch_ledger import BatchLedger

    return bool(BatchLedger.for_cache(cache).open_jobs())


def _earlier_jobs(plan: RunPlan, settings: Settings, provider: EmbeddingProvider, cache: EmbeddingCache,
                  ex: Executor) -> EarlierJobs:
    """A run that does not use the Batch API (batch mode off, ``--re-embed``) and the jobs earlier
    runs left open for this provider configuration (audit I, M1: it embedded their chunks through
    sync calls, and the provider billed the jobs too, left open for ever). Batch mode off: each job
    is polled once; a completed one is collected into the cache (the build then finds its vectors
    there), a failed one closed, one still running left open. ``--re-embed``: they are cancelled
    and closed, their output (vectors of what it replaces) unread. Through the batch run's own
    steps (:class:`memory_core.index.batch_runner.LookOnce`). A failure here never fails the run: it
    is said once, and the run goes on by sync calls."""
    from memory_core.index import batch_jobs as J
    from memory_core.index.batch_runner import LookOnce

    discard = ("cancelled by index --re-embed, its output not read (it holds vectors of what the re-embed"
               " replaces)") if plan.re_embed else ""
    look: LookOnce | None = None
    try:
        ctx = J.open_context(settings, provider, cache, str(ensure_workdir(plan)))
        look = LookOnce(ctx, ex.batch_ops(ctx, None), discard=discard)
        return look.look()
    except Exception as exc:
        if is_stop(exc):
            raise
        seen = look.seen if look is not None else EarlierJobs()
        # (a ProviderError's message is scrubbed of secrets; another one says its kind only)
        seen.errors.insert(0, str(exc)[:300] if isinstance(exc, ProviderError) else type(exc).__name__)
        done = {*seen.collected, *seen.closed, *seen.cancelled, *seen.dropped, *seen.left_open}
        with contextlib.suppress(Exception):
            from memory_core.index.batch_ledger import BatchLedger

            seen.unreached += [str(j.job_id or j.local_id) for j in BatchLedger.for_cache(cache).open_jobs()
                               if str(j.job_id or j.local_id) not in done]
        log.info("batch: looking at the jobs of earlier runs failed: %s", exc)
        return seen


def _batch_phase(plan: RunPlan, settings: Settings, provider: EmbeddingProvider, cache: EmbeddingCache, ex: Executor,
                 progress: Progress, report: ProgressFn,
                 live: list[Any] | None = None) -> tuple[tuple[EmbedCounts, BatchFigures] | None, int, int]:
    """Batch API jobs for the run's misses (and jobs of earlier runs left to collect or
    cancel); what they do not embed is left to the streamed build's sync requests.
    Returns (the batch figures, or None when there was nothing for batch mode; cache hits of
    chunks; of transcript exchange vectors).
    ``live`` gets the coordinator, for the partial summary of a run stopped in its jobs.
    The progress says what the jobs collected: chunks embedded, tokens and cost (a rerun
    collecting a cancelled run's job said ``0 embedded, $0.0000``)."""
    from memory_core.index import batch_jobs as J
    from memory_core.index.batch_ledger import BatchLedger
    from memory_core.index.batch_runner import BatchRun

    misses = ex.stage("collect-misses", collect_misses, plan, settings, provider, cache)
    if not misses.misses and not BatchLedger.for_cache(cache).open_jobs():
        return None, misses.hits, misses.exchange_hits
    progress.phase = "batch jobs"

    runs: list[BatchRun] = []

    def batch_progress(stage: str, done: int, total: int) -> None:
        progress.ready, progress.chunks = done, total
        if runs:
            progress.embedded, progress.tokens_batch = runs[0].embedded, runs[0].tokens_batch
        report(progress)

    ctx = J.open_context(settings, provider, cache, str(ensure_workdir(plan)))
    log.info("embedding %d chunks and %d transcript exchange vectors through %s batch jobs", misses.chunk_misses,
             misses.exchanges, provider.name)
    run = BatchRun(ctx, misses, ex.batch_ops(ctx, batch_progress), progress=batch_progress)
    runs.append(run)
    if live is not None:
        live.append(run)
    stats = run.run()
    # the streamed build counts its own sync requests; the cost so far keeps the jobs' tokens
    progress.phase, progress.ready, progress.chunks, progress.embedded = "index", 0, 0, 0
    # vectors another live run's jobs put in the shared cache while this one waited: cache hits
    return (stats, misses.hits + stats[1].chunks_from_other_runs,
            misses.exchange_hits + run.exchanges_from_other_runs)


def _attach_partial_summary(exc: BaseException, plan: RunPlan, provider: EmbeddingProvider, reason: str,
                            progress: Progress, timer: Timer, embedded_on: str, from_cache: int, *,
                            settings: Settings | None = None, batch: tuple[EmbedCounts, BatchFigures] | None = None,
                            batch_run: Any = None) -> None:
    """What a run that did not finish had done: its vectors are cached, nothing was published.
    In Batch API mode, the jobs it submitted (requests, tokens, cost) and the ones left open at
    the provider, which the next run re-attaches to (a cancelled backfill said ``batch mode off,
    0 jobs, 0 tokens`` though it had submitted a job billed for 295 requests)."""
    with contextlib.suppress(Exception):
        what = str(exc) or type(exc).__name__
        if isinstance(exc, KeyboardInterrupt) or type(exc).__name__ in ("TerminationSignal", "CancelledRun"):
            what = stop_word(exc)  # "interrupted", "stopped by SIGTERM", "cancelled": what it was
        embed: EmbedStats | None = None
        jobs = batch
        in_jobs = batch is None and batch_run is not None  # stopped inside the batch phase
        if in_jobs:
            with contextlib.suppress(Exception):
                jobs = batch_run.partial()
        if jobs is not None and settings is not None:
            from memory_core.index.stages import embed_stats

            sync = EmbedCounts() if in_jobs else EmbedCounts(progress.requests, progress.embedded, progress.tokens)
            embed = embed_stats(settings, provider, sync, jobs)
            if embed.batch is not None and not in_jobs and embed.batch.jobs_pending == 0:
                embed.batch.stopped = False  # the jobs were done; the run stopped after them
        partial = summarize(plan, provider, reason, chunks=None, from_cache=from_cache, embed=embed, built=None,
                            timings=timer.times, embedded_on=embedded_on, progress=progress, error=what)
        partial.chunks_in_flight = progress.in_flight
        if is_stop(exc):  # what stopped it, as a run stopped after its publish says it (not only in `error`)
            partial.stopped = stop_word(exc)
        if jobs is not None:  # the jobs' transcript exchange vectors, apart from their chunks
            partial.exchanges_embedded = jobs[0].exchanges
        exc.run_summary = partial  # type: ignore[attr-defined]
