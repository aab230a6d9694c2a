"""The in-process engine's build: chunk, look up, embed and insert as one stream.

The staged functions in :mod:`memory_core.pipeline` hand work from stage to stage through
Parquet files, which suits Prefect tasks (each stage a task, each request group a task, Batch
API jobs that need every miss up front). Run in one process, the same stages in sequence
cost about 4x the time SQLite needs to insert the rows. This module runs them as one stream
instead, with the same results (the same rows, cache entries, requests and summary):

* files are read and chunked in order; every new chunk hash is looked up in the cache in
  groups of :data:`LOOKUP_ROWS` (one read gives the hit and its vector);
* misses fill request groups exactly as :func:`memory_core.embeddings.grouping.plan_groups`
  would (the provider's input and token limits), which are sent to a thread pool as soon as
  they are full (``concurrency`` in flight; one at a time for the local model, whose torch
  code releases the GIL, so its compute overlaps this thread's reading and chunking);
* each response is committed to the cache as it arrives (a killed run keeps what it paid for);
* a row goes to the temp index once its vector is there, in file order, :func:`insert_rows` at
  a time; a large run writes the temp index in a child process
  (:class:`memory_core.writer_proc.ProcessIndexWriter`), so SQLite's work overlaps ours.

Memory stays flat: rows wait only for the request groups in flight; a vector is dropped once
no waiting row needs it (a later duplicate reads it back from the cache).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np

from memory_core.cache import EmbeddingCache
from memory_core.chunking import chunk_id
from memory_core.config import Settings
from memory_core.embeddings.base import EmbeddingProvider
from memory_core.embeddings.grouping import TOKEN_MARGIN
from memory_core.errors import RunError
from memory_core.failpoints import failpoint
from memory_core.store import FileRow, IndexWriter, InPlaceBusyError, edit_in_place, probe_index

LOOKUP_ROWS = 512
# Rows per insert batch handed to the index writer, at most this many ...
INSERT_ROWS = 4096
# ... and at most about this many bytes (text + vector) per batch, so a batch of 1,536-d rows
# stays near the size of a 384-d one (the writer process's queue holds a few batches).
# Measured at 41k chunks: batches of 4,096 rows built 6-8% faster than batches of 1,024.
INSERT_BYTES = 12 * 1024 * 1024

# Above this many bytes of sources to (re)index, the temp index is written by a child process
# (starting one costs ~0.2 s; below this the whole build is about that fast anyway).
# Small incremental runs edit the live file in place instead (memory_core.store.edit_in_place).
# MEMORY_CORE_WRITER=process|inline|inplace overrides (tests, benchmarks).
PROCESS_WRITER_BYTES = 2 * 1024 * 1024

ProgressFn = Callable[[str, int, int], None]


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

    def __init__(self, provider: EmbeddingProvider, cache: EmbeddingCache | None, concurrency: int) -> None:
        self.provider = provider
        self.cache = cache
        self.with_vectors = provider.name != "none" and cache is not None
        self.dims: int | None = provider.dims
        self.workers = 1 if provider.name == "local" else max(1, concurrency)
        self.pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="embed") \
            if self.with_vectors else None
        self.budget = max(1, int(provider.max_tokens_per_request * TOKEN_MARGIN))
        self.max_inputs = provider.max_inputs_per_request
        # rows (ChunkRow field order, embedding None) waiting for their vector, in file order
        self.waiting: deque[list[Any]] = deque()
        self.need: Counter[str] = Counter()  # waiting rows per hash
        self.vecs: dict[str, bytes] = {}  # vectors that waiting rows need
        # Every hash of this run, as Python's hash() of the hex string (an int, cached on the str):
        # ~60 bytes a chunk instead of ~140 for the string, the one thing a run keeps per chunk.
        # Two hashes sharing a hash() (~1e-9 at 100k chunks) only cost a cache read: the second
        # is refetched, not found, and looked up like a new one.
        self.seen: set[int] = set()
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
        self.stats = {"requests": 0, "embedded": 0, "tokens": 0}

    # -- vectors ------------------------------------------------------------------------
    def add_row(self, row: list[Any], text: str) -> None:
        h = row[5]
        self.waiting.append(row)
        if not self.with_vectors:
            return
        self.need[h] += 1
        if h in self.vecs or h in self.pending:
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

    def resolve(self) -> None:
        """Look up the new hashes; misses go into request groups."""
        assert self.cache is not None
        if self.refetch:
            got = self.cache.get_many(self.refetch)
            self.vecs.update(got)
            self.pending.difference_update(got)
            lost = [h for h in self.refetch if h not in got]
            self.refetch = []
            if lost:  # evicted or deleted behind our back: embed again
                self.lookup.extend((h, next(r[7] for r in self.waiting if r[5] == h)) for h in lost)
        if not self.lookup:
            return
        got = {} if self.cold else self.cache.get_many(h for h, _ in self.lookup)
        self.vecs.update(got)
        self.pending.difference_update(got)
        self.hits += len(got)
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

    def submit(self) -> None:
        if not self.group_h:
            return
        assert self.pool is not None
        fut = self.pool.submit(self._embed_and_store, self.group_h, self.group_t)
        self.inflight[fut] = (self.group_h, self.group_tokens)
        self.group_h, self.group_t, self.group_tokens = [], [], 0
        self.drain(self.workers * 2)

    def _embed_and_store(self, hashes: list[str], texts: list[str]) -> np.ndarray:
        """In a pool thread: one request, its vectors committed to the cache as they arrive."""
        from memory_core.pipeline import store_vectors

        vectors = np.ascontiguousarray(self.provider.embed_documents(texts), dtype="<f4")
        assert self.cache is not None
        store_vectors(self.cache, hashes, vectors)
        return vectors

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
                done, _ = wait(list(self.inflight), return_when=FIRST_COMPLETED)
            for fut in done:
                hashes, tokens = self.inflight.pop(fut)
                vectors = fut.result()
                for i, h in enumerate(hashes):
                    self.vecs[h] = vectors[i].tobytes()
                    self.pending.discard(h)
                self.stats["requests"] += 1
                self.stats["embedded"] += len(hashes)
                self.stats["tokens"] += tokens

    def finish_vectors(self) -> None:
        if self.with_vectors:
            self.resolve()
            self.submit()
            self.drain(0)
            assert self.pool is not None and self.cache is not None
            self.pool.submit(self.cache.checkpoint)  # beside the index's last inserts and commit

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
                if emb is None:
                    break
                if size is None:
                    self.dims, size = len(emb) // 4, len(emb)
                elif len(emb) != size:
                    raise RunError(f"cached vector for {row[1]} has {len(emb) // 4} dims, index has {self.dims}")
                row[9] = emb
                need[h] -= 1
                if not need[h]:
                    del need[h]
                    del vecs[h]
            waiting.popleft()
            out.append(tuple(row))
        return out

    def close(self) -> None:
        if self.pool is not None:
            for fut in self.inflight:
                fut.cancel()
            self.pool.shutdown(wait=True, cancel_futures=True)


def stream_index(plan: Any, settings: Settings, provider: EmbeddingProvider, cache: EmbeddingCache | None, *,
                 concurrency: int = 4, progress: ProgressFn | None = None,
                 in_place: bool | None = None) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """Build, verify and swap the next index from ``plan`` in one stream.

    ``in_place`` None: decided by :func:`memory_core.store.edit_in_place`. An in-place update
    that readers keep from committing is rolled back and done again as a new file (its
    vectors are in the cache by then).

    Returns what the staged path's stages return, for :func:`memory_core.pipeline.summarize`:
    (ChunkResult, MissResult, embed stats, build result). ``ChunkResult.path`` and
    ``MissResult.path`` are empty: no work files are written.
    """
    from memory_core.pipeline import (
        ChunkResult,
        MissResult,
        chunk_file,
        chunk_params,
        finish_meta,
        sync_embed_extras,
    )

    index_path = Path(plan.index_path)
    live_meta = probe_index(index_path)[0] if not plan.full else None
    tokens, overlap = chunk_params(settings, provider)
    model = provider.model
    now = int(time.time() * 1000)
    st = _Stream(provider, cache, concurrency)
    if st.dims is None and live_meta and st.with_vectors:
        st.dims = live_meta.get("dims")
    writer_cls: Any = IndexWriter
    source_bytes = sum(f.size for f in plan.to_index)
    if in_place is None:
        in_place = edit_in_place(full=plan.full, live_exists=index_path.exists(), source_bytes=source_bytes,
                                 removed=len(plan.removed))
    busy = False
    if not in_place and use_process_writer(source_bytes):
        from memory_core.writer_proc import ProcessIndexWriter

        writer_cls = ProcessIndexWriter
    writer: Any = None
    warnings: list[str] = []
    files: dict[str, dict[str, Any]] = {}
    over: dict[str, int] = {}
    total = 0
    inserted = 0

    def open_writer() -> Any:
        w = writer_cls(index_path, full=plan.full, dims=st.dims, **({"in_place": True} if in_place else {}))
        w.open()
        if not plan.full:
            w.delete_paths(list(plan.removed) + [f.path for f in plan.to_index])
        return w

    def insert(limit: int) -> None:
        nonlocal writer, inserted
        if st.inflight:
            st.drain(len(st.inflight))  # take in what has arrived, without waiting
        while True:
            rows = st.ready_rows(limit)
            if not rows:
                return
            if writer is None:
                writer = open_writer()
            writer.insert_tuples(rows)
            inserted += len(rows)
            if progress:
                progress("build", inserted, total)
            if len(rows) < limit:
                return

    try:
        if st.dims is not None or not st.with_vectors:
            writer = open_writer()  # an incremental run's copy of the live index overlaps the chunking
        n_files = len(plan.to_index)
        for i, f in enumerate(plan.to_index, 1):
            fc = chunk_file(f, settings, provider, tokens, overlap, warnings)
            if fc is not None:
                for c in fc.chunks:
                    st.add_row([chunk_id(f.source, f.path, c.start_line, c.end_line, c.hash, model), f.path, f.source,
                                c.start_line, c.end_line, c.hash, model, c.text, None, None, now], c.text)
                total += len(fc.chunks)
                files[f.path] = fc.file_row
                if fc.over_window:
                    over[f.path] = fc.over_window
                failpoint("chunk")
            if len(st.waiting) >= insert_rows(st.dims):
                insert(insert_rows(st.dims))
            if progress:
                progress("chunk", i, n_files)
        st.finish_vectors()
        insert(insert_rows(st.dims))
        if st.waiting:
            row = st.waiting[0]
            raise RunError(f"no vector for a chunk of {row[1]} (lines {row[3]}-{row[4]}); the embedding stage did"
                           " not finish")
        if writer is None:
            writer = open_writer()
        writer.upsert_files(FileRow(**v) for v in files.values())
        counts = writer.verify(expect_vectors=st.with_vectors)
        meta = dict(plan.meta)
        meta["dims"] = st.dims if st.with_vectors else None
        finish_meta(meta, plan, live_meta, over, counts, writer.vec, st.with_vectors, now)
        writer.set_meta(meta)
        try:
            writer.swap()
        except InPlaceBusyError as exc:
            writer.abort()
            busy = True
            warnings.append(f"{exc}; built a new file instead")
    except BaseException:
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.abort()
        raise
    finally:
        st.close()
    chunks = ChunkResult(path="", files=files, chunks=total, unique_hashes=len(st.seen), warnings=warnings,
                         over_window=over)
    misses = MissResult(path="", misses=st.misses, hits=st.hits)
    embed: dict[str, Any] = {}
    if st.with_vectors:
        embed = dict(st.stats)
        sync_embed_extras(settings, provider, embed)
    built = {"counts": counts, "dims": meta["dims"], "vector_store": meta["vector_store"],
             "chunks_over_window": meta["chunks_over_window"], "in_place": in_place}
    if busy:  # again as a new file: the vectors come from the cache now
        built = stream_index(plan, settings, provider, cache, concurrency=concurrency, progress=progress,
                             in_place=False)[3]
    return chunks, misses, embed, built
