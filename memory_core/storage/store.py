"""The SQLite index file: connections, schema, meta, the temp-DB writer, the swap and the lock.

Schema (names follow the reference so other tools can read the file)::

    meta(key TEXT PRIMARY KEY, value TEXT)          -- key 'memory_index_meta_v1' -> JSON
    files(path TEXT PRIMARY KEY, source, hash, mtime, size, chunks, lines, indexed_at)
    chunks(rid INTEGER PRIMARY KEY, id TEXT UNIQUE, path, source, start_line, end_line,
           hash, model, text, embedding BLOB, updated_at)
    chunks_fts  FTS5(text, content='', contentless_delete=1)      rowid = chunks.rid
    chunks_bits(block INTEGER PRIMARY KEY, live, rids BLOB, codes BLOB)   -- see memory_core.storage.vectors

``chunks.rid`` is an explicit INTEGER PRIMARY KEY so that VACUUM never renumbers it; the FTS
and vector rows share it, which makes joins cheap and deletes exact. Each vector is stored
once at full precision, in ``chunks.embedding`` (little-endian float32), and once as one sign
bit per dimension in ``chunks_bits``, which a query scans before it ranks the nearest rows by
their exact cosines (:mod:`memory_core.storage.vectors`; meta ``vector_store = "blob+bits"``). No
extension is needed to write or search it.

Older schemas stay readable (the next run rebuilds them, ``schema_version`` changed):
schema 2 kept the vectors in a sqlite-vec ``chunks_vec vec0(embedding float[dims]
distance_metric=cosine)`` table (``"vec0"``, searched by vec0's brute-force KNN, ~10x slower
than the bits) or, where sqlite-vec did not load, in ``chunks.embedding`` (``"blob"``); schema
1 kept both copies. Schema 4 and older kept a copy of every chunk's text in ``chunks_fts``
(``text`` plus six UNINDEXED columns repeating ``chunks``' id, path, source, model and lines);
schema 5's ``chunks_fts`` is contentless (``content=''``, ``contentless_delete=1``, SQLite
>= 3.43): it holds only the inverted index of the text as tokenised for search (CJK
characters spaced out, see :mod:`memory_core.storage.textsearch`) and each row's length
(``chunks_fts_docsize``), so ``bm25()`` and the phrase functions work alike, and a row's
fields and original text are read from ``chunks`` by ``rowid = chunks.rid``. Selecting
``chunks_fts.text`` gives NULL.

How a run publishes its index (the live file is never half-written):

* a full build, or an incremental run with a lot to do, writes a temp file beside the live
  one with fast pragmas (no journal), verifies it, syncs it and renames it over the live path;
* a small incremental run (:func:`edit_in_place`) edits the live file in ONE SQLite
  transaction with a rollback journal and ``synchronous=FULL``: it verifies the counts inside
  the transaction and commits, or rolls back and leaves the file as it was. Copying the whole
  file for a one-file change cost O(index) (copy, fsync and freeing the old file: ~0.35 s at
  41k chunks, ~1 s at 100k, 3-5x the run itself); the transaction costs O(change).

Readers therefore use SQLite's locking (no ``immutable=1``): a query sees one committed
state; a commit waits for running statements and new ones wait for the commit (busy
timeout), which for a small edit is milliseconds. A run that dies mid-commit leaves a hot
journal; :func:`recover_index` rolls it back (every run does so first, under the lock, and
readers open read-write with ``query_only`` so they can too). The live file is never in WAL
mode: a -wal/-shm pair belongs to a path, not to an inode, and the file is still replaced.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import socket
import stat
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

import apsw
import numpy as np

from memory_core.errors import (
    IndexDamagedError,
    IndexLockedError,
    IndexMissingError,
    NotAnIndexError,
    PathError,
    RunError,
    UnsafePathError,
    UsageError,
)
from memory_core.failpoints import failpoint
from memory_core.storage import index_changes, vectors

if TYPE_CHECKING:  # apsw's stubs only
    from apsw import Bindings, SQLiteValue

META_KEY = "memory_index_meta_v1"
SCHEMA_VERSION = 5  # 2: vectors stored once (vec0 or chunks.embedding); 3: float32 + sign bits (vectors.py);
# 4: transcript chunks' exchange vectors (vectors.PARTS_TABLE); 5: contentless chunks_fts (text index only)
FILE_MODE = 0o600
DIR_MODE = 0o700
# SQLite's header field ``application_id`` (offset 68) of every index memory-core writes: only a
# file with this mark (or, written before the mark existed, our meta record) is ever replaced.
APPLICATION_ID = 0x4D436F72  # "MCor"
SQLITE_MAGIC = b"SQLite format 3\x00"
SQLITE_SIDECARS = ("-journal", "-wal", "-shm")


# -- files we create or write: never through a symlink ------------------------------------

def lstat_unless_link(path: str | os.PathLike[str], *, cannot: str, link: str) -> os.stat_result | None:
    """``os.lstat`` of a file memory-core is about to use, create or write: None when there is none
    yet. Raises PathError ``"<cannot>: <reason>"`` when it cannot be looked at, and
    UnsafePathError ``link`` when it (the last component) is a symbolic link."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PathError(f"{cannot}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(link)
    return st


def refuse_symlink(path: str | os.PathLike[str], what: str = "file") -> None:
    """Raise UnsafePathError when ``path`` (the last component) is a symbolic link."""
    p = os.fspath(path)
    lstat_unless_link(path, cannot=f"cannot use the {what} {p}",
                      link=f"refusing to write the {what} {p}: it is a symbolic link")


def safe_open(path: str | os.PathLike[str], flags: int, mode: int = FILE_MODE, *, what: str = "file") -> int:
    """``os.open`` for a file memory-core creates or writes: never through a symlink (O_NOFOLLOW),
    and only a regular file (a FIFO or device in its place is refused, never waited on)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.EEXIST and os.path.islink(path)):
            raise UnsafePathError(f"refusing to write the {what} {os.fspath(path)}: it is a symbolic link") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafePathError(f"refusing to write the {what} {os.fspath(path)}: it is not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_lock_file(lock: str | os.PathLike[str], what: str) -> int:
    """A lock file's descriptor (created 0600), through :func:`safe_open`: a symlink or a non-regular
    file in its place is refused (:class:`UnsafePathError`); any other failure is one
    :class:`UsageError` naming it (``what``: the flush ledger, the memory store). The caller flocks and closes it."""
    try:
        return safe_open(lock, os.O_RDWR | os.O_CREAT, 0o600, what=f"{what}'s lock")
    except UnsafePathError:
        raise
    except OSError as exc:
        raise UsageError(f"cannot use the {what}'s lock {os.fspath(lock)}: {exc.strerror or exc}") from None


def refuse_sqlite_symlinks(path: str | os.PathLike[str], what: str = "database") -> None:
    """A database and its journals are opened by SQLite, which follows symlinks for the journals:
    check each name first (the database itself is also opened with SQLITE_OPEN_NOFOLLOW)."""
    p = os.fspath(path)
    for suffix in ("", *SQLITE_SIDECARS):
        refuse_symlink(p + suffix, what if not suffix else f"{what} journal")


def make_private_dir(path: str | os.PathLike[str]) -> None:
    """Create a work folder (and missing parents) 0700, refusing a symlink at its own name or
    its parent's (``.memory-core-work``, a run's folder)."""
    p = Path(path)
    for q in (p.parent, p):
        refuse_symlink(q, "work folder")
    p.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if not p.is_dir() or p.is_symlink():
        raise UnsafePathError(f"refusing the work folder {p}: it is not a directory")


def copy_private(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, what: str = "temp index") -> None:
    """Copy ``src`` to a NEW file ``dst`` (O_EXCL, 0600, never through a symlink)."""
    out = safe_open(dst, os.O_CREAT | os.O_EXCL | os.O_WRONLY, what=what)
    try:
        with open(src, "rb") as fin, os.fdopen(out, "wb", closefd=False) as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
    finally:
        os.close(out)


# -- is this file ours? -----------------------------------------------------------------------

def check_index_target(path: Path) -> bool:
    """Refuse an index path memory-core must not write; True when a file is there.

    Refused (UsageError, exit 2): a symlink, a folder, anything but a regular file, and a file
    that memory-core did not write: not SQLite, another application's SQLite database (its own
    ``application_id``), an SQLite file without our mark and without our meta record, and an
    empty file (memory-core never leaves one at the index path: a new index is written beside it
    and renamed into place; a 0-byte file there is someone else's, e.g. a lock file). Only files
    that pass may be treated as a damaged index and rebuilt.
    """
    st = lstat_unless_link(path, cannot=f"cannot use {path} as the index",
                           link=f"refusing the index {path}: it is a symbolic link (give the real path)")
    if st is None:
        return False
    if stat.S_ISDIR(st.st_mode):
        raise PathError(f"the index path {path} is a folder; give a file path, e.g. {path / 'index.sqlite'}")
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(f"refusing the index {path}: it is not a regular file")
    refuse = f"refusing to use {path} as the index: it is not a memory-core index"
    if st.st_size == 0:
        raise NotAnIndexError(f"{refuse} (an empty file; memory-core never leaves one: remove it to build"
                              " the index there)")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            header = os.read(fd, 100)
        finally:
            os.close(fd)
    except OSError as exc:
        raise PathError(f"cannot read the index {path}: {exc.strerror or exc}") from None
    if not header.startswith(SQLITE_MAGIC):
        raise NotAnIndexError(f"{refuse} (not an SQLite file)")
    app_id = int.from_bytes(header[68:72], "big") if len(header) >= 72 else 0
    if app_id == APPLICATION_ID:
        return True
    if app_id != 0:
        raise NotAnIndexError(f"{refuse} (another application's SQLite database, application_id {app_id:#x})")
    try:  # written before the mark: ours only if it holds our meta record
        conn = connect(path, readonly=True)
        try:
            ours = read_meta(conn) is not None
        finally:
            conn.close()
    except apsw.Error:
        ours = False
    if not ours:
        raise NotAnIndexError(f"{refuse} (an SQLite database without memory-core's tables)")
    return True

_vec_path: str | None | Literal[False] = False  # False: not looked up yet


def sqlite_vec_path() -> str | None:
    """Path of the sqlite-vec loadable extension, or None when it is not installed."""
    global _vec_path
    if _vec_path is not False:
        return _vec_path
    path: str | None
    try:
        import sqlite_vec

        path = sqlite_vec.loadable_path()
    except Exception:  # pragma: no cover - depends on the installation
        path = None
    _vec_path = path
    return path


def load_vec(conn: apsw.Connection) -> bool:
    """Load sqlite-vec into ``conn``; False (and no exception) when it cannot be loaded."""
    if os.environ.get("MEMORY_CORE_DISABLE_VEC") == "1":
        return False
    path = sqlite_vec_path()
    if not path:
        return False
    try:
        conn.enable_load_extension(True)
        conn.load_extension(path)
        conn.enable_load_extension(False)
        return True
    except apsw.Error:
        return False


def connect(path: str | os.PathLike[str], *, readonly: bool = False, immutable: bool = False) -> apsw.Connection:
    """Open an SQLite connection with apsw (its own SQLite, FTS5, extension loading).

    ``immutable`` is only for files nothing else can be writing (a run's own reads under the
    index lock, tests); readers of the live index use :func:`connect_reader`.
    """
    p = os.fspath(path)
    if readonly:
        uri = "file:" + _uri_quote(p) + "?mode=ro" + ("&immutable=1" if immutable else "")
        conn = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    else:
        refuse_sqlite_symlinks(p)
        name, uri_flag = _sqlite_name(p)
        conn = apsw.Connection(name, flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
                               | apsw.SQLITE_OPEN_NOFOLLOW | uri_flag)
    conn.set_busy_timeout(10_000)
    return conn


def connect_reader(path: str | os.PathLike[str]) -> apsw.Connection:
    """A connection that only reads the live index, and can roll back a hot journal.

    Opened read-write with ``PRAGMA query_only`` when the file is writable, because SQLite
    refuses to read a file with a hot journal (left by a run killed mid-commit) through a
    read-only connection; falls back to read-only (then a later run recovers the file).
    """
    p = os.fspath(path)
    check_index_target(Path(p))  # a folder, a device or a file that is not ours: one line, exit 2
    try:
        refuse_sqlite_symlinks(p, "index")
        name, uri = _sqlite_name(p)
        conn = apsw.Connection(name, flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_NOFOLLOW | uri)
    except (apsw.Error, UnsafePathError):
        return connect(p, readonly=True)
    conn.set_busy_timeout(10_000)
    conn.execute("PRAGMA query_only=ON")
    return conn


def recover_index(path: Path) -> bool:
    """Roll back the hot journal a run killed mid-commit left beside ``path``; True if one was.

    Call while holding the index lock (no run is writing). SQLite rolls a hot journal back
    when a read-write connection first reads the file.
    """
    if not os.path.exists(str(path) + "-journal"):
        return False
    refuse_sqlite_symlinks(path, "index")
    try:
        name, uri = _sqlite_name(os.fspath(path))
        conn = apsw.Connection(name, flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_NOFOLLOW | uri)
        try:
            conn.set_busy_timeout(10_000)
            conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()
        finally:
            conn.close()
    except apsw.Error as exc:
        raise RunError(f"cannot recover the index at {path} from an interrupted update: {exc}") from exc
    return True


def _uri_quote(p: str) -> str:
    from urllib.parse import quote

    return quote(os.fsencode(p), safe="/")  # the file system's bytes, also when they are not UTF-8


def _sqlite_name(p: str) -> tuple[str, int]:
    """(file name, extra open flags) for apsw: a path whose bytes are not UTF-8 (a Latin-1
    workspace name) goes as a ``file:`` URI with its bytes percent-encoded."""
    try:
        p.encode("utf-8")
        return p, 0
    except UnicodeEncodeError:
        return "file:" + _uri_quote(p), apsw.SQLITE_OPEN_URI


# -- schema ------------------------------------------------------------------------------

def fts_tokenizer() -> str:
    from memory_core.storage.textsearch import FTS_TOKENIZER

    return FTS_TOKENIZER


# FTS5's contentless_delete=1 (chunks_fts, schema 5) needs SQLite 3.43 or later
FTS_MIN_SQLITE = (3, 43, 0)


def _sqlite_version() -> tuple[int, ...]:
    return tuple(int(x) for x in apsw.sqlite_lib_version().split(".")[:3])


HASH_INDEX_SQL = "CREATE INDEX IF NOT EXISTS idx_chunks_hash ON chunks(hash)"
"""Chunks by content hash: the run's cache asks the live index for vectors by it (cache.py)."""


def create_schema(conn: apsw.Connection, dims: int | None, *, with_vec: bool) -> None:
    if _sqlite_version() < FTS_MIN_SQLITE:
        raise RunError(f"SQLite {apsw.sqlite_lib_version()} is too old to write an index: its FTS5 table needs"
                       " contentless_delete (SQLite 3.43 or later; `pip install -U apsw` bundles one)")
    tok = fts_tokenizer().replace("'", "''")
    conn.execute(
        f"""
        CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS files (
          path TEXT PRIMARY KEY,
          source TEXT NOT NULL DEFAULT 'memory',
          hash TEXT NOT NULL,
          mtime INTEGER NOT NULL,
          size INTEGER NOT NULL,
          chunks INTEGER NOT NULL DEFAULT 0,
          lines INTEGER,
          indexed_at INTEGER NOT NULL DEFAULT 0
        );
        CREATE TABLE IF NOT EXISTS chunks (
          rid INTEGER PRIMARY KEY,
          id TEXT NOT NULL UNIQUE,
          path TEXT NOT NULL,
          source TEXT NOT NULL DEFAULT 'memory',
          start_line INTEGER NOT NULL,
          end_line INTEGER NOT NULL,
          hash TEXT NOT NULL,
          model TEXT NOT NULL,
          text TEXT NOT NULL,
          embedding BLOB,
          updated_at INTEGER NOT NULL
        );
        CREATE INDEX IF NOT EXISTS idx_chunks_path ON chunks(path);
        CREATE INDEX IF NOT EXISTS idx_chunks_source ON chunks(source);
        {HASH_INDEX_SQL};
        CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
          text, content='', contentless_delete=1, tokenize='{tok}'
        );
        """
    )
    mark_index(conn)
    if with_vec and dims:
        vectors.create(conn)


def mark_index(conn: apsw.Connection) -> None:
    """Write memory-core's ``application_id`` into the header (a no-op when it is there)."""
    if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")


def read_meta(conn: apsw.Connection) -> dict[str, Any] | None:
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (META_KEY,)).fetchone()
    except apsw.SQLError:
        return None
    if not row:
        return None
    try:
        value = json.loads(row[0])
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def write_meta(conn: apsw.Connection, meta: dict[str, Any]) -> None:
    conn.execute(
        "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (META_KEY, json.dumps(meta, sort_keys=True)),
    )


def has_table(conn: apsw.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone() is not None


# apsw types a fetched row as "Any | None" and a row's values as "None | int | float | Buffer | str":
# what a statement is known to return, checked once here instead of assumed at every call

def value_of(conn: apsw.Connection, sql: str, bindings: Bindings = ()) -> SQLiteValue:
    """The first column of the row of a statement that always returns one (an aggregate, a PRAGMA)."""
    row = conn.execute(sql, bindings).fetchone()
    if row is None:
        raise apsw.SQLError(f"no row from {sql!r}")
    return row[0]


def int_of(conn: apsw.Connection, sql: str, bindings: Bindings = ()) -> int:
    """:func:`value_of` a statement answering an integer (``count(*)``, ``PRAGMA data_version``)."""
    value = value_of(conn, sql, bindings)
    if not isinstance(value, int):
        raise apsw.SQLError(f"{sql!r} returned {type(value).__name__}, not an integer")
    return value


def blob_of(value: SQLiteValue) -> bytes:
    """A stored vector's bytes (``chunks.embedding``, vec0's ``embedding``): IndexDamagedError for
    anything but a BLOB."""
    if not isinstance(value, bytes):
        raise IndexDamagedError(f"a stored vector is {type(value).__name__}, not a BLOB; rebuild the index"
                                " with `memory-core index --full`")
    return value


# -- reading the live index ---------------------------------------------------------------

class LiveFile(NamedTuple):
    """A ``files`` row of the live index. A NamedTuple: a no-change run reads one per indexed file
    (242k at 1M chunks), and a tuple is built ~3x faster than a frozen dataclass."""

    path: str
    source: str
    hash: str
    mtime_ms: int
    size: int
    chunks: int
    lines: int | None


def probe_index(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(meta, problem) of the index at ``path``: problem is None for a healthy file.

    A missing file is (None, None). A file SQLite cannot read, or without our tables, is
    reported as damaged with a short reason. A file that memory-core did not write (see
    :func:`check_index_target`) raises a UsageError: it is never "damaged", never rebuilt.
    """
    if not check_index_target(path):
        return None, None
    try:
        conn = connect_reader(path)
    except apsw.Error as exc:
        return None, f"cannot open: {exc}"
    try:
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            meta = read_meta(conn)
            if meta is None:
                return None, "no memory-core meta record"
            for t in ("files", "chunks", "chunks_fts"):
                if not has_table(conn, t):
                    return meta, f"table {t} is missing"
            conn.execute("SELECT count(*) FROM files").fetchone()
            conn.execute("SELECT rid FROM chunks ORDER BY rid DESC LIMIT 1").fetchone()
            return meta, None
        except apsw.Error as exc:
            return None, f"not a readable SQLite index: {exc.__class__.__name__}: {exc}"
    finally:
        conn.close()


_LIVE_FILE_COLUMNS = ("path, source, hash, CAST(mtime AS INTEGER), CAST(size AS INTEGER), CAST(chunks AS INTEGER),"
                      " lines")


def read_live_files(path: Path) -> dict[str, LiveFile]:
    conn = connect(path, readonly=True, immutable=True)
    try:
        make = LiveFile._make
        rows = conn.execute(f"SELECT {_LIVE_FILE_COLUMNS} FROM files")
        return {r[0]: make(r) for r in rows}
    finally:
        conn.close()


def read_live_stats(path: Path) -> dict[str, tuple[str, int, int]]:
    """Every indexed path's ``(source, mtime ms, size)``: what a scan compares each file with
    (:func:`memory_core.sources.discovery.scan_against`). Plain tuples of four columns: at 242k
    files, about a third of the time of :func:`read_live_files`."""
    conn = connect(path, readonly=True, immutable=True)
    try:
        rows = conn.execute("SELECT path, source, CAST(mtime AS INTEGER), CAST(size AS INTEGER) FROM files")
        return {r[0]: (r[1], r[2], r[3]) for r in rows}
    finally:
        conn.close()


def read_live_rows(path: Path, rows_for: Iterable[str], folders: Iterable[str] = ()
                   ) -> tuple[int, dict[str, LiveFile], str | None]:
    """What a run given the changed paths needs of the ``files`` table, without reading it whole
    (242k rows at 1M chunks): how many files are indexed, the rows of ``rows_for`` that are, and
    an indexed path under one of ``folders`` (None if none is: a gone path that held files was a
    folder). Each is a count or a lookup on the table's primary key."""
    conn = connect(path, readonly=True, immutable=True)
    try:
        n = int_of(conn, "SELECT count(*) FROM files")
        make = LiveFile._make
        rows: dict[str, LiveFile] = {}
        for p in rows_for:
            for r in conn.execute(f"SELECT {_LIVE_FILE_COLUMNS} FROM files WHERE path = ?", (p,)):
                rows[r[0]] = make(r)
        held = None
        for folder in folders:  # the paths between "folder/" and "folder0" ('0' follows '/'): those under it
            got = conn.execute("SELECT path FROM files WHERE path > ? AND path < ? ORDER BY path LIMIT 1",
                               (folder + "/", folder + "0")).fetchone()
            if got is not None:
                held = str(got[0])
                break
        return n, rows, held
    finally:
        conn.close()


# -- the writer -----------------------------------------------------------------------------

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


@dataclass
class FileRow:
    path: str
    source: str
    hash: str
    mtime_ms: int
    size: int
    chunks: int
    lines: int | None = None


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
)
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
                 in_place: bool = False) -> None:
        self.live_path = Path(live_path)
        self.full = full or not self.live_path.exists()
        self.in_place = in_place and not self.full
        self.dims = dims
        self.tmp_path = self.live_path.with_name(
            f".{self.live_path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        )
        self.conn: apsw.Connection | None = None
        self.vec = False
        self._want_vec = use_vec
        self._next_rid = 1
        self._first_new_rid = 1
        self._parts = False  # the index has a parts table (schema 4)
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
        return vectors.measure_scan(self.conn, int(self.dims))

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
        return {"chunks": n_chunks, "fts": n_fts, "vectors": n_vec, "files": n_files}

    def swap(self) -> None:
        """Commit, sync and atomically rename the temp file over the live index (in place: commit)."""
        if self.in_place:
            self._commit_in_place()
            return
        self.prepare_swap()
        publish_temp(self.tmp_path, self.live_path)
        self.swapped = True

    def prepare_swap(self) -> None:
        """Commit, optimise, close and fsync the temp file: ready for :func:`publish_temp`."""
        assert self.conn is not None
        conn = self.conn
        try:
            conn.execute(HASH_INDEX_SQL)  # a full build's, in one sorted pass (open)
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

    def _commit_in_place(self) -> None:
        assert self.conn is not None
        conn = self.conn
        try:
            self._log_change()
            failpoint("before-swap")
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


# -- the writer lock -----------------------------------------------------------------------

class IndexLock:
    """One writer per index: an exclusive ``flock`` on ``<index>.lock``.

    The kernel releases a flock when its process dies, so a lock left by a killed run is
    taken over by the next one without any stale-lock guessing. The file records who holds
    it, for the message a waiting run prints.
    """

    def __init__(self, index_path: Path, *, wait: bool = True, timeout_s: float = 600.0) -> None:
        self.index_path = Path(index_path)
        self.path = Path(str(index_path) + ".lock")
        self.wait = wait
        self.timeout_s = timeout_s
        self.fd: int | None = None

    def holder(self) -> str:
        try:
            return self.path.read_text().strip() or "unknown"
        except OSError:
            return "unknown"

    def acquire(self) -> IndexLock:
        check_index_target(self.index_path)  # never a lock (or a rebuild) beside a file that is not ours
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = safe_open(self.path, os.O_RDWR | os.O_CREAT, what="lock file")
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                if not self.wait or time.monotonic() >= deadline:
                    holder = self.holder()
                    os.close(fd)
                    how = "" if not self.wait else f" after waiting {self.timeout_s:.0f}s"
                    raise IndexLockedError(
                        f"another run is writing {self.path.with_suffix('')} ({holder}){how}"
                    ) from None
                time.sleep(0.1)
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%dT%H:%M:%S')}".encode())
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> IndexLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def require_index(path: Path) -> None:
    if not path.exists():
        raise IndexMissingError(f"no index at {path}; run `memory-core index` first")
    _, problem = probe_index(path)
    if problem:
        raise IndexDamagedError(f"the index at {path} is damaged ({problem}); run `memory-core index --full` to rebuild it")
