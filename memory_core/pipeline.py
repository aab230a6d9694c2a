"""One reindex run, as stages that Prefect tasks (or a plain caller) run in order.

    discover -> chunk -> cache lookup -> embed misses -> build temp DB -> verify + swap

Each stage's output is small metadata or a Parquet file in the run's work directory, so a
task result stays small, memory stays flat in the corpus size, and the embed stage can run
on other machines (it needs only the texts of one request group). The embedding cache is
written as each provider response arrives, so a killed run loses nothing it paid for.

:func:`run_index` runs the stages in-process (a thread pool for embedding); the Prefect flow
in ``flows/reindex.py`` runs the same stage functions as tasks.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import queue
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from memory_core.cache import EmbeddingCache
from memory_core.chunking import chunk_id, chunk_markdown, fit_to_window, remap_chunk_lines
from memory_core.config import Settings
from memory_core.discovery import FileEntry, discover_files, hash_file
from memory_core.embeddings.base import EmbeddingProvider
from memory_core.embeddings.grouping import plan_groups
from memory_core.errors import ProviderError, RunError
from memory_core.failpoints import failpoint
from memory_core.store import (
    SCHEMA_VERSION,
    ChunkRow,
    FileRow,
    IndexLock,
    IndexWriter,
    InPlaceBusyError,
    LiveFile,
    edit_in_place,
    fts_tokenizer,
    probe_index,
    read_live_files,
    recover_index,
    remove_stale_temp_files,
)

log = logging.getLogger("memory_core.pipeline")

ROW_GROUP = 4096
# Work files live for one run on local disk: uncompressed Parquet writes ~7x and reads ~10x
# faster than snappy for chunk texts, for ~3x the (temporary) bytes.
WORK_COMPRESSION = "none"
MAX_FILE_BYTES = 64 * 1024 * 1024
BINARY_SNIFF = 8192

ProgressFn = Callable[[str, int, int], None]

CHUNK_SCHEMA = pa.schema([
    ("path", pa.string()), ("source", pa.string()), ("start_line", pa.int32()), ("end_line", pa.int32()),
    ("hash", pa.string()), ("text", pa.large_string()),
])
MISS_SCHEMA = pa.schema([("hash", pa.string()), ("text", pa.large_string()), ("tokens", pa.int32())])


# -- plan ------------------------------------------------------------------------------------

@dataclass
class RunPlan:
    """What discovery decided: which files to (re)index, carry over or drop."""

    run_id: str
    workdir: str
    index_path: str
    full: bool
    full_reason: str
    meta: dict[str, Any]
    to_index: list[FileEntry]
    carried: list[str]  # indexed paths whose live rows are kept as they are
    removed: list[str]
    counts: dict[str, int]
    warnings: list[str] = field(default_factory=list)

    @property
    def nothing_to_do(self) -> bool:
        return not self.full and not self.to_index and not self.removed


@dataclass
class ChunkResult:
    path: str  # parquet file of chunk rows
    files: dict[str, dict[str, Any]]  # indexed path -> FileRow fields
    chunks: int
    unique_hashes: int
    warnings: list[str]
    over_window: dict[str, int] = field(default_factory=dict)  # path -> chunks over the model's window


@dataclass
class MissResult:
    path: str  # parquet file of unique (hash, text, tokens) not in the cache
    misses: int
    hits: int


@dataclass
class RunSummary:
    index_path: str
    provider: str
    model: str
    provider_reason: str
    full: bool
    full_reason: str
    swapped: bool
    # how the new index went live: "replaced" (a new file renamed over the old) or "in place"
    # (one transaction on the live file); "" when nothing was published
    published: str = ""
    files_scanned: int = 0
    files_new: int = 0
    files_changed: int = 0
    files_unchanged: int = 0
    files_removed: int = 0
    files_skipped: int = 0
    sessions_carried: int = 0
    chunks_total: int = 0
    chunks_indexed: int = 0
    chunks_embedded: int = 0
    chunks_from_cache: int = 0
    # chunks longer than the model's input window (embedded from their head), whole index
    chunks_over_window: int = 0
    embed_requests: int = 0
    tokens_sent: int = 0
    tokens_sync: int = 0
    tokens_batch: int = 0
    # batch mode: jobs submitted / re-attached / collected / failed / pending, whether batch mode
    # was switched off and why (see memory_core.batch.runner); empty when batch mode is off
    batch: dict[str, Any] = field(default_factory=dict)
    # estimated cost of the tokens sent and the saving against all-sync (memory_core.batch.cost)
    cost: dict[str, Any] = field(default_factory=dict)
    # set when the primary provider kept failing and the run was rebuilt with the fallback:
    # {"from", "to", "reason"}
    fallback: dict[str, Any] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def outcome(self) -> str:
        """What the run did to the index, in a few words (CLI summary, flow summary table)."""
        if self.swapped:
            return "updated in place" if self.published == "in place" else "swapped in"
        pending = int(self.batch.get("jobs_pending") or 0)
        return f"not updated: {pending} batch job(s) still running" if pending else "unchanged, nothing to do"

    def lines(self) -> list[str]:
        s = self
        mode = f"full rebuild ({s.full_reason})" if s.full else "incremental"
        state = s.outcome() + ("; run again to collect them" if not s.swapped and s.batch.get("jobs_pending") else "")
        out = [
            f"index: {s.index_path} ({mode}; {state})",
            f"provider: {s.provider} / {s.model} ({s.provider_reason})",
        ]
        if s.fallback:
            out.append(f"fallback: {s.fallback.get('from')} -> {s.fallback.get('to')} because {s.fallback.get('reason')};"
                       " full rebuild with the fallback (vectors of two providers are never mixed)")
        out += [
            f"files: {s.files_scanned} scanned, {s.files_new} new, {s.files_changed} changed,"
            f" {s.files_unchanged} unchanged, {s.files_removed} removed, {s.files_skipped} skipped",
            f"chunks: {s.chunks_total} total, {s.chunks_indexed} from new/changed files,"
            f" {s.chunks_embedded} embedded, {s.chunks_from_cache} from cache",
        ]
        if s.chunks_over_window:
            out.append(f"chunks over the model's input window: {s.chunks_over_window} (their vectors cover the head"
                       " only; a smaller chunking.tokens avoids it, see docs/search.md)")
        out.append(f"requests: {s.embed_requests}, tokens sent: {s.tokens_sent}")
        if s.batch:
            out.append(_batch_line(s.batch))
        if s.cost:
            from memory_core.batch.cost import cost_line

            out.append(cost_line(s.cost))
        out.append("seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in s.stage_seconds.items()))
        return out


def _batch_line(b: dict[str, Any]) -> str:
    if "jobs_submitted" not in b:
        return f"batch: {b.get('mode', 'off')}"
    line = (f"batch: {b.get('mode')}; jobs {b['jobs_submitted']} submitted, {b['jobs_reattached']} re-attached,"
            f" {b['jobs_collected']} collected, {b['jobs_failed']} failed, {b['jobs_timed_out']} timed out,"
            f" {b['jobs_pending']} pending; chunks {b['chunks_via_batch']} via batch, {b['chunks_via_sync']} via sync"
            f" ({b['lines_failed']} failed lines re-sent)")
    if b.get("disabled"):
        line += f"; batch mode switched off: {b.get('disabled_reason')}"
    return line


def build_meta(settings: Settings, provider: EmbeddingProvider, reason: str) -> dict[str, Any]:
    tokens, overlap = chunk_params(settings, provider)
    return {
        "schema_version": SCHEMA_VERSION,
        "provider": provider.name,
        "model": provider.model,
        "provider_key": provider.provider_key,
        "provider_reason": reason,
        "dims": provider.dims,
        "chunk_tokens": tokens,
        "chunk_overlap": overlap,
        "sources": sorted(settings.sources),
        "extra_paths": sorted(settings.extra_paths),
        "redact": settings.redact,
        "fts_tokenizer": fts_tokenizer(),
    }


REBUILD_KEYS = ("schema_version", "provider", "model", "provider_key", "chunk_tokens", "chunk_overlap",
                "sources", "extra_paths", "redact", "fts_tokenizer")


def chunk_params(settings: Settings, provider: EmbeddingProvider) -> tuple[int, int]:
    tokens = settings.chunking.tokens or provider.default_chunk_tokens
    overlap = settings.chunking.overlap if settings.chunking.overlap is not None else provider.default_chunk_overlap
    overlap = max(0, min(overlap, tokens - 1))
    return tokens, overlap


def _rebuild_reason(old: dict[str, Any] | None, new: dict[str, Any]) -> str | None:
    if old is None:
        return "no index yet"
    for key in REBUILD_KEYS:
        if old.get(key) != new.get(key):
            return f"{key} changed"
    if new.get("provider") != "none" and new.get("dims") and old.get("dims") and old["dims"] != new["dims"]:
        return "dims changed"
    return None


def discover_stage(settings: Settings, provider: EmbeddingProvider, reason: str, *, full: bool = False,
                   workdir_root: Path | None = None) -> RunPlan:
    """Find the sources, hash what may have changed, and diff against the live index."""
    index_path = settings.index_file
    disc = discover_files(settings)
    warnings = list(disc.warnings)
    meta = build_meta(settings, provider, reason)
    live_meta, problem = probe_index(index_path)
    full_reason = "requested" if full else ""
    if problem:
        warnings.append(f"the live index is damaged ({problem}); rebuilding it from sources and cache")
        full, full_reason = True, "live index damaged"
    elif not full:
        why = _rebuild_reason(live_meta, meta)
        if why:
            full, full_reason = True, why
    live: dict[str, LiveFile] = {} if (full or live_meta is None) else read_live_files(index_path)

    to_index: list[FileEntry] = []
    carried: list[str] = []
    counts = {"scanned": len(disc.files), "new": 0, "changed": 0, "unchanged": 0, "removed": 0, "sessions_carried": 0}
    seen: set[str] = set()
    for f in disc.files:
        seen.add(f.path)
        old = live.get(f.path)
        if old is not None and old.size == f.size and old.mtime_ms == f.mtime_ms and old.source == f.source:
            carried.append(f.path)
            counts["unchanged"] += 1
            continue
        if old is None and f.source != "sessions":
            # new: nothing to compare, so it is hashed when it is read for chunking (one read)
            to_index.append(f)
            counts["new"] += 1
            continue
        try:
            digest = hash_file(f.abs_path)
        except OSError as exc:
            if old is not None:
                warnings.append(f"cannot read {f.path} ({exc.strerror}); keeping its indexed rows")
                carried.append(f.path)
                counts["unchanged"] += 1
            else:
                warnings.append(f"cannot read {f.path} ({exc.strerror}); skipped")
            continue
        if old is not None and old.hash == digest and old.source == f.source:
            # Same bytes, new mtime (touch, checkout): keep rows, refresh the files row.
            carried.append(f.path)
            counts["unchanged"] += 1
            continue
        if old is not None and f.source == "sessions" and _below_delta(settings, f, old):
            carried.append(f.path)
            counts["sessions_carried"] += 1
            continue
        to_index.append(f.with_hash(digest))
        counts["changed" if old is not None else "new"] += 1
    removed = sorted(p for p in live if p not in seen)
    counts["removed"] = len(removed)
    run_id = time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
    root = workdir_root or index_path.parent / ".memory-core-work"
    workdir = root / run_id
    workdir.mkdir(parents=True, exist_ok=True)
    failpoint("discover")
    return RunPlan(
        run_id=run_id, workdir=str(workdir), index_path=str(index_path), full=full, full_reason=full_reason,
        meta=meta, to_index=to_index, carried=carried, removed=removed, counts=counts, warnings=warnings,
    )


def _below_delta(settings: Settings, f: FileEntry, old: LiveFile) -> bool:
    """A transcript that grew by less than both delta thresholds keeps its indexed rows."""
    if f.size < old.size:
        return False  # rewritten or truncated: reindex
    grew = f.size - old.size
    if grew >= settings.sessions.delta_bytes:
        return False
    if old.lines is None:
        return False
    from memory_core.sessions import count_lines

    try:
        new_lines = count_lines(f.abs_path) - old.lines
    except OSError:
        return True
    return new_lines < settings.sessions.delta_messages


# -- chunk -----------------------------------------------------------------------------------

def _read_bytes(abs_path: str, size_hint: int) -> bytes:
    """The file's bytes, through the os module: ``open().read()`` costs ~15 µs a file in
    objects and extra system calls (fstat, isatty, a growing buffer); a first read sized by the
    discovered size and one more to see the end cost ~7 µs (20k files: 0.30 s -> 0.15 s).
    A file that grew since discovery is read to its end all the same."""
    fd = os.open(abs_path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        parts = []
        want = size_hint + 1
        while chunk := os.read(fd, want):
            parts.append(chunk)
            want = 1 << 20
        return parts[0] if len(parts) == 1 else b"".join(parts)
    finally:
        os.close(fd)


def _read_markdown(f: FileEntry, warnings: list[str]) -> tuple[str, str] | None:
    """(text, sha256 of the bytes), or None with a warning when the file cannot be indexed."""
    if f.size > MAX_FILE_BYTES:
        warnings.append(f"{f.path} is {f.size // (1024 * 1024)} MiB, over the {MAX_FILE_BYTES // (1024 * 1024)} MiB limit; skipped")
        return None
    try:
        data = _read_bytes(f.abs_path, f.size)
    except FileNotFoundError:
        warnings.append(f"{f.path} disappeared during the run; skipped")
        return None
    except OSError as exc:
        warnings.append(f"cannot read {f.path} ({exc.strerror}); skipped")
        return None
    if b"\x00" in data[:BINARY_SNIFF]:
        warnings.append(f"{f.path} looks binary (NUL bytes); skipped")
        return None
    digest = hashlib.sha256(data).hexdigest()
    try:
        return data.decode("utf-8"), digest
    except UnicodeDecodeError:
        warnings.append(f"{f.path} is not valid UTF-8; undecodable bytes were replaced")
        return data.decode("utf-8", errors="replace"), digest


@dataclass
class FileChunks:
    """One file's chunks (deduplicated, non-blank) and its ``files`` row fields."""

    chunks: list[Any]
    file_row: dict[str, Any]
    over_window: int = 0


def chunk_file(f: FileEntry, settings: Settings, provider: EmbeddingProvider, tokens: int, overlap: int,
               warnings: list[str]) -> FileChunks | None:
    """Read and chunk one source file; None (with a warning) when it cannot be indexed."""
    from memory_core.embeddings.local import count_over_window
    from memory_core.redact import redact, should_redact
    from memory_core.sessions import parse_session_file

    lines: int | None = None
    digest = f.hash
    if f.source == "sessions":
        try:
            doc = parse_session_file(f.abs_path, redact_secrets=should_redact("sessions", settings.redact))
        except OSError as exc:
            warnings.append(f"cannot read {f.path} ({exc.strerror}); skipped")
            return None
        if doc.skipped:
            warnings.append(f"{f.path}: {doc.skipped} malformed lines (not JSON) skipped")
        chunks = remap_chunk_lines(fit_to_window(chunk_markdown(doc.content, tokens, overlap), provider, tokens,
                                                 overlap), doc.line_map) if doc.content else []
        lines = doc.lines
    else:
        got = _read_markdown(f, warnings)
        if got is None:
            return None
        text, read_digest = got
        digest = digest or read_digest
        if should_redact("memory", settings.redact):
            text = "\n".join(redact(line) for line in text.split("\n"))
        chunks = fit_to_window(chunk_markdown(text, tokens, overlap), provider, tokens, overlap)
    # Identical segments of one long line share lines and hash, hence the reference's
    # chunk id: keep one (they would be the same search result anyway).
    seen_keys: set[tuple[int, int, str]] = set()
    kept = []
    for c in chunks:
        key = (c.start_line, c.end_line, c.hash)
        if c.text.strip() and key not in seen_keys:
            seen_keys.add(key)
            kept.append(c)
    row = {"path": f.path, "source": f.source, "hash": digest or "", "mtime_ms": f.mtime_ms, "size": f.size,
           "chunks": len(kept), "lines": lines}
    over = count_over_window(provider, [c.text for c in kept]) if kept and _may_exceed_window(provider, tokens, overlap) \
        else 0
    return FileChunks(kept, row, over)


def _may_exceed_window(provider: EmbeddingProvider, tokens: int, overlap: int) -> bool:
    """False when no chunk of these settings can be over the provider's window: a chunk holds
    at most ``(tokens + overlap) * 4`` characters plus a newline, and the token estimate never
    exceeds characters + 1. True for providers that count with their own tokenizer."""
    if callable(getattr(provider, "count_truncated", None)):
        return True
    limit = getattr(provider, "max_tokens_per_input", None)
    return not limit or (max(32, tokens * 4) + overlap * 4 + 2) > limit


def merge_over_window(plan: RunPlan, live_meta: dict[str, Any] | None, new: dict[str, int]) -> dict[str, int]:
    """Chunks over the model's window per indexed path: the live index's for carried files,
    this run's for the files it indexed (only paths with a non-zero count are kept)."""
    out: dict[str, int] = {}
    if not plan.full and live_meta:
        gone = set(plan.removed) | {f.path for f in plan.to_index}
        out = {p: n for p, n in (live_meta.get("over_window_by_path") or {}).items() if p not in gone}
    out.update({p: n for p, n in new.items() if n})
    return dict(sorted(out.items()))


def chunk_stage(plan: RunPlan, settings: Settings, provider: EmbeddingProvider,
                progress: ProgressFn | None = None) -> ChunkResult:
    """Chunk every file to (re)index into ``chunks.parquet`` in the run's work directory."""
    tokens, overlap = chunk_params(settings, provider)
    out = os.path.join(plan.workdir, "chunks.parquet")
    warnings: list[str] = []
    files: dict[str, dict[str, Any]] = {}
    over: dict[str, int] = {}
    hashes: set[str] = set()
    buf: dict[str, list[Any]] = {k: [] for k in CHUNK_SCHEMA.names}
    total = 0
    with pq.ParquetWriter(out, CHUNK_SCHEMA, compression=WORK_COMPRESSION) as writer:
        def flush() -> None:
            if buf["path"]:
                writer.write_table(pa.table(buf, schema=CHUNK_SCHEMA))
                for v in buf.values():
                    v.clear()

        for i, f in enumerate(plan.to_index, 1):
            fc = chunk_file(f, settings, provider, tokens, overlap, warnings)
            if fc is None:
                continue
            for c in fc.chunks:
                buf["path"].append(f.path)
                buf["source"].append(f.source)
                buf["start_line"].append(c.start_line)
                buf["end_line"].append(c.end_line)
                buf["hash"].append(c.hash)
                buf["text"].append(c.text)
                hashes.add(c.hash)
            total += len(fc.chunks)
            files[f.path] = fc.file_row
            if fc.over_window:
                over[f.path] = fc.over_window
            if len(buf["path"]) >= ROW_GROUP:
                flush()
            failpoint("chunk")
            if progress:
                progress("chunk", i, len(plan.to_index))
        flush()
    return ChunkResult(path=out, files=files, chunks=total, unique_hashes=len(hashes), warnings=warnings,
                       over_window=over)


def iter_chunk_batches(path: str, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
    pf = pq.ParquetFile(path)
    yield from pf.iter_batches(batch_size=ROW_GROUP, columns=columns)


# -- cache lookup ------------------------------------------------------------------------------

def cache_lookup_stage(plan: RunPlan, chunks: ChunkResult, cache: EmbeddingCache | None,
                       provider: EmbeddingProvider) -> MissResult:
    """Write the unique chunk texts that have no cached vector to ``misses.parquet``."""
    out = os.path.join(plan.workdir, "misses.parquet")
    hits = 0
    misses = 0
    seen: set[str] = set()
    with pq.ParquetWriter(out, MISS_SCHEMA, compression=WORK_COMPRESSION) as writer:
        if provider.name != "none":
            for batch in iter_chunk_batches(chunks.path, ["hash", "text"]):
                hs = batch.column("hash").to_pylist()
                texts = batch.column("text").to_pylist()
                new = [(h, t) for h, t in zip(hs, texts, strict=True) if h not in seen]
                seen.update(h for h, _ in new)
                new = list(dict(new).items())
                cached = cache.has_many(h for h, _ in new) if cache is not None else set()
                hits += len(cached)
                todo = [(h, t) for h, t in new if h not in cached]
                misses += len(todo)
                if todo:
                    writer.write_table(pa.table({
                        "hash": [h for h, _ in todo], "text": [t for _, t in todo],
                        "tokens": [provider.estimate_tokens(t) for _, t in todo],
                    }, schema=MISS_SCHEMA))
    return MissResult(path=out, misses=misses, hits=hits)


# -- embed -------------------------------------------------------------------------------------

@dataclass
class EmbedGroup:
    index: int
    hashes: list[str]
    texts: list[str]
    tokens: int


def iter_embed_groups(misses: MissResult, provider: EmbeddingProvider) -> Iterator[EmbedGroup]:
    """Request groups over the misses, streamed from the Parquet file."""
    if misses.misses == 0:
        return
    table = pq.read_table(misses.path, columns=["tokens"])
    token_counts = table.column("tokens").to_pylist()
    groups = plan_groups(token_counts, max_inputs=provider.max_inputs_per_request,
                         max_tokens=provider.max_tokens_per_request)
    pf = pq.ParquetFile(misses.path)
    pending_h: list[str] = []
    pending_t: list[str] = []
    gi = 0
    for batch in pf.iter_batches(batch_size=ROW_GROUP, columns=["hash", "text"]):
        pending_h.extend(batch.column("hash").to_pylist())
        pending_t.extend(batch.column("text").to_pylist())
        while gi < len(groups) and len(pending_h) >= len(groups[gi]):
            n = len(groups[gi])
            yield EmbedGroup(gi, pending_h[:n], pending_t[:n], sum(token_counts[groups[gi].start:groups[gi].stop]))
            del pending_h[:n], pending_t[:n]
            gi += 1
    while gi < len(groups):
        n = len(groups[gi])
        yield EmbedGroup(gi, pending_h[:n], pending_t[:n], sum(token_counts[groups[gi].start:groups[gi].stop]))
        del pending_h[:n], pending_t[:n]
        gi += 1


def embed_group(provider: EmbeddingProvider, group: EmbedGroup) -> tuple[list[str], np.ndarray]:
    """Embed one request group; returns (hashes, float32 vectors). Pure: writes nothing."""
    return group.hashes, provider.embed_documents(group.texts)


def store_vectors(cache: EmbeddingCache, hashes: list[str], vectors: np.ndarray) -> None:
    """Commit one response's vectors to the cache at once."""
    cache.put_array(hashes, vectors)
    failpoint("embed")


def embed_stage_local(misses: MissResult, provider: EmbeddingProvider, cache: EmbeddingCache, *,
                      concurrency: int = 4, progress: ProgressFn | None = None) -> dict[str, int]:
    """Embed every miss with a bounded thread pool, caching each response as it arrives."""
    stats = {"requests": 0, "embedded": 0, "tokens": 0}
    if misses.misses == 0:
        return stats
    workers = 1 if provider.name == "local" else max(1, concurrency)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="embed") as pool:
        inflight: dict[Future[tuple[list[str], np.ndarray]], EmbedGroup] = {}

        def drain(block_until: int) -> None:
            while len(inflight) > block_until:
                done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
                for fut in done:
                    g = inflight.pop(fut)
                    hashes, vecs = fut.result()
                    store_vectors(cache, hashes, vecs)
                    stats["requests"] += 1
                    stats["embedded"] += len(hashes)
                    stats["tokens"] += g.tokens
                    if progress:
                        progress("embed", stats["embedded"], misses.misses)

        try:
            for g in iter_embed_groups(misses, provider):
                inflight[pool.submit(embed_group, provider, g)] = g
                drain(workers * 2)
            drain(0)
        except BaseException:
            for fut in inflight:
                fut.cancel()
            raise
    return stats


def _has_open_batch_jobs(cache: EmbeddingCache) -> bool:
    from memory_core.batch.ledger import BatchLedger

    return bool(BatchLedger.for_cache(cache).open_jobs())


def embed_stage(settings: Settings, misses: MissResult, provider: EmbeddingProvider, cache: EmbeddingCache | None,
                *, concurrency: int = 4, progress: ProgressFn | None = None) -> dict[str, Any]:
    """Embed the misses: through the provider's Batch API when ``batch.enabled`` and the
    provider has one (also when only jobs of earlier runs are left to collect or cancel), else
    with sync requests. Returns ``requests``, ``embedded``, ``tokens``, ``tokens_sync``,
    ``tokens_batch``, ``batch`` and ``cost`` (see :class:`RunSummary`)."""

    if cache is None or provider.name == "none":
        return {}
    if settings.batch.enabled and provider.supports_batch and (misses.misses or _has_open_batch_jobs(cache)):
        from memory_core.batch import run_batch_embedding

        return run_batch_embedding(settings, provider, misses, cache, progress=progress, sync_concurrency=concurrency)
    stats: dict[str, Any] = dict(embed_stage_local(misses, provider, cache, concurrency=concurrency, progress=progress))
    sync_embed_extras(settings, provider, stats)
    return stats


def sync_embed_extras(settings: Settings, provider: EmbeddingProvider, stats: dict[str, Any]) -> None:
    """Token split, batch-mode note and cost of a run embedded with sync requests only."""
    from memory_core.batch.cost import estimate_cost

    stats["tokens_sync"], stats["tokens_batch"] = stats["tokens"], 0
    if settings.batch.enabled and not provider.supports_batch:
        stats["batch"] = {"mode": f"sync ({provider.name} has no Batch API)"}
    if provider.name != "local":  # a hosted provider: what this run cost
        stats["cost"] = estimate_cost(settings, provider.name, provider.model, tokens_sync=stats["tokens"],
                                      tokens_batch=0)


def batch_pending(embed: dict[str, Any] | None) -> int:
    """Batch jobs still running after the embed stage (``batch.wait = false``): the cache is
    incomplete and the index must not be built from it."""
    return int(((embed or {}).get("batch") or {}).get("jobs_pending") or 0)


# -- build, verify, swap ----------------------------------------------------------------------

def _vector_dims(cache: EmbeddingCache | None, provider: EmbeddingProvider, chunks: ChunkResult,
                 live_meta_dims: int | None) -> int | None:
    if provider.name == "none":
        return None
    if provider.dims:
        return provider.dims
    if cache is not None:
        for batch in iter_chunk_batches(chunks.path, ["hash"]):
            got = cache.get_many(batch.column("hash").to_pylist()[:50])
            for v in got.values():
                return len(v) // 4
    return live_meta_dims


def _build_rows(chunks: ChunkResult, cache: EmbeddingCache | None, provider: EmbeddingProvider,
                with_vectors: bool, dims: int | None, now: int) -> Iterator[list[ChunkRow]]:
    """The temp index's rows, one Parquet batch at a time."""
    model = provider.model
    for batch in iter_chunk_batches(chunks.path):
        cols = {name: batch.column(name).to_pylist() for name in CHUNK_SCHEMA.names}
        vecs = cache.get_many(cols["hash"]) if (cache is not None and with_vectors) else {}
        rows = []
        for path, source, start, end, h, text in zip(cols["path"], cols["source"], cols["start_line"],
                                                      cols["end_line"], cols["hash"], cols["text"], strict=True):
            emb = vecs.get(h) if with_vectors else None
            if with_vectors and emb is None:
                raise RunError(f"no vector for a chunk of {path} (lines {start}-{end}); the embedding stage did"
                               " not finish")
            if emb is not None and dims and len(emb) != dims * 4:
                raise RunError(f"cached vector for {path} has {len(emb) // 4} dims, index has {dims}")
            rows.append(ChunkRow(
                id=chunk_id(source, path, start, end, h, model), path=path, source=source, start_line=start,
                end_line=end, hash=h, model=model, text=text, fts_text=None, embedding=emb,
                updated_at=now,
            ))
        yield rows


_DONE = object()


def _prefetch(items: Iterator[Any], depth: int = 2) -> Iterator[Any]:
    """Run ``items`` in a thread, ``depth`` items ahead of the consumer; re-raises its errors."""
    q: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        q.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put((_DONE, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            q.put((_DONE, exc))

    t = threading.Thread(target=produce, name="build-rows", daemon=True)
    t.start()
    try:
        while True:
            item, exc = q.get()
            if item is _DONE:
                if exc is not None:
                    raise exc
                return
            yield item
    finally:
        stop.set()
        with contextlib.suppress(queue.Empty):
            while True:
                q.get_nowait()
        t.join()


def build_stage(plan: RunPlan, chunks: ChunkResult, cache: EmbeddingCache | None,
                provider: EmbeddingProvider, progress: ProgressFn | None = None,
                in_place: bool | None = None) -> dict[str, Any]:
    """Build the next index in a temp file, verify it and swap it in (or, for a small
    incremental run, edit the live file in one transaction: see :func:`edit_in_place`)."""
    index_path = Path(plan.index_path)
    live_meta, _ = probe_index(index_path) if not plan.full else (None, None)
    dims = _vector_dims(cache, provider, chunks, (live_meta or {}).get("dims"))
    with_vectors = provider.name != "none"
    meta = dict(plan.meta)
    meta["dims"] = dims
    now = int(time.time() * 1000)
    if in_place is None:
        in_place = edit_in_place(full=plan.full, live_exists=index_path.exists(),
                                 source_bytes=sum(f.size for f in plan.to_index), removed=len(plan.removed))
    with IndexWriter(index_path, full=plan.full, dims=dims, in_place=in_place) as writer:
        if not plan.full:
            writer.delete_paths(plan.removed)
            writer.delete_paths(chunks.files.keys())
            # files whose index run was skipped (unreadable, binary) but that were indexed: drop
            writer.delete_paths(f.path for f in plan.to_index if f.path not in chunks.files)
        done = 0
        # Rows are prepared (Parquet read, vectors, ids, FTS text) in a thread while this one
        # inserts the previous batch: apsw releases the GIL while SQLite works.
        with contextlib.closing(_prefetch(_build_rows(chunks, cache, provider, with_vectors, dims, now))) as batches:
            for rows in batches:
                writer.insert_chunks(rows)
                done += len(rows)
                if progress:
                    progress("build", done, chunks.chunks)
        writer.upsert_files(FileRow(**v) for v in chunks.files.values())
        counts = writer.verify(expect_vectors=with_vectors)
        finish_meta(meta, plan, live_meta, chunks.over_window, counts, writer.vec, with_vectors, now)
        writer.set_meta(meta)
        try:
            writer.swap()
        except InPlaceBusyError as exc:
            writer.abort()
            log.warning("%s; building a new file instead", exc)
            return build_stage(plan, chunks, cache, provider, progress, in_place=False)
    return {"counts": counts, "dims": dims, "vector_store": meta["vector_store"],
            "chunks_over_window": meta["chunks_over_window"], "in_place": writer.in_place}


def finish_meta(meta: dict[str, Any], plan: RunPlan, live_meta: dict[str, Any] | None, over_window: dict[str, int],
                counts: dict[str, int], vec: bool, with_vectors: bool, now: int) -> None:
    """The meta row of a finished build: vector store, counts, chunks over the model's window."""
    meta["vector_store"] = ("vec0" if vec else "blob") if with_vectors else None
    meta["built_at"] = now
    meta["counts"] = counts
    by_path = merge_over_window(plan, live_meta, over_window) if with_vectors else {}
    meta["over_window_by_path"] = by_path
    meta["chunks_over_window"] = sum(by_path.values())


def cleanup_workdir(plan: RunPlan) -> None:
    shutil.rmtree(plan.workdir, ignore_errors=True)
    parent = Path(plan.workdir).parent
    with contextlib.suppress(OSError):
        parent.rmdir()  # only when empty


def summarize(plan: RunPlan, provider: EmbeddingProvider, reason: str, *, chunks: ChunkResult | None,
              misses: MissResult | None, embed: dict[str, int] | None, built: dict[str, Any] | None,
              timings: dict[str, float]) -> RunSummary:
    c = plan.counts
    live = None if built else (probe_index(Path(plan.index_path))[0] or {})
    total = built["counts"]["chunks"] if built else int((live.get("counts") or {}).get("chunks", 0))
    over = built.get("chunks_over_window", 0) if built else int(live.get("chunks_over_window") or 0)
    warnings = plan.warnings + (chunks.warnings if chunks else []) + _embed_warnings(embed)
    skipped = len(plan.to_index) - (len(chunks.files) if chunks else len(plan.to_index))
    return RunSummary(
        index_path=plan.index_path, provider=provider.name, model=provider.model, provider_reason=reason,
        full=plan.full, full_reason=plan.full_reason, swapped=built is not None,
        published=(("in place" if built.get("in_place") else "replaced") if built else ""),
        files_scanned=c["scanned"], files_new=c["new"], files_changed=c["changed"], files_unchanged=c["unchanged"],
        files_removed=c["removed"], files_skipped=skipped, sessions_carried=c["sessions_carried"],
        chunks_total=total, chunks_indexed=chunks.chunks if chunks else 0,
        chunks_embedded=(embed or {}).get("embedded", 0), chunks_from_cache=misses.hits if misses else 0,
        chunks_over_window=over,
        embed_requests=(embed or {}).get("requests", 0), tokens_sent=(embed or {}).get("tokens", 0),
        tokens_sync=(embed or {}).get("tokens_sync", (embed or {}).get("tokens", 0)),
        tokens_batch=(embed or {}).get("tokens_batch", 0), batch=dict((embed or {}).get("batch") or {}),
        cost=dict((embed or {}).get("cost") or {}), fallback=dict((embed or {}).get("fallback") or {}),
        stage_seconds={k: round(v, 3) for k, v in timings.items()}, warnings=warnings,
    )


def _embed_warnings(embed: dict[str, Any] | None) -> list[str]:
    out = []
    fb = (embed or {}).get("fallback") or {}
    if fb:
        out.append(f"provider {fb.get('from')} kept failing ({fb.get('reason')}); the index was rebuilt in full"
                   f" with the fallback {fb.get('to')}")
    b = (embed or {}).get("batch") or {}
    if b.get("disabled"):
        out.append(f"batch mode was switched off for this run: {b.get('disabled_reason')}")
    if b.get("jobs_pending"):
        out.append(f"{b['jobs_pending']} batch job(s) still running (batch.wait = false); the index was not"
                   " updated; run again to collect them")
    return out


class Timer:
    def __init__(self) -> None:
        self.times: dict[str, float] = {}

    def stage(self, name: str) -> _TimerCtx:
        return _TimerCtx(self, name)


class _TimerCtx:
    def __init__(self, timer: Timer, name: str) -> None:
        self.timer, self.name = timer, name

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.timer.times[self.name] = self.timer.times.get(self.name, 0.0) + time.perf_counter() - self.t0


def open_cache(settings: Settings, provider: EmbeddingProvider, plan: RunPlan) -> EmbeddingCache | None:
    """The embedding cache of this run; with ``cache.enabled = false`` it lives (and dies) in the workdir."""
    if provider.name == "none":
        return None
    path = settings.cache_file if settings.cache.enabled else Path(plan.workdir) / "run-cache.sqlite"
    return EmbeddingCache(path, provider.name, provider.model, provider.provider_key)


def preflight(settings: Settings) -> None:
    """Refuse a run whose workspace is missing before anything is created on disk."""
    from memory_core.errors import PathError

    if not settings.workspace_dir.is_dir():
        raise PathError(f"workspace not found: {settings.workspace_dir}")


class _SwitchProvider(Exception):
    """The primary kept failing during the run; rerun the stages with the fallback."""

    def __init__(self, provider: EmbeddingProvider, reason: str, info: dict[str, Any]) -> None:
        super().__init__(info["reason"])
        self.provider, self.reason, self.info = provider, reason, info


def fallback_for_run(settings: Settings, primary: EmbeddingProvider,
                     exc: Exception) -> tuple[EmbeddingProvider, str, dict[str, Any]] | None:
    """The fallback provider for a primary that failed during a run: (provider, reason, info)
    where ``info`` = {"from", "to", "reason"} goes into the run summary; None if there is none.

    The caller must rebuild the index in full with it (``discover_stage(..., full=True)`` then
    set ``plan.full_reason = fallback_full_reason(info)``): vectors are never mixed.
    """
    from memory_core.embeddings.registry import create_fallback_provider

    why = str(exc)
    switched = create_fallback_provider(settings, primary, why)
    if switched is None:
        return None
    fb, reason = switched
    info = {"from": f"{primary.name}/{primary.model}", "to": f"{fb.name}/{fb.model}", "reason": why}
    return fb, reason, info


def fallback_full_reason(info: dict[str, Any]) -> str:
    return f"provider fallback from {info['from']} to {info['to']}"


def _index_once(settings: Settings, provider: EmbeddingProvider, reason: str, *, full: bool,
                fallback: dict[str, Any] | None, timer: Timer, progress: ProgressFn | None,
                concurrency: int) -> RunSummary:
    with timer.stage("discover"):
        plan = discover_stage(settings, provider, reason, full=full or fallback is not None)
    if fallback is not None:
        plan.full_reason = fallback_full_reason(fallback)
    try:
        if plan.nothing_to_do:
            return summarize(plan, provider, reason, chunks=None, misses=None, embed=None, built=None,
                             timings=timer.times)
        cache = open_cache(settings, provider, plan)
        built = None
        # Sync embedding runs as one stream with no work files (memory_core.streaming); Batch
        # API mode needs every miss up front, so it runs the stages one after another.
        streamed = not (settings.batch.enabled and provider.supports_batch)
        try:
            try:
                if streamed:
                    from memory_core.streaming import stream_index

                    with timer.stage("index"):
                        chunks, misses, embed, built = stream_index(plan, settings, provider, cache,
                                                                    concurrency=concurrency, progress=progress)
                else:
                    with timer.stage("chunk"):
                        chunks = chunk_stage(plan, settings, provider, progress)
                    with timer.stage("cache"):
                        misses = cache_lookup_stage(plan, chunks, cache, provider)
                    with timer.stage("embed"):
                        embed = embed_stage(settings, misses, provider, cache, concurrency=concurrency,
                                            progress=progress)
            except ProviderError as exc:
                switched = None if fallback is not None else fallback_for_run(settings, provider, exc)
                if switched is None:
                    raise
                raise _SwitchProvider(*switched) from exc
            if fallback is not None:
                embed["fallback"] = fallback
            if not streamed and not batch_pending(embed):
                with timer.stage("build"):
                    built = build_stage(plan, chunks, cache, provider, progress)
            if built is not None and cache is not None and settings.cache.enabled:
                cache.evict(settings.cache.max_entries)
        finally:
            if cache is not None:
                cache.close()
        summary = summarize(plan, provider, reason, chunks=chunks, misses=misses, embed=embed, built=built,
                            timings=timer.times)
        for w in summary.warnings:
            log.warning("%s", w)
        return summary
    finally:
        cleanup_workdir(plan)


def run_index(settings: Settings, *, full: bool = False, provider: EmbeddingProvider | None = None,
              reason: str = "", progress: ProgressFn | None = None, concurrency: int = 4) -> RunSummary:
    """Run one reindex in-process (no Prefect). Raises MemoryCoreError subclasses on failure.

    Embedding goes through the provider's Batch API when ``batch.enabled`` (see
    :mod:`memory_core.batch`). If the provider keeps failing and ``settings.fallback`` is set,
    the run starts over with the fallback provider as a full rebuild (what the primary already
    returned stays in the cache), and the summary's ``fallback`` says so and why.
    """
    from memory_core.embeddings.registry import create_provider

    preflight(settings)
    if provider is None:
        provider, reason = create_provider(settings)
    timer = Timer()
    index_path = settings.index_file
    with IndexLock(index_path, wait=settings.lock.wait, timeout_s=settings.lock.timeout_s):
        remove_stale_temp_files(index_path)
        recover_index(index_path)
        try:
            return _index_once(settings, provider, reason, full=full, fallback=None, timer=timer, progress=progress,
                               concurrency=concurrency)
        except _SwitchProvider as sw:
            log.warning("provider %s failed (%s); rebuilding with the fallback %s", sw.info["from"],
                        sw.info["reason"], sw.info["to"])
            return _index_once(settings, sw.provider, sw.reason, full=True, fallback=sw.info, timer=timer,
                               progress=progress, concurrency=concurrency)


def summary_json(summary: RunSummary) -> str:
    return json.dumps(summary.to_dict(), indent=2, sort_keys=True)
