"""The embedding cache: the durable record of what embeddings were already paid for.

It lives in its own SQLite file (WAL mode), outside the temp index, so it survives failed
and killed runs. Every provider response is committed as it arrives. Entries are keyed by
``(provider, model, provider_key, chunk hash)``; ``provider_key`` hashes everything that
changes vectors (provider, base URL, model, dimensions, non-secret headers), never a key.

``max_entries`` caps the size; eviction removes the oldest ``updated_at`` first. Reads
refresh nothing (a hit does not rewrite the row), so a lookup stays a pure read.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import apsw
import numpy as np

from memory_core.store import FILE_MODE, connect

log = logging.getLogger(__name__)

LOOKUP_GROUP = 400
# A vector row (~1.6 KB at 384-d, ~6 KB at 1536-d) must fit in a leaf page of this WITHOUT
# ROWID table: with 4 KiB pages every row spilled into an overflow page, which tripled the
# file and the I/O of each commit. New cache files get 32 KiB pages (an existing file keeps
# its page size). A larger page cache and a WAL checkpoint every ~128 MiB instead of every
# 1000 pages cut the write cost of a cold build by 2-3x; each response is still its own
# committed transaction.
NEW_CACHE_PAGE_SIZE = 32768
CACHE_PRAGMAS = ("PRAGMA synchronous=NORMAL", "PRAGMA cache_size=-65536", "PRAGMA journal_size_limit=67108864")
CHECKPOINT_BYTES = 128 * 1024 * 1024

# A rowid table with the key in its own index: the vectors are appended in insert order and
# only the small key entries land at random places. The first schema was WITHOUT ROWID, which
# keeps every (1.5-12 KiB) vector inside the key's B-tree, so random hashes split and move
# pages of vectors: inserting 20k vectors took 5x the CPU at 1,536 dims and 3.6x at 384
# (and a 30% bigger file). Files of that schema are converted when opened.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS embedding_cache (
  provider TEXT NOT NULL,
  model TEXT NOT NULL,
  provider_key TEXT NOT NULL,
  hash TEXT NOT NULL,
  embedding BLOB NOT NULL,
  dims INTEGER,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (provider, model, provider_key, hash)
);
CREATE INDEX IF NOT EXISTS idx_embedding_cache_updated_at ON embedding_cache(updated_at);
"""


def _upgrade_schema(conn: apsw.Connection) -> None:
    """Convert a cache of the first (WITHOUT ROWID) schema in one transaction: a crash leaves
    the old table as it was."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'embedding_cache'").fetchone()
    if not row or "WITHOUT ROWID" not in str(row[0]).upper():
        return
    log.info("converting the embedding cache to the rowid schema (once)")
    with conn:
        conn.execute("ALTER TABLE embedding_cache RENAME TO embedding_cache_v1")
        conn.execute("DROP INDEX IF EXISTS idx_embedding_cache_updated_at")
        conn.execute(_SCHEMA)
        conn.execute("INSERT INTO embedding_cache(provider, model, provider_key, hash, embedding, dims, updated_at)"
                     " SELECT provider, model, provider_key, hash, embedding, dims, updated_at FROM embedding_cache_v1"
                     " ORDER BY updated_at")
        conn.execute("DROP TABLE embedding_cache_v1")


class EmbeddingCache:
    """Vectors by chunk hash for one (provider, model, provider_key)."""

    def __init__(self, path: Path, provider: str, model: str, provider_key: str) -> None:
        self.path = Path(path)
        self.provider = provider
        self.model = model
        self.provider_key = provider_key
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            fd = os.open(self.path, os.O_CREAT | os.O_WRONLY, FILE_MODE)
            os.close(fd)
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
        self._lock = threading.Lock()
        # Writes go through a second connection: apsw refuses two threads on one connection at
        # once, and a run reads the cache in one thread while pool threads store responses.
        self._wconn: apsw.Connection | None = None

    def _writer(self) -> apsw.Connection:
        if self._wconn is None:
            w = connect(self.path)
            for pragma in CACHE_PRAGMAS:
                w.execute(pragma)
            page_size = w.execute("PRAGMA page_size").fetchone()[0]
            w.execute(f"PRAGMA wal_autocheckpoint={max(1000, CHECKPOINT_BYTES // page_size)}")
            self._wconn = w
        return self._wconn

    def close(self) -> None:
        if self._wconn is not None:
            self._wconn.close()
            self._wconn = None
        self.conn.close()

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def _key(self) -> tuple[str, str, str]:
        return (self.provider, self.model, self.provider_key)

    def get_many(self, hashes: Iterable[str]) -> dict[str, bytes]:
        """Cached vectors (float32 bytes) for the hashes that have one."""
        out: dict[str, bytes] = {}
        uniq = list(dict.fromkeys(hashes))
        for i in range(0, len(uniq), LOOKUP_GROUP):
            group = uniq[i:i + LOOKUP_GROUP]
            marks = ",".join("?" * len(group))
            for h, emb in self.conn.execute(
                "SELECT hash, embedding FROM embedding_cache WHERE provider = ? AND model = ? AND provider_key = ?"
                f" AND hash IN ({marks})",
                (*self._key, *group),
            ):
                out[h] = emb
        return out

    def has_many(self, hashes: Iterable[str]) -> set[str]:
        found: set[str] = set()
        uniq = list(dict.fromkeys(hashes))
        for i in range(0, len(uniq), LOOKUP_GROUP):
            group = uniq[i:i + LOOKUP_GROUP]
            marks = ",".join("?" * len(group))
            found.update(
                r[0]
                for r in self.conn.execute(
                    "SELECT hash FROM embedding_cache WHERE provider = ? AND model = ? AND provider_key = ?"
                    f" AND hash IN ({marks})",
                    (*self._key, *group),
                )
            )
        return found

    def put_many(self, items: Sequence[tuple[str, bytes]], dims: int) -> None:
        """Store vectors and commit at once (one provider response = one transaction)."""
        if not items:
            return
        size = dims * 4
        if all(len(emb) == size for _, emb in items):
            self._put_packed([h for h, _ in items], b"".join(emb for _, emb in items), dims)
            return
        now = int(time.time() * 1000)
        with self._lock:
            w = self._writer()
            with w:
                w.executemany(
                    "INSERT INTO embedding_cache(provider, model, provider_key, hash, embedding, dims, updated_at)"
                    " VALUES(?,?,?,?,?,?,?) ON CONFLICT DO UPDATE SET embedding = excluded.embedding,"
                    " dims = excluded.dims, updated_at = excluded.updated_at",
                    ((*self._key, h, emb, dims, now) for h, emb in items),
                )

    def put_array(self, hashes: Sequence[str], vectors: np.ndarray) -> None:
        """Store the rows of a float32 (n, dims) array under ``hashes`` and commit at once."""
        if not len(hashes):
            return
        arr = np.ascontiguousarray(vectors, dtype="<f4")
        if arr.ndim != 2 or arr.shape[0] != len(hashes):
            raise ValueError(f"{len(hashes)} hashes but vectors of shape {arr.shape}")
        self._put_packed(list(hashes), arr.tobytes(), int(arr.shape[1]))

    def _put_packed(self, hashes: list[str], packed: bytes, dims: int) -> None:
        # One statement for the whole response: SQLite slices the packed vectors itself, so the
        # GIL is released for the whole insert (a per-row executemany needs it back every row,
        # which stalls behind a busy thread) and no per-row Python objects are made.
        now = int(time.time() * 1000)
        with self._lock:
            w = self._writer()
            with w:
                w.execute(
                    "INSERT INTO embedding_cache(provider, model, provider_key, hash, embedding, dims, updated_at)"
                    " SELECT ?1, ?2, ?3, j.value, substr(?4, j.key * ?5 + 1, ?5), ?6, ?7 FROM json_each(?8) AS j"
                    " WHERE true ON CONFLICT DO UPDATE SET embedding = excluded.embedding, dims = excluded.dims,"
                    " updated_at = excluded.updated_at",
                    (*self._key, packed, dims * 4, dims, now, json.dumps(hashes)),
                )

    def is_empty(self) -> bool:
        """True when there is no entry for this (provider, model, provider_key)."""
        return self.conn.execute(
            "SELECT 1 FROM embedding_cache WHERE provider = ? AND model = ? AND provider_key = ? LIMIT 1", self._key
        ).fetchone() is None

    def count(self, *, all_models: bool = False) -> int:
        if all_models:
            return self.conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]
        return self.conn.execute(
            "SELECT count(*) FROM embedding_cache WHERE provider = ? AND model = ? AND provider_key = ?", self._key
        ).fetchone()[0]

    def evict(self, max_entries: int | None) -> int:
        """Delete the oldest entries beyond ``max_entries`` (all models together)."""
        if not max_entries:
            return 0
        total = self.count(all_models=True)
        excess = total - max_entries
        if excess <= 0:
            return 0
        with self._lock, self.conn:
            self.conn.execute(
                "DELETE FROM embedding_cache WHERE (provider, model, provider_key, hash) IN"
                " (SELECT provider, model, provider_key, hash FROM embedding_cache ORDER BY updated_at LIMIT ?)",
                (excess,),
            )
        return excess


def cache_entry_count(path: Path) -> int | None:
    """Entries in the cache file at ``path`` (read-only); None when there is no cache."""
    if not Path(path).exists():
        return None
    try:
        conn = connect(path, readonly=True)
        try:
            return conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]
        finally:
            conn.close()
    except apsw.Error:
        return None
