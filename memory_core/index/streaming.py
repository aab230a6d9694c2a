"""The build of every run: chunk, look up, embed and insert as one stream.

Both executors run it (the CLI's in-process one and the Prefect flow's): handing work from
stage to stage through files cost about 4x the time SQLite needs to insert the rows, so the
stages run as one stream instead:

* files are read and chunked in order; every new chunk hash is looked up in the cache in
  groups of :data:`LOOKUP_ROWS` (one read gives the hit and its vector);
* misses fill request groups exactly as :func:`memory_core.embeddings.grouping.plan_groups`
  would (the provider's input and token limits), which go to the executor as soon as they are
  full (twice its parallelism in flight: a thread pool, one request at a time for the local
  model, whose torch code releases the GIL, or Prefect tasks on threads or a Dask cluster);
* each response is committed to the cache as it arrives (a killed run keeps what it paid for);
* a row goes to the temp index once its vector is there, in file order, :func:`insert_rows` at
  a time; a large run writes the temp index in a child process
  (:class:`memory_core.index.writer_proc.ProcessIndexWriter`), so SQLite's work overlaps ours.

Memory stays flat: rows wait only for the request groups in flight; a vector is dropped once
no waiting row needs it (a later duplicate reads it back from the cache).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter, deque
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import Any

import numpy as np

from memory_core.config import Settings
from memory_core.embeddings.base import EmbeddingProvider
from memory_core.embeddings.grouping import TOKEN_MARGIN
from memory_core.errors import RunError
from memory_core.failpoints import failpoint
from memory_core.index import run_stops
from memory_core.index.chunking import chunk_id
from memory_core.index.runtypes import (
    BuildResult,
    ChunkResult,
    EmbedCounts,
    Executor,
    Progress,
    ProgressFn,
    RunPlan,
)
from memory_core.index.stages import chunk_file, chunk_parts, finish_meta
from memory_core.index.writer import BuildWriter, FileRow, IndexWriter, InPlaceBusyError, edit_in_place
from memory_core.storage import vectors
from memory_core.storage.cache import EmbeddingCache, preserve_leaving
from memory_core.storage.indexmeta import IndexRecord, chunk_params
from memory_core.storage.store import probe_index

LOOKUP_ROWS = 512
# Rows per insert batch handed to the index writer, at most this many ...
INSERT_ROWS = 4096
# ... and at most about this many bytes (text + vector) per batch, so a batch of 1,536-d rows
# stays near the size of a 384-d one (the writer process's queue holds a few batches).
# Measured at 41k chunks: batches of 4,096 rows built 6-8% faster than batches of 1,024.
INSERT_BYTES = 12 * 1024 * 1024

# Above this many bytes of sources to (re)index, the temp index is written by a child process
# (starting one costs ~0.2 s; below this the whole build is about that fast anyway).
# Small incremental runs edit the live file in place instead (memory_core.index.writer.edit_in_place).
# MEMORY_CORE_WRITER=process|inline|inplace overrides (tests, benchmarks).
PROCESS_WRITER_BYTES = 2 * 1024 * 1024
# The progress callback is called at most this often (and at the end).
PROGRESS_EVERY_S = 0.2


def insert_rows(dims: int | None) -> int:
    """Rows per insert batch for vectors of ``dims`` dimensions."""
    if not dims:
        return INSERT_ROWS
    return min(INSERT_ROWS, max(256, INSERT_BYTES // (dims * 4 + 2048)))


def use_process_writer(source_bytes: int) -> bool:
    mode = os.environ.get("MEMORY_CORE_WRITER", "auto")
    if mode == "process":
        return True
    if mode in ("inline", "copy", "inplace"):
        return False
    return source_bytes >= PROCESS_WRITER_BYTES


class _Stream:
    """State of one streamed build (see the module docstring)."""

    def __init__(self, provider: EmbeddingProvider, cache: EmbeddingCache | None, executor: Executor,
                 progress: Progress) -> None:
        self.provider = provider
        self.cache = cache
        self.executor = executor
        self.progress = progress
        self.with_vectors = provider.has_vectors and cache is not None
        # the dimension of the index this run writes: the provider's when it is known before its
        # first answer; else the live index's (an incremental run), else the provider's first
        # answer (a full run: see learn_dims). Looked-up vectors of another length are misses.
        self.dims: int | None = provider.dims
        self.index_dims: int | None = None  # an incremental run: the dimension the live index holds
        self.workers = executor.parallelism(provider)
        self.groups = 0
        self.budget = max(1, int(provider.max_tokens_per_request * TOKEN_MARGIN))
        self.max_inputs = provider.max_inputs_per_request
        # rows (ChunkRow field order, embedding None) waiting for their vector, in file order
        self.waiting: deque[list[Any]] = deque()
        self.need: Counter[str] = Counter()  # waiting rows per hash
        self.part_need: Counter[str] = Counter()  # waiting rows per exchange hash (not counted as progress)
        self.part_text: dict[str, str] = {}  # texts of exchanges not embedded yet (a cache eviction re-embeds)
        self.vecs: dict[str, bytes] = {}  # vectors that waiting rows need
        # Every hash of this run, as Python's hash() of the hex string (an int, cached on the str):
        # ~60 bytes a chunk instead of ~140 for the string, the one thing a run keeps per chunk.
        # Two hashes sharing a hash() (~1e-9 at 100k chunks) only cost a cache read: the second
        # is refetched, not found, and looked up like a new one.
        self.seen: set[int] = set()
        self.chunk_seen: set[int] = set()  # the same for the chunks' own hashes (what the new index holds by hash)
        self.pending: set[str] = set()  # in the open group or in flight
        self.lookup: list[tuple[str, str]] = []  # new hashes (and texts) not yet looked up
        self.refetch: list[str] = []  # hashes seen before whose vector was dropped: read from the cache
        self.group_h: list[str] = []
        self.group_t: list[str] = []
        self.group_tokens = 0
        self.inflight: dict[Future[np.ndarray], tuple[list[str], int]] = {}
        # A cold cache (first build, new model) has nothing to look up: only this run's own
        # vectors can be in it, and the run keeps track of those.
        self.cold = cache is not None and cache.is_empty()
        self.hits = 0
        self.misses = 0
        self.stats = EmbedCounts()

    # -- vectors ------------------------------------------------------------------------
    def add_row(self, row: list[Any], text: str, parts: list[tuple[str, str]] | None = None,
                days: list[tuple[str, int, str]] | None = None) -> None:
        """Queue a chunk row; ``parts``: (hash, text) of its exchanges, whose vectors the row also
        waits for (``row[11]``: their hashes, then their vectors); ``days``: when a transcript
        chunk was written (``row[12]``, :attr:`memory_core.index.writer.ChunkRow.days`)."""
        h = row[5]
        self.chunk_seen.add(hash(h))
        row.append([ph for ph, _ in parts] if parts and self.with_vectors else None)
        row.append(days or None)
        self.waiting.append(row)
        if not self.with_vectors:
            self.progress.ready += 1
            return
        self.need[h] += 1
        for ph, ptext in parts or ():
            self.part_need[ph] += 1
            if ph not in self.vecs:
                self.part_text.setdefault(ph, ptext)
                self._want(ph, ptext)
        if h in self.vecs:
            self.progress.ready += 1
            self.progress.cached += 1
            return
        self._want(h, text)

    def _exchange_only(self, h: str) -> bool:
        """A transcript exchange's vector that no chunk of the run has as its own."""
        return bool(self.part_need.get(h)) and not self.need.get(h)

    def _want(self, h: str, text: str) -> None:
        """Have the vector of ``h`` looked up (and embedded if missing), once."""
        if h in self.pending or h in self.vecs:
            return
        self.pending.add(h)
        key = hash(h)
        if key in self.seen:
            self.refetch.append(h)
        else:
            self.seen.add(key)
            self.lookup.append((h, text))
        if len(self.lookup) + len(self.refetch) >= LOOKUP_ROWS:
            self.resolve()

    def _text_of(self, h: str) -> str:
        got = self.part_text.get(h)
        return got if got is not None else next(r[7] for r in self.waiting if r[5] == h)

    def resolve(self) -> None:
        """Look up the new hashes; misses go into request groups."""
        assert self.cache is not None
        if self.dims is None and self.lookup and not self.cold:
            self.learn_dims()
        if self.refetch:
            got = self.cache.get_many(self.refetch, self.dims)
            self.vecs.update(got)
            self.pending.difference_update(got)
            self.progress.ready += (n := sum(self.need[h] for h in got))
            self.progress.cached += n
            lost = [h for h in self.refetch if h not in got]
            self.refetch = []
            if lost:  # evicted or deleted behind our back: embed again
                self.lookup.extend((h, self._text_of(h)) for h in lost)
        if not self.lookup:
            return
        got = {} if self.cold else self.cache.get_many((h for h, _ in self.lookup), self.dims)
        self.vecs.update(got)
        self.pending.difference_update(got)
        exchange_hits = sum(1 for h in got if self._exchange_only(h))
        self.hits += len(got) - exchange_hits  # chunks; the exchanges' apart
        self.progress.cache_hits = self.hits
        self.stats.exchanges_cached += exchange_hits
        self.progress.ready += (n := sum(self.need[h] for h in got))
        self.progress.cached += n
        for h, text in self.lookup:
            if h in got:
                continue
            self.misses += 1
            tokens = self.provider.estimate_tokens(text)
            if self.group_h and (len(self.group_h) >= self.max_inputs or self.group_tokens + tokens > self.budget):
                self.submit()
            self.group_h.append(h)
            self.group_t.append(text)
            self.group_tokens += tokens
        self.lookup = []

    def learn_dims(self) -> None:
        """A full run whose provider does not say its dimension before answering (an unknown
        model, no ``remote.dimensions``): its first looked-up text is embedded alone, first, so
        the run builds at the dimension the provider returns now; vectors of another length in
        the live index or the cache are misses, embedded again (one request: a rebuild after the
        provider changed dimension mixed the old vectors with the new and failed for ever)."""
        h, text = self.lookup.pop(0)
        self.misses += 1
        if self.cache is not None and self.cache.answers is not None:  # one text: its answer is checked
            self.cache.answers.expect([h], [text])
        fut = self.executor.embed(self.provider, self.cache, [h], [text], self.groups)
        self.groups += 1
        self.inflight[fut] = ([h], self.provider.estimate_tokens(text))
        self.drain(0)

    def check_dims(self, got: np.ndarray) -> None:
        """The provider's answer has the run's dimension (the first answer sets it when unknown)."""
        n = int(got.shape[1]) if got.ndim == 2 else 0
        if self.dims is None:
            self.dims = n
            return
        if n == self.dims:
            return
        who = f"{self.provider.name} / {self.provider.model}"
        if self.index_dims is not None and self.index_dims == self.dims:
            raise RunError(f"the provider now returns {n}-d vectors, the index holds {self.dims}-d ({who}); the index"
                           " was left as it was (vectors of two sizes are never mixed): a full rebuild"
                           f" (`memory-core index --full`, a flow's `full` parameter) rebuilds it with {n}-d vectors,"
                           f" embedding again what is not cached at {n} dimensions")
        raise RunError(f"the provider returned {n}-d vectors after {self.dims}-d ones in this run ({who}); set"
                       " remote.dimensions if the model can answer either")

    def submit(self) -> None:
        if not self.group_h:
            return
        if self.cache is not None and self.cache.answers is not None:  # one or two texts: the answer is checked
            self.cache.answers.expect(self.group_h, self.group_t)
        fut = self.executor.embed(self.provider, self.cache, self.group_h, self.group_t, self.groups)
        self.groups += 1
        self.inflight[fut] = (self.group_h, self.group_tokens)
        self.group_h, self.group_t, self.group_tokens = [], [], 0
        self.drain(self.workers * 2)

    def drain(self, block_until: int) -> None:
        """Take in every finished request; wait while more than ``block_until`` are in flight.

        Finished requests are taken in even when there is no need to wait: their rows become
        ready for the writer at once (waiting until ``workers * 2`` groups were in flight held
        the first insert back ~0.4 s at 99k chunks, with the vectors long there)."""
        while self.inflight:
            done = {fut for fut in self.inflight if fut.done()}
            if not done:
                if len(self.inflight) <= block_until:
                    return
                # in slices: a stop lost on the way (raised in a finalizer) ends the wait
                done, _ = wait(list(self.inflight), timeout=run_stops.WAKE_S, return_when=FIRST_COMPLETED)
                if not done:
                    run_stops.check()
                    continue
            for fut in done:
                hashes, tokens = self.inflight.pop(fut)
                got = np.ascontiguousarray(fut.result(), dtype="<f4")
                self.stats.add(len(hashes), tokens, sum(1 for h in hashes if self._exchange_only(h)))
                self._copy_counts()  # received and cached, whatever follows
                self.check_dims(got)
                for i, h in enumerate(hashes):
                    self.vecs[h] = got[i].tobytes()
                    self.pending.discard(h)
                self.progress.ready += sum(self.need[h] for h in hashes)
                self.report()

    def report(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.on_progress is not None and (force or now - self.last_report >= PROGRESS_EVERY_S):
            self.last_report = now
            self.on_progress(self.progress)

    on_progress: ProgressFn | None = None
    last_report = 0.0
    checkpointer: threading.Thread | None = None

    def finish_vectors(self) -> None:
        if self.with_vectors:
            self.resolve()
            self.submit()
            self.drain(0)
            assert self.cache is not None
            # beside the index's last inserts and commit (apsw releases the GIL)
            self.checkpointer = threading.Thread(target=self.cache.checkpoint, name="cache-checkpoint")
            self.checkpointer.start()

    # -- rows -----------------------------------------------------------------------------
    def ready_rows(self, limit: int) -> list[tuple[Any, ...]]:
        """Up to ``limit`` rows from the head of the queue whose vectors are there."""
        out: list[tuple[Any, ...]] = []
        waiting, vecs, need = self.waiting, self.vecs, self.need
        size = self.dims * 4 if self.dims else None
        while waiting and len(out) < limit:
            row = waiting[0]
            if self.with_vectors:
                h = row[5]
                emb = vecs.get(h)
                if emb is None or (row[11] and any(ph not in vecs for ph in row[11])):
                    break
                if size is None:
                    self.dims, size = len(emb) // 4, len(emb)
                elif len(emb) != size:  # never: lookups and answers are held to the run's dimension
                    raise RunError(f"the vector for {row[1]} has {len(emb) // 4} dims, the index {self.dims}")
                row[9] = emb
                phs = row[11]
                if phs:
                    row[11] = [vecs[ph] for ph in phs]
                    for ph in phs:
                        self.part_need[ph] -= 1
                        if not self.part_need[ph]:
                            del self.part_need[ph]
                            self.part_text.pop(ph, None)
                            if not need.get(ph):
                                vecs.pop(ph, None)
                need[h] -= 1
                if not need[h]:
                    del need[h]
                    if not self.part_need.get(h):
                        del vecs[h]
            waiting.popleft()
            out.append(tuple(row))
        return out

    def count_finished(self) -> None:
        """Count the requests that finished but were not taken in yet (a run ending early: its
        partial summary says what was received and cached)."""
        for fut in [f for f in self.inflight if f.done() and not f.cancelled() and f.exception() is None]:
            hashes, tokens = self.inflight.pop(fut)
            self.stats.add(len(hashes), tokens, sum(1 for h in hashes if self._exchange_only(h)))
        self._copy_counts()

    def _copy_counts(self) -> None:
        p, c = self.progress, self.stats
        p.requests, p.embedded, p.tokens = c.requests, c.embedded, c.tokens

    def close(self, wait_running: bool = True) -> None:
        """Cancel requests not started. The running ones store their vectors in the cache as
        they arrive, whether or not anyone waits for them (a cancelled run keeps what it was
        sent back); a run that failed does not wait for them."""
        # a request the executor cannot cancel here (one queued behind a Prefect task runner, whose
        # future here is already running) is not sent either: a cancelled run sent them during its
        # grace and dropped what they returned after it, so the rerun paid for them again
        # (the thirty-ninth session's audit E). Only for a run that stopped or failed: one that
        # finished waits for every request, and a fallback's run binds a new hold
        if not wait_running:
            self.executor.hold()
        for fut in self.inflight:
            fut.cancel()
        running = [fut for fut in self.inflight if not fut.cancelled()]
        if wait_running:
            wait(running)
        elif running:
            # a run that stopped: the requests already sent are paid for; their vectors are taken
            # in (cached and counted) if they return within STOP_GRACE_S (a cancelled run said
            # 448 embedded while its running requests went on caching: the rerun found 593)
            wait(running, timeout=STOP_GRACE_S)
            # then no longer: a request to a stalled provider (each attempt up to remote.timeout_s,
            # and its retries) held the stopped run for minutes
            self.executor.abandon()
            wait(running, timeout=ABANDON_WAIT_S)
            self.count_finished()
        # what is still running: said in the run's partial summary
        self.progress.in_flight = sum(len(h) for fut, (h, _) in self.inflight.items()
                                      if not fut.cancelled() and not fut.done())
        self.inflight.clear()
        if self.checkpointer is not None:
            self.checkpointer.join()


STOP_GRACE_S = 10.0
"""How long a run that stopped waits for its embedding requests already running (their vectors are paid for)."""
ABANDON_WAIT_S = 2.0
"""How long it then waits for them to give up (``Executor.abandon``: at most ``retry.ABANDON_POLL_S``)."""


def scan_plan_of(writer: BuildWriter, live_meta: dict[str, Any] | None, counts: dict[str, int]) -> vectors.ScanPlan | None:
    """How searches of the index this run leaves read its vectors (issue 39): measured on its
    own vectors by the writer (:func:`memory_core.storage.vectors.measure_scan`) when the index
    is new, was never measured, or its vector count moved by more than
    :data:`memory_core.storage.vectors.RECHECK_CHANGE` since it was; else the live index's
    record, kept (its provider, and so its kind of vectors, change only with a full rebuild)."""
    prior = vectors.ScanPlan.from_meta(live_meta)
    if live_meta is not None and not prior.stale(int(counts.get("vectors", 0)), int(counts.get("parts", 0))):
        return prior
    got: vectors.ScanPlan | None = writer.measure_scan()
    return got


Built = tuple[ChunkResult, int, EmbedCounts, BuildResult]
"""What :func:`stream_index` returns: what chunking found, cache hits, the sync requests'
figures, the published index."""


def stream_index(plan: RunPlan, settings: Settings, provider: EmbeddingProvider, cache: EmbeddingCache | None,
                 executor: Executor, progress: Progress | None = None, on_progress: ProgressFn | None = None,
                 published: list[Built] | None = None, *, in_place: bool | None = None) -> Built:
    """Build, verify and publish the next index from ``plan`` in one stream.

    ``in_place`` None: decided by :func:`memory_core.index.writer.edit_in_place`. An in-place update
    that readers keep from committing is rolled back and done again as a new file (its
    vectors are in the cache by then).

    Returns (what chunking found, cache hits, the sync requests' figures, the published index).
    ``progress`` is updated as the stream goes (the orchestrator reads it if the run ends early).
    ``published`` gets the same the moment the new index is live (the rename or the in-place
    commit, which a stop cannot split from the writer's record of it: ``stops_held``), so a run
    stopped after that knows it published, and what.
    """
    index_path = Path(plan.index_path)
    live_meta = probe_index(index_path)[0] if not plan.full else None
    tokens, overlap = chunk_params(settings, provider)
    model = provider.model
    now = int(time.time() * 1000)
    if progress is None:
        progress = Progress(files_total=len(plan.to_index), bytes_total=sum(f.size for f in plan.to_index))
    st = _Stream(provider, cache, executor, progress)
    st.on_progress = on_progress
    if live_meta and st.with_vectors:
        st.index_dims = (IndexRecord.from_meta(live_meta) or IndexRecord()).dims
        if st.dims is None:
            st.dims = st.index_dims
    source_bytes = sum(f.size for f in plan.to_index)
    if in_place is None:
        live = index_path.exists()
        in_place = edit_in_place(full=plan.full, live_exists=live, source_bytes=source_bytes,
                                 live_bytes=index_path.stat().st_size if live else 0,
                                 removed=len(plan.removed))
    busy = False
    in_child = not in_place and use_process_writer(source_bytes)
    writer: BuildWriter | None = None
    warnings: list[str] = []
    skipped: dict[str, list[Any]] = {}  # the files this run looked at and could not index (finish_meta)
    files: dict[str, dict[str, Any]] = {}
    over: dict[str, int] = {}
    total = 0
    failed = False
    published = [] if published is None else published

    def noted(built: BuildResult) -> BuildResult:
        """``built`` is live: said to the caller at once (``published``)."""
        if not published:
            published.append((ChunkResult(files=files, chunks=total, warnings=warnings, over_window=over), st.hits,
                              st.stats, built))
        return built

    def built_here() -> BuildResult:
        return BuildResult(counts=counts, dims=meta["dims"], vector_store=meta["vector_store"],
                           chunks_over_window=meta["chunks_over_window"], in_place=bool(in_place))

    def open_writer() -> BuildWriter:
        w: BuildWriter
        if in_child:
            from memory_core.index.writer_proc import ProcessIndexWriter

            w = ProcessIndexWriter(index_path, full=plan.full, dims=st.dims)
        else:
            w = IndexWriter(index_path, full=plan.full, dims=st.dims, in_place=bool(in_place))
        w.open()
        if not plan.full:  # this process's writer keeps the unchanged chunks' rows; the writer process does not
            w.delete_paths(plan.removed)
            w.replace_paths(f.path for f in plan.to_index)
        return w

    def insert(limit: int) -> None:
        nonlocal writer
        if st.inflight:
            st.drain(len(st.inflight))  # take in what has arrived, without waiting
        while True:
            rows = st.ready_rows(limit)
            if not rows:
                return
            if writer is None:
                writer = open_writer()
            writer.insert_tuples(rows)
            if len(rows) < limit:
                return

    try:
        if st.dims is not None or not st.with_vectors:
            writer = open_writer()  # an incremental run's copy of the live index overlaps the chunking
        for f in plan.to_index:
            run_stops.check()  # a stop lost on the way ends the run here, not after its publish
            fc = chunk_file(f, settings, provider, tokens, overlap, warnings, skipped)
            if fc is not None:
                progress.chunks += len(fc.chunks)
                for i, c in enumerate(fc.chunks):
                    st.add_row([chunk_id(f.source, f.path, c.start_line, c.end_line, c.hash, model), f.path, f.source,
                                c.start_line, c.end_line, c.hash, model, c.text, None, None, now], c.text,
                               chunk_parts(f.source, settings, c.text, provider), fc.days[i] if fc.days else None)
                total += len(fc.chunks)
                files[f.path] = fc.file_row
                if fc.over_window:
                    over[f.path] = fc.over_window
                failpoint("chunk")
            progress.files_done += 1
            progress.bytes_done += f.size
            if len(st.waiting) >= insert_rows(st.dims):
                insert(insert_rows(st.dims))
            st.report()
        st.finish_vectors()
        insert(insert_rows(st.dims))
        if st.waiting:
            row = st.waiting[0]
            raise RunError(f"no vector for a chunk of {row[1]} (lines {row[3]}-{row[4]}); the embedding stage did"
                           " not finish")
        if writer is None:
            writer = open_writer()
        writer.finish_replace()
        # the files read, and those touched only (their new mtime: memory_core.index.runtypes.RunPlan.touched)
        writer.upsert_files(FileRow(**v) for v in {**({} if plan.full else plan.touched), **files}.values())
        counts = writer.verify(expect_vectors=st.with_vectors)
        meta = dict(plan.meta)
        meta["dims"] = st.dims if st.with_vectors else None
        finish_meta(meta, plan, live_meta, over, counts, writer.vec, st.with_vectors, now, skipped)
        scan = scan_plan_of(writer, live_meta, counts) if st.with_vectors and st.dims else None
        if scan is not None:
            meta["vector_scan"] = scan.to_meta()
        writer.set_meta(meta)
        if settings.cache.enabled:
            # the vectors of the chunks leaving the live index go to the cache first (memory_core.storage.cache)
            preserve_leaving(settings.cache_file, index_path,
                             model_key=(provider.name, provider.model, provider.provider_key) if st.with_vectors
                             else None,
                             paths=None if plan.full else [*plan.removed, *(f.path for f in plan.to_index)],
                             # --re-embed: the live index's vectors of this model are what it replaces,
                             # none is kept (those of another model still are)
                             staying=(lambda h: True) if plan.re_embed else (lambda h: hash(h) in st.chunk_seen),
                             legacy_keys=provider.legacy_provider_keys)
        run_stops.check()  # the last look before the publish: a Ctrl-C lost on the way never publishes
        try:
            writer.swap()
            noted(built_here())
        except InPlaceBusyError as exc:
            writer.abort()
            busy = True
            warnings.append(f"{exc}; built a new file instead")
    except BaseException:
        failed = True
        if writer is not None and writer.swapped:  # a stop right after the publish: the run made it
            noted(built_here())
        with contextlib.suppress(Exception):
            st.count_finished()
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.abort()
        raise
    finally:
        st.close(wait_running=not failed)
    if busy:  # again as a new file: the vectors come from the cache now
        again: list[Built] = []
        try:
            stream_index(plan, settings, provider, cache, executor, None, None, again, in_place=False)
        finally:
            if again:
                noted(again[0][3])
    progress.finished = True
    st.report(force=True)
    return published[0]
