"""The index writer and the swap: the next index written beside the live one (or one transaction
on the live file), verified, synced and renamed into place (issue 38: the writer moved here from
``memory_core.storage.store``, which keeps the file's format, connections, meta and the lock).

How a run publishes its index, and why, is told in :mod:`memory_core.storage.store`'s docstring;
:class:`BuildWriter` is the protocol both writers (:class:`IndexWriter` here, and
:class:`memory_core.index.writer_proc.ProcessIndexWriter`) follow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import apsw
import numpy as np

from memory_core.errors import RunError
from memory_core.failpoints import failpoint
from memory_core.index.run_stops import stops_held
from memory_core.storage import index_changes, vectors
from memory_core.storage.store import (
    FILE_MODE,
    HASH_INDEX_SQL,
    LiveFile,
    connect,
    copy_private,
    create_schema,
    has_table,
    mark_index,
    recover_index,
    safe_open,
    write_meta,
)

if TYPE_CHECKING:  # apsw's stubs only
    pass


@dataclass
class ChunkRow:
    id: str
    path: str
    source: str
    start_line: int
    end_line: int
    hash: str
    model: str
    text: str
    fts_text: str | None  # None: the writer segments ``text`` (textsearch.segment_many)
    embedding: bytes | None
    updated_at: int
    parts: Sequence[bytes] | None = None  # float32 vectors of the chunk's exchanges (transcripts)
    days: Sequence[tuple[str, int, str]] | None = None  # a transcript chunk's earliest message per day (chunk_stamps)


FileRow = LiveFile
"""A ``files`` row as written: the same type the live index's rows are read as."""


# A new temp index: no journal, no syncs until the end (a crash just leaves a temp file), one
# connection. The page cache: inserting 99k chunks (FTS5 + vec0, 64 KiB pages) took 4.0-4.4 s
# with 32-64 MiB and 4.75-5.1 s with 256 MiB (a bigger cache costs more to manage than the OS
# page cache costs to take the spilled pages), and the writer process's peak RSS went from
# 350 to 157 MiB. bench.run's raw-insert baseline uses these same pragmas.
BUILD_PRAGMAS = (
    "PRAGMA journal_mode=OFF",
    "PRAGMA synchronous=OFF",
    "PRAGMA temp_store=MEMORY",
    "PRAGMA cache_size=-65536",  # 64 MiB
    "PRAGMA locking_mode=EXCLUSIVE",
)
# New index files get 4 KiB pages (SQLite's default; 64 KiB before issue 25). An in-place edit
# journals and writes every page it touches, and each edited chunk touches a page at a random
# place in each of ~8 B-trees (its row, the id, hash, path and source indexes, the FTS docsize
# and segments, the codes), so what an edit writes grows with the page size. A 1% change
# (bench.scale, same session): at 200k x 1536 chunks 341 MiB written with 64 KiB pages, 252 with
# 8 KiB, 183 with 4 KiB (99 with replace_paths' kept rows); at 1M x 1536, 1,247 MiB -> 415 MiB
# (4 KiB pages and kept rows), the run's peak RSS 1,026 -> 567 MiB (cache_spill is off: the
# dirty pages stay in memory until the commit). The file is as big either way (a 1,536-d row's
# 6 KiB vector fills one overflow page whole). Cost: the full build's CPU +10-20% (more pages to
# manage; within this VM's noise at 1M: 286 vs 321 s); the queries the same within noise.
NEW_FILE_PAGE_SIZE = 4096
# Editing the live file: a real rollback journal and full syncs (the commit is the swap), the
# change held in memory until the commit (no spill, which would lock readers out earlier).
IN_PLACE_PRAGMAS = (
    "PRAGMA journal_mode=DELETE",
    "PRAGMA synchronous=FULL",
    "PRAGMA temp_store=MEMORY",
    "PRAGMA cache_size=-65536",  # 64 MiB
    "PRAGMA cache_spill=OFF",
    # a removed or rewritten chunk's text is zeroed, not left in the file's free space (an outside
    # audit read a deleted note's text in the index file's bytes after an in-place run); its words
    # leave FTS5's segments at the commit (Writer._purge_deleted_words)
    "PRAGMA secure_delete=ON",
)
# FTS5's contentless table deletes by tombstone (it keeps no text to find a row's words by), so
# a removed or rewritten chunk's words, single stemmed tokens, stayed in FTS5's segments until
# FTS5 happened to merge theirs: a deleted note's names and words could be read in the index
# file. An incremental run that deleted rows merges the segments into one ('optimize': every
# tombstoned entry is dropped; secure_delete zeroes the pages they leave). It costs O(the text
# index): ~30 ms more for an in-place run on a 17 MiB index (bench/results/in-place-purge-2026-12-01.md),
# 55 ms for 7,800 chunks' text. A new file (copy) always does it; an
# in-place edit, which exists to keep a small change cheap, only while the live file is at most
# this big (above it the words go at the next run that writes a new file, or `index --full`).
PURGE_IN_PLACE_MAX_BYTES = 200 * 1024 * 1024
# An incremental run edits the live file in place when it (re)indexes at most this many bytes
# of sources and removes at most IN_PLACE_MAX_REMOVED files; bigger runs build a new file.
# Both bounds grow with the live index: x1 per IN_PLACE_INDEX_BYTES of it, up to
# IN_PLACE_MAX_SCALE times. Copying costs O(index) and the transaction O(change) (a 1% change
# of 200k x 1536 chunks, ~2 MiB of sources, copied a 2.3 GB file); at 41k chunks (~200 MiB)
# both ways took about as long at 2 MiB. The cap bounds what the transaction holds in memory
# until its commit (cache_spill off: ~10x the sources' bytes at 1536-d).
IN_PLACE_MAX_BYTES = 2 * 1024 * 1024
IN_PLACE_MAX_REMOVED = 1000
IN_PLACE_INDEX_BYTES = 200 * 1024 * 1024
IN_PLACE_MAX_SCALE = 8
# How long the commit waits for readers to finish their statements. While it waits, new
# readers wait too (SQLite's PENDING lock), so this stays short: a reader that holds the file
# longer (an export streaming a big index) makes the run roll back and build a new file instead.
IN_PLACE_BUSY_MS = 1500


class InPlaceBusyError(RunError):
    """An in-place commit could not get the file from its readers in time (rolled back)."""


def edit_in_place(*, full: bool, live_exists: bool, source_bytes: int, removed: int, live_bytes: int = 0) -> bool:
    """Whether an incremental run edits the live file in one transaction (see the module doc).

    ``MEMORY_CORE_WRITER``: ``inplace`` forces it for any incremental run; ``inline``,
    ``copy`` and ``process`` force a new file.
    """
    if full or not live_exists:
        return False
    mode = os.environ.get("MEMORY_CORE_WRITER", "auto")
    if mode == "inplace":
        return True
    if mode != "auto":
        return False
    scale = max(1, min(IN_PLACE_MAX_SCALE, int(live_bytes) // IN_PLACE_INDEX_BYTES))
    return source_bytes <= IN_PLACE_MAX_BYTES * scale and removed <= IN_PLACE_MAX_REMOVED * scale


def _fsync_path(path: str, *, directory: bool = False) -> None:
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _counted(conn: apsw.Connection, table: str, shadow: str) -> str:
    return shadow if has_table(conn, shadow) else table


class BuildWriter(Protocol):
    """What a build asks of the writer of the next index, in this order: ``open``, edits
    (``delete_paths``, ``replace_paths``, ``insert_tuples``, then ``finish_replace``,
    ``upsert_files``), ``verify``, ``set_meta``, then ``swap`` (or ``abort`` on any failure).

    Two writers are one: :class:`IndexWriter`, in this process, and
    :class:`memory_core.index.writer_proc.ProcessIndexWriter`, which runs an :class:`IndexWriter` in
    a child process and sends it the edits without waiting (so it cannot say how many rows a
    delete removed). :func:`memory_core.index.streaming.stream_index` uses nothing else.
    """

    @property
    def vec(self) -> bool:
        """After :meth:`verify`: the vectors' sign bits are stored (meta ``vector_store``)."""
        ...

    @property
    def swapped(self) -> bool:
        """True once the new index is live (renamed into place, or committed in place)."""
        ...

    def open(self) -> None: ...

    def delete_paths(self, paths: Iterable[str]) -> int | None:
        """Remove these files' rows (the count where the writer knows it at once)."""
        ...

    def replace_paths(self, paths: Iterable[str]) -> None: ...

    def finish_replace(self) -> int: ...

    def insert_tuples(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Insert chunk rows, each in :class:`ChunkRow`'s field order."""
        ...

    def upsert_files(self, rows: Iterable[FileRow]) -> None: ...

    def set_meta(self, meta: dict[str, Any]) -> None: ...

    def verify(self, *, expect_vectors: bool) -> dict[str, int]: ...

    def swap(self) -> None: ...

    def measure_scan(self) -> vectors.ScanPlan | None:
        """How well the quick vector scan works on the index's own vectors (issue 39)."""
        ...

    def abort(self) -> None: ...


class IndexWriter:
    """Builds the next index in a temp file beside the live one and swaps it in.

    ``full=True`` (or no live index) starts from an empty file; otherwise the live file is
    copied and edited. Nothing touches the live path until :meth:`swap`; :meth:`abort`
    (also called on any exception inside ``with``) removes the temp file.

    ``in_place=True`` (incremental only) edits the live file itself inside one transaction
    instead: :meth:`swap` commits it, :meth:`abort` rolls it back.
    """

    def __init__(self, live_path: Path, *, full: bool, dims: int | None, use_vec: bool = True,
                 in_place: bool = False, tmp_path: Path | None = None) -> None:
        self.live_path = Path(live_path)
        self.full = full or not self.live_path.exists()
        self.in_place = in_place and not self.full
        self.dims = dims
        # ``tmp_path``: chosen by the caller (the writer process's parent, which must know it from
        # the start to remove it whatever becomes of the child); else a new name beside the live file
        self.tmp_path = Path(tmp_path) if tmp_path is not None else temp_path_for(self.live_path)
        self.conn: apsw.Connection | None = None
        self.vec = False
        self._want_vec = use_vec
        self._next_rid = 1
        self._first_new_rid = 1
        self._parts = False  # the index has a parts table (schema 4)
        self._days = False  # the index has chunk_days (schema 6)
        self._next_part_rid = 1
        self.swapped = False
        # replace_paths: the old rows of the files this run indexes again, by chunk id, until
        # finish_replace (an unchanged chunk keeps its row: see replace_paths)
        self._old_rows: dict[str, tuple[int, bool]] = {}
        self._kept: set[int] = set()
        self._replaced: list[str] = []
        # the change log (memory_core.storage.index_changes) of an incremental run: the state it started
        # from and the chunk rows it removed
        self._before: str | None = None
        self._deleted: list[int] = []

    # context manager: abort on error
    def __enter__(self) -> IndexWriter:
        self.open()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if not self.swapped:
            self.abort()

    def open(self) -> None:
        if self.in_place:
            self._open_in_place()
            return
        self.live_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if not self.full:
                copy_private(self.live_path, self.tmp_path)
            else:
                os.close(safe_open(self.tmp_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, what="temp index"))
            os.chmod(self.tmp_path, FILE_MODE)
            conn = connect(self.tmp_path)
            if self.full:
                conn.execute(f"PRAGMA page_size={NEW_FILE_PAGE_SIZE}")
            for p in BUILD_PRAGMAS:
                conn.execute(p)
            self.conn = conn
            self.vec = bool(self.dims) and self._want_vec
            if self.full:
                create_schema(conn, self.dims, with_vec=self.vec)
                # built once before the commit (prepare_swap): kept up row by row, its random keys
                # dirty a page each all over a B-tree that outgrows the page cache at ~1M chunks
                conn.execute("DROP INDEX IF EXISTS idx_chunks_hash")
            elif self.dims and self.vec and not has_table(conn, vectors.BITS_TABLE):
                create_schema(conn, self.dims, with_vec=True)
            if not self.full:  # an index written before it: its vectors become findable by hash (cache.py)
                conn.execute(HASH_INDEX_SQL)
                # the copy's removed rows and purged segments are zeroed, as an in-place edit's are
                conn.execute("PRAGMA secure_delete=ON")
            mark_index(conn)
            row = conn.execute("SELECT max(rid) FROM chunks").fetchone()
            self._next_rid = (row[0] or 0) + 1
            self._first_new_rid = self._next_rid
            self._open_parts(conn)
            if not self.full:
                self._before = index_changes.meta_digest(conn)
            conn.execute("BEGIN")
        except OSError as exc:
            self.abort()
            raise RunError(f"cannot create the temp index beside {self.live_path}: {exc.strerror or exc}") from exc
        except apsw.Error as exc:
            self.abort()
            raise RunError(f"cannot prepare the temp index: {exc}") from exc

    def _open_in_place(self) -> None:
        try:
            conn = connect(self.live_path)
            self.conn = conn
            conn.set_busy_timeout(IN_PLACE_BUSY_MS)
            for p in IN_PLACE_PRAGMAS:
                conn.execute(p)
            self.vec = bool(self.dims) and self._want_vec
            conn.execute("BEGIN IMMEDIATE")  # readers go on; no other writer (the run holds the lock)
            if self.dims and self.vec and not has_table(conn, vectors.BITS_TABLE):
                create_schema(conn, self.dims, with_vec=True)
            mark_index(conn)
            row = conn.execute("SELECT max(rid) FROM chunks").fetchone()
            self._next_rid = (row[0] or 0) + 1
            self._first_new_rid = self._next_rid
            self._open_parts(conn)
            self._before = index_changes.meta_digest(conn)
        except apsw.Error as exc:
            self.abort()
            raise RunError(f"cannot open the index at {self.live_path} for an update: {exc}") from exc

    def _open_parts(self, conn: apsw.Connection) -> None:
        self._days = has_table(conn, "chunk_days")
        self._parts = bool(self.vec and self.dims) and vectors.has_parts(conn)
        if self._parts:
            row = conn.execute(f"SELECT max(rid) FROM {vectors.PARTS_TABLE}").fetchone()
            self._next_part_rid = (row[0] or 0) + 1

    # -- edits ----------------------------------------------------------------------------
    def delete_paths(self, paths: Iterable[str]) -> int:
        """Remove every row of these indexed paths (chunks, FTS, vectors, files)."""
        assert self.conn is not None
        conn = self.conn
        removed = 0
        for path in paths:
            rids = [r[0] for r in conn.execute("SELECT rid FROM chunks WHERE path = ?", (path,))]
            removed += self._delete_rows(rids)
            conn.execute("DELETE FROM files WHERE path = ?", (path,))
        return removed

    def _delete_rows(self, rids: Sequence[int]) -> int:
        """Remove these chunk rows and what hangs off them (FTS row, code, exchange vectors)."""
        assert self.conn is not None
        conn = self.conn
        if rids:
            self._deleted.extend(rids)
            conn.executemany("DELETE FROM chunks_fts WHERE rowid = ?", ((r,) for r in rids))
            if self.vec and self.dims:
                vectors.delete(conn, rids)
                if self._parts:
                    vectors.delete_parts(conn, rids)
            conn.executemany("DELETE FROM chunks WHERE rid = ?", ((r,) for r in rids))
            if self._days:
                conn.executemany("DELETE FROM chunk_days WHERE rid = ?", ((r,) for r in rids))
        return len(rids)

    def replace_paths(self, paths: Iterable[str]) -> None:
        """These files are indexed again by this run: their rows go at :meth:`finish_replace`,
        except the rows of chunks the run inserts unchanged (same chunk id: same source, path,
        lines, text hash and model), which stay where they are, with their FTS row, vector,
        code and exchange vectors. An edit to one chunk of a file then rewrites that chunk's
        rows, not the file's, in every B-tree (chunks, its id and hash indexes, the FTS
        segments, the codes): what an in-place transaction journals and writes is the change,
        not the files it touches (issue 25). A kept row keeps its ``updated_at``."""
        assert self.conn is not None
        for path in paths:
            self._replaced.append(path)
            for rid, cid, has_vec in self.conn.execute(
                    "SELECT rid, id, embedding IS NOT NULL FROM chunks WHERE path = ?", (path,)):
                self._old_rows[cid] = (rid, bool(has_vec))

    def finish_replace(self) -> int:
        """Delete what :meth:`replace_paths` set aside and the run did not insert again (and the
        replaced files' rows: the run writes them again). Returns how many chunk rows went."""
        assert self.conn is not None
        gone = self._delete_rows(sorted(rid for rid, _ in self._old_rows.values() if rid not in self._kept))
        self.conn.executemany("DELETE FROM files WHERE path = ?", ((p,) for p in self._replaced))
        self._old_rows, self._kept, self._replaced = {}, set(), []
        return gone

    def _refresh_days(self, rid: int, days: Iterable[tuple[str, int, str]]) -> None:
        """A kept row's recorded days made the run's (``ChunkRow.days``: (first time, line, day)),
        written only where they differ: the same text read again by a newer reading of
        timestamps (indexmeta.MESSAGE_DAYS_VERSION) may date it otherwise; an unchanged one
        writes nothing (issue 25)."""
        assert self.conn is not None
        new = sorted((day, ts, n) for ts, n, day in days)
        old = sorted(self.conn.execute("SELECT day, first, line FROM chunk_days WHERE rid = ?", (rid,)))
        if [tuple(o) for o in old] != new:
            self.conn.execute("DELETE FROM chunk_days WHERE rid = ?", (rid,))
            self.conn.executemany("INSERT INTO chunk_days(day, rid, first, line) VALUES(?,?,?,?)",
                                  ((day, rid, ts, n) for day, ts, n in new))

    def insert_tuples(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Insert chunk rows given as tuples in :class:`ChunkRow` field order (``fts_text`` None:
        computed here, so a writer process does that work). A row whose chunk is unchanged in a
        file set aside by :meth:`replace_paths` is not inserted: the old row stays."""
        assert self.conn is not None
        conn = self.conn
        if self._old_rows:
            keep = []
            for r in rows:
                old = self._old_rows.get(r[0])
                if old is not None and old[0] not in self._kept and old[1] == (r[9] is not None):
                    self._kept.add(old[0])
                    if self._days and len(r) > 12:
                        self._refresh_days(old[0], r[12] or ())
                else:
                    keep.append(r)
            if len(keep) < len(rows):
                rows = keep
                if not rows:
                    failpoint("build")
                    return
        start = self._next_rid
        self._next_rid += len(rows)
        conn.executemany(
            "INSERT INTO chunks(rid, id, path, source, start_line, end_line, hash, model, text, embedding, updated_at)"
            " VALUES(?,?,?,?,?,?,?,?,?,?,?)",
            ((start + i, *r[:8], r[9], r[10]) for i, r in enumerate(rows)),
        )
        from memory_core.storage.textsearch import segment_many

        if self._days:  # when each transcript chunk was written (ChunkRow.days)
            conn.executemany("INSERT INTO chunk_days(day, rid, first, line) VALUES(?,?,?,?)",
                             ((day, start + i, ts, n) for i, r in enumerate(rows) if len(r) > 12 and r[12]
                              for ts, n, day in r[12]))
        fts = iter(segment_many([r[7] for r in rows if r[8] is None]))
        conn.executemany(
            "INSERT INTO chunks_fts(rowid, text) VALUES(?,?)",  # contentless: only the text is indexed
            ((start + i, next(fts) if r[8] is None else r[8]) for i, r in enumerate(rows)),
        )
        if self.vec and self.dims:  # the sign bits of every vector of the right size (verify counts them)
            size = int(self.dims) * 4
            got = [(start + i, r[9]) for i, r in enumerate(rows) if r[9] is not None and len(r[9]) == size]
            vectors.append(conn, [g[0] for g in got], [g[1] for g in got], int(self.dims))
            # a transcript chunk's exchange vectors (ChunkRow.parts), in their own table and codes
            parts = [(start + i, v) for i, r in enumerate(rows) if len(r) > 11 and r[11]
                     for v in r[11] if v is not None and len(v) == size]
            if parts and self._parts:
                first = self._next_part_rid
                self._next_part_rid += len(parts)
                conn.executemany(f"INSERT INTO {vectors.PARTS_TABLE}(rid, chunk, embedding) VALUES(?,?,?)",
                                 ((first + j, c, v) for j, (c, v) in enumerate(parts)))
                vectors.append(conn, range(first, first + len(parts)), [v for _, v in parts], int(self.dims),
                               vectors.PARTS_BITS_TABLE)
        failpoint("build")

    def upsert_files(self, rows: Iterable[FileRow]) -> None:
        assert self.conn is not None
        now = int(time.time() * 1000)
        self.conn.executemany(
            "INSERT INTO files(path, source, hash, mtime, size, chunks, lines, indexed_at) VALUES(?,?,?,?,?,?,?,?)"
            " ON CONFLICT(path) DO UPDATE SET source=excluded.source, hash=excluded.hash, mtime=excluded.mtime,"
            " size=excluded.size, chunks=excluded.chunks, lines=excluded.lines, indexed_at=excluded.indexed_at",
            ((r.path, r.source, r.hash, r.mtime_ms, r.size, r.chunks, r.lines, now) for r in rows),
        )

    def set_meta(self, meta: dict[str, Any]) -> None:
        assert self.conn is not None
        write_meta(self.conn, meta)

    def measure_scan(self) -> vectors.ScanPlan | None:
        """How well the quick vector scan finds this index's nearest rows, and so how searches
        read its vectors (:func:`memory_core.storage.vectors.measure_scan`), as this run leaves
        it; None for an index without vectors."""
        assert self.conn is not None
        if not (self.vec and self.dims):
            return None
        plan = vectors.measure_scan(self.conn, int(self.dims))
        if self._parts and vectors.count(self.conn, vectors.PARTS_BITS_TABLE):
            # the part vectors (exchanges, note windows) are scanned from their own codes: measured alike
            plan = dataclasses.replace(plan, parts=vectors.measure_scan(self.conn, int(self.dims),
                                                                        table=vectors.PARTS_BITS_TABLE))
        return plan

    # -- verify and swap --------------------------------------------------------------------
    def verify(self, *, expect_vectors: bool) -> dict[str, int]:
        """Check that chunks, FTS rows and vectors agree; raise RunError otherwise."""
        assert self.conn is not None
        conn = self.conn
        n_chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        in_vec = bool(self.vec and self.dims)
        missing = bad = 0
        if expect_vectors:
            # Read every row this run inserted (all of them in a full build); the rows carried
            # over from the live index were checked by the run that wrote them.
            missing, bad = conn.execute(
                "SELECT coalesce(sum(embedding IS NULL), 0),"
                " coalesce(sum(embedding IS NOT NULL AND length(embedding) != ?), 0) FROM chunks WHERE rid >= ?",
                ((self.dims or 0) * 4, self._first_new_rid),
            ).fetchone()
        # count the shadow tables (one row per document / vector, plain B-trees): counting the
        # virtual tables scans them (~30 ms at 41k rows, per run)
        n_fts = conn.execute(f"SELECT count(*) FROM {_counted(conn, 'chunks_fts', 'chunks_fts_docsize')}").fetchone()[0]
        problems = []
        if n_fts != n_chunks:
            problems.append(f"{n_chunks} chunks but {n_fts} FTS rows")
        elif has_table(conn, "chunks_fts_docsize"):
            # the FTS table keeps no copy of the rows (contentless): each chunk this run inserted
            # has its FTS row under its own rid (equal counts alone would miss a shifted rowid)
            unmatched = conn.execute(
                "SELECT count(*) FROM chunks c WHERE c.rid >= ?"
                " AND NOT EXISTS (SELECT 1 FROM chunks_fts_docsize d WHERE d.id = c.rid)",
                (self._first_new_rid,)).fetchone()[0]
            if unmatched:
                problems.append(f"{unmatched} chunks have no FTS row of their rid")
        n_vec = 0
        if expect_vectors:
            if missing:
                problems.append(f"{missing} chunks have no vector")
            if self.dims and bad:
                problems.append(f"{bad} vectors do not have {self.dims} dimensions")
            if in_vec:
                n_vec = vectors.count(conn)
                if n_vec != n_chunks:
                    problems.append(f"{n_chunks} chunks but {n_vec} vectors")
                if self._parts:
                    n_parts = conn.execute(f"SELECT count(*) FROM {vectors.PARTS_TABLE}").fetchone()[0]
                    n_codes = vectors.count(conn, vectors.PARTS_BITS_TABLE)
                    if n_parts != n_codes:
                        problems.append(f"{n_parts} exchange vectors but {n_codes} codes for them")
            elif self.dims:
                n_vec = n_chunks - missing
        n_files_chunks = conn.execute("SELECT coalesce(sum(chunks), 0) FROM files").fetchone()[0]
        if n_files_chunks != n_chunks:
            problems.append(f"files table counts {n_files_chunks} chunks, chunks table has {n_chunks}")
        if problems:
            raise RunError("index verification failed: " + "; ".join(problems))
        n_files = conn.execute("SELECT count(*) FROM files").fetchone()[0]
        out = {"chunks": n_chunks, "fts": n_fts, "vectors": n_vec, "files": n_files}
        if in_vec and self._parts:
            out["parts"] = int(n_parts)
        return out

    def swap(self) -> None:
        """Commit, sync and atomically rename the temp file over the live index (in place: commit)."""
        if self.in_place:
            self._commit_in_place()
            return
        self.prepare_swap()
        with stops_held():
            publish_temp(self.tmp_path, self.live_path)
            self.swapped = True

    def prepare_swap(self) -> None:
        """Commit, optimise, close and fsync the temp file: ready for :func:`publish_temp`."""
        assert self.conn is not None
        conn = self.conn
        try:
            conn.execute(HASH_INDEX_SQL)  # a full build's, in one sorted pass (open)
            self._purge_deleted_words()
            self._log_change()
            conn.execute("COMMIT")
            conn.execute("PRAGMA optimize")
            conn.close()
            self.conn = None
            _fsync_path(str(self.tmp_path))
        except OSError as exc:
            raise RunError(f"cannot swap the new index into place: {exc.strerror or exc}") from exc
        except apsw.Error as exc:
            raise RunError(f"cannot finish the new index: {exc}") from exc

    def _log_change(self) -> None:
        """An incremental run's row of the change log, in its transaction (see
        :mod:`memory_core.storage.index_changes`): long-lived readers update what they keep by it."""
        if self._before is not None and self.conn is not None:
            index_changes.record(self.conn, self._before, np.asarray(self._deleted, dtype=np.int64),
                                 self._first_new_rid)

    def _purge_deleted_words(self) -> None:
        """The deleted rows' words out of FTS5's segments (:data:`PURGE_IN_PLACE_MAX_BYTES`)."""
        if not self._deleted or self.conn is None:
            return
        if self.in_place:
            try:
                if os.path.getsize(self.live_path) > PURGE_IN_PLACE_MAX_BYTES:
                    return
            except OSError:
                return
        self.conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES('optimize')")

    def _commit_in_place(self) -> None:
        assert self.conn is not None
        conn = self.conn
        try:
            self._purge_deleted_words()
            self._log_change()
            failpoint("before-swap")
            with stops_held():
                conn.execute("COMMIT")  # journal synced, pages written and synced, journal deleted
                self.swapped = True
            failpoint("after-swap")
        except apsw.BusyError as exc:
            raise InPlaceBusyError(f"readers kept {self.live_path} busy for {IN_PLACE_BUSY_MS / 1000:g} s;"
                                   " the update was rolled back") from exc
        except apsw.Error as exc:
            raise RunError(f"cannot commit the update to {self.live_path}: {exc}; the index is unchanged") from exc
        finally:
            if self.swapped:
                with contextlib.suppress(apsw.Error):
                    conn.close()
                self.conn = None

    def abort(self) -> None:
        if self.in_place:
            if self.conn is not None:  # roll back: the live file stays as it was
                with contextlib.suppress(apsw.Error):
                    if not self.conn.getautocommit():
                        self.conn.execute("ROLLBACK")
                with contextlib.suppress(apsw.Error):
                    self.conn.close()
                self.conn = None
            return
        if self.conn is not None:
            with contextlib.suppress(apsw.Error):
                self.conn.close()
            self.conn = None
        for suffix in ("", "-journal", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(self.tmp_path) + suffix)


def temp_path_for(live_path: Path) -> Path:
    """A new temp index name beside ``live_path`` (:func:`remove_stale_temp_files` knows the prefix)."""
    return live_path.with_name(f".{live_path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def publish_temp(tmp_path: Path, live_path: Path) -> None:
    """Rename a finished, synced temp index over the live one and sync the directory."""
    try:
        failpoint("before-swap")
        recover_index(live_path)  # a hot journal must never meet the new file
        os.replace(tmp_path, live_path)
        _fsync_path(str(live_path.parent), directory=True)
        failpoint("after-swap")
    except OSError as exc:
        raise RunError(f"cannot swap the new index into place: {exc.strerror or exc}") from exc


def remove_stale_temp_files(live_path: Path) -> int:
    """Delete temp files left by killed runs (call while holding the writer lock)."""
    n = 0
    prefix = f".{live_path.name}.tmp-"
    with contextlib.suppress(FileNotFoundError):
        for e in os.scandir(live_path.parent):
            if e.name.startswith(prefix):
                with contextlib.suppress(OSError):
                    os.unlink(e.path)
                    n += 1
    return n


