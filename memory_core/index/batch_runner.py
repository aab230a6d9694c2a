"""Run the embedding of a run's cache misses through a provider's Batch API.

:class:`BatchRun` is the coordinator; it decides, the job steps in :mod:`memory_core.index.batch_jobs`
do. It runs the steps through a :class:`JobOps` executor: :class:`LocalOps` (a thread pool, the
in-process executor's) or the Prefect one in ``flows/batch.py`` (one task per step per job);
the orchestrator (``memory_core.index.pipeline.run_index``) picks it through its executor. The order
of business:

1. Re-attach: every open job in the ledger for this provider configuration that covers a chunk
   this run needs is polled and collected instead of being submitted again (a job whose submit
   was interrupted is first looked up at the provider by its local id). Open jobs that cover
   nothing this run needs are cancelled (``batch.cancel_unneeded``); whatever output they
   already have is still collected into the cache. Only jobs whose owning run is dead (or
   unrecorded) are taken over (``batch_ledger``'s owners): a job another live run is submitting
   or waiting on (a cache file shared by several indexes) is left to it; its chunks are not
   planned again, and when that run ends the job is looked at once more: closed, its vectors
   are in the cache (what is not goes to a new job or sync); still open, this run takes it over.
2. Plan: the remaining misses, across all files of the run, become JSONL jobs split at the
   provider's limits.
3. Run at most ``batch.concurrency`` jobs at once: submit, poll (own deadline), collect.
   Lines that failed inside a job are left to sync calls. A job that fails, expires, is cancelled by
   the provider or disappears counts 1 toward ``batch.failure_limit`` and its unfinished chunks
   are queued again as a new job; a poll that times out is waited out once more, and a second
   timeout counts 2, cancels the job and collects its partial output. A completed job resets
   the count (as the reference). At the limit, batch mode is off for the rest of the run: jobs
   already running are still collected, and every chunk not yet submitted is left to sync calls.
4. ``batch.wait = false``: jobs are submitted and polled once; the ones already done are
   collected, the others stay in the ledger for a later run (``jobs_pending`` in the stats);
   the caller must not build the index from an incomplete cache.

A run that does not use the Batch API (batch mode off, ``--re-embed``) sees to the open jobs of
earlier runs through :class:`LookOnce`, the same coordinator with nothing to submit: each job polled
once and collected or closed, or (``--re-embed``) cancelled and closed with its output unread.

Sync calls are not made here: whatever batch jobs did not put into the cache is a cache miss
of the streamed build that follows (``memory_core.index.streaming``), which embeds it through the same
executor as any other run, so there is one sync embedding loop in memory-core.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from typing import Any

import pyarrow.parquet as pq

from memory_core.embeddings import batch_types as st
from memory_core.embeddings.batch_types import CollectResult, EarlierJobs, JobRecord, JobSpec
from memory_core.embeddings.retry import abandoned_when
from memory_core.errors import ProviderError
from memory_core.index import batch_jobs as J
from memory_core.index import run_stops
from memory_core.index.batch_ledger import BatchLedger, LedgerJob, RunOwner
from memory_core.index.runtypes import EmbedCounts, JobOps, MissResult
from memory_core.storage.cache import EmbeddingCache

log = logging.getLogger("memory_core.batch")

BatchProgressFn = Callable[[str, int, int], None]  # (stage, chunks done, chunks in all)
TIMEOUT_WAITS = 2  # a timed-out poll is waited out once more before it counts (2) as a failure


class Stopped(Exception):
    """Raised inside a step's sleep when the run is shutting down."""




STEPS: dict[str, Callable[..., Any]] = {
    "submit": J.submit_job, "poll": J.poll_job, "collect": J.collect_job, "cancel": J.cancel_job,
    "recover": J.recover_job,
}


class LocalOps:
    """Job steps in a thread pool of this process (one thread per job in flight).

    apsw connections must not be used by two threads at once, so each worker thread gets its
    own connection to the cache file (and a context around it); SQLite's locking serialises
    their writes, as it does for Prefect tasks.
    """

    def __init__(self, ctx: J.BatchContext, *, workers: int) -> None:
        self.ctx = ctx
        self.stop = threading.Event()
        self.local = threading.local()
        self.opened: list[EmbeddingCache] = []
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="batch")

    def _sleep(self, seconds: float) -> None:
        if self.stop.wait(seconds):
            raise Stopped()

    def _thread_ctx(self) -> J.BatchContext:
        ctx = getattr(self.local, "ctx", None)
        if ctx is None:
            base = self.ctx
            cache = EmbeddingCache(base.cache.path, base.cache.provider, base.cache.model, base.cache.provider_key)
            with self.lock:
                self.opened.append(cache)
            ctx = J.BatchContext(base.settings, base.provider, base.client, cache,
                                 BatchLedger.for_cache(cache, index_path=base.ledger.index_path), base.workdir,
                                 sleep=self._sleep)
            self.local.ctx = ctx
        return ctx

    def _run(self, step: str, obj: Any, kw: dict[str, Any]) -> object:
        # a call in flight ends when the run stops (close() sets ``stop``): a poll or download whose
        # answer drips held the pool's shutdown, and the run, past its SIGTERM (audit I, M3)
        with abandoned_when(self.stop):
            return STEPS[step](self._thread_ctx(), obj, **kw)

    def start(self, step: str, obj: Any, **kw: Any) -> Future[Any]:
        return self.pool.submit(self._run, step, obj, kw)

    def wait_any(self, handles: list[Any]) -> list[Any]:
        while True:  # in slices: a stop lost on the way (raised in a finalizer) ends the wait
            done, _ = wait(handles, timeout=run_stops.WAKE_S, return_when=FIRST_COMPLETED)
            if done:
                return list(done)
            run_stops.check()

    # Any: JobOps.result
    def result(self, handle: Any) -> Any:
        return handle.result()

    def settle(self) -> None:
        """No step is running: fold what the worker threads' caches journaled into the cache file,
        where other processes see it (the caches stay open; a later write starts a new journal)."""
        with self.lock:
            opened = list(self.opened)
        for cache in opened:
            try:
                cache.fold()
            except Exception as exc:  # kept in its journal, folded at close or by the next run
                log.warning("batch: could not fold the cache journal of a job step: %s", exc)

    def close(self) -> None:
        self.stop.set()
        self.pool.shutdown(wait=True, cancel_futures=True)
        for cache in self.opened:
            cache.close()
        self.opened.clear()


def miss_hashes(misses: MissResult) -> tuple[set[str], set[str]]:
    """(every hash of the misses, those of transcript exchange vectors that are no chunk's own)."""
    if not misses.misses:
        return set(), set()
    out: set[str] = set()
    exchanges: set[str] = set()
    for batch in pq.ParquetFile(misses.path).iter_batches(batch_size=8192, columns=["hash", "exchange"]):
        hs = batch.column("hash").to_pylist()
        out.update(hs)
        exchanges.update(h for h, ex in zip(hs, batch.column("exchange").to_pylist(), strict=True) if ex)
    return out, exchanges - set(misses.part_chunks)


class BatchRun:
    """One run's batch embedding: re-attach, plan, run jobs, fall back to sync where needed."""

    def __init__(self, ctx: J.BatchContext, misses: MissResult, ops: JobOps, *,
                 progress: BatchProgressFn | None = None) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.misses = misses
        self.ops = ops
        self.progress = progress
        b = self.settings.batch
        self.wait = b.wait
        self.concurrency = b.concurrency
        self.limit = b.failure_limit
        self.timeout_s = b.timeout_minutes * 60
        self.needed: set[str] = set()
        self.exchange_only: set[str] = set()  # of ``needed``: transcript exchange vectors, not chunks
        self.queue: deque[JobSpec] = deque()
        self.attach: deque[JobRecord] = deque()
        self.unneeded: deque[JobRecord] = deque()
        self.inflight: dict[Any, tuple[str, Any, bool]] = {}  # handle -> (step, obj, unneeded)
        self.hashes_of: dict[str, list[str]] = {}  # local id -> chunk hashes (this run's jobs)
        self.sync: set[str] = set()
        self.pending: list[JobRecord] = []
        self.failures = 0
        self.batch_on = True
        self.stats = st.BatchFigures()
        self.tokens_batch = 0
        self.embedded = 0  # chunks
        self.exchanges = 0  # transcript exchange vectors (counted apart, as the streamed build does)
        self.submitted_ids: set[str] = set()  # local ids of the jobs this run submitted
        self.reattached_ids: set[str] = set()
        self.collected_ids: set[str] = set()
        self.owner = RunOwner("", None, None)  # this run's owner lock, held while run() runs
        self.foreign: dict[str, list[str]] = {}  # live other runs' jobs -> the chunk hashes this run needs of them
        self.foreign_deadline: float | None = None
        self.exchanges_from_other_runs = 0

    # -- bookkeeping -----------------------------------------------------------------------
    def _error(self, msg: str) -> None:
        log.warning("%s", msg)
        if len(self.stats.errors) < 10:
            self.stats.errors.append(msg[:300])

    def _fail(self, points: int, msg: str) -> None:
        self.failures += points
        self.stats.failure_points += points
        self._error(msg)
        if self.batch_on and self.failures >= self.limit:
            self.batch_on = False
            self.stats.disabled = True
            self.stats.disabled_reason = (f"{self.failures} batch failure points reached the limit of"
                                             f" {self.limit}; last: {msg}")
            log.warning("batch mode is off for the rest of this run; remaining chunks go through sync calls")
            while self.queue:
                spec = self.queue.popleft()
                self.sync.update(spec.hashes())
                spec.remove_files()

    def _requeue(self, hashes: list[str]) -> None:
        todo = {h for h in hashes if h in self.needed}
        if not todo:
            return
        if not self.batch_on:
            self.sync.update(todo)
            return
        specs = J.plan_jobs(self.ctx, self.misses.path, include=todo)
        self.stats.requeued_chunks += sum(s.requests for s in specs)
        self.queue.extend(specs)

    def _start(self, step: str, obj: Any, unneeded: bool = False, **kw: Any) -> None:
        self.inflight[self.ops.start(step, obj, **kw)] = (step, obj, unneeded)

    def _poll(self, rec: JobRecord, unneeded: bool = False) -> None:
        if self.wait:
            self._start("poll", rec, unneeded, timeout_s=self.timeout_s)
        else:
            self._start("poll", rec, unneeded, max_polls=1)

    # -- the run ---------------------------------------------------------------------------
    def run(self) -> tuple[EmbedCounts, st.BatchFigures]:
        t0 = time.perf_counter()
        self.needed, self.exchange_only = miss_hashes(self.misses)

        def start() -> None:
            claimed = self._reattach()
            self.queue.extend(J.plan_jobs(self.ctx, self.misses.path, exclude=claimed))

        self._owned_loop(start)
        return self._result(time.perf_counter() - t0)

    def _owned_loop(self, start: Callable[[], None]) -> None:
        """``start`` (the jobs to follow), then the loop until every step ended, with the ledger's
        owner lock held throughout: held until every step ended and closed its cache (its vectors
        are then in the cache file, where a run waiting on this one's jobs looks for them)."""
        self.owner = RunOwner.acquire(self.ctx.ledger.path)
        try:
            start()
            try:
                self._loop()
            finally:
                self.ops.close()
        finally:
            self.owner.release()

    def _reattach(self) -> set[str]:
        """Take over the open jobs of dead runs that this run needs (or may cancel); follow those of
        live runs. Returns the chunk hashes not to plan again."""
        claimed: set[str] = set()
        for job in self.ctx.ledger.open_jobs():
            hashes = self.ctx.ledger.hashes(job.local_id)
            needed = any(h in self.needed for h in hashes)
            # (a cache file shared by several indexes: never cancel another index's job)
            unneeded = (not needed and self.settings.batch.cancel_unneeded
                        and job.index_path in ("", self.ctx.ledger.index_path))
            if not (needed or unneeded):
                continue
            if not self._take(job):
                if needed:
                    self._follow(job, hashes)
                    claimed.update(hashes)
                continue
            rec = job.record()
            if needed:
                self.attach.append(rec)
                self.reattached_ids.add(rec.local_id)
                self.hashes_of[rec.local_id] = hashes
                claimed.update(hashes)
                self.stats.jobs_reattached += 1
            else:
                self.unneeded.append(rec)
        if self.attach:
            log.info("re-attaching to %d batch job(s) from earlier runs", len(self.attach))
        return claimed

    def _take(self, job: LedgerJob) -> bool:
        """Whether this run now owns ``job``: its owner was dead (or unrecorded) and no other run
        took it first. Never a job whose owner is alive."""
        if job.owner and job.owner != self.owner.token and self.ctx.ledger.owner_alive(job.owner):
            return False
        return self._claim(job)

    def _claim(self, job: LedgerJob) -> bool:
        if not self.owner.held:  # let go while waiting on other runs: a new token for new work
            self.owner = RunOwner.acquire(self.ctx.ledger.path)
        return self.ctx.ledger.claim(job.local_id, job.owner, self.owner.token, self.owner.info)

    def _follow(self, job: LedgerJob, hashes: list[str]) -> None:
        self.foreign[job.local_id] = [h for h in hashes if h in self.needed]
        self.stats.jobs_of_other_runs += 1
        if self.foreign_deadline is None:
            self.foreign_deadline = time.monotonic() + self.timeout_s * TIMEOUT_WAITS
        log.info("batch job %s (%s) belongs to another live run (%s) on this cache file: left to it; its %d"
                 " chunk(s) this run needs are taken from it when it ends", job.local_id, job.state,
                 job.owner_info or "?", len(self.foreign[job.local_id]))

    def _check_foreign(self) -> None:
        """Look again at the jobs of other live runs: a run that ended leaves its vectors in the cache
        (what is not there is queued again); a job still open whose run died is taken over."""
        for lid in list(self.foreign):
            job = self.ctx.ledger.get(lid)
            if job is not None and job.owner != self.owner.token and self.ctx.ledger.owner_alive(job.owner):
                continue  # (closed, its vectors may still be in that run's journal: they are once it ends)
            if job is not None and job.open:
                if not self._claim(job):
                    continue  # another run took it first: followed on, with its new owner
                del self.foreign[lid]
                log.info("batch job %s: its run ended and left it open; re-attaching", lid)
                self.attach.append(job.record())
                self.reattached_ids.add(lid)
                self.hashes_of[lid] = self.ctx.ledger.hashes(lid)
                self.stats.jobs_reattached += 1
                continue
            hashes = self.foreign.pop(lid)
            have = self.ctx.cache.has_many(hashes, self.ctx.provider.dims) if hashes else set()
            n_ex = sum(1 for h in have if h in self.exchange_only)
            self.stats.chunks_from_other_runs += len(have) - n_ex
            self.exchanges_from_other_runs += n_ex
            self._requeue([h for h in hashes if h not in have])

    def _await_foreign(self) -> bool:
        """With nothing of its own in flight: wait one poll interval for the other runs' jobs.
        False when this run waits no more (``batch.wait = false``: they are pending; past the
        deadline: their chunks go through sync calls, the jobs are left to their runs)."""
        if not self.wait:
            for lid in list(self.foreign):
                job = self.ctx.ledger.get(lid)
                if job is not None:
                    self.pending.append(job.record())
                del self.foreign[lid]
            return False
        if self.owner.held:
            # Nothing of this run's own is in flight: what its steps collected goes into the cache
            # file and its lock is let go, so a run waiting on this one's jobs finds them done and
            # two runs never wait on each other (a cycle through a job taken over from a dead run).
            # Its jobs left open (pending, unreadable) are for a later run, as when a run ends.
            settle = getattr(self.ops, "settle", None)
            if settle is not None:
                settle()
            self.owner.release()
        if self.foreign_deadline is not None and time.monotonic() > self.foreign_deadline:
            for lid, hashes in list(self.foreign.items()):
                self.sync.update(hashes)
                self._error(f"batch job {lid} of another live run is still open after"
                            f" {self.timeout_s * TIMEOUT_WAITS:.0f}s: left to that run; its {len(hashes)}"
                            " chunk(s) go through sync calls this run")
            self.foreign.clear()
            return False
        self.ctx.sleep(self.settings.batch.poll_interval_s)
        self._check_foreign()
        return True

    def _fill(self) -> None:
        while len(self.inflight) < self.concurrency:
            if self.unneeded:
                rec = self.unneeded.popleft()
                self._start("recover" if rec.job_id is None else "cancel", rec, True)
            elif self.attach:
                rec = self.attach.popleft()
                if rec.job_id is None:
                    self._start("recover", rec)
                else:
                    self._poll(rec)
            elif self.batch_on and self.queue:
                spec = self.queue.popleft()
                spec.owner, spec.owner_info = self.owner.token, self.owner.info
                self.hashes_of[spec.local_id] = spec.hashes()
                self.submitted_ids.add(spec.local_id)
                self._start("submit", spec)
            else:
                break

    def _loop(self) -> None:
        while True:
            self._check_foreign()
            self._fill()
            if not self.inflight:
                if self.foreign and self._await_foreign():
                    continue
                return
            for handle in self.ops.wait_any(list(self.inflight)):
                step, obj, unneeded = self.inflight.pop(handle)
                try:
                    out = self.ops.result(handle)
                except ProviderError as exc:
                    self._step_failed(step, obj, exc)
                else:
                    self._step_done(step, obj, out, unneeded)

    def _step_done(self, step: str, obj: Any, out: Any, unneeded: bool) -> None:
        if step == "recover":
            if out is None:  # never reached the provider: its chunks are needed again
                self._requeue(self.hashes_of.pop(obj.local_id, []))
            elif unneeded:
                self._start("cancel", out, True)
            else:
                self._poll(out)
        elif step == "submit":
            self.stats.jobs_submitted += 1
            spec: JobSpec = obj
            spec.remove_files()
            self._poll(out)
        elif step == "poll":
            self._polled(out, unneeded)
        elif step == "cancel":
            if out.terminal:
                self._start("collect", out, unneeded)
            elif not unneeded:  # the provider is slow to cancel: left in the ledger
                self.sync.update(h for h in self.hashes_of.get(out.local_id, []) if h in self.needed)
            if unneeded:
                self.stats.jobs_cancelled += 1
        elif step == "collect":
            self._collected(obj, out, unneeded)

    def _polled(self, rec: JobRecord, unneeded: bool) -> None:
        if rec.status == st.COMPLETED:
            self._start("collect", rec, unneeded)
        elif rec.terminal:
            if not unneeded:
                self.stats.jobs_failed += 1
                self._fail(1, f"{rec.label} {rec.status}: {rec.error or rec.provider_status}")
            self._start("collect", rec, unneeded)
        elif rec.status == st.TIMEOUT:
            if rec.timeouts < TIMEOUT_WAITS:
                log.warning("%s: no result after %.0fs; waiting once more", rec.label, self.timeout_s)
                rec.status = st.RUNNING
                self._poll(rec, unneeded)
            else:
                self.stats.jobs_timed_out += 1
                self._fail(2, f"{rec.label} timed out twice ({rec.error}); cancelled")
                self._start("cancel", rec, unneeded)
        else:  # wait = false: still running
            self.pending.append(rec)

    def _collected(self, rec: JobRecord, res: CollectResult, unneeded: bool) -> None:
        self.stats.jobs_collected += 1
        self.collected_ids.add(rec.local_id)
        # only what this run needs counts as embedded; a re-attached job may also cover chunks of
        # notes deleted or changed since it was submitted (the surplus, reported apart)
        useful = [h for h in res.stored_hashes if h in self.needed]
        n_ex = sum(1 for h in useful if h in self.exchange_only)
        self.stats.chunks_via_batch += len(useful) - n_ex
        self.stats.exchanges_via_batch += n_ex
        self.stats.surplus_via_batch += res.stored - len(useful)
        self.embedded += len(useful) - n_ex
        self.exchanges += n_ex
        self.tokens_batch += res.tokens + res.tokens_unusable  # unusable lines were billed too
        self.stats.tokens_unusable += res.tokens_unusable
        self.hashes_of.pop(rec.local_id, None)
        if unneeded:
            return
        if res.problems.get("too_large"):  # its output cannot be read (batch_jobs._refused): said once, whole
            self.stats.jobs_failed += 1
            self._fail(1, f"{rec.label}: {res.examples[0] if res.examples else res.summary()}")
            self.sync.update(h for h in res.failed_hashes if h in self.needed)
        elif rec.status == st.COMPLETED:
            unusable = len(res.failed_hashes)
            if res.lines and unusable and (res.stored == 0 or 2 * unusable > res.lines):
                # "completed" with no usable vector, or mostly unusable ones (e.g. every vector of the
                # wrong size): a failure, so a systematic fault reaches the failure limit
                self.stats.jobs_failed += 1
                self._fail(1, f"{rec.label} completed with {unusable} of {res.lines} line(s) unusable"
                              f" ({res.summary()})")
            else:
                self.failures = 0  # success resets the count, as the reference
            failed = [h for h in res.failed_hashes if h in self.needed]
            if failed:
                self.stats.lines_failed += len(failed)
                self._error(f"{rec.label}: {len(failed)} line(s) without a vector ({res.summary()});"
                            " re-embedding them through sync calls" + (f"; e.g. {res.examples[0]}"
                                                                       if res.examples else ""))
                self.sync.update(failed)
        else:  # failed, expired, cancelled or lost: what it did not finish is queued again
            self._requeue(res.failed_hashes)
        if self.progress:
            self.progress("batch", self.stats.chunks_via_batch, self.misses.chunk_misses)  # chunks, as the build

    def _step_failed(self, step: str, obj: Any, exc: ProviderError) -> None:
        if isinstance(exc, J.LookupUnknown):
            self._lookup_unknown(step, obj, exc)
        elif step == "submit":
            spec: JobSpec = obj
            self.stats.jobs_failed += 1
            self.hashes_of.pop(spec.local_id, None)
            self._fail(1, f"{self.ctx.provider.name} batch submit failed: {exc}")
            retry = replace(spec, local_id=J.new_local_id())
            if self.batch_on:
                self.queue.append(retry)
            else:
                self.sync.update(h for h in spec.hashes() if h in self.needed)
                spec.remove_files()
        else:
            # A job we cannot poll, cancel or read: it stays open in the ledger; its chunks go
            # through sync calls so this run can finish.
            rec: JobRecord = obj
            self.stats.jobs_failed += 1
            self._fail(1, f"{rec.label}: {step} failed: {exc}")
            self.sync.update(h for h in self.hashes_of.pop(rec.local_id, []) if h in self.needed)

    def _lookup_unknown(self, step: str, obj: Any, exc: J.LookupUnknown) -> None:
        """The provider's job list could not be read, so whether a job exists (and is being paid
        for) is unknown: never abandon it nor create it again. Its ledger row stays open (a later
        run looks it up again and re-attaches it); its chunks go through sync calls this run."""
        hashes = self.hashes_of.pop(obj.local_id, [])
        todo = [h for h in hashes if h in self.needed]
        self.sync.update(todo)
        if step == "submit":  # a create whose outcome is unknown counts as a failed submit
            spec: JobSpec = obj
            spec.remove_files()
            self.stats.jobs_failed += 1
            self._fail(1, f"{exc}; not created again; left open in the ledger for a later run;"
                          f" its {len(todo)} chunk(s) go through sync calls this run")
        else:
            self._error(f"{exc}; left open in the ledger for a later run; its {len(todo)} chunk(s) go"
                        " through sync calls this run")

    def _submitted(self) -> list[Any]:
        """The ledger's rows of the jobs this run submitted that reached the provider."""
        jobs = (self.ctx.ledger.get(lid) for lid in sorted(self.submitted_ids))
        return [j for j in jobs if j is not None and j.job_id]

    def partial(self) -> tuple[EmbedCounts, st.BatchFigures]:
        """What a run stopped in the middle of its jobs (cancelled, failed) had done: the jobs
        it submitted (their requests and tokens were sent), what it collected, and the jobs left
        open at the provider, which stay in the ledger for the next run to re-attach to. Read
        after :meth:`run` unwound (its steps ended)."""
        s = replace(self.stats, errors=list(self.stats.errors))
        submitted = self._submitted()
        mine = self.submitted_ids | self.reattached_ids
        # at the provider: jobs with its id (a submit stopped before its create returned, e.g. while
        # waiting to retry it, left a row but no job: "1 job(s) left open at the provider ()"; the
        # next run looks such a row up, and closes it when the provider has no such job)
        left = [j for j in self.ctx.ledger.open_jobs() if j.local_id in mine and j.job_id]
        s.jobs_submitted = max(s.jobs_submitted, len(submitted))
        s.requests_submitted = sum(j.requests for j in submitted)
        s.tokens_submitted = sum(j.tokens for j in submitted)
        s.jobs_pending, s.pending_job_ids = len(left), [j.job_id for j in left]
        s.stopped = True
        # tokens sent through batch: what was collected, plus the jobs this run sent that nobody collected yet
        uncollected = sum(j.tokens for j in submitted if j.local_id not in self.collected_ids)
        return EmbedCounts(requests=s.jobs_submitted, embedded=self.embedded, tokens=self.tokens_batch + uncollected,
                           exchanges=self.exchanges), s

    def _result(self, seconds: float) -> tuple[EmbedCounts, st.BatchFigures]:
        """(what the jobs embedded, the job figures); ``memory_core.index.stages.embed_stats`` adds the
        sync requests' and the cost."""
        s = self.stats
        s.jobs_pending = len(self.pending)
        s.pending_job_ids = [r.job_id for r in self.pending]
        left = {h for h in self.sync if h in self.needed}
        s.exchanges_left_to_sync = len(left & self.exchange_only)
        s.chunks_left_to_sync = len(left) - s.exchanges_left_to_sync
        s.seconds = round(seconds, 3)
        submitted = self._submitted()
        s.requests_submitted = sum(j.requests for j in submitted)
        s.tokens_submitted = sum(j.tokens for j in submitted)
        return EmbedCounts(requests=s.jobs_submitted, embedded=self.embedded, tokens=self.tokens_batch,
                           exchanges=self.exchanges), s


# -- the open jobs of earlier runs, for a run that does not use the Batch API ----------------------

class LookOnce(BatchRun):
    """A run that does not use the Batch API (batch mode off, ``index --re-embed``) and the jobs
    earlier runs left open in the ledger for its provider configuration (audit I, M1: it embedded
    their chunks through sync calls, the jobs were billed as well and stayed open for ever).

    With ``discard`` empty (batch mode off): each job is polled once, never waited on, through the
    batch run's own steps and bookkeeping: a completed job is collected (its vectors go into the
    cache as a batch run takes them, and the build that follows finds them there), a failed,
    expired or cancelled one is closed as a batch run closes it (what it finished is read), one
    still running is left open (its chunks go through sync calls). Jobs of any index on the cache
    file are collected; jobs of another live run are not touched.

    With ``discard`` (why their output is not wanted: ``index --re-embed``, which replaces the
    vectors they hold): the jobs of this index are cancelled at the provider and closed without
    their output being read (:func:`memory_core.index.batch_jobs.cancel_job`); one whose cancel
    fails stays open.

    Nothing is submitted. The first provider error ends the looking: the jobs not yet looked at
    stay open as they are, and the run goes on by sync calls."""

    def __init__(self, ctx: J.BatchContext, ops: JobOps, *, discard: str = "") -> None:
        super().__init__(ctx, MissResult(path="", misses=0, hits=0), ops)
        self.wait = False  # one poll each
        self.batch_on = False  # nothing is submitted again: what a job does not embed goes to sync calls
        self.discard = discard
        self.seen = EarlierJobs()
        self.names: dict[str, str] = {}  # local id -> the id the notes give

    def look(self) -> EarlierJobs:
        self._owned_loop(self._adopt)
        self.seen.running += [self.names.get(r.local_id, r.job_id or r.local_id) for r in self.pending]
        self.seen.vectors = self.stats.chunks_via_batch + self.stats.exchanges_via_batch
        self.seen.tokens = self.tokens_batch
        return self.seen

    def _adopt(self) -> None:
        for job in self.ctx.ledger.open_jobs():
            name = str(job.job_id or job.local_id)
            self.names[job.local_id] = name
            # (never cancel another index's job on a shared cache file: as cancel_unneeded)
            mine = job.index_path in ("", self.ctx.ledger.index_path)
            if (self.discard and not mine) or not self._take(job):
                self.seen.others.append(name)
                continue
            rec = job.record()
            hashes = self.ctx.ledger.hashes(job.local_id)
            self.hashes_of[rec.local_id] = hashes
            self.needed.update(hashes)  # what it holds counts as collected, not as surplus
            self.reattached_ids.add(rec.local_id)
            self.stats.jobs_reattached += 1
            (self.unneeded if self.discard else self.attach).append(rec)

    def _name(self, rec: JobRecord) -> str:
        return self.names.get(rec.local_id, rec.job_id or rec.local_id)

    def _fill(self) -> None:
        while self.discard and self.unneeded and len(self.inflight) < self.concurrency:
            rec = self.unneeded.popleft()
            if rec.job_id is None:
                self._start("recover", rec, True)
            else:
                self._start("cancel", rec, True, discard=self.discard)
        super()._fill()

    def _step_done(self, step: str, obj: Any, out: Any, unneeded: bool) -> None:
        if step == "recover" and out is None:  # never reached the provider: closed as abandoned
            self.seen.closed.append(self._name(obj))
        elif step == "recover":  # found at the provider by its local id
            self.names[out.local_id] = out.job_id or out.local_id
            if self.discard:
                self._start("cancel", out, True, discard=self.discard)
                return
        elif self.discard and step == "cancel":
            rec: JobRecord = out
            (self.seen.cancelled if rec.status == st.CANCELLED else self.seen.dropped).append(self._name(rec))
            self.stats.jobs_cancelled += 1
            return
        super()._step_done(step, obj, out, unneeded)

    def _collected(self, rec: JobRecord, res: CollectResult, unneeded: bool) -> None:
        ok = rec.status == st.COMPLETED and not res.problems.get("too_large")
        (self.seen.collected if ok else self.seen.closed).append(self._name(rec))
        super()._collected(rec, res, unneeded)

    def _step_failed(self, step: str, obj: Any, exc: ProviderError) -> None:
        """Said once, by the run's warning: the job stays open as it is, and so do those not yet
        looked at (a Batch API that fails for one job is asked no more this run)."""
        log.info("batch: %s of %s failed: %s", step, self._name(obj), exc)
        self.seen.errors.append(str(exc)[:300])
        self.seen.unreached.append(self._name(obj))
        self.hashes_of.pop(obj.local_id, None)
        for queue in (self.attach, self.unneeded):
            while queue:
                self.seen.unreached.append(self._name(queue.popleft()))
