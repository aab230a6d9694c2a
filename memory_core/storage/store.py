"""The SQLite index file: connections, schema, meta and the writer lock (the writer and the swap: :mod:`memory_core.index.writer`).

Schema (names follow the reference so other tools can read the file)::

    meta(key TEXT PRIMARY KEY, value TEXT)          -- key 'memory_index_meta_v1' -> JSON
    files(path TEXT PRIMARY KEY, source, hash, mtime, size, chunks, lines, indexed_at)
    chunks(rid INTEGER PRIMARY KEY, id TEXT UNIQUE, path, source, start_line, end_line,
           hash, model, text, embedding BLOB, updated_at)
    chunks_fts  FTS5(text, content='', contentless_delete=1)      rowid = chunks.rid
    chunk_days(day TEXT, rid INTEGER, first TEXT, line INTEGER, PRIMARY KEY(day, rid)) WITHOUT ROWID
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
import stat
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import apsw

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
from memory_core.storage import openfiles, vectors

if TYPE_CHECKING:  # apsw's stubs only
    from apsw import Bindings, SQLiteValue

META_KEY = "memory_index_meta_v1"
SCHEMA_VERSION = 6  # 2: vectors stored once (vec0 or chunks.embedding); 3: float32 + sign bits (vectors.py);
# 4: transcript chunks' exchange vectors (vectors.PARTS_TABLE); 5: contentless chunks_fts (text index only);
# 6: when each transcript chunk was written (chunk_days)
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


def make_private_dir(path: str | os.PathLike[str], *, ours: int = 2) -> None:
    """Create a work folder (and missing parents) 0700, refusing a symlink at its own name or at
    the names of the ``ours - 1`` folders above it that memory-core made (a run's folder: the
    index's and ``.memory-core-work``)."""
    p = Path(path)
    for q in reversed([p, *p.parents][:ours]):
        refuse_symlink(q, "work folder")
    p.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if not p.is_dir() or p.is_symlink():
        raise UnsafePathError(f"refusing the work folder {p}: it is not a directory")


def copy_private(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, what: str = "temp index") -> None:
    """Copy ``src`` (the live index: read through :func:`openfiles.kept`, so that no reader of this
    process loses its locks) to a NEW file ``dst`` (O_EXCL, 0600, never through a symlink)."""
    out = safe_open(dst, os.O_CREAT | os.O_EXCL | os.O_WRONLY, what=what)
    try:
        with openfiles.kept(src) as fin, os.fdopen(out, "wb", closefd=False) as fout:
            at = 0
            while chunk := os.pread(fin, 1 << 20, at):
                fout.write(chunk)
                at += len(chunk)
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
        header = _read_header(path, st)
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


def carries_index_mark(path: Path) -> bool:
    """Whether ``path`` is a regular file whose SQLite header carries memory-core's
    ``application_id``: no connection opened, and the header read as :func:`check_index_target`
    reads it (no lock of this process dropped by a closed descriptor)."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            return False
        header = _read_header(path, st)
    except OSError:
        return False
    return header.startswith(SQLITE_MAGIC) and len(header) >= 72 and \
        int.from_bytes(header[68:72], "big") == APPLICATION_ID


def _read_header(path: Path, st: os.stat_result) -> bytes:
    """The first 100 bytes of the index file ``path`` (``st``: its lstat), read anew each time (a
    header overwritten in place is seen) through a descriptor that is never closed under a
    connection of this process (:func:`memory_core.storage.openfiles.kept`): POSIX locks belong to
    a process and a file, and closing any descriptor of the file drops them all (N7, N8)."""
    with openfiles.kept(path, same_as=st) as fd:
        return os.pread(fd, 100, 0)


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
        conn: apsw.Connection = openfiles.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI,
                                                     path=p)
    else:
        refuse_sqlite_symlinks(p)
        name, uri_flag = _sqlite_name(p)
        conn = openfiles.Connection(name, flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
                                    | apsw.SQLITE_OPEN_NOFOLLOW | uri_flag, path=p)
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
        conn = openfiles.Connection(name, flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_NOFOLLOW | uri, path=p)
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
        conn = openfiles.Connection(name, flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_NOFOLLOW | uri,
                                    path=os.fspath(path))
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


CHUNK_DAYS_SQL = """
        CREATE TABLE IF NOT EXISTS chunk_days (
          day TEXT NOT NULL,
          rid INTEGER NOT NULL,
          first TEXT NOT NULL,
          line INTEGER NOT NULL,
          PRIMARY KEY (day, rid)
        ) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS idx_chunk_days_rid ON chunk_days(rid);"""
"""When each transcript chunk was written (schema 6): a row per day (``YYYY-MM-DD``) it has a
message of (each message's UTC day and, when its timestamp carries another offset, its local
day), with that day's earliest message time (``first``, ``YYYY-MM-DDTHH:MM``) and JSONL line
(``line``: where a snippet for that day starts); a chunk with no timed message has its session
header's day; notes have none (their day is their name or mtime).
A search finds a named day's chunks and dates its candidates here, never reading a transcript
(:mod:`memory_core.query.dates`)."""


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
        {CHUNK_DAYS_SQL}
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
    lines: int | None = None  # a note's or transcript's line count (None: not recorded)


def probe_index(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(meta, problem) of the index at ``path``: problem is None for a healthy file.

    A missing file is (None, None). A file SQLite cannot read, without our tables, or whose
    sign-bit codes disagree with its record (:func:`memory_core.storage.vectors.codes_problem`)
    is reported as damaged with a short reason. A file that memory-core did not write (see
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
            # one read transaction: an in-place update committing between the meta and the codes
            # would make them disagree (a healthy index said damaged; the thirty-ninth session's audit G)
            conn.execute("BEGIN")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            meta = read_meta(conn)
            if meta is None:
                return None, "no memory-core meta record"
            for t in ("files", "chunks", "chunks_fts"):
                if not has_table(conn, t):
                    return meta, f"table {t} is missing"
            conn.execute("SELECT count(*) FROM files").fetchone()
            conn.execute("SELECT rid FROM chunks ORDER BY rid DESC LIMIT 1").fetchone()
            # the vector side: its codes as the run that wrote them counted them (a damaged
            # block or lost rows would make the vector side find less, without an error)
            return meta, vectors.codes_problem(conn, meta)
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

    def _prepare(self) -> None:
        """Before the lock file is opened: what it guards is checked (a subclass's own check)."""
        check_index_target(self.index_path)  # never a lock (or a rebuild) beside a file that is not ours
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def _open(self) -> int:
        """The lock file's descriptor: never through a symlink, only a regular file (:func:`safe_open`)."""
        return safe_open(self.path, os.O_RDWR | os.O_CREAT, what="lock file")

    def _busy(self, holder: str, how: str) -> IndexLockedError:
        """The error of a lock another process holds (``how``: how long this one waited)."""
        return IndexLockedError(f"another run is writing {self.path.with_suffix('')} ({holder}){how}")

    def acquire(self) -> IndexLock:
        self._prepare()
        fd = self._open()
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
                    raise self._busy(holder, how) from None
            try:
                time.sleep(0.1)
            except BaseException:  # a stop while waiting (an export's SIGTERM, Ctrl-C): no descriptor left open
                os.close(fd)
                raise
        import socket  # here: a reader never takes the writer lock (socket, selectors: ~2.5 ms of its start)

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
