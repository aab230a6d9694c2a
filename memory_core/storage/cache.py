"""The embedding cache: the durable record of what embeddings were already paid for.

It lives in its own SQLite file (WAL mode), outside the temp index, so it survives failed
and killed runs. Entries are keyed by ``(provider, model, provider_key, chunk hash)``;
``provider_key`` hashes everything that changes vectors (provider, base URL, model, dimensions,
non-secret headers), never a key.

Every provider response is stored as it arrives, in a journal beside the cache file
(memory_core/storage/cache_journal.py), not in SQLite: ``<cache file>-journal-<uuid>``, one per
:class:`EmbeddingCache` instance (a run, a batch thread, a Prefect task), created at its first
write and held under an exclusive ``flock`` while the instance lives. A response is one record
(digests, float32 vectors, crc32) written with one ``pwritev``. Why (measured): committing each
response to SQLite inserted its R random 32-byte keys into the key index, and once R exceeded
that index's page count every commit wrote the whole index to the WAL again: O(N^2/R) bytes. A
1M x 1536-d cold build wrote 33,358 MiB for ~5,900 MiB of vectors (5.5x), and the publish then
trimmed them all. The instance keeps a map digest -> offset of its records (sorted numpy arrays,
~40 bytes an entry) so its lookups (:meth:`EmbeddingCache.get_many`, ``has_many``, ``hashes``,
``count``, ``is_empty``) see what it stored; a streamed build re-reads its own vectors that way.

Where journal entries go: after a publish, :meth:`EmbeddingCache.trim` drops those the new live
index holds and inserts the rest into ``cache_vectors`` in one transaction, in key order (each
key-index page written once), then deletes the journal; when there is no trim (a shared cache,
``cache.enabled = false``, a failed run), :meth:`EmbeddingCache.close` does the same without
dropping anything (:meth:`EmbeddingCache.fold`); ``evict`` folds first, then counts the file.
``delete_many`` forgets journal entries too and appends a drop record, so a replay does not bring
them back.

Crashes: a journal whose owner died (its lock can be taken) is an orphan; every instance folds
the orphans it finds when it opens, before any lookup (:meth:`EmbeddingCache.recover`), then
deletes them. A record cut short by the kill, or with a bad crc32, ends that file's replay: the
records before it count. Durability is what the cache had with ``synchronous=NORMAL`` in WAL
mode: a record is in the page cache once ``pwritev`` returns, so a killed process loses no
answered request; nothing is fsynced, so a power loss can lose the last responses (embedded
again: a cost). A journal of another live instance is left to it; its vectors are invisible to
others until it folds them (they may be embedded twice: a cost, never a wrong vector).

``max_entries`` caps the size; eviction removes the oldest ``updated_at`` first. Reads
refresh nothing (a hit does not rewrite the row), so a lookup stays a pure read.

One float32 copy of a vector where one suffices (issue 25): the live index is the record of the
vectors it holds (``chunks.embedding``, found by chunk hash through ``idx_chunks_hash``), and
the cache keeps what the live index does not hold:

* vectors received during a run, journaled per response, until the run's index is published
  (a killed run loses nothing, as before);
* vectors of chunks that leave the index: before a run publishes, the vectors of the chunks the
  old live index has and the new one will not (edited or deleted files; every vector when the
  model changes) are committed to the cache (:func:`preserve_leaving`), so reverting an edit,
  restoring a file or switching back to a model embeds nothing again.

After a publish, :func:`trim` deletes the cache entries whose hash the new live index holds
(same provider, model and provider_key) and gives the pages back. A lookup
(:meth:`EmbeddingCache.get_many`) reads the live index first (:class:`LiveVectors`, when its
meta names the same provider, model, provider_key and dimensions), then this instance's
journal, then the cache file. Every crash point leaves at worst a vector in both places (the
next published run trims it), never in neither: a journal is deleted only after the transaction
that folded what it keeps committed (a crash between the two folds it again: duplicates,
nothing lost). An index written before ``idx_chunks_hash`` existed is no record (its vectors
are all in the cache, as that code never trimmed): it is neither read nor trimmed for until a
run that builds a new file adds the index.

A cache file shared by several indexes (``cache.path`` set for more than one) is trimmed only
while one index uses it: each run records its index in ``cache_indexes``; with two or more there,
nothing is trimmed (the cache keeps every vector, as before), because a vector trimmed for index
A would be in neither place for index B. Lookups also read the other recorded indexes (same
model), so index B's first run finds what index A held while it was the only one and had
trimmed; what only a recorded index held is embedded again if that index file is deleted.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import apsw
import numpy as np

from memory_core.errors import RunCancelled, RunError, UnsafePathError
from memory_core.storage import cache_journal as J
from memory_core.storage import openfiles
from memory_core.storage.indexmeta import IndexRecord
from memory_core.storage.store import connect, int_of

log = logging.getLogger(__name__)

_Found = TypeVar("_Found", dict[str, bytes], set[str])  # what a LiveVectors lookup answers

LOOKUP_GROUP = 400
# A vector row (~1.6 KB at 384-d, ~6 KB at 1536-d) must fit in a leaf page: with 4 KiB pages
# every 1,536-d row spilled into an overflow page. New cache files get 32 KiB pages (an
# existing file keeps its page size). A WAL checkpoint every ~128 MiB instead of every 1000
# pages cut the write cost of a cold build by 2-3x; each response is still its own committed
# transaction. A page cache of 16 MiB per connection writes schema 3 as fast as 64 MiB did
# (0.7-1.2 s of CPU either way for 99k x 384-d, within this VM's noise) and keeps the two
# connections' caches from holding 128 MiB of a big run's memory.
NEW_CACHE_PAGE_SIZE = 32768
CACHE_PRAGMAS = ("PRAGMA synchronous=NORMAL", "PRAGMA cache_size=-16384", "PRAGMA journal_size_limit=67108864",
                 "PRAGMA temp_store=MEMORY")
CHECKPOINT_BYTES = 128 * 1024 * 1024

# Schema 3. Vectors are appended to a rowid table; only their keys land at random places, in
# a small index: (model_id, the 32-byte sha256 digest). ``cache_models`` names each
# (provider, model, provider_key) once.
#
# Why (measured, 99k x 384-d vectors in 121 responses, one commit each): the key decides the
# cost. Every commit writes each index page its random keys touched to the WAL, so the bytes
# written grow with the index's size. Schema 2 keyed rows by (provider, model, provider_key,
# hash) as text, ~170 bytes an entry: 2.0-2.4 s of CPU (1.4-1.5 s of it in the kernel,
# writing pages). Schema 3's ~40-byte entries: 0.8 s, and a 25% smaller file.
# Schema 1 (WITHOUT ROWID) kept every vector inside the key's B-tree: 5x schema 2's cost.
# Files of either older schema are converted when opened.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS cache_models (
  id INTEGER PRIMARY KEY,
  provider TEXT NOT NULL,
  model TEXT NOT NULL,
  provider_key TEXT NOT NULL,
  UNIQUE (provider, model, provider_key)
);
CREATE TABLE IF NOT EXISTS cache_vectors (
  rid INTEGER PRIMARY KEY,
  model_id INTEGER NOT NULL REFERENCES cache_models(id),
  hash BLOB NOT NULL,
  embedding BLOB NOT NULL,
  dims INTEGER,
  updated_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS idx_cache_vectors_key ON cache_vectors(model_id, hash);
CREATE INDEX IF NOT EXISTS idx_cache_vectors_updated_at ON cache_vectors(updated_at);
CREATE TABLE IF NOT EXISTS cache_indexes (
  path TEXT PRIMARY KEY,
  seen_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS cache_renewals (
  model_id INTEGER NOT NULL,
  index_path TEXT NOT NULL,
  since INTEGER NOT NULL,
  PRIMARY KEY (model_id, index_path)
);
"""
# After a trim, free pages beyond this share of the file (and this many bytes) are given back.
RECLAIM_SHARE = 0.25
RECLAIM_MIN_BYTES = 4 * 1024 * 1024


def _upgrade_schema(conn: apsw.Connection) -> None:
    """Convert a cache of schema 1 or 2 (table ``embedding_cache``, text keys) in one
    transaction: a crash leaves the old table as it was. Keys that are not sha256 hex digests
    (never written by memory-core) are dropped. Measured: ~1 s per 100k 384-d vectors, half of it
    the VACUUM that gives the old table's pages back (177 -> 161 MiB, not 339)."""
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'embedding_cache'").fetchone()
    if not row:
        return
    log.info("converting the embedding cache to schema 3 (once)")
    with conn:
        conn.execute(_SCHEMA)
        conn.execute("INSERT OR IGNORE INTO cache_models(provider, model, provider_key)"
                     " SELECT DISTINCT provider, model, provider_key FROM embedding_cache")
        conn.execute(
            "INSERT OR REPLACE INTO cache_vectors(model_id, hash, embedding, dims, updated_at)"
            " SELECT m.id, unhex(e.hash), e.embedding, e.dims, e.updated_at FROM embedding_cache e"
            " JOIN cache_models m USING (provider, model, provider_key)"
            " WHERE length(e.hash) = 64 AND unhex(e.hash) IS NOT NULL ORDER BY e.updated_at")
        conn.execute("DROP TABLE embedding_cache")
    try:
        conn.execute("VACUUM")  # give back the old table's pages (the file would stay twice its size)
    except apsw.Error as exc:  # e.g. another process reading it: the pages are reused by later writes
        log.warning("embedding cache converted but not vacuumed (%s); it keeps the old table's free pages", exc)


def _digests(hashes: Sequence[str]) -> list[bytes]:
    try:
        out = [bytes.fromhex(h) for h in hashes]
    except ValueError:
        out = []
    if len(out) != len(hashes) or any(len(d) != 32 for d in out):
        raise ValueError("embedding cache keys are sha256 hex digests (chunk hashes)")
    return out


class _Truncated(Exception):
    """The cache file is shorter than its header says (and there is no WAL to hold the rest)."""


def _check_not_truncated(path: Path, header: bytes, size: int) -> None:
    """``header``: the file's first 100 bytes, ``size``: its size."""
    try:
        wal = os.path.getsize(str(path) + "-wal") if os.path.exists(str(path) + "-wal") else 0
    except OSError:
        return
    if len(header) < 100 or wal:
        return
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    # the in-header size is valid when its "version-valid-for" equals the change counter
    if header[92:96] == header[24:28] and pages and size < pages * page_size:
        raise _Truncated(f"{size} bytes, its header says {pages * page_size}")


def set_aside(path: Path) -> Path:
    """Rename a damaged SQLite file (and its -wal/-shm) to ``<name>.damaged-<UTC time>``; its new path."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    for suffix in ("-wal", "-shm", ""):
        with contextlib.suppress(FileNotFoundError):
            os.rename(str(path) + suffix, str(aside) + suffix)
    return aside


def _valid_vector(emb: bytes) -> bool:
    """A float32 vector with a direction: non-empty, finite, not all zeros."""
    if not emb or len(emb) % 4:
        return False
    v = np.frombuffer(emb, dtype="<f4")
    return bool(np.isfinite(v).all() and np.abs(v).max() > 0)


class AnswerCheck(Protocol):
    """What a run checks a response against before its vectors are stored
    (:class:`memory_core.index.answer_check.SmallRequestCheck`): told a request's texts before it is
    sent (``expect``), it refuses (ProviderError) the answer to it before the cache stores it
    (``check``, from :func:`memory_core.index.stages.store_vectors`)."""

    def expect(self, hashes: Sequence[str], texts: Sequence[str]) -> None: ...

    def check(self, hashes: Sequence[str], vectors: np.ndarray) -> None: ...


def _adopt_legacy_keys(conn: apsw.Connection, provider: str, model: str, provider_key: str,
                       legacy_keys: Sequence[str]) -> None:
    """Give the rows a key the rule before gave this configuration keyed (``legacy_keys``:
    :func:`memory_core.embeddings.base.legacy_provider_keys`) the configuration's key, in one write
    transaction of the cache file, so the upgrade to the key without credentials embeds nothing
    again: its ``cache_models`` row is renamed (its vectors and pending re-embeds follow, by id), and
    so are its Batch API ledger rows (``batch_jobs``: a run finds its open jobs by key). When the new
    key has a row already (a run of either version since), the legacy row's vectors move to it, but
    for the chunks it holds a vector of too (the same text, the same configuration: one is kept);
    the emptied legacy row stays, so a live process still writing under its id (the version before)
    loses nothing: the next opening moves that too. Nothing is written when no row has a legacy key."""
    if not legacy_keys:
        return
    marks = ",".join("?" * len(legacy_keys))
    # a legacy row holding nothing (its vectors trimmed: the live index holds them) is left alone
    legacy_models = (f"SELECT id FROM cache_models m WHERE provider = ? AND model = ? AND provider_key IN ({marks})"
                     " AND (EXISTS (SELECT 1 FROM cache_vectors v WHERE v.model_id = m.id)"
                     " OR EXISTS (SELECT 1 FROM cache_renewals r WHERE r.model_id = m.id))")
    legacy_jobs = f"SELECT 1 FROM batch_jobs WHERE provider = ? AND model = ? AND provider_key IN ({marks}) LIMIT 1"

    def ledger() -> bool:
        return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'batch_jobs'").fetchone() \
            is not None and conn.execute(legacy_jobs, (provider, model, *legacy_keys)).fetchone() is not None

    if conn.execute(legacy_models, (provider, model, *legacy_keys)).fetchone() is None and not ledger():
        return  # the common case: nothing to move, nothing written
    moved = 0
    conn.execute("BEGIN IMMEDIATE")  # read again under the write lock: another process may have moved them
    try:
        old_ids = [int(r[0]) for r in conn.execute(legacy_models + " ORDER BY id", (provider, model, *legacy_keys))]
        row = conn.execute("SELECT id FROM cache_models WHERE provider = ? AND model = ? AND provider_key = ?",
                           (provider, model, provider_key)).fetchone()
        new_id = None if row is None else int(row[0])
        for old_id in old_ids:
            if new_id is None:
                conn.execute("UPDATE cache_models SET provider_key = ? WHERE id = ?", (provider_key, old_id))
                new_id = old_id
                moved += int_of(conn, "SELECT count(*) FROM cache_vectors WHERE model_id = ?", (old_id,))
                continue
            # vectors of hashes the new key has one of already are skipped here, and dropped below
            conn.execute("UPDATE OR IGNORE cache_vectors SET model_id = ? WHERE model_id = ?", (new_id, old_id))
            moved += conn.changes()
            conn.execute("DELETE FROM cache_vectors WHERE model_id = ?", (old_id,))
            conn.execute("INSERT OR IGNORE INTO cache_renewals(model_id, index_path, since)"
                         " SELECT ?, index_path, since FROM cache_renewals WHERE model_id = ?", (new_id, old_id))
            conn.execute("DELETE FROM cache_renewals WHERE model_id = ?", (old_id,))
        if ledger():
            conn.execute(f"UPDATE batch_jobs SET provider_key = ? WHERE provider = ? AND model = ?"
                         f" AND provider_key IN ({marks})", (provider_key, provider, model, *legacy_keys))
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    log.info("embedding cache: %d vectors of %s / %s recorded under the provider key of the rule before (it"
             " hashed credentials) are under today's key", moved, provider, model)


class EmbeddingCache:
    """Vectors by chunk hash (a sha256 hex digest) for one (provider, model, provider_key)."""

    # a run's check of each response before it is stored (stages.open_cache sets it); None: none
    answers: AnswerCheck | None = None

    def __init__(self, path: Path, provider: str, model: str, provider_key: str, *,
                 legacy_keys: Collection[str] = ()) -> None:
        self.path = Path(path)
        self.provider = provider
        self.model = model
        self.provider_key = provider_key
        # the keys the rule before gave this configuration (EmbeddingProvider.legacy_provider_keys):
        # their rows are this configuration's, renamed to ``provider_key`` when the cache opens
        self.legacy_keys = tuple(k for k in legacy_keys if k != provider_key)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._open()
        except (apsw.CorruptError, apsw.NotADBError, _Truncated) as exc:
            self._close_quietly()
            aside = set_aside(self.path)
            log.warning("the embedding cache %s is damaged (%s); set aside as %s, continuing with an empty cache"
                        " (its vectors will be embedded again)", self.path, exc, aside.name)
            self._open()
        self._lock = threading.Lock()
        # Writes go through a second connection: apsw refuses two threads on one connection at
        # once, and a run reads the cache in one thread while pool threads store responses.
        self._wconn: apsw.Connection | None = None
        # indexes whose vectors of this model are read before the cache's (see the module doc):
        # the run's own live index, then the other indexes recorded as using this cache
        self.live: list[LiveVectors] = []
        # this instance's writes (see the module doc): created at the first one
        self.journal = J.Journal(self.path, J.identity_bytes(provider, model, provider_key))
        # True for a cache that lives and dies with one run (its work folder): close() then
        # drops the journal instead of folding it into a file about to be deleted
        self.throwaway = False
        # True for a run that embeds every chunk again (``index --re-embed``): lookups see only
        # what this instance stored (its journal), never the live indexes' nor the cache file's
        # vectors (bad ones a provider once answered: one vector for every text); its vectors
        # replace the cached ones when folded, and :meth:`drop_old` drops the model's others
        self.renew = False
        # a renewal of one index that no run has published yet (:meth:`begin_renewal`): when it
        # started (ms), so what it received before a kill counts as its own
        self.renew_since: int | None = None
        self.recover()

    def _open(self) -> None:
        self.conn = None
        try:  # the safe create and the truncation check, through a descriptor that drops no lock of ours
            with openfiles.kept(self.path, create=True) as fd:
                if not openfiles.connected(self.path):  # else another connection of ours checked it
                    _check_not_truncated(self.path, os.pread(fd, 100, 0), os.fstat(fd).st_size)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EINVAL):
                why = "a symbolic link" if exc.errno == errno.ELOOP else "not a regular file"
                raise UnsafePathError(f"refusing to write the embedding cache {self.path}: it is {why}") from None
            raise
        self.conn = connect(self.path)
        if os.path.getsize(self.path) == 0:  # a new file: page size before anything else
            self.conn.execute(f"PRAGMA page_size={NEW_CACHE_PAGE_SIZE}")
        self.conn.execute("PRAGMA journal_mode=WAL")
        for pragma in CACHE_PRAGMAS:
            self.conn.execute(pragma)
        page_size = self.conn.execute("PRAGMA page_size").fetchone()[0]
        self.conn.execute(f"PRAGMA wal_autocheckpoint={max(1000, CHECKPOINT_BYTES // page_size)}")
        _upgrade_schema(self.conn)
        self.conn.execute(_SCHEMA)
        _adopt_legacy_keys(self.conn, self.provider, self.model, self.provider_key, self.legacy_keys)
        self.conn.execute("INSERT OR IGNORE INTO cache_models(provider, model, provider_key) VALUES(?,?,?)",
                          (self.provider, self.model, self.provider_key))
        self.model_id: int = self.conn.execute(
            "SELECT id FROM cache_models WHERE provider = ? AND model = ? AND provider_key = ?",
            (self.provider, self.model, self.provider_key)).fetchone()[0]

    def _close_quietly(self) -> None:
        if getattr(self, "conn", None) is not None:
            with contextlib.suppress(apsw.Error):
                self.conn.close()
        self.conn = None

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """A write to the cache that fails (disk full, I/O) is a run failure with one line."""
        try:
            yield
        except apsw.Error as exc:
            what = "the disk is full" if isinstance(exc, apsw.FullError) else f"{exc.__class__.__name__}: {exc}"
            raise RunError(f"cannot write the embedding cache {self.path}: {what}; the live index was left as it"
                           " was") from exc

    def _writer(self) -> apsw.Connection:
        if self._wconn is None:
            w = connect(self.path)
            for pragma in CACHE_PRAGMAS:
                w.execute(pragma)
            page_size = w.execute("PRAGMA page_size").fetchone()[0]
            w.execute(f"PRAGMA wal_autocheckpoint={max(1000, CHECKPOINT_BYTES // page_size)}")
            self._wconn = w
        return self._wconn

    def checkpoint(self) -> None:
        """Copy the WAL into the cache file: the work that closing the last connection does
        otherwise (0.15 s after a 41k-chunk cold build), which then only deletes the WAL. A
        run calls it from a pool thread once its last vector is stored, so it overlaps the
        index's commit. PASSIVE: it never waits for a reader (TRUNCATE could wait out the
        10 s busy timeout behind one, and measured no faster)."""
        with self._lock, self._writing():
            self._writer().execute("PRAGMA wal_checkpoint(PASSIVE)")

    def close(self) -> None:
        """Fold this instance's journal into the cache (one sorted transaction) and close. A
        fold that fails (disk full) leaves the journal for the next instance to fold."""
        self.close_live()
        try:
            if self.throwaway:  # a run's own cache (``cache.enabled = false``): deleted next
                with self._lock:
                    self.journal.discard()
            else:
                self.fold()
        except (RunError, OSError) as exc:
            if isinstance(exc, RunCancelled):  # a stop from outside stops the run, not only the fold
                self.journal.release()
                raise
            log.warning("%s; the journal %s is kept and folded by the next run", exc, self.journal.path)
            self.journal.release()
        finally:
            if self._wconn is not None:
                self._wconn.close()
                self._wconn = None
            self.conn.close()

    # -- the journal (module doc) ------------------------------------------------------------
    _UPSERT = ("INSERT INTO cache_vectors(model_id, hash, embedding, dims, updated_at) VALUES(?,?,?,?,?)"
               " ON CONFLICT DO UPDATE SET embedding = excluded.embedding, dims = excluded.dims,"
               " updated_at = excluded.updated_at")

    def _own_identity(self, identity: tuple[str, str, str]) -> bool:
        """Whether a journal's identity (provider, model, key) is this instance's configuration."""
        provider, model, key = identity
        return (provider, model) == (self.provider, self.model) and (key == self.provider_key
                                                                     or key in self.legacy_keys)

    def _model_id_of(self, w: apsw.Connection, identity: tuple[str, str, str]) -> int:
        w.execute("INSERT OR IGNORE INTO cache_models(provider, model, provider_key) VALUES(?,?,?)", identity)
        return int(w.execute("SELECT id FROM cache_models WHERE provider = ? AND model = ? AND provider_key = ?",
                             identity).fetchone()[0])

    def fold(self) -> int:
        """Insert this instance's journal entries into ``cache_vectors`` in digest order, in one
        transaction (each page of the key index written once), then delete the journal; the
        number folded. After it, later writes start a new journal."""
        with self._lock:
            if self.journal.fd is None:
                return 0
            digests, offsets = self.journal.entries()
            if len(digests):
                with self._writing():
                    w = self._writer()
                    with w:
                        w.executemany(self._UPSERT, ((self.model_id, d, emb, dims, t)
                                                     for d, emb, dims, t in self.journal.rows(digests, offsets)))
            self.journal.discard()
            return len(digests)

    def recover(self) -> int:
        """Fold every orphan journal beside the cache (its owner died: its lock could be taken)
        into ``cache_vectors``, each in one transaction in digest order, and delete it. Records
        after a torn or damaged one are lost (embedded again when needed). A journal whose owner
        is alive is left to it: its vectors are not seen here until it folds them (a cost: they
        may be embedded twice; never a wrong vector). The number of vectors folded."""
        folded = 0
        for path in J.journal_paths(self.path):
            if path == self.journal.path:
                continue
            try:
                fd = J.take_orphan(path)
            except (OSError, UnsafePathError) as exc:
                log.warning("cannot read the embedding cache journal %s (%s); left as it is", path, exc)
                continue
            if fd is None:
                continue
            try:
                sc = J.scan(fd)
                if sc.identity is None and os.fstat(fd).st_size > 0:
                    log.warning("%s is no embedding cache journal (or its header is damaged); left as it is", path)
                    continue
                if sc.damaged_at is not None:
                    log.warning("the embedding cache journal %s is damaged or cut short at byte %d: the %d records"
                                " before it are kept", path, sc.damaged_at, sc.records)
                if len(sc) and sc.identity is not None:
                    with self._lock, self._writing():
                        w = self._writer()
                        with w:
                            # a journal of this configuration under a key the rule before gave it
                            # (a run of the version before, killed): folded as this model's
                            model_id = self.model_id if self._own_identity(sc.identity) \
                                else self._model_id_of(w, sc.identity)
                            w.executemany(self._UPSERT, ((model_id, d, emb, dims, t)
                                                         for d, emb, dims, t in J.scan_rows(fd, sc)))
                    folded += len(sc)
                os.unlink(path)
            except RunError as exc:
                if isinstance(exc, RunCancelled):
                    raise
                log.warning("%s; the journal %s is folded by a later run", exc, path)
            except OSError as exc:
                log.warning("cannot fold the embedding cache journal %s (%s); left as it is", path, exc)
            finally:
                os.close(fd)
        if folded:
            log.info("folded %d vectors of an interrupted run's journal into the embedding cache", folded)
        return folded

    def close_live(self) -> None:
        for live in self.live:
            live.close()
        self.live = []

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _select(self, columns: str, hashes: Iterable[str], since: int | None = None) -> Iterable[tuple[Any, ...]]:
        """Rows of this model for ``hashes``; ``since``: only those stored at or after it (ms)."""
        uniq = list(dict.fromkeys(hashes))
        newer = "" if since is None else f" AND updated_at >= {int(since)}"
        for i in range(0, len(uniq), LOOKUP_GROUP):
            group = _digests(uniq[i:i + LOOKUP_GROUP])
            marks = ",".join("?" * len(group))
            # an all-zero vector (accepted by versions before issue 17) is no entry: re-embedded
            yield from self.conn.execute(
                f"SELECT {columns} FROM cache_vectors WHERE model_id = ? AND hash IN ({marks})"
                " AND embedding != zeroblob(length(embedding))" + newer,
                (self.model_id, *group))

    # -- a re-embed that did not publish is continued, not paid again ---------------------------
    def begin_renewal(self, index_path: Path) -> int:
        """Record that the index at ``index_path`` is being embedded again (``index --re-embed``)
        and return when that began (ms): a renewal already pending (a re-embed killed or failed
        before it published) keeps its start, so the vectors it received, folded into the cache
        from its journal, count as this renewal's own (:meth:`get_many`). Ended by
        :meth:`end_renewal` once a re-embed of the index is published."""
        with self._lock, self._writing():
            w = self._writer()
            with w:
                w.execute("INSERT OR IGNORE INTO cache_renewals(model_id, index_path, since) VALUES(?, ?, ?)",
                          (self.model_id, os.path.abspath(index_path), int(time.time() * 1000)))
                since = int(w.execute("SELECT since FROM cache_renewals WHERE model_id = ? AND index_path = ?",
                                      (self.model_id, os.path.abspath(index_path))).fetchone()[0])
        return since

    def end_renewal(self, index_path: Path) -> None:
        with self._lock, self._writing():
            w = self._writer()
            with w:
                w.execute("DELETE FROM cache_renewals WHERE model_id = ? AND index_path = ?",
                          (self.model_id, os.path.abspath(index_path)))

    def get_many(self, hashes: Iterable[str], dims: int | None = None) -> dict[str, bytes]:
        """Vectors (float32 bytes) for the hashes that have one (valid ones only): the live
        index's, then the cache's. ``dims``: only vectors of that many dimensions; one of another
        length is a miss (a provider whose answers changed dimension under one key: an
        OpenAI-compatible endpoint serving another model, with no ``remote.dimensions``)."""
        size = int(dims) * 4 if dims else None

        def fits(emb: bytes) -> bool:
            return size is None or len(emb) == size

        rest = list(dict.fromkeys(hashes))
        got: dict[str, bytes] = {}
        if self.renew:  # this renewal's own vectors only: this run's, and a stopped one's (renew_since)
            if rest and self.journal:
                with self._lock:
                    got.update((d.hex(), emb) for d, emb in self.journal.get(_digests(rest)).items() if fits(emb))
                rest = [h for h in rest if h not in got]
            if rest and self.renew_since is not None:
                got.update((h.hex(), emb) for h, emb in self._select("hash, embedding", rest, self.renew_since)
                           if fits(emb) and _valid_vector(emb))
            return got
        for live in list(self.live):
            if rest:
                got.update((h, emb) for h, emb in self._ask(live, live.get_many, rest, {}).items() if fits(emb))
                rest = [h for h in rest if h not in got]
        if rest and self.journal:
            with self._lock:
                got.update((d.hex(), emb) for d, emb in self.journal.get(_digests(rest)).items() if fits(emb))
            rest = [h for h in rest if h not in got]
        got.update((h.hex(), emb) for h, emb in self._select("hash, embedding", rest)
                   if fits(emb) and _valid_vector(emb))
        return got

    def _ask(self, live: LiveVectors, fn: Callable[[list[str]], _Found], hashes: list[str], nothing: _Found) -> _Found:
        """``fn(hashes)`` of one index; an index that cannot be read (another index's writer
        committing, a damaged file) is no longer asked (``nothing`` found there): its vectors
        are looked for in the cache."""
        try:
            return fn(hashes)
        except apsw.Error as exc:
            log.warning("cannot read vectors from the index %s (%s); looking in the cache only", live.path, exc)
            self.live.remove(live)
            live.close()
            return nothing

    def has_many(self, hashes: Iterable[str], dims: int | None = None) -> set[str]:
        """The hashes with a vector in the live index or the cache. ``dims``: only vectors of that
        many dimensions count (as :meth:`get_many`'s: one of another length is a miss, and a
        Batch API run that counted it as present embedded it at the sync price after all)."""
        size = int(dims) * 4 if dims else None
        rest = list(dict.fromkeys(hashes))
        held: set[str] = set()
        for live in [] if self.renew else list(self.live):
            if rest and (size is None or live.size == size):
                held |= self._ask(live, live.has_many, rest, set())
                rest = [h for h in rest if h not in held]
        if rest and self.journal:
            with self._lock:
                found = self.journal.lookup(_digests(rest))
                fits = [off >= 0 and (size is None or self.journal.dims_at(off) * 4 == size) for off in found]
            held.update(h for h, ok in zip(rest, fits, strict=True) if ok)
            rest = [h for h, ok in zip(rest, fits, strict=True) if not ok]
        if self.renew:
            if rest and self.renew_since is not None:
                held |= {r[0].hex() for r in self._select("hash, length(embedding)", rest, self.renew_since)
                         if size is None or r[1] == size}
            return held
        if size is None:
            return held | {r[0].hex() for r in self._select("hash", rest)}
        return held | {r[0].hex() for r in self._select("hash, length(embedding)", rest) if r[1] == size}

    def hashes(self) -> set[str]:
        """Every chunk hash cached for this (provider, model, provider_key): in the cache file
        or this instance's journal."""
        with self._lock:
            digests, _ = self.journal.entries()
        raw = digests.tobytes()
        out = {raw[i:i + 32].hex() for i in range(0, len(raw), 32)}
        return out | {r[0].hex() for r in self.conn.execute("SELECT hash FROM cache_vectors WHERE model_id = ?",
                                                            (self.model_id,))}

    def put_many(self, items: Sequence[tuple[str, bytes]], dims: int) -> None:
        """Store vectors and commit at once (one provider response = one transaction)."""
        if not items:
            return
        if not all(_valid_vector(emb) for _, emb in items):
            raise ValueError("refusing to cache an empty, zero, NaN or infinite vector")
        size = dims * 4
        if all(len(emb) == size for _, emb in items):
            self._put_packed([h for h, _ in items], b"".join(emb for _, emb in items), dims)
            return
        by_size: dict[int, list[tuple[bytes, bytes]]] = {}
        for d, (_, emb) in zip(_digests([h for h, _ in items]), items, strict=True):
            by_size.setdefault(len(emb), []).append((d, emb))
        now = int(time.time() * 1000)
        with self._lock, self._journaling():
            for n, group in by_size.items():
                self.journal.put([d for d, _ in group], b"".join(e for _, e in group), n // 4, now)

    def delete_many(self, hashes: Sequence[str]) -> None:
        """Forget the vectors of ``hashes`` (for this model): a provider answered them twice,
        differently, so neither answer is trusted and they are embedded again."""
        if not hashes:
            return
        digests = _digests(list(hashes))
        with self._lock, self._journaling():
            self.journal.drop(digests, int(time.time() * 1000))
        with self._lock, self._writing():
            w = self._writer()
            with w:
                w.executemany("DELETE FROM cache_vectors WHERE model_id = ? AND hash = ?",
                              ((self.model_id, d) for d in digests))

    def put_array(self, hashes: Sequence[str], vectors: np.ndarray) -> None:
        """Store the rows of a float32 (n, dims) array under ``hashes`` and commit at once."""
        if not len(hashes):
            return
        arr = np.ascontiguousarray(vectors, dtype="<f4")
        if arr.ndim != 2 or arr.shape[0] != len(hashes):
            raise ValueError(f"{len(hashes)} hashes but vectors of shape {arr.shape}")
        if not (np.isfinite(arr).all() and (np.abs(arr).max(axis=1) > 0).all()):
            raise ValueError("refusing to cache a zero, NaN or infinite vector")
        self._put_packed(list(hashes), arr.reshape(-1).view(np.uint8).data, int(arr.shape[1]))

    def _put_packed(self, hashes: list[str], packed: Any, dims: int) -> None:
        # One record for the whole response, written with one pwritev (the vectors straight from
        # the caller's buffer: no copy).
        digests = _digests(hashes)
        now = int(time.time() * 1000)
        with self._lock, self._journaling():
            self.journal.put(digests, packed, dims, now)

    @contextlib.contextmanager
    def _journaling(self) -> Iterator[None]:
        """A write to the journal that fails (disk full, I/O) is a run failure with one line."""
        try:
            yield
        except OSError as exc:
            what = "the disk is full" if exc.errno == errno.ENOSPC else str(exc)
            raise RunError(f"cannot write the embedding cache journal beside {self.path}: {what}; the live index"
                           " was left as it was") from exc

    def is_empty(self) -> bool:
        """True when there is no vector for this (provider, model, provider_key): no cache
        entry, and no live index holding vectors of it (:attr:`renew`: nothing in its journal)."""
        if self.renew:
            return not self.journal and (self.renew_since is None or self.conn.execute(
                "SELECT 1 FROM cache_vectors WHERE model_id = ? AND updated_at >= ? LIMIT 1",
                (self.model_id, self.renew_since)).fetchone() is None)
        if any(not live.is_empty() for live in self.live) or self.journal:
            return False
        return self.conn.execute("SELECT 1 FROM cache_vectors WHERE model_id = ? LIMIT 1",
                                 (self.model_id,)).fetchone() is None

    def drop_old(self) -> int:
        """Delete every vector of this (provider, model, provider_key) from the cache file, keeping
        this instance's journal (folded next, by :meth:`trim` or :meth:`close`): after a
        ``--re-embed`` run published, the vectors it did not embed again are not trusted (a
        provider that once answered one vector for every text put them there). The number deleted."""
        with self._lock, self._writing():
            w = self._writer()
            with w:
                n = int_of(w, "SELECT count(*) FROM cache_vectors WHERE model_id = ?", (self.model_id,))
                w.execute("DELETE FROM cache_vectors WHERE model_id = ?", (self.model_id,))
        if n:
            log.info("re-embed: dropped %d older vectors of %s / %s from the embedding cache", n, self.provider,
                     self.model)
        return n

    # -- one vector copy: the cache keeps what the live index does not hold ---------------
    def register_index(self, index_path: Path) -> None:
        """Record that the index at ``index_path`` uses this cache (see :meth:`sole_index`)."""
        with self._lock, self._writing():
            w = self._writer()
            with w:
                w.execute("INSERT INTO cache_indexes(path, seen_at) VALUES(?, ?) ON CONFLICT(path) DO UPDATE"
                          " SET seen_at = excluded.seen_at", (os.path.abspath(index_path), int(time.time() * 1000)))

    def indexes(self) -> list[str]:
        """The index paths recorded as using this cache."""
        return [r[0] for r in self.conn.execute("SELECT path FROM cache_indexes ORDER BY seen_at DESC")]

    def sole_index(self, index_path: Path) -> bool:
        """True when the index at ``index_path`` is the only one recorded as using this cache."""
        return self.indexes() == [os.path.abspath(index_path)]

    def trim(self, live: LiveVectors) -> int:
        """Delete the entries of this model whose hash ``live`` (the just-published index) holds,
        drop the journal's entries it holds and fold the rest of the journal in (one transaction,
        digest order), delete the journal, then give the freed pages back; the number of entries
        deleted or dropped."""

        def held_of(digests: Iterable[bytes]) -> Iterator[tuple[bytes, bool]]:
            group: list[bytes] = []
            for d in digests:
                group.append(d)
                if len(group) >= LOOKUP_GROUP:
                    have = live.has_many([g.hex() for g in group])
                    yield from ((g, g.hex() in have) for g in group)
                    group.clear()
            if group:
                have = live.has_many([g.hex() for g in group])
                yield from ((g, g.hex() in have) for g in group)

        rows = (r[0] for r in self.conn.execute("SELECT hash FROM cache_vectors WHERE model_id = ?",
                                                (self.model_id,)))
        held = [d for d, h in held_of(rows) if h]
        with self._lock:
            jdig, joff = self.journal.entries()
        raw = jdig.tobytes()
        jheld = np.fromiter((h for _, h in held_of(raw[i:i + 32] for i in range(0, len(raw), 32))), dtype=bool,
                            count=len(jdig))
        with self._lock, self._writing():
            w = self._writer()
            with w:
                if held and w.execute("SELECT count(*) FROM cache_vectors").fetchone()[0] == len(held):
                    # every entry (a cold build): one DELETE without a WHERE clause, which SQLite
                    # runs as a truncation, freeing the pages without visiting the rows (40k x
                    # 1536-d: 3.7 s of row-by-row deletes at load 4, bench/results/cachesize-40k.md)
                    w.execute("DELETE FROM cache_vectors")
                else:
                    w.executemany("DELETE FROM cache_vectors WHERE model_id = ? AND hash = ?",
                                  ((self.model_id, d) for d in held))
                keep = ~jheld
                if keep.any():  # digest order: the key index's pages are each written once
                    w.executemany(self._UPSERT, ((self.model_id, d, emb, dims, t) for d, emb, dims, t
                                                 in self.journal.rows(jdig[keep], joff[keep])))
            self.journal.discard()
        if held:
            self.reclaim()
        return len(held) + int(jheld.sum())

    def reclaim(self) -> None:
        """Give free pages back to the file system when they are a large part of the file: one
        VACUUM, which costs what is left (after a cold build's trim, nothing: 40k x 1536-d took
        0.46 s as an incremental vacuum, which walks every freed page, and ~0.05 s this way)."""
        with self._lock, self._writing():
            w = self._writer()
            page_size, pages, free = (w.execute(f"PRAGMA {p}").fetchone()[0]
                                      for p in ("page_size", "page_count", "freelist_count"))
            if free * page_size < RECLAIM_MIN_BYTES or free < pages * RECLAIM_SHARE:
                return
            try:
                w.execute("VACUUM")
            except apsw.BusyError as exc:  # another connection reading: the pages are reused later
                log.info("embedding cache not vacuumed (%s)", exc)
                return
            w.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def count(self, *, all_models: bool = False) -> int:
        """Entries in the cache file, plus those of this instance's journal it does not hold."""
        with self._lock:
            digests, _ = self.journal.entries()
        raw = digests.tobytes()
        conn = self.conn
        assert conn is not None  # None only once closed
        both = 0
        for i in range(0, len(raw), 32 * LOOKUP_GROUP):
            group = [raw[j:j + 32] for j in range(i, min(len(raw), i + 32 * LOOKUP_GROUP), 32)]
            both += int_of(conn, f"SELECT count(*) FROM cache_vectors WHERE model_id = ? AND hash IN"
                                 f" ({','.join('?' * len(group))})", (self.model_id, *group))
        extra = len(digests) - both
        if all_models:
            return int_of(conn, "SELECT count(*) FROM cache_vectors") + extra
        return int_of(conn, "SELECT count(*) FROM cache_vectors WHERE model_id = ?", (self.model_id,)) + extra

    def evict(self, max_entries: int | None) -> int:
        """Fold the journal in, then delete the oldest entries beyond ``max_entries`` (all models
        together)."""
        if not max_entries:
            return 0
        self.fold()
        total = self.count(all_models=True)
        excess = total - max_entries
        if excess <= 0:
            return 0
        with self._lock, self._writing(), self.conn:
            self.conn.execute(
                "DELETE FROM cache_vectors WHERE rid IN (SELECT rid FROM cache_vectors ORDER BY updated_at LIMIT ?)",
                (excess,),
            )
        return excess


def cache_entry_count(path: Path) -> int | None:
    """Entries in the cache file at ``path`` and in its journals (read-only; a journal's are
    counted without checking them); None when there is no cache."""
    if not Path(path).exists():
        return None
    journaled = sum(J.entry_count(p) for p in J.journal_paths(Path(path)))
    try:
        conn = connect(path, readonly=True)
        try:
            table = "cache_vectors" if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'cache_vectors'").fetchone() \
                else "embedding_cache"
            return int_of(conn, f"SELECT count(*) FROM {table}") + journaled
        finally:
            conn.close()
    except apsw.Error:
        return None


def cache_bytes(path: Path) -> int:
    """Bytes of the cache file at ``path``, its WAL and its journals."""
    files = [Path(str(path) + x) for x in ("", "-wal")] + J.journal_paths(Path(path))
    total = 0
    for f in files:
        with contextlib.suppress(OSError):
            total += f.stat().st_size
    return total


# -- the live index as the record of the vectors it holds ----------------------------------------

HASH_INDEX = "idx_chunks_hash"


def _same_model(record: IndexRecord | None, provider: str | None, model: str | None, provider_key: str | None,
                dims: int | None, legacy_keys: Collection[str] = ()) -> bool:
    """Whether the index ``record`` describes holds float32 vectors of this configuration (its key,
    or one the rule before gave it: ``legacy_keys``) and of ``dims`` (when given)."""
    if record is None or record.vector_store not in ("blob", "blob+bits") or not record.dims:
        return False
    return (record.provider, record.model) == (provider, model) \
        and (record.provider_key == provider_key or record.provider_key in legacy_keys) \
        and (not dims or record.dims == int(dims))


class LiveVectors:
    """The float32 vectors a published index holds (``chunks.embedding``), by chunk hash.

    Read-only and only for an index that has :data:`HASH_INDEX` and whose meta names the model
    asked for (:meth:`open` returns None otherwise). A run holds the index's writer lock, so
    the file it reads is the live one until the run itself publishes.
    """

    def __init__(self, conn: apsw.Connection, record: IndexRecord, path: Path) -> None:
        self.conn = conn
        self.path = Path(path)
        self.record = record
        self.size = int(record.dims or 0) * 4

    @classmethod
    def open(cls, index_path: Path, provider: str, model: str, provider_key: str,
             dims: int | None = None, *, legacy_keys: Collection[str] = ()) -> LiveVectors | None:
        """The vectors of the index at ``index_path`` when it holds ``provider``/``model``'s of the key
        ``provider_key`` (or of one of ``legacy_keys``: the same configuration under the rule before's
        key, until a run publishes it anew), else None."""
        from memory_core.storage.store import has_table, read_meta

        if not Path(index_path).is_file():
            return None
        try:
            conn = connect(index_path, readonly=True)
        except apsw.Error:
            return None
        try:
            record = IndexRecord.from_meta(read_meta(conn))
            if record is not None and _same_model(record, provider, model, provider_key, dims, legacy_keys) \
                    and has_table(conn, HASH_INDEX):
                return cls(conn, record, Path(index_path))
        except apsw.Error:
            pass
        conn.close()
        return None

    def close(self) -> None:
        with contextlib.suppress(apsw.Error):
            self.conn.close()

    def _groups(self, hashes: Sequence[str]) -> Iterator[list[str]]:
        for i in range(0, len(hashes), LOOKUP_GROUP):
            yield list(hashes[i:i + LOOKUP_GROUP])

    def get_many(self, hashes: Iterable[str]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for group in self._groups(list(dict.fromkeys(hashes))):
            for h, emb in self.conn.execute(
                    f"SELECT hash, embedding FROM chunks WHERE hash IN ({','.join('?' * len(group))})", group):
                if h not in out and isinstance(emb, bytes) and len(emb) == self.size and _valid_vector(emb):
                    out[h] = emb
        return out

    def has_many(self, hashes: Iterable[str]) -> set[str]:
        """The hashes some chunk of the index has (its ``idx_chunks_hash`` alone is read: every
        chunk of a "blob" or "blob+bits" index has its vector, the run that wrote it verified it)."""
        out: set[str] = set()
        for group in self._groups(list(dict.fromkeys(hashes))):
            out.update(r[0] for r in self.conn.execute(
                f"SELECT hash FROM chunks WHERE hash IN ({','.join('?' * len(group))})", group))
        return out

    def is_empty(self) -> bool:
        return self.conn.execute("SELECT 1 FROM chunks LIMIT 1").fetchone() is None

    def recent(self, k: int) -> list[tuple[str, str, bytes]]:
        """(hash, text, vector) of the ``k`` chunks the index got last (the highest row ids: an
        incremental run's new rows come after the rows it kept): a few vectors, with their texts,
        that a response is checked against (:func:`memory_core.embeddings.base.check_not_a_known_vector`)."""
        out: list[tuple[str, str, bytes]] = []
        for h, text, emb in self.conn.execute(
                "SELECT hash, text, embedding FROM chunks WHERE embedding IS NOT NULL ORDER BY rowid DESC LIMIT ?",
                (int(k),)):
            if isinstance(h, str) and isinstance(text, str) and isinstance(emb, bytes) and len(emb) == self.size \
                    and _valid_vector(emb):
                out.append((h, text, emb))
        return out


def preserve_leaving(cache_path: Path, index_path: Path, *, model_key: tuple[str, str, str] | None,
                     paths: Sequence[str] | None, staying: Any, legacy_keys: Collection[str] = ()) -> int:
    """Before a run publishes: commit to the cache at ``cache_path`` the vectors of the live
    index that the new index will not hold, so that no vector is ever in neither place.

    ``model_key``: (provider, model, provider_key) of the new index (None: keyword-only). When
    it is the live index's, the rows of ``paths`` (None: every row) whose hash ``staying(hash)``
    does not claim leave; otherwise every row leaves (they stay in the cache under the live
    index's own model, for a switch back). ``legacy_keys``: keys the rule before gave ``model_key``'s
    configuration; a live index recorded under one is that model (its leaving rows go to the cache
    under ``model_key``'s key). An index without :data:`HASH_INDEX` is skipped: the
    code that wrote it kept every vector in the cache. Returns the vectors written."""

    if not Path(index_path).is_file():
        return 0
    try:
        return _preserve(connect(index_path, readonly=True), cache_path, model_key, paths, staying, legacy_keys)
    except apsw.Error as exc:  # a damaged live index (being rebuilt): what cannot be read cannot be kept
        log.warning("could not read the vectors of the index being replaced (%s); those not in the cache will be"
                    " embedded again when needed", exc)
        return 0


def _preserve(conn: apsw.Connection, cache_path: Path, model_key: tuple[str, str, str] | None,
              paths: Sequence[str] | None, staying: Any, legacy_keys: Collection[str] = ()) -> int:
    from memory_core.storage.store import read_meta

    try:
        record = IndexRecord.from_meta(read_meta(conn))
        if record is None:
            return 0
        old_key = (record.provider, record.model, record.provider_key)
        if not _same_model(record, *old_key, None) or not conn.execute(
                "SELECT 1 FROM sqlite_master WHERE name = ?", (HASH_INDEX,)).fetchone():
            return 0
        size = int(record.dims or 0) * 4
        same = model_key is not None and (tuple(model_key) == old_key or (
            tuple(model_key[:2]) == old_key[:2] and record.provider_key in legacy_keys))
        if not same:
            paths, staying = None, (lambda h: False)
        # the model's own rows (under the key of the rule before, too: then what leaves is kept under
        # today's, as the run's cache has it), else the live index's model's
        keep_as = model_key if same and model_key is not None else old_key
        if paths is None:
            rows: Iterable[tuple[str, Any]] = conn.execute("SELECT hash, NULL FROM chunks")
        else:
            marks = [list(paths[i:i + LOOKUP_GROUP]) for i in range(0, len(paths), LOOKUP_GROUP)]
            rows = (r for g in marks for r in conn.execute(
                f"SELECT hash, NULL FROM chunks WHERE path IN ({','.join('?' * len(g))})", g))
        leaving = list(dict.fromkeys(h for h, _ in rows if not staying(h)))
        if not leaving:
            return 0
        written = 0
        with EmbeddingCache(cache_path, *keep_as, legacy_keys=legacy_keys if same else ()) as cache:  # type: ignore[arg-type]
            for i in range(0, len(leaving), LOOKUP_GROUP):
                group = leaving[i:i + LOOKUP_GROUP]
                got: dict[str, bytes] = {}
                for h, emb in conn.execute(
                        f"SELECT hash, embedding FROM chunks WHERE hash IN ({','.join('?' * len(group))})", group):
                    if isinstance(emb, bytes) and len(emb) == size and _valid_vector(emb):
                        got.setdefault(h, emb)
                cache.put_many(list(got.items()), size // 4)  # committed: in both places until the publish
                written += len(got)
        return written
    finally:
        conn.close()


def renewal_pending(cache_path: Path, provider: str, model: str, provider_key: str, index_path: Path, *,
                    legacy_keys: Collection[str] = ()) -> int | None:
    """When a re-embed of the index at ``index_path`` began (ms) that no run has published yet
    (:meth:`EmbeddingCache.begin_renewal`), or None. It only reads; None when there is no cache,
    or one that is not a regular file or is damaged. ``legacy_keys``: keys the rule before gave the
    configuration (a re-embed recorded under one, by the version before, is this one's)."""
    # a damaged file is the run's cache to set aside (EmbeddingCache), with nothing opened beside it
    # here: a connection to it made its -wal and -shm, set aside with it. The header is read through
    # openfiles.kept, as EmbeddingCache._open reads it: closing a plain descriptor of the file would
    # drop the locks of this process's live connections to it (a shared cache in one process)
    try:
        with openfiles.kept(cache_path) as fd:  # a link or another kind of file: OSError
            if not openfiles.connected(cache_path):  # else a connection of ours checked it
                header, size = os.pread(fd, 100, 0), os.fstat(fd).st_size
                if size and not header.startswith(b"SQLite format 3\x00"):
                    return None
                _check_not_truncated(Path(cache_path), header, size)
    except (OSError, _Truncated):
        return None
    try:
        # not readonly: a read-only connection to a WAL file could not map its -shm through a VFS
        # of Python's (the kill-in-commit tests') and its close failed with a disk I/O error
        conn = connect(cache_path)
    except apsw.Error:
        return None
    try:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'cache_renewals'").fetchone() is None:
            return None
        keys = [provider_key, *legacy_keys]
        row = conn.execute(
            "SELECT min(r.since) FROM cache_renewals r JOIN cache_models m ON m.id = r.model_id"
            f" WHERE m.provider = ? AND m.model = ? AND m.provider_key IN ({','.join('?' * len(keys))})"
            " AND r.index_path = ?",
            (provider, model, *keys, os.path.abspath(index_path))).fetchone()
        return None if row is None or row[0] is None else int(row[0])
    except apsw.Error:
        return None
    finally:
        with contextlib.suppress(apsw.Error):
            conn.close()
