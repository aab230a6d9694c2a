"""What an index holds (``memory-core status``, MCP ``memory_status``): :func:`index_status`
gives a typed :class:`~memory_core.query.results.MemoryStatus` (JSON only at the edges),
and what each of its bytes is for (:data:`SIZE_LINES`, :func:`index_sizes`)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import apsw

from memory_core.config import Settings
from memory_core.query.results import MemoryStatus, scan_report
from memory_core.query.retrieval import _Index
from memory_core.storage import vectors
from memory_core.storage.indexmeta import IndexRecord, newer_error, newer_writer
from memory_core.storage.run_owners import stopped_runs
from memory_core.storage.store import int_of, probe_index


def index_status(path: Path, settings: Settings, lock: AbstractContextManager[Any], current: Callable[[], _Index],
                 provider_note: Callable[[], str], *, measure: bool = False) -> MemoryStatus:
    """What the index holds; ``measure``: also split the rest of its bytes (text, FTS5, other
    B-trees) by reading every page (SQLite's ``dbstat``: the whole file). ``current()``, called holding
    ``lock``: the opened index (:meth:`memory_core.query.search.Searcher._current`)."""
    from memory_core.storage.cache import cache_entry_count

    stopped = stopped_runs(path)  # flow runs killed mid-run: still Running in Prefect
    if not path.exists():
        return MemoryStatus(state="missing", index_path=str(path), exists=False, stopped_flow_runs=stopped)
    meta, problem = probe_index(path)
    if (newer := newer_writer(meta)) is not None:  # not ours to read: what it holds is not said
        return MemoryStatus(state="newer", index_path=str(path), problem=str(newer_error(path, newer)),
                            stopped_flow_runs=stopped)
    if problem:
        return MemoryStatus(state="damaged", index_path=str(path), problem=problem, stopped_flow_runs=stopped)
    with lock:
        idx = current()
        c = idx.conn
        rec = IndexRecord.from_meta(idx.meta) or IndexRecord()
        dims = rec.dims
        index_bytes = path.stat().st_size
        files, chunks = int_of(c, "SELECT count(*) FROM files"), int_of(c, "SELECT count(*) FROM chunks")
        by_source = _counts(c, "SELECT source, count(*) FROM chunks GROUP BY source")
        search = (_bits_search(idx.scan_plan) if idx.has_bits else
                  "vec0 KNN (an index of schema 2: `memory-core index --full` rebuilds it for faster"
                  " search)" if idx.vec_loaded else
                  "off (sqlite-vec not loadable; the vectors are in vec0)" if idx.has_vec_table else
                  "numpy cosine (sqlite-vec not loadable)") if dims else "off (keyword-only index)"
        vector_bytes = vectors.sizes(c, dims)
        sizes = index_sizes(c, dims, index_bytes, settings.cache_file, measure=measure)
        scan = idx.scan_plan if idx.has_bits and dims else None
    from memory_core.sources.freshness import dirty_state

    dirty = dirty_state(settings)  # the sources changed since the index was built
    return MemoryStatus(
        state="ok", index_path=str(path), provider=rec.provider, model=rec.model,
        provider_reason=rec.provider_reason, dims=dims, chunk_tokens=rec.chunk_tokens,
        chunk_overlap=rec.chunk_overlap, sources=list(rec.sources) or None, built_at=rec.built_at,
        files=files, chunks=chunks, chunks_by_source=by_source, vector_search=search, index_bytes=index_bytes,
        vector_bytes=vector_bytes, cache_entries=cache_entry_count(settings.cache_file),
        cache_path=str(settings.cache_file), sizes=sizes, vector_scan=scan,
        # chunks longer than the embedding model's input window (embedded from their head only)
        chunks_over_window=rec.chunks_over_window, note=provider_note(),
        dirty=dirty.dirty, dirty_reason=dirty.reason, below_delta=list(dirty.below_delta),
        extra_paths=list(settings.extra_paths),
        cache_max_entries=settings.cache.max_entries,
        batch=rec.batch,  # the Batch API jobs of the run that built this index
        built_from=IndexRecord.from_meta(idx.meta), stopped_flow_runs=stopped,
        re_embed_pending=re_embed_pending(settings, path, rec))


def re_embed_pending(settings: Settings, path: Path, rec: IndexRecord) -> str | None:
    """When (UTC, to the minute, as the run says it) a re-embed of the index at ``path`` began
    that no run has published (``index --re-embed`` failed or killed: the cache file's
    ``cache_renewals``), for the provider, model and provider key the index records; or None.
    The next run of the index continues it (:func:`memory_core.index.pipeline._pending_renewal`,
    which asks the same of the configured provider). Read as that check reads it
    (:func:`memory_core.storage.cache.renewal_pending`: nothing when there is no cache file, and
    none is made)."""
    if not (settings.cache.enabled and rec.has_vectors and rec.provider and rec.model and rec.provider_key):
        return None
    from memory_core.storage.cache import renewal_pending

    since = renewal_pending(settings.cache_file, rec.provider, rec.model, rec.provider_key, path)
    if since is None:
        return None
    import datetime as _dt

    return _dt.datetime.fromtimestamp(since / 1000, _dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _bits_search(plan: vectors.ScanPlan) -> str:
    if plan.mode == "exact":
        return ("every float32 vector scanned (exact): the sign bits miss this index's nearest rows"
                f" (quick scan recall@10 {plan.recall_default:.3f} < {plan.target:g})")
    if plan.widen > 1:
        return f"sign bits scanned, {plan.widen}x the candidates ranked by float32 cosines"
    return "sign bits scanned, the nearest ranked by float32 cosines"


def vector_scan_status(meta: dict[str, Any] | None) -> dict[str, Any] | None:
    """How well the quick vector scan finds an index's nearest rows and how its searches read
    the vectors (the ``vector_scan`` field of ``status``; for ``memory-core eval`` too): the
    index's recorded :class:`memory_core.storage.vectors.ScanPlan`, with ``measured`` (False: an
    index built before the check) and a one-line ``summary``. None for an index without vectors."""
    record = IndexRecord.from_meta(meta)
    if record is None or not record.dims:
        return None
    return scan_report(vectors.ScanPlan.from_meta(meta))


# What each byte of the index and its cache is for (``status``; ``status --sizes`` splits "rest").
SIZE_LINES = {
    "vectors_float32": "chunks.embedding: each chunk's vector once, for exact cosines; the record of the vectors"
                       " the index holds (the cache does not keep a second copy)",
    "exchange_parts_float32": "chunk_parts: part vectors, transcript chunks' exchanges (chunking.exchange_vectors)"
                              " and note chunks' line windows (chunking.note_windows)",
    "sign_bits": "chunks_bits, chunk_parts_bits: one bit a dimension, scanned by every vector query",
    "text": "chunks' text and row fields (id, path, lines) and their pages' free space",
    "fts": "chunks_fts: the FTS5 keyword index and each row's length (contentless: no copy of the text)",
    "keys": "B-tree indexes (chunk id, path, source, hash), the files table, chunk_days (when each transcript"
            " chunk was written) and the change log (index_changes:"
            " the rows the last 32 incremental runs removed and added, so long-lived readers update what they keep)",
    "rest": "text, FTS5 and B-tree indexes (`status --sizes` splits it; reads the whole file)",
    "free": "free pages (reused by later runs)",
    "cache": "the embedding cache: vectors the live index does not hold (received by an unfinished run, or of"
             " chunks that left the index), so re-adding them embeds nothing, and the part vectors (windows,"
             " exchanges: the index keeps those by chunk, not by text)",
}


def index_sizes(conn: apsw.Connection, dims: int | None, index_bytes: int, cache_file: Path, *,
                measure: bool = False) -> dict[str, int]:
    """Bytes per purpose (:data:`SIZE_LINES`). Without ``measure`` only what costs no scan: the
    vectors' bytes (rows x dims x 4), the bits' blobs, free pages, the cache file."""
    from memory_core.storage.cache import cache_bytes

    vb = vectors.sizes(conn, dims)
    parts = vb["part_vectors"] * int(dims or 0) * 4
    out = {"vectors_float32": vb["float32_bytes"] - parts, "exchange_parts_float32": parts,
           "sign_bits": vb["bits_bytes"]}
    page_size = int_of(conn, "PRAGMA page_size")
    free = int_of(conn, "PRAGMA freelist_count") * page_size
    if measure:
        by_name = _counts(conn, "SELECT name, sum(pgsize) FROM dbstat GROUP BY name")
        fts = sum(v for k, v in by_name.items() if k.startswith("chunks_fts"))
        out["text"] = max(0, by_name.get("chunks", 0) - out["vectors_float32"])
        out["fts"] = fts
        out["keys"] = max(0, index_bytes - sum(out.values()) - free)
    else:
        out["rest"] = max(0, index_bytes - sum(out.values()) - free)
    out["free"] = free
    out["cache"] = cache_bytes(cache_file)  # the file, its WAL and its journals
    return out


def _counts(conn: apsw.Connection, sql: str) -> dict[str, int]:
    """``{name: count}`` of a ``SELECT name, count(*) / sum(...) ... GROUP BY name`` (both never NULL
    here: a chunk's source, a table's name; a group's count or its pages' bytes), in SQLite's order."""
    out: dict[str, int] = {}
    for name, n in conn.execute(sql).fetchall():
        if not isinstance(name, str) or not isinstance(n, int):
            raise apsw.SQLError(f"{sql!r} returned ({type(name).__name__}, {type(n).__name__})")
        out[name] = n
    return out
