"""The vector store of an index: each vector once at full precision, and a 1-bit copy to scan.

Layout (schema 3)::

    chunks.embedding   BLOB   little-endian float32, one per chunk: the exact cosines
    chunks_bits(block INTEGER PRIMARY KEY,  -- the first row id in the block
                live INTEGER,               -- row ids in it that are not deleted
                rids BLOB,                  -- int64 row ids, ascending; 0 = deleted
                codes BLOB)                 -- one sign bit per dimension per row, padded to 64 bits
    chunk_parts(rid INTEGER PRIMARY KEY, chunk INTEGER, embedding BLOB)   (schema 4)
    chunk_parts_bits                        -- the parts' codes, laid out as chunks_bits

Parts are extra vectors of one chunk (a transcript chunk's exchanges: a user message and its
replies, one of more than 4 messages as overlapping windows of 4,
:func:`memory_core.sources.sessions.exchange_parts`): a chunk's vector relevance is the best
cosine of its own vector and its parts'. A transcript chunk holds several exchanges on unrelated
topics, and its one vector is a blur of them; the planted fact of a conversation ("I sold the old
bike for 180") scored cosine 0.08 against "how much did I get for the bicycle I sold" as a chunk
and well above as its own exchange (eval/README.md has the figures).

A query scans the bits (Hamming distance of the sign bits, numpy over the blocks, read once per
opened file by a long-lived reader) for the :func:`rescore_count` nearest rows, and ranks those by
their exact float32 cosines read by row id. Measured at 200k x 1536 (bench/results/scale-*.md):
sqlite-vec's vec0 brute-force KNN over the float32 vectors took ~660 ms a query, vec0's own
``bit[N]`` column 90 ms at k=100 and 285 ms at k=400 (its top-k grows with k), numpy over the
same bits ~12 ms plus the rescore; the bits are 1/32 of the float32 bytes.

Why blocks of row ids and codes and not a row per vector: a reader loads every code at once,
and one blob per ~4,096 rows reads at memory speed where a million rows cost a million Python
objects. Why not vec0: see above; it also kept the float32 copy in 1,024-row blobs, whose point
reads walk an overflow chain (~0.7 ms a row at 200k x 1536) where a B-tree row costs ~0.02 ms.

The quick scan's quality depends on the vectors: exact on dense neural embeddings, it missed the
nearest rows of sparse, feature-hashed vectors (94% zeros: a zero and a negative value give the
same bit; recall@10 0.27 at 200k x 1536, bench/results/sparse-vectors-200000.md). So an index
measures it on its own vectors when it is built or changed (:func:`measure_scan`) and records
how its searches read them (:class:`ScanPlan`: the quick scan, its candidates widened, or every
vector, :func:`exact_nearest` / :class:`FloatRows`).

Edits stay proportional to the change: a deleted row's id is zeroed in place (an incremental blob
write of 8 bytes), appended rows go to the last block while it has room, else a new one.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import apsw
import numpy as np

from memory_core.storage import index_changes

BITS_TABLE = "chunks_bits"
PARTS_TABLE = "chunk_parts"
PARTS_BITS_TABLE = "chunk_parts_bits"
VECTOR_TABLES = {BITS_TABLE: "chunks", PARTS_BITS_TABLE: PARTS_TABLE}  # codes -> where the float32 rows are
BLOCK_ROWS = 4096
# A query takes the SCAN_MIN (at least SCAN_FACTOR x the rescored) rows nearest by Hamming
# distance, orders those by the query's float32 dot product with their sign bits (asymmetric:
# the query keeps its precision) and reads the exact vectors of the best RESCORE_MIN (at least
# RESCORE_FACTOR x the rows it wants). Measured on clustered vectors at 50k rows whose top 10
# have cosines 0.26-0.41 over a background of 0 (the hardest case we tried; 384-d):
# recall@10 against exact search 0.925 with Hamming alone then 400 rescored, 0.983 with the
# asymmetric step between them; 1.0 where neighbours stand further out (bench/results/scale-*.md).
SCAN_MIN = 4000
SCAN_FACTOR = 10
RESCORE_MIN = 400
RESCORE_FACTOR = 4

_BITS_SCHEMA = """
CREATE TABLE IF NOT EXISTS {table} (
  block INTEGER PRIMARY KEY,
  live INTEGER NOT NULL,
  rids BLOB NOT NULL,
  codes BLOB NOT NULL
);
"""
SCHEMA = _BITS_SCHEMA.format(table=BITS_TABLE)
PARTS_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {PARTS_TABLE} (
  rid INTEGER PRIMARY KEY,
  chunk INTEGER NOT NULL,
  embedding BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_{PARTS_TABLE}_chunk ON {PARTS_TABLE}(chunk);
""" + _BITS_SCHEMA.format(table=PARTS_BITS_TABLE)


def code_bytes(dims: int) -> int:
    """Bytes of one row's code: a bit per dimension, padded to whole 64-bit words."""
    return (int(dims) + 63) // 64 * 8


def quantize(m: np.ndarray) -> np.ndarray:
    """Sign bits of the rows of ``m`` (n x dims), little bit order, padded: (n, code_bytes) uint8.
    A dimension > 0 is 1; the same as sqlite-vec's ``vec_quantize_binary``."""
    m = np.atleast_2d(np.asarray(m, dtype=np.float32))
    bits = np.packbits(m > 0, axis=1, bitorder="little")
    want = code_bytes(m.shape[1])
    if bits.shape[1] < want:
        bits = np.pad(bits, ((0, 0), (0, want - bits.shape[1])))
    return np.ascontiguousarray(bits)


def rescore_count(want: int, n: int, widen: int = 1) -> int:
    """How many rows nearest by their bits are ranked by their exact cosines for ``want`` results
    (``widen``: times more, as the index's :class:`ScanPlan` says)."""
    return min(n, max(RESCORE_MIN, RESCORE_FACTOR * want) * max(1, int(widen)))


def scan_count(rescore: int, n: int) -> int:
    """How many rows nearest by Hamming distance are ordered by the asymmetric score."""
    return min(n, max(SCAN_MIN, SCAN_FACTOR * rescore))


_BYTE_BITS = ((np.arange(256)[:, None] >> np.arange(8)[None, :]) & 1).astype(np.float32)  # (256, 8), little order


def asymmetric_scores(qvec: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The query's dot product with each row's sign bits (bit 1 -> +1, 0 -> -1): the float32
    query against 1-bit rows, a closer estimate of the cosine order than the Hamming distance.
    ``codes``: (n, code_bytes) uint8. One table lookup per code byte."""
    cb = codes.shape[1]
    q = np.zeros(cb * 8, dtype=np.float32)
    q[:len(qvec)] = qvec
    table = _BYTE_BITS @ q.reshape(cb, 8).T  # (256, cb): sum of q over the set bits of each byte value
    ones = table[codes, np.arange(cb)].sum(axis=1, dtype=np.float32)
    out: np.ndarray = 2 * ones - float(q.sum())
    return out


# -- writing --------------------------------------------------------------------------------

def create(conn: apsw.Connection) -> None:
    conn.execute(SCHEMA)
    conn.execute(PARTS_SCHEMA)


def append(conn: apsw.Connection, rids: Sequence[int], vectors: Sequence[bytes], dims: int,
           table: str = BITS_TABLE) -> None:
    """Add the codes of these rows (ascending row ids above every stored one; float32 blobs)."""
    if not len(rids):
        return
    m = np.frombuffer(b"".join(vectors), dtype="<f4").reshape(len(vectors), int(dims))
    codes = quantize(m)
    ids = np.asarray(rids, dtype="<i8")
    tail = conn.execute(f"SELECT block, rids, codes FROM {table} ORDER BY block DESC LIMIT 1").fetchone()
    start = 0
    if tail is not None:
        t_ids = np.frombuffer(tail[1], dtype="<i8")
        room = BLOCK_ROWS - int(np.count_nonzero(t_ids))
        if room > 0 and (not len(t_ids) or int(t_ids.max()) < int(ids[0])):
            keep = t_ids != 0  # the rewrite drops the tail's deleted rows
            t_codes = np.frombuffer(tail[2], dtype=np.uint8).reshape(len(t_ids), -1)[keep]
            take = min(room, len(ids))
            new_ids = np.concatenate([t_ids[keep], ids[:take]])
            new_codes = np.concatenate([t_codes, codes[:take]])
            conn.execute(f"DELETE FROM {table} WHERE block = ?", (tail[0],))
            conn.execute(f"INSERT INTO {table}(block, live, rids, codes) VALUES(?,?,?,?)",
                         (int(new_ids[0]), len(new_ids), new_ids.tobytes(), new_codes.tobytes()))
            start = take
    for s in range(start, len(ids), BLOCK_ROWS):
        part = ids[s:s + BLOCK_ROWS]
        conn.execute(f"INSERT INTO {table}(block, live, rids, codes) VALUES(?,?,?,?)",
                     (int(part[0]), len(part), part.tobytes(), codes[s:s + BLOCK_ROWS].tobytes()))


def delete(conn: apsw.Connection, rids: Iterable[int], table: str = BITS_TABLE) -> int:
    """Mark these rows deleted (their id zeroed in place); a block left empty is dropped.
    Returns how many were found."""
    found = 0
    by_block: dict[int, list[int]] = {}
    for rid in sorted({int(r) for r in rids}):
        row = conn.execute(f"SELECT block FROM {table} WHERE block <= ? ORDER BY block DESC LIMIT 1",
                           (rid,)).fetchone()
        if row is not None:
            by_block.setdefault(row[0], []).append(rid)
    for block, wanted in by_block.items():
        raw, live = conn.execute(f"SELECT rids, live FROM {table} WHERE block = ?", (block,)).fetchone()
        ids = np.frombuffer(raw, dtype="<i8")
        pos = np.searchsorted(ids, wanted)  # ascending, with zeros where rows were deleted
        hits = []
        for p, rid in zip(pos.tolist(), wanted, strict=True):
            if p < len(ids) and ids[p] == rid:
                hits.append(p)
            else:  # past a zeroed slot the order is broken: look it up
                where = np.flatnonzero(ids == rid)
                if len(where):
                    hits.append(int(where[0]))
        if not hits:
            continue
        found += len(hits)
        if live - len(hits) <= 0:
            conn.execute(f"DELETE FROM {table} WHERE block = ?", (block,))
            continue
        with conn.blob_open("main", table, "rids", block, True) as blob:
            for p in hits:
                blob.seek(p * 8)
                blob.write(b"\0" * 8)
        conn.execute(f"UPDATE {table} SET live = live - ? WHERE block = ?", (len(hits), block))
    return found


def count(conn: apsw.Connection, table: str = BITS_TABLE) -> int:
    """Rows with a code (not deleted)."""
    return int(conn.execute(f"SELECT coalesce(sum(live), 0) FROM {table}").fetchone()[0])


class CodesDamaged(ValueError):
    """A block of sign-bit codes that its own lengths or the index's record contradict: the
    vector tables of the file are damaged (:class:`memory_core.errors.IndexDamagedError` to a
    reader, a full rebuild to the next run)."""


def _block_arrays(raw_ids: object, raw_codes: object, cb: int, table: str) -> tuple[np.ndarray, np.ndarray]:
    """A block's (row ids, codes (n, cb) uint8), refused when its blobs do not fit together (a
    damaged page reads as NULL or as bytes of another length)."""
    if not isinstance(raw_ids, bytes) or not isinstance(raw_codes, bytes) or len(raw_ids) % 8 \
            or len(raw_codes) != len(raw_ids) // 8 * cb:
        raise CodesDamaged(f"a block of {table} is damaged (its row ids and codes do not fit together)")
    i = np.frombuffer(raw_ids, dtype="<i8")
    return i, np.frombuffer(raw_codes, dtype=np.uint8).reshape(len(i), cb)


def codes_problem(conn: apsw.Connection, meta: Mapping[str, Any] | None) -> str | None:
    """What is wrong with the sign-bit tables of an index whose meta is ``meta`` (None: nothing
    found). Reads one row a block (a few hundred rows at 1M vectors) and the blobs' lengths, not
    the blobs (``length()`` of a blob reads its header): a block cut short or rows gone
    (``DELETE``, a lost page) make the codes disagree with the vectors the run that wrote the
    index counted (its meta's ``counts``), which a query would otherwise not notice: the vector
    side would just find less."""
    if not meta or meta.get("vector_store") != "blob+bits" or not isinstance(meta.get("dims"), int):
        return None
    cb = code_bytes(int(meta["dims"]))
    counts = meta.get("counts") if isinstance(meta.get("counts"), dict) else {}
    for table, key in ((BITS_TABLE, "vectors"), (PARTS_BITS_TABLE, "parts")):
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone() is None:
            if table == BITS_TABLE:
                return f"table {table} is missing"
            continue
        live, bad = conn.execute(
            f"SELECT coalesce(sum(live), 0), coalesce(sum(rids IS NULL OR codes IS NULL OR length(rids) % 8 != 0"
            f" OR length(codes) != length(rids) / 8 * ?), 0) FROM {table}", (cb,)).fetchone()
        if bad:
            return f"{bad} block(s) of {table} are damaged"
        want = counts.get(key)
        if isinstance(want, int) and not isinstance(want, bool) and int(live) != want:
            return f"{table} holds {int(live)} codes where the index was built with {want} vectors"
    return None


def has_parts(conn: apsw.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (PARTS_BITS_TABLE,)).fetchone() is not None


def delete_parts(conn: apsw.Connection, chunk_rids: Sequence[int]) -> int:
    """Remove the parts of these chunks (their rows and codes); returns how many."""
    if not chunk_rids:
        return 0
    lit = ",".join(str(int(r)) for r in chunk_rids)
    prids = [r for (r,) in conn.execute(f"SELECT rid FROM {PARTS_TABLE} WHERE chunk IN ({lit})")]
    if prids:
        delete(conn, prids, PARTS_BITS_TABLE)
        conn.execute(f"DELETE FROM {PARTS_TABLE} WHERE chunk IN ({lit})")
    return len(prids)


def part_cosines(conn: apsw.Connection, qvec: np.ndarray, chunk_rids: Sequence[int]) -> dict[int, float]:
    """The best cosine of ``qvec`` with each of these chunks' parts (chunks without parts left out)."""
    if not chunk_rids:
        return {}
    lit = ",".join(str(int(r)) for r in chunk_rids)
    rows = list(conn.execute(f"SELECT rid, chunk, embedding FROM {PARTS_TABLE} WHERE chunk IN ({lit})"))
    cos = cosines(qvec, [(r, e) for r, _, e in rows])
    best: dict[int, float] = {}
    for r, chunk, _ in rows:
        c = cos.get(int(r), 0.0)
        if c > best.get(chunk, -2.0):
            best[chunk] = c
    return best


# -- reading --------------------------------------------------------------------------------

def read_vectors(conn: apsw.Connection, rids: Sequence[int], rows: str = "chunks") -> list[tuple[int, bytes]]:
    """(rid, float32 blob) of these chunks (or parts: ``rows`` = :data:`PARTS_TABLE`), by row id
    (row ids are ints: a literal list)."""
    if not rids:
        return []
    lit = ",".join(str(int(r)) for r in rids)
    return list(conn.execute(f"SELECT rid, embedding FROM {rows} WHERE rid IN ({lit}) AND embedding IS NOT NULL"))


def cosines(qvec: np.ndarray, rows: Sequence[tuple[int, bytes]]) -> dict[int, float]:
    """Cosine of ``qvec`` with each stored vector; a vector without a direction (all zeros) or
    a damaged one scores 0."""
    if not rows:
        return {}
    q = np.asarray(qvec, dtype=np.float32)
    qn = q / (np.linalg.norm(q) or 1.0)
    size = len(qn) * 4
    good = [(r, b) for r, b in rows if b is not None and len(b) == size]
    out = {int(r): 0.0 for r, _ in rows}
    if good:
        m = np.frombuffer(b"".join(b for _, b in good), dtype="<f4").reshape(len(good), -1)
        # einsum, not BLAS: for a few hundred rows BLAS's threads cost ~8x the arithmetic here
        norms = np.sqrt(np.einsum("ij,ij->i", m, m))
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            sims = np.nan_to_num(np.einsum("ij,j->i", m, qn) / np.where(norms > 0, norms, np.inf),
                                 nan=0.0, posinf=0.0, neginf=0.0)
        out.update(zip((int(r) for r, _ in good), sims.tolist(), strict=True))
    return out



def _add_hamming(words: np.ndarray, q: np.ndarray, dist: np.ndarray) -> None:
    """Add to ``dist`` the Hamming distance of each column of ``words`` (64-bit words by row, one
    column a code) to the query's code ``q``: one word row at a time, no (n, words) temporary."""
    tmp = np.empty(words.shape[1], dtype=np.uint64)
    pc = np.empty(words.shape[1], dtype=np.uint8)
    for j in range(words.shape[0]):
        np.bitwise_xor(words[j], q[j], out=tmp)
        np.bitwise_count(tmp, out=pc)
        dist += pc

class BitIndex:
    """Every code of one opened index in memory, words column-major (scanned a word at a time).

    Held as a base (the codes as loaded) and a tail (the rows added since, by :meth:`updated`),
    with the base's rows deleted since masked: a small change to the index costs a reader the
    change, not a copy of every code. Positions run over the base then the tail; ``rids`` maps
    a position to its row id (a deleted row's position is never returned)."""

    def __init__(self, conn: apsw.Connection, dims: int, table: str = BITS_TABLE) -> None:
        ids: list[np.ndarray] = []
        codes: list[np.ndarray] = []
        cb = code_bytes(dims)
        self.rows = VECTOR_TABLES[table]
        self.table = table
        for raw_ids, raw_codes in conn.execute(f"SELECT rids, codes FROM {table} ORDER BY block"):
            i, c = _block_arrays(raw_ids, raw_codes, cb, table)
            keep = i != 0
            if not keep.all():
                i, c = i[keep], c[keep]
            ids.append(i)
            codes.append(c)
        self.dims = int(dims)
        self.digest = ""  # the index state it holds (index_changes.meta_digest), set by shared_bit_index
        rids = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
        allc = np.concatenate(codes) if codes else np.zeros((0, cb), dtype=np.uint8)
        self._set(rids, np.ascontiguousarray(allc.view("<u8").T), None, rids[:0], np.zeros((cb // 8, 0), dtype="<u8"))

    def _set(self, base_rids: np.ndarray, base_words: np.ndarray, dead: np.ndarray | None,
             tail_rids: np.ndarray, tail_words: np.ndarray) -> None:
        self._base_rids, self._base_words, self._dead = base_rids, base_words, dead
        self._tail_rids, self._tail_words = tail_rids, np.ascontiguousarray(tail_words)
        self.rids = np.concatenate([base_rids, tail_rids]) if len(tail_rids) else base_rids
        self._dead_pos = np.flatnonzero(dead) if dead is not None else np.zeros(0, dtype=np.int64)
        self._live = len(self.rids) - len(self._dead_pos)
        self.nbytes = self.rids.nbytes + base_words.nbytes + self._tail_words.nbytes

    def __len__(self) -> int:
        return self._live

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(row ids, words) of the live rows, in position order: what a fresh load holds."""
        keep = np.ones(len(self.rids), dtype=bool)
        keep[self._dead_pos] = False
        return self.rids[keep], self._gather(np.flatnonzero(keep))

    def _gather(self, pos: np.ndarray) -> np.ndarray:
        """The words (words, len(pos)) of these positions."""
        nb = len(self._base_rids)
        if not len(self._tail_rids):
            return self._base_words[:, pos]
        low = pos < nb
        out = np.empty((self._base_words.shape[0], len(pos)), dtype=self._base_words.dtype)
        out[:, low] = self._base_words[:, pos[low]]
        out[:, ~low] = self._tail_words[:, pos[~low] - nb]
        return out

    def updated(self, conn: apsw.Connection, delta: index_changes.Delta) -> BitIndex:
        """This index's codes brought to the state ``delta`` leads to, as ``conn`` sees it (in one
        transaction): the deleted rows masked, the codes of the rows added since read from their
        blocks (the last ones) into the tail. The same live rows in the same order as a fresh load
        (:meth:`arrays`): the rows kept are below ``delta.added_from``, the added ones at or above
        it (memory_core.storage.index_changes). Once the tail or the masked rows pass 1/16 of the base,
        they are folded into a new base (one copy, every 16th of the index's size in changes)."""
        base, nb = self._base_rids, len(self._base_rids)
        dead = np.zeros(nb, dtype=bool) if self._dead is None else self._dead.copy()
        dead[int(np.searchsorted(base, delta.added_from)):] = True  # ascending: blocks in order, rows appended
        gone = delta.deleted[delta.deleted < delta.added_from]
        if len(gone):
            pos = np.searchsorted(base, gone)
            ok = pos < nb
            pos, gone_ok = pos[ok], gone[ok]
            dead[pos[base[pos] == gone_ok]] = True
        t_keep = self._tail_rids < delta.added_from
        if len(delta.deleted):
            t_keep &= ~np.isin(self._tail_rids, delta.deleted)
        row = conn.execute(f"SELECT max(block) FROM {self.table} WHERE block <= ?", (delta.added_from,)).fetchone()
        ids: list[np.ndarray] = [self._tail_rids[t_keep]]
        words: list[np.ndarray] = [self._tail_words[:, t_keep]]
        cb = self._base_words.shape[0] * 8
        for raw_ids, raw_codes in conn.execute(f"SELECT rids, codes FROM {self.table} WHERE block >= ? ORDER BY block",
                                               (row[0] if row and row[0] is not None else 0,)):
            i, c = _block_arrays(raw_ids, raw_codes, cb, self.table)
            new = i >= delta.added_from  # zeroed (deleted) slots are 0
            if new.any():
                ids.append(i[new])
                words.append(c[new].view("<u8").T)
        out = BitIndex.__new__(BitIndex)
        out.rows, out.table, out.dims, out.digest = self.rows, self.table, self.dims, ""
        tail_rids, tail_words = np.concatenate(ids), np.concatenate(words, axis=1)
        if 16 * (len(tail_rids) + int(dead.sum())) > nb:  # fold: one copy of the live rows
            live = ~dead
            out._set(np.concatenate([base[live], tail_rids]),
                     np.ascontiguousarray(np.concatenate([self._base_words[:, live], tail_words], axis=1)),
                     None, tail_rids[:0], tail_words[:, :0])
        else:
            out._set(base, self._base_words, dead if dead.any() else None, tail_rids, tail_words)
        return out

    def nearest(self, qvec: np.ndarray, r: int) -> np.ndarray:
        """Row ids of (at least) the ``r`` rows whose codes are nearest the query's (Hamming
        distance; rows tied with the r-th are all kept)."""
        out: np.ndarray = self.rids[self._nearest(qvec, r)]
        return out

    def _live_positions(self) -> np.ndarray:
        if not len(self._dead_pos):
            return np.arange(len(self.rids))
        keep = np.ones(len(self.rids), dtype=bool)
        keep[self._dead_pos] = False
        return np.flatnonzero(keep)

    def _nearest(self, qvec: np.ndarray, r: int, exclude: np.ndarray | None = None) -> np.ndarray:
        """Positions (into ``rids``) of the rows :meth:`nearest` returns; ``exclude``: a mask of
        positions never returned (rows of other sources), its rows not counted in ``r``."""
        if exclude is None and r >= self._live:
            return self._live_positions()
        q = quantize(np.asarray(qvec, dtype=np.float32)[None, :])[0].view("<u8")
        n, nb = len(self.rids), len(self._base_rids)
        n_words = self._base_words.shape[0]
        dist = np.zeros(n, dtype=np.uint16)
        for words, d in ((self._base_words, dist[:nb]), (self._tail_words, dist[nb:])):
            if words.shape[1]:
                _add_hamming(words, q, d)
        if len(self._dead_pos):
            dist[self._dead_pos] = n_words * 64 + 1  # past every real distance: never within the cut
        if exclude is not None:
            dist[exclude] = n_words * 64 + 1
        # the r-th smallest distance by counting (distances are small integers): cheaper than a sort
        hist = np.bincount(dist, minlength=n_words * 64 + 2)
        cut = int(np.searchsorted(np.cumsum(hist), r))
        return np.flatnonzero(dist <= cut)

    def distances(self, qvec: np.ndarray) -> np.ndarray:
        """The Hamming distance of the query's code to each position's (a deleted row's past every
        real one), as :meth:`_nearest` counts them."""
        q = quantize(np.asarray(qvec, dtype=np.float32)[None, :])[0].view("<u8")
        n_words = self._base_words.shape[0]
        dist = np.zeros(len(self.rids), dtype=np.uint16)
        words = self._gather(np.arange(len(self.rids))) if len(self._tail_rids) else self._base_words
        _add_hamming(words, q, dist)
        if len(self._dead_pos):
            dist[self._dead_pos] = n_words * 64 + 1
        return dist

    def keep_mask(self, rids: np.ndarray) -> np.ndarray:
        """The positions whose row ids are in ``rids`` (the rows of some sources), as a mask."""
        return np.isin(self.rids, rids)

    def candidates(self, qvec: np.ndarray, want: int, keep: np.ndarray | None = None,
                   widen: int = 1) -> np.ndarray:
        """Row ids whose exact cosines are read for ``want`` results: the :func:`scan_count`
        nearest by Hamming distance, of those the :func:`rescore_count` best by
        :func:`asymmetric_scores`. ``keep`` (:meth:`keep_mask`): only these positions' rows, as if
        the index held no others (a source filter gets its own ``want`` nearest, not the nearest of
        every source that happen to be its). ``widen``: :attr:`ScanPlan.widen`."""
        exclude = None
        if keep is None:
            n = len(self)
        else:
            eligible = keep.copy()
            eligible[self._dead_pos] = False
            n = int(np.count_nonzero(eligible))
            exclude = ~eligible
        r = rescore_count(want, n, widen)
        if r >= n:
            return self.rids[self._live_positions() if exclude is None else np.flatnonzero(~exclude)]
        pos = self._nearest(qvec, scan_count(r, n), exclude)
        if len(pos) > r:
            codes = np.ascontiguousarray(self._gather(pos).T).view(np.uint8)
            score = asymmetric_scores(np.asarray(qvec, dtype=np.float32), codes)
            pos = pos[np.argpartition(-score, r - 1)[:r]]
        out: np.ndarray = self.rids[pos]
        return out

    def search(self, conn: apsw.Connection, qvec: np.ndarray, want: int,
               keep: np.ndarray | None = None, widen: int = 1) -> list[tuple[int, float]]:
        """The ``want`` rows with the highest exact cosine among :meth:`candidates`, best first:
        [(rid, cosine)]."""
        return best_by_cosine(conn, qvec, self.candidates(qvec, want, keep, widen), want, self.rows)


def best_by_cosine(conn: apsw.Connection, qvec: np.ndarray, candidates: np.ndarray, want: int,
                   rows: str = "chunks") -> list[tuple[int, float]]:
    """The ``want`` of ``candidates`` (row ids) with the highest exact cosine, best first."""
    cos = cosines(qvec, read_vectors(conn, candidates.tolist(), rows))
    return sorted(cos.items(), key=lambda kv: (-kv[1], kv[0]))[:want]


def streamed_candidates(conn: apsw.Connection, dims: int, qvec: np.ndarray, want: int,
                        table: str = BITS_TABLE, only: np.ndarray | None = None, widen: int = 1) -> np.ndarray:
    """:meth:`BitIndex.candidates` of one query, the codes read a block at a time and scanned as
    they are stored (a row's words side by side) instead of loaded into a :class:`BitIndex`: what
    a one-shot reader (a CLI search) needs. Loading transposes every code into one array (~1 s at
    1M x 1536 on this VM); one pass over the blocks costs about the read. The same rows in the
    same order, so the same candidates."""
    n_words = code_bytes(dims) // 8
    q = quantize(np.asarray(qvec, dtype=np.float32)[None, :])[0].view("<u8")
    ids: list[np.ndarray] = []
    dists: list[np.ndarray] = []
    blocks: list[np.ndarray] = []
    for raw_ids, raw_codes in conn.execute(f"SELECT rids, codes FROM {table} ORDER BY block"):
        i, c8 = _block_arrays(raw_ids, raw_codes, n_words * 8, table)
        c = c8.view("<u8")
        keep = i != 0
        if only is not None:  # the rows of some sources (BitIndex.candidates' keep)
            keep &= np.isin(i, only)
        if not keep.all():
            i, c = i[keep], c[keep]
        ids.append(i)
        dists.append(np.bitwise_count(c ^ q).sum(axis=1, dtype=np.uint16))
        blocks.append(c)
    rids = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
    n = len(rids)
    r = rescore_count(want, n, widen)
    if r >= n:
        return rids
    scan = scan_count(r, n)
    if scan >= n:
        pos = np.arange(n)
    else:  # as BitIndex._nearest: the scan-th smallest distance by counting
        dist = np.concatenate(dists)
        cut = int(np.searchsorted(np.cumsum(np.bincount(dist, minlength=n_words * 64 + 2)), scan))
        pos = np.flatnonzero(dist <= cut)
    if len(pos) > r:
        starts = np.cumsum([0, *(len(b) for b in blocks)])
        which = np.searchsorted(starts, pos, side="right") - 1
        codes = np.empty((len(pos), n_words), dtype="<u8")
        bounds = np.searchsorted(which, np.arange(len(blocks) + 1))  # pos is ascending: each block's run
        for b in np.flatnonzero(np.diff(bounds)):
            lo, hi = bounds[b], bounds[b + 1]
            codes[lo:hi] = blocks[b][pos[lo:hi] - starts[b]]
        score = asymmetric_scores(np.asarray(qvec, dtype=np.float32), codes.view(np.uint8))
        pos = pos[np.argpartition(-score, r - 1)[:r]]
    return rids[pos]


def exact_nearest(conn: apsw.Connection, qvec: np.ndarray, want: int, rows: str = "chunks",
                  only: np.ndarray | None = None) -> list[tuple[int, float]]:
    """The ``want`` rows of ``rows`` (``chunks`` or :data:`PARTS_TABLE`) with the highest exact
    cosine, best first: every float32 vector read once, a block of rows at a time (an index whose
    quick scan misses its nearest rows: :class:`ScanPlan`). ``only``: these row ids only."""
    q = np.asarray(qvec, dtype=np.float32)
    q = q / (np.linalg.norm(q) or 1.0)
    size = len(q) * 4
    best_r = np.zeros(0, dtype=np.int64)
    best_s = np.zeros(0, dtype=np.float32)
    cur = conn.execute(f"SELECT rid, embedding FROM {rows} WHERE embedding IS NOT NULL")
    while True:
        got = list(itertools.islice(cur, EXACT_BLOCK))
        if not got:
            break
        pairs = [(r, b) for r, b in got if len(b) == size]
        if only is not None:
            pairs = [p for p, ok in zip(pairs, np.isin([r for r, _ in pairs], only).tolist(), strict=True) if ok]
        if pairs:
            rid = np.fromiter((r for r, _ in pairs), dtype=np.int64, count=len(pairs))
            m = np.frombuffer(b"".join(b for _, b in pairs), dtype="<f4").reshape(len(pairs), -1)
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                norms = np.sqrt(np.einsum("ij,ij->i", m, m))
                sims = np.nan_to_num((m @ q) / np.where(norms > 0, norms, np.inf), nan=0.0, posinf=0.0, neginf=0.0)
            best_r = np.concatenate([best_r, rid])
            best_s = np.concatenate([best_s, sims.astype(np.float32)])
            if len(best_r) > want:
                keep = np.argpartition(-best_s, want - 1)[:want]
                best_r, best_s = best_r[keep], best_s[keep]
        if len(got) < EXACT_BLOCK:
            break
    order = sorted(zip(best_r.tolist(), best_s.tolist(), strict=True), key=lambda kv: (-kv[1], kv[0]))
    return [(int(r), float(c)) for r, c in order[:want]]


class FloatRows:
    """Every float32 vector of one table of an opened index, as unit rows in memory: the exact
    scan of a long-lived reader of an index whose quick scan misses its nearest rows
    (:class:`ScanPlan` ``mode`` "exact"). Holds rows x dims x 4 bytes (the index's float32
    copy); shared by the readers of this process that see the same state (:func:`shared_float_rows`)."""

    def __init__(self, conn: apsw.Connection, dims: int, rows: str = "chunks") -> None:
        size = int(dims) * 4
        ids: list[np.ndarray] = []
        mats: list[np.ndarray] = []
        cur = conn.execute(f"SELECT rid, embedding FROM {rows} WHERE embedding IS NOT NULL ORDER BY rid")
        while True:
            got = [(r, b) for r, b in itertools.islice(cur, EXACT_BLOCK) if len(b) == size]
            if got:
                ids.append(np.fromiter((r for r, _ in got), dtype=np.int64, count=len(got)))
                m = np.frombuffer(b"".join(b for _, b in got), dtype="<f4").reshape(len(got), int(dims)).copy()
                with np.errstate(invalid="ignore", over="ignore"):
                    m /= np.maximum(np.sqrt(np.einsum("ij,ij->i", m, m)), 1e-30)[:, None]
                mats.append(np.nan_to_num(m, nan=0.0, posinf=0.0, neginf=0.0))
            else:
                break
        self.rids = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
        self.m = np.concatenate(mats) if mats else np.zeros((0, int(dims)), dtype=np.float32)
        self.nbytes = self.m.nbytes + self.rids.nbytes

    def search(self, qvec: np.ndarray, want: int, only: np.ndarray | None = None) -> list[tuple[int, float]]:
        """The ``want`` rows of the highest cosine (of ``only``'s row ids), best first."""
        q = np.asarray(qvec, dtype=np.float32)
        sims = self.m @ (q / (np.linalg.norm(q) or 1.0))
        if only is not None:
            sims = np.where(np.isin(self.rids, only), sims, -np.inf)
        pos = np.argpartition(-sims, want - 1)[:want] if want < len(sims) else np.arange(len(sims))
        pos = pos[np.isfinite(sims[pos])]
        order = sorted(zip(self.rids[pos].tolist(), sims[pos].tolist(), strict=True), key=lambda kv: (-kv[1], kv[0]))
        return [(int(r), float(c)) for r, c in order]


_floats: dict[tuple[str, str, int, str], weakref.ref[FloatRows]] = {}


def shared_float_rows(conn: apsw.Connection, path: str, dims: int, rows: str = "chunks",
                      loaded_only: bool = False) -> FloatRows | None:
    """The :class:`FloatRows` of the index at ``path`` as ``conn`` sees it, shared by this
    process's readers of the same state (keyed as :func:`shared_bit_index`); ``loaded_only``:
    None unless a reader has loaded it already."""
    digest = index_changes.meta_digest(conn)
    key = (path, digest, int(dims), rows)
    with _shared_lock:
        ref = _floats.get(key)
        got = ref() if ref is not None else None
    if got is None and not loaded_only:
        conn.execute("BEGIN")
        try:
            if index_changes.meta_digest(conn) != digest:  # pragma: no cover - changed in between
                digest = index_changes.meta_digest(conn)
                key = (path, digest, int(dims), rows)
            got = FloatRows(conn, dims, rows)
        finally:
            conn.execute("COMMIT")
        with _shared_lock:
            for k in [k for k, r in _floats.items() if r() is None]:
                del _floats[k]
            _floats[key] = weakref.ref(got)
    return got


# -- how well the quick scan works on an index's own vectors ------------------------------------

# The quick scan (the bits, then exact cosines of the best candidates) must find at least this
# share of the exact top 10 on the index's own vectors; below it a search widens its candidates
# (ScanPlan.widen) or reads every vector (ScanPlan.mode "exact"), whichever meets it.
RECALL_TARGET = 0.98
CHECK_K = 10  # recall@10
CHECK_QUERIES = 64  # a sample of the index's own vectors, each a query
# How many times more candidates a search may take before reading every vector costs less:
# candidates are read by row id (a B-tree seek each), every vector in one pass (~1/8 of a seek
# a row on this VM): widening stops while the candidates stay below 1/8 of the rows.
WIDEN_STEPS = (1, 2, 4, 8, 16, 32, 64, 128)
EXACT_BLOCK = 4096
# An incremental run measures again once the rows differ from the measured count by this share
# (the quick scan's recall depends on the rows it chooses among; a provider's kind of vectors
# changes only with a full rebuild).
RECHECK_CHANGE = 0.1


@dataclass(frozen=True)
class ScanPlan:
    """How a search reads an index's vectors, chosen when the index was built or changed
    (:func:`measure_scan`) and recorded in its meta (``vector_scan``): the quick scan, its
    candidates widened ``widen`` times, or every vector (``mode`` "exact").

    ``recall``: the measured recall@10 of the way chosen against an exact scan of the same
    vectors; ``recall_default``: the quick scan's at its default width (what a search of this
    index did before the check); ``rows``: the vectors measured; ``sample``: the queries."""

    mode: str = "bits"  # "bits" | "exact"
    widen: int = 1
    recall: float = 1.0
    recall_default: float = 1.0
    rows: int = 0
    sample: int = 0
    target: float = RECALL_TARGET
    measured: bool = True  # False: an index built before the check (the default quick scan, unmeasured)
    # the part vectors' own plan (exchanges, note windows: :data:`PARTS_BITS_TABLE`), measured alike;
    # None: the index has none, or was measured before parts were (their default quick scan)
    parts: ScanPlan | None = None

    def to_meta(self) -> dict[str, object]:
        out: dict[str, object] = {"mode": self.mode, "widen": self.widen, "recall_at_10": round(self.recall, 4),
                                  "recall_at_10_default": round(self.recall_default, 4), "rows": self.rows,
                                  "sample": self.sample, "target": self.target}
        if self.parts is not None:
            out["parts"] = self.parts.to_meta()
        return out

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any] | None) -> ScanPlan:
        """The plan an index's meta records; an index without one (built before the check) keeps
        the default quick scan, ``measured`` False."""
        got = (meta or {}).get("vector_scan")
        if not isinstance(got, dict):
            return cls(measured=False)

        def num(key: str, default: float) -> float:
            v = got.get(key)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default

        mode = got.get("mode") if got.get("mode") in ("bits", "exact") else "bits"
        parts = cls.from_meta({"vector_scan": got["parts"]}) if isinstance(got.get("parts"), dict) else None
        return cls(mode=str(mode), widen=max(1, int(num("widen", 1))), recall=num("recall_at_10", 1.0),
                   recall_default=num("recall_at_10_default", 1.0), rows=int(num("rows", 0)),
                   sample=int(num("sample", 0)), target=num("target", RECALL_TARGET), parts=parts)

    def stale(self, rows: int, parts: int = 0) -> bool:
        """Whether an index now holding ``rows`` vectors (and ``parts`` part vectors) should be
        measured again: never measured, or either count moved by more than :data:`RECHECK_CHANGE`
        (part vectors never measured while it has some count as a move)."""
        if not self.measured or abs(rows - self.rows) > RECHECK_CHANGE * max(self.rows, 1):
            return True
        if self.parts is None:
            return parts > 0
        return abs(parts - self.parts.rows) > RECHECK_CHANGE * max(self.parts.rows, 1)

    def describe(self) -> str:
        """One line for ``status``."""
        head = self._describe_own()
        if self.parts is not None and self.parts.measured:
            head += "; part vectors: " + self.parts._describe_own().replace("vectors'", "part vectors'")
        return head

    def _describe_own(self) -> str:
        if not self.measured:
            return "quick scan not measured (an index built before the check; the next run measures it)"
        if self.sample == 0:  # so few rows that the quick scan reads every row's exact cosine
            return f"exact: the quick scan reads all {self.rows} vectors' exact cosines (nothing to measure)"
        head = (f"quick scan recall@10 {self.recall_default:.3f} against an exact scan"
                f" ({self.sample} of its {self.rows} vectors as queries)")
        if self.mode == "exact":
            return head + f"; below {self.target:g}: every vector is read (exact)"
        if self.widen > 1:
            return head + f"; below {self.target:g}: candidates widened {self.widen}x (recall@10 {self.recall:.3f})"
        return head


def measure_scan(conn: apsw.Connection, dims: int, *, sample: int = CHECK_QUERIES, k: int = CHECK_K,
                 seed: int = 0, table: str = BITS_TABLE) -> ScanPlan:
    """Measure the quick scan on this index's own vectors (``table``: the chunks' codes, or the
    part vectors' :data:`PARTS_BITS_TABLE`) and choose how searches read them.

    ``sample`` stored vectors (drawn with a fixed seed) are the queries; each gets its exact top
    ``k`` (every float32 vector, the query's own row left out) and the quick scan's
    (:meth:`BitIndex.candidates`, then the exact cosines of those), at the default width, then
    2, 4, ... times wider while the candidates stay below 1/8 of the rows. The first width whose
    recall@k reaches :data:`RECALL_TARGET` is the plan; none: ``mode`` "exact". A row the quick
    scan returns counts as found when its cosine reaches the exact k-th's (ties are not misses).
    Costs one pass over the float32 vectors and ``sample`` quick scans per width tried."""
    n = count(conn, table)
    if n <= rescore_count(k + 1, n):  # the quick scan reads every row's exact cosine
        return ScanPlan(rows=n, sample=0)
    bits = BitIndex(conn, dims, table)
    rows = VECTOR_TABLES[table]
    rids = bits.rids  # ascending, live
    rng = np.random.default_rng(seed)
    qrids = np.sort(rng.choice(rids, size=min(sample, len(rids)), replace=False))
    qrows = dict(read_vectors(conn, qrids.tolist(), rows))
    qrids = np.asarray([r for r in qrids.tolist() if r in qrows and len(qrows[r]) == dims * 4], dtype=np.int64)
    if not len(qrids):
        return ScanPlan(rows=n, sample=0)
    Q = np.frombuffer(b"".join(qrows[r] for r in qrids.tolist()), dtype="<f4").reshape(len(qrids), dims)
    Q = Q / np.maximum(np.linalg.norm(Q, axis=1, keepdims=True), 1e-12)
    # every query's cosine with every row, in the order of ``rids`` (n x 4 bytes a query)
    sims = np.zeros((len(qrids), len(rids)), dtype=np.float32)
    size = dims * 4
    cur = conn.execute(f"SELECT rid, embedding FROM {rows} WHERE embedding IS NOT NULL ORDER BY rid")
    while True:
        got = list(itertools.islice(cur, EXACT_BLOCK))
        if not got:
            break
        ok = [(r, b) for r, b in got if len(b) == size]
        if ok:
            rid = np.fromiter((r for r, _ in ok), dtype=np.int64, count=len(ok))
            pos = np.searchsorted(rids, rid)
            inside = (pos < len(rids)) & (rids[np.minimum(pos, len(rids) - 1)] == rid)
            m = np.frombuffer(b"".join(b for _, b in ok), dtype="<f4").reshape(len(ok), dims)
            norms = np.sqrt(np.einsum("ij,ij->i", m, m))
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                s = np.nan_to_num((Q @ m.T) / np.where(norms > 0, norms, np.inf), nan=0.0, posinf=0.0, neginf=0.0)
            sims[:, pos[inside]] = s[:, inside]
        if len(got) < EXACT_BLOCK:
            break
    own = np.searchsorted(rids, qrids)
    sims[np.arange(len(qrids)), own] = -np.inf  # a query's own row is not its neighbour
    kk = min(k, len(rids) - 1)
    kth = -np.partition(-sims, kk - 1, axis=1)[:, kk - 1]  # the exact k-th cosine of each query

    def recalls(widths: list[int]) -> dict[int, float]:
        """recall@kk of the quick scan at each of these widths: per query, the Hamming distances
        and the asymmetric scores of the widest width's rows once, each width's candidates taken
        from them as :meth:`BitIndex.candidates` takes them (the rows within its Hamming cut, of
        those its rescore count best by the asymmetric score)."""
        found = dict.fromkeys(widths, 0)
        cuts = {w: (rescore_count(kk + 1, n, w), scan_count(rescore_count(kk + 1, n, w), n)) for w in widths}
        n_words = bits._base_words.shape[0]
        for i in range(len(qrids)):
            dist = bits.distances(Q[i])
            cum = np.cumsum(np.bincount(dist, minlength=n_words * 64 + 2))
            limit = {w: (n_words * 64 + 1 if s >= n else int(np.searchsorted(cum, s))) for w, (_, s) in cuts.items()}
            pos_all = np.flatnonzero(dist <= max(limit.values()))
            score_all = asymmetric_scores(Q[i], np.ascontiguousarray(bits._gather(pos_all).T).view(np.uint8))
            for w, (r, _) in cuts.items():
                sel = dist[pos_all] <= limit[w]
                pos, sc = pos_all[sel], score_all[sel]
                if len(pos) > r:
                    pos = pos[np.argpartition(-sc, r - 1)[:r]]
                top = np.sort(sims[i, pos])[::-1][:kk]  # the quick scan's best kk (its own row scores -inf)
                found[w] += int(np.count_nonzero(top >= kth[i] - 1e-6))
        return {w: f / (kk * len(qrids)) for w, f in found.items()}

    default = recalls([1])[1]
    if default >= RECALL_TARGET:
        return ScanPlan(mode="bits", widen=1, recall=default, recall_default=default, rows=n, sample=len(qrids))
    wider = [w for w in WIDEN_STEPS if w > 1 and 8 * rescore_count(kk + 1, n, w) <= n]
    for lo in range(0, len(wider), 2):  # two widths a pass: the wider one's rows cost the pass
        by_width = recalls(wider[lo:lo + 2])
        for w in wider[lo:lo + 2]:
            if by_width[w] >= RECALL_TARGET:
                return ScanPlan(mode="bits", widen=w, recall=by_width[w], recall_default=default, rows=n,
                                sample=len(qrids))
    return ScanPlan(mode="exact", widen=1, recall=1.0, recall_default=default, rows=n, sample=len(qrids))


def loaded_bit_index(conn: apsw.Connection, path: str, dims: int, table: str = BITS_TABLE) -> BitIndex | None:
    """The :class:`BitIndex` of this state of the index if a reader of this process has loaded it."""
    key = (path, index_changes.meta_digest(conn), int(dims), table)
    with _shared_lock:
        ref = _shared.get(key)
        return ref() if ref is not None else None


_shared: dict[tuple[str, str, int, str], weakref.ref[BitIndex]] = {}
_shared_lock = threading.Lock()


def shared_bit_index(conn: apsw.Connection, path: str, dims: int, table: str = BITS_TABLE,
                     prev: BitIndex | None = None) -> BitIndex:
    """The :class:`BitIndex` of the index at ``path`` as ``conn`` sees it, shared by every reader of
    this process that sees the same state (the MCP server's and the sync triggers' searchers).

    Keyed by the path and the index's meta record, read in the same read transaction as the
    codes: every run that changes the index writes a new meta (``built_at``), so one key never
    names two states. ``prev``: the codes of an earlier state of the same index (the reader's
    before the file changed): when the index's change log links the two
    (:mod:`memory_core.storage.index_changes`), they are brought up to date by the change instead of
    reading every code again."""
    conn.execute("BEGIN")
    try:
        digest = index_changes.meta_digest(conn)
        key = (path, digest, int(dims), table)
        with _shared_lock:
            ref = _shared.get(key)
            got = ref() if ref is not None else None
        if got is None:
            delta = (index_changes.since(conn, prev.digest, digest)
                     if prev is not None and prev.digest and prev.table == table and prev.dims == int(dims) else None)
            got = prev.updated(conn, delta) if prev is not None and delta is not None else BitIndex(conn, dims, table)
            got.digest = digest
            with _shared_lock:
                for k in [k for k, r in _shared.items() if r() is None]:
                    del _shared[k]
                _shared[key] = weakref.ref(got)
        return got
    finally:
        conn.execute("COMMIT")


def sizes(conn: apsw.Connection, dims: int | None) -> dict[str, int]:
    """What the vectors take in the index file (``status``): the float32 copy (rows x dims x 4,
    chunks and parts), the bits and how many of the vectors are parts (without reading either: ``length()`` of a blob reads its header only)."""
    out = {"float32_bytes": 0, "bits_bytes": 0, "part_vectors": 0}
    if not dims:
        return out
    for table in (BITS_TABLE, PARTS_BITS_TABLE):
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone() is None:
            continue
        n, b = conn.execute(f"SELECT coalesce(sum(live), 0), coalesce(sum(length(rids) + length(codes)), 0)"
                            f" FROM {table}").fetchone()
        out["float32_bytes"] += int(n) * int(dims) * 4
        out["bits_bytes"] += int(b)
        if table == PARTS_BITS_TABLE:
            out["part_vectors"] = int(n)
    return out
