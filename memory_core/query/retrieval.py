"""Retrieval: the candidates of one query from one opened index file, before any ranking.

Where each is decided:

* :class:`_Index`: one opened index file (its connections, meta, vectors' layout, cached counts);
* :func:`keyword_hits`: the keyword side, FTS5's BM25 top k (from the phrases' postings in memory,
  :class:`_Postings` / :func:`keyword_top`, for queries of common words; beside the vector side,
  chosen by the phrases in fewer than half of the rows);
* :func:`vector_hits`: the vector side (sign bits then exact cosines, sqlite-vec's KNN on a schema-2
  index, or a numpy scan);
* :func:`complete`: every candidate gets both raw scores (:func:`cosines`, :func:`bm25_of_rows` with
  :func:`_bm25_given_df`), whether it holds an identifier of the query, the query terms' IDF;
* :func:`dated_hits`: a named day's chunks neither side found (:func:`memory_core.query.dates.dated_chunk_rows`).

:class:`memory_core.query.search.Searcher` runs them (``Searcher.retrieve``) and ranks the result
(:mod:`memory_core.query.rank`). Never imports the indexing code.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import re
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import apsw
import numpy as np

from memory_core.config import SUPPORT_MIN_COVERAGE, Settings
from memory_core.errors import IndexDamagedError, IndexNewerError, ProviderError
from memory_core.query import ranking
from memory_core.query.dates import Dater, DateRange, calendar_word, dated_chunk_rows
from memory_core.sources.sessions import LABEL_PREFIXES as SPEAKERS
from memory_core.storage import index_changes, textsearch, vectors
from memory_core.storage.indexmeta import IndexRecord, newer_error, newer_writer
from memory_core.storage.store import (
    blob_of,
    connect,
    connect_reader,
    has_table,
    int_of,
    load_vec,
    read_meta,
    value_of,
)

if TYPE_CHECKING:
    from memory_core.embeddings.base import EmbeddingProvider

log = logging.getLogger("memory_core.query.search")

POINT_READS_PER_SCAN = 1000
"""An index of schema 2 (vectors in sqlite-vec's vec0): the cosines of up to this many keyword
candidates per million chunks are read by one point statement each, more by one restricted KNN
(which scans the table). Measured at 200k x 1536: 0.6-0.8 ms a point read, 280 ms a scan."""
PARTS_READ_MAX = 16
"""The most part vectors (exchanges, windows) the vector side reads per chunk it wants, looking for
that many chunks that own them (:meth:`_Index._with_parts`)."""

# The chunk columns of the vector side's candidates, joined in the same statement as the vec0
# KNN (a MATERIALIZED CTE, so the top k is computed before the join).
_ROW_SELECT = (
    "SELECT {alias}.rid, {raw}, c.id, c.path, c.source, c.start_line, c.end_line, c.text, fl.mtime"
    " FROM {alias} JOIN chunks c ON c.rid = {alias}.rid LEFT JOIN files fl ON fl.path = c.path"
)


_BM25_FUNCTION = "memory_core_bm25"
_BM25_K1 = 1.2  # FTS5's bm25() constants (fts5_aux.c)
_BM25_B = 0.75


def _bm25_given_df(api: Any, *dfs: int) -> float:
    """FTS5's ``bm25(chunks_fts)`` of the current row, the same arithmetic in the same order as
    ``fts5Bm25Function`` (sqlite/ext/fts5/fts5_aux.c), except that each phrase's document count
    (the rows matching it alone) is given by the caller instead of counted.

    bm25() counts them with ``xQueryPhrase``, a walk of every phrase's whole doclist, each time a
    statement starts, and SQLite starts it again for every value of ``rowid IN (...)``: scoring 40
    known rows of a 4-word query walked the doclists 160 times (~1 s at 200k chunks). Here the
    counts come from :meth:`_Index.df` (counted once per opened index), the row count and average
    length from FTS5's own totals, a row's term frequencies and length from FTS5's own data for
    that row (its position lists and docsize): the score is bm25()'s, bit for bit where Python
    and the SQLite build use the same IEEE arithmetic (tests/test_query_speed.py compares them)."""
    n_row = api.row_count
    avgdl = api.column_total_size(-1) / n_row
    d = float(api.column_size(-1))
    # bm25(): 1.0 per instance
    tfs = [float(sum(len(offsets) for offsets in api.phrase_locations(i))) for i in range(len(dfs))]
    return _bm25(n_row, avgdl, d, tfs, dfs)


def _bm25(n_row: int, avgdl: float, d: float, tfs: list[float], dfs: tuple[int, ...] | list[int]) -> float:
    """``fts5Bm25Function``'s arithmetic, in its order: the row's length ``d``, each phrase's
    instances in it ``tfs`` and its document count ``dfs``."""
    k1, b = _BM25_K1, _BM25_B
    score = 0.0
    for f, df in zip(tfs, dfs, strict=True):
        idf = math.log((n_row - df + 0.5) / (df + 0.5))
        if idf <= 0.0:
            idf = 1e-6
        score += idf * ((f * (k1 + 1.0)) / (f + k1 * (1 - b + b * d / avgdl)))
    return -1.0 * score


def _register_bm25(conn: apsw.Connection) -> bool:
    """Register :func:`_bm25_given_df` on ``conn`` (apsw 3.46+); False when it cannot be."""
    register = getattr(conn, "register_fts5_function", None)
    if register is None:
        return False
    try:
        register(_BM25_FUNCTION, _bm25_given_df)
        register(_TF_FUNCTION, _tf_and_size)
        register(_INST_FUNCTION, _inst_count)
        register(_TOTALS_FUNCTION, _totals)
    except (apsw.Error, AttributeError):
        return False
    return True


def _tf_and_size(api: Any) -> int:
    """The current row's instances of phrase 0 (what bm25() counts) and its length in tokens, packed."""
    size: int = api.column_size(-1)  # FTS5's auxiliary API (apsw): untyped
    return (sum(len(offsets) for offsets in api.phrase_locations(0)) << 32) | size


def _inst_count(api: Any) -> int:
    """The current row's instances of the query's one phrase (what bm25() counts for it)."""
    return int(api.inst_count)


def _varints(blob: bytes) -> list[int]:
    """The SQLite varints of ``blob`` (FTS5's averages record and docsize rows): 7 bits a byte,
    high bit set while more follow; a ninth byte gives all of its 8 bits."""
    out: list[int] = []
    i, n = 0, len(blob)
    while i < n:
        v = 0
        for j in range(9):
            if i >= n:
                return out  # cut short: not a varint list
            byte = blob[i]
            i += 1
            if j == 8:
                v = (v << 8) | byte
                break
            v = (v << 7) | (byte & 0x7F)
            if byte < 0x80:
                break
        out.append(v)
    return out


COMMON_MARGIN = 64
COMMON_MARGIN_MIN = 16
"""A phrase's count is read to half of the rows plus 1/64 of them (at least 16) before it is taken
as common (:meth:`_Index.idf_df`): the margin lets a long-lived reader keep it common across
incremental runs that delete fewer rows than that (:meth:`_Index._carry_common`)."""

KEYWORD_POSTINGS_MIN = 20_000
"""A keyword query whose phrases match at least this many rows in all (each row counted once per
phrase) is scored from the phrases' postings kept in memory (:class:`_Postings`) once they are
kept; below it FTS5's own ``ORDER BY bm25() LIMIT k`` is fast (about 2 µs a matched row)."""
POSTINGS_BUDGET_BYTES = 256 * 2**20
"""At most this many bytes of postings per opened index (least recently used dropped first)."""


class _Postings:
    """The term frequencies and row lengths of the common phrases of one opened index, so that a
    query of common words is scored by numpy instead of FTS5's bm25() over every matched row.

    FTS5 scores an OR query by visiting every row that holds any of its words: ~2 µs a row in
    bm25() (its instance list, its length), so a query of four words each in 80% of 200k chunks
    costs ~0.4 s whatever k is, and the sort is the cheap part. A phrase's frequencies (one byte
    per row of the index, read once through FTS5 itself by :func:`_tf_and_size`) make the same
    scores an array operation; the arithmetic is bm25()'s (:func:`_bm25_given_df`) in the same
    order, so the scores and the order are FTS5's, ties by row id as SQLite's sorter keeps them
    (tests/test_query_speed.py compares them).

    Only queries of at least :data:`KEYWORD_POSTINGS_MIN` matched rows use them. A one-token
    phrase is read on its first use from an fts5vocab 'instance' table (in C: ~55 ms a word in 80%
    of 200k chunks, about what one FTS5 query of it costs), the rows' lengths once from FTS5's
    docsize table; a phrase of several tokens (CJK, ``foo_bar``), or any phrase when fts5vocab is
    not available, through FTS5 row by row on its second use (a one-shot query does not pay for
    it). Within :data:`POSTINGS_BUDGET_BYTES` (least recently used dropped first)."""

    def __init__(self, max_rid: int, vocab: apsw.Connection | None = None) -> None:
        self.size = max_rid + 1
        self.lengths = np.zeros(self.size, dtype=np.float64)  # tokens per row (set by every read)
        self.vocab = vocab  # a read-only connection with an fts5vocab 'instance' table (temp.mc_vocab)
        if vocab is not None and not self._read_lengths(vocab):
            self.vocab = None
        self.tf: dict[str, np.ndarray] = {}  # phrase -> its frequency in every row (uint8/16)
        self.seen: set[str] = set()
        self.n_row = 0
        self.total_tokens = 0
        self.bytes = self.lengths.nbytes
        self._norm: np.ndarray | None = None  # bm25()'s length normalisation of every row
        self.lock = threading.Lock()
        self.digest = ""  # the index state they describe (index_changes.meta_digest)

    def _read_lengths(self, conn: apsw.Connection, since: int = 0) -> bool:
        """Every row's length in tokens (of the rows from ``since`` up) from FTS5's docsize table
        (the first varint of each row's sizes: the text column; in schema 4 and older the others
        are UNINDEXED, 0), as xColumnSize(-1) reads it. A contentless table of one column (schema
        5) stores that one varint alone (1-3 bytes): zeros pad it to three, never read as part of it."""
        try:
            row = conn.execute("SELECT group_concat(id), group_concat(substr(hex(sz) || '0000', 1, 6), '')"
                               " FROM (SELECT id, sz FROM chunks_fts_docsize WHERE id >= ? ORDER BY id)",
                               (since,)).fetchone()
        except apsw.Error:
            return False
        ids, sizes = row if row is not None else (None, None)  # an aggregate: always one row
        if not ids or not isinstance(ids, str) or not isinstance(sizes, str):  # NULL: no rows
            return True
        rids = np.fromstring(ids, dtype=np.int64, sep=",")
        raw = np.frombuffer(bytes.fromhex(sizes), dtype=np.uint8)
        if len(raw) != 3 * len(rids) or rids.max() >= self.size or rids.min() < 0:
            return False  # a row too short for three bytes (not this schema) or added since the index was opened
        b = raw.reshape(-1, 3).astype(np.int64)
        if (b[:, 0] >= 128).any() and (b[b[:, 0] >= 128, 1] >= 128).any():
            return False  # a row of 16,384 tokens or more: read through FTS5 instead
        self.lengths[rids] = np.where(b[:, 0] < 128, b[:, 0], ((b[:, 0] & 0x7F) << 7) | b[:, 1])
        return True

    def ready(self, phrases: list[str]) -> bool:
        """True when every phrase is kept or can be read now: at once from the fts5vocab table, else
        on its second use (a one-shot query does not pay for reading through FTS5)."""
        if self.vocab is not None:
            return True
        with self.lock:
            unseen = [p for p in phrases if p not in self.tf and p not in self.seen]
            self.seen.update(unseen)
            return not unseen

    def read(self, conn: apsw.Connection, phrase: str, df: int) -> bool:
        """Keep ``phrase``'s frequencies (and the lengths of the rows holding it); False if it cannot
        be. ``df``: the rows it matches (:meth:`_Index.df`), checked against what was read."""
        row = conn.execute(f"SELECT {_TOTALS_FUNCTION}(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?"
                           " LIMIT 1", (phrase,)).fetchone()
        if row is None:
            return False  # no row holds it: FTS5 cannot say its totals, and it scores nothing
        n_row, total, tokens = json.loads(row[0])
        tf: np.ndarray | None = None
        lengths: tuple[np.ndarray, np.ndarray] | None = None
        if self.vocab is not None and len(tokens) == 1 and isinstance(tokens[0], str):
            # one token (as FTS5 tokenized the phrase): its instances, in C, from the fts5vocab table
            docs = value_of(self.vocab, "SELECT group_concat(doc) FROM temp.mc_vocab WHERE term = ? AND col = 'text'",
                            (tokens[0],))
            rids = (np.fromstring(docs, dtype=np.int64, sep=",") if isinstance(docs, str) and docs
                    else np.zeros(0, dtype=np.int64))
            if len(rids) and rids.min() >= 0 and rids.max() < self.size:
                counts = np.bincount(rids, minlength=self.size)
                if int(np.count_nonzero(counts)) == df:
                    tf = counts
        if tf is None:  # a phrase of several tokens, or no fts5vocab: every row through FTS5
            with self.lock:
                if phrase not in self.seen:  # on its second use: a one-shot query does not pay for it
                    self.seen.add(phrase)
                    return False
            rows = conn.execute(f"SELECT rowid, {_TF_FUNCTION}(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?",
                                (phrase,)).fetchall()
            a = np.asarray(rows, dtype=np.int64).reshape(-1, 2)
            rids, packed = a[:, 0], a[:, 1]
            if len(rids) != df or (len(rids) and (rids.max() >= self.size or rids.min() < 0)):
                return False  # a row added since this index was opened: the next query opens it anew
            tf = np.zeros(self.size, dtype=np.int64)
            tf[rids] = packed >> 32
            lengths = (rids, (packed & 0xFFFFFFFF).astype(np.float64))
        tf = tf.astype(np.uint8 if tf.max(initial=0) < 256 else np.uint32)
        with self.lock:
            if not self.n_row:
                self.n_row, self.total_tokens = n_row, total
            elif (self.n_row, self.total_tokens) != (n_row, total):
                return False
            if lengths is not None:
                self.lengths[lengths[0]] = lengths[1]
                self._norm = None
            self.tf[phrase] = tf
            self.bytes += tf.nbytes
            while self.bytes > POSTINGS_BUDGET_BYTES and len(self.tf) > 1:
                self.bytes -= self.tf.pop(next(iter(self.tf))).nbytes
        return True

    def updated(self, conn: apsw.Connection, delta: index_changes.Delta,
                vocab: apsw.Connection | None) -> tuple[_Postings, dict[str, int]] | None:
        """These postings brought to the state ``delta`` leads to, as ``conn`` sees it (called in
        one read transaction), and the new document count of each kept phrase; None if they
        cannot be. The deleted rows and every row from ``delta.added_from`` up are cleared, then
        the added rows' lengths are read from FTS5's docsize table and each kept phrase's
        frequencies in them through FTS5 itself (``MATCH ? AND rowid >= ?``: FTS5 seeks to those
        rows in each doclist). Applying a change twice gives the same arrays."""
        max_rid = value_of(conn, "SELECT max(rid) FROM chunks")
        with self.lock:
            tf_old, seen, lengths_old = dict(self.tf), set(self.seen), self.lengths
        new = _Postings(max_rid if isinstance(max_rid, int) else 0)
        new.vocab, new.seen = (vocab if self.vocab is not None else None), seen  # lengths known for every row, or not
        size, start = new.size, max(0, int(delta.added_from))
        n = min(size, len(lengths_old))
        dead = delta.deleted[(delta.deleted >= 0) & (delta.deleted < size)]
        new.lengths[:n] = lengths_old[:n]
        new.lengths[dead] = 0.0
        new.lengths[start:] = 0.0
        if not new._read_lengths(conn, start):
            return None
        dfs: dict[str, int] = {}
        for phrase, old in tf_old.items():
            rows = conn.execute(f"SELECT rowid, {_INST_FUNCTION}(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?"
                                " AND rowid >= ?", (phrase, start)).fetchall()
            a = np.asarray(rows, dtype=np.int64).reshape(-1, 2)
            rids, counts = a[:, 0], a[:, 1]
            if len(rids) and (rids.max() >= size or rids.min() < start):
                return None
            top = int(counts.max(initial=0))
            tf = np.zeros(size, dtype=old.dtype if top <= np.iinfo(old.dtype).max else np.uint32)
            tf[:n] = old[:n]
            tf[dead] = 0
            tf[start:] = 0
            tf[rids] = counts
            new.tf[phrase] = tf
            new.bytes += tf.nbytes
            dfs[phrase] = int(np.count_nonzero(tf))
        for phrase in new.tf:  # FTS5's row count and total tokens now (any phrase that still matches a row)
            row = conn.execute(f"SELECT {_TOTALS_FUNCTION}(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?"
                               " LIMIT 1", (phrase,)).fetchone()
            if row is not None:
                new.n_row, new.total_tokens = json.loads(row[0])[:2]
                break
        else:
            new.tf, new.bytes, dfs = {}, new.lengths.nbytes, {}
        new.digest = index_changes.meta_digest(conn)
        return new, dfs

    def has(self, phrases: list[str]) -> bool:
        with self.lock:
            return self.n_row > 0 and all(p in self.tf for p in phrases)

    def scores(self, phrases: list[str], dfs: list[int], rids: np.ndarray | None = None) -> np.ndarray | None:
        """bm25() of every row, or of the rows ``rids`` (0 where no phrase matches), as
        :func:`_bm25_given_df` computes it."""
        with self.lock:
            got = [self.tf[p] for p in phrases if p in self.tf]
            if len(got) != len(phrases) or self.n_row <= 0:
                return None
            for p in phrases:  # most recently used last
                self.tf[p] = self.tf.pop(p)
            n_row, avgdl = self.n_row, self.total_tokens / self.n_row
            k1, b = _BM25_K1, _BM25_B
            if self._norm is None:
                self._norm = k1 * (1 - b + b * self.lengths / avgdl)
            norm = self._norm if rids is None else self._norm[rids]
            score = np.zeros(len(norm), dtype=np.float64)
            for tf, df in zip(got, dfs, strict=True):
                idf = math.log((n_row - df + 0.5) / (df + 0.5))
                if idf <= 0.0:
                    idf = 1e-6
                f = (tf if rids is None else tf[rids]).astype(np.float64)
                score += idf * ((f * (k1 + 1.0)) / (f + norm))  # + 0.0 where the phrase is not, as in bm25()
        return score


_TF_FUNCTION = "memory_core_tf"
_INST_FUNCTION = "memory_core_inst"
_TOTALS_FUNCTION = "memory_core_totals"


def _totals(api: Any) -> str:
    """FTS5's row count and total tokens (its averages record), as bm25() reads them, and the
    tokens of phrase 0 as FTS5 tokenized it (JSON)."""
    return json.dumps([api.row_count, api.column_total_size(-1), list(api.phrases[0])])


def _cosine_from_distance(distance: float | None) -> float:
    # a stored vector without a direction (all zeros) has no distance: it scores 0, never crashes
    return 1.0 - float(distance) if distance is not None and math.isfinite(distance) else 0.0


@dataclass(frozen=True)
class Candidates:
    """What the two retrieval sides found for one query (see :meth:`Searcher.retrieve`)."""

    query: str
    keyword: list[ranking.Hit]
    vector: list[ranking.Hit]
    embedded: bool  # the query was embedded (the vector side ran)
    union: list[ranking.Hit] = field(default_factory=list)  # both sides, every hit with both raw scores
    calibration: ranking.Calibration = ranking.Calibration(0.2, 0.8, "model table")
    idf_total: float = 0.0  # sum of the query terms' IDF (see ranking.keyword_relevance)
    dates: DateRange | None = None  # the day(s) the query names (memory_core.query.dates)
    corpus_coverage: float = 1.0  # IDF share of the query terms that occur anywhere in the index
    # the model's vocabulary holds whole every word of the query that no chunk contains, two or
    # more, and it names no identifier (asked only of a query memory's words do not support:
    # ranking.query_supported)
    knows_absent_words: bool = False
    # each candidate file's best cosines (at most FILE_SUPPORT_CHUNKS, best first) over all its
    # chunks, not only the retrieved ones (:func:`file_cosines`): its relevance as a whole
    file_cosines: dict[str, list[float]] = field(default_factory=dict)
    # the share of the candidate files that hold more than one chunk (:func:`multi_chunk_share`):
    # how much a file's relevance as a whole can say beyond its chunk's own
    multi_chunk_share: float = 1.0
    # words were left to embed (False: an empty query, or one only of the day it names, which
    # matches by date alone): no vector side was asked for, so none failed
    words_left: bool = True

    @property
    def words_absent(self) -> bool:
        """Few or none of the query's words are in memory (a weak answer's note says so; both
        backends put it in ``last_search``)."""
        return self.idf_total > 0 and self.corpus_coverage < SUPPORT_MIN_COVERAGE


BACKGROUND_SAMPLE_SQL = "SELECT embedding FROM chunks WHERE embedding IS NOT NULL ORDER BY hash LIMIT 512"
"""The chunks whose vectors give an index's background cosine: the first 512 by content hash, a
uniform sample of the whole index, and the same rows in the same order for the same chunks
however the index was built (idx_chunks_hash walks them in order; a file written before it: one
sort). The first 512 row ids, used before, were the first files' chunks in path order, not a
sample of the whole (cosqa: 0.1834 against 0.1866 over all 6,118 chunks; by hash 0.1882), and
other rows after incremental runs than after a full build of the same notes, so the same notes
scored differently (tests/test_incremental_differential.py)."""


def background_of(conn: apsw.Connection) -> float | None:
    """An index's background cosine (:data:`BACKGROUND_SAMPLE_SQL`), for
    :meth:`memory_core.query.ranking.Calibration.for_model`; None below two vectors."""
    return mean_pair_cosine([blob_of(r[0]) for r in conn.execute(BACKGROUND_SAMPLE_SQL)])


def mean_pair_cosine(blobs: list[bytes]) -> float | None:
    """The mean cosine of every pair of these float32 vectors (None below two). A damaged row (a
    length other than most rows', a NaN or infinite value, all zeros) is left out, as a search
    scores it 0: one such row must not fail every search of its index."""
    if not blobs:
        return None
    width = Counter(len(b) for b in blobs).most_common(1)[0][0]
    kept = [b for b in blobs if len(b) == width]
    if len(kept) < 2 or width == 0 or width % 4:
        return None
    m = np.frombuffer(b"".join(kept), dtype="<f4").reshape(len(kept), -1)
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.linalg.norm(m, axis=1)
    m = m[np.isfinite(norms) & (norms > 0)]  # (a copy)
    if len(m) < 2:
        return None
    m /= np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
    g = m @ m.T
    n = len(m)
    return float((g.sum() - np.trace(g)) / (n * (n - 1)))


def damaged(path: Path | str, why: object) -> IndexDamagedError:
    """The error a reader raises for a damaged index: what is wrong and how to rebuild it."""
    return IndexDamagedError(f"the index at {path} is damaged ({why}); rebuild it with `memory-core index --full`")


class _Index:
    """One opened index file (one inode), or one committed state of it.

    ``prev``: this reader's index before the file changed. What it kept in memory (every code,
    the common words' postings) is brought up to date by the index's change log when the log
    links the two states (:mod:`memory_core.storage.index_changes`), on first use, instead of being read
    again; otherwise it is read again as for a new file."""

    def __init__(self, path: Path, prev: _Index | None = None) -> None:
        st = os.stat(path)
        self.ident = (st.st_ino, st.st_dev, st.st_mtime_ns, st.st_size)
        self.conn = connect_reader(path)
        try:
            # changes when another connection commits to the file (an in-place update), even one
            # that leaves its size and mtime as they were (mtime ticks are coarse on some
            # filesystems); read before the meta, so a commit in between is seen next time
            self.data_version = int_of(self.conn, "PRAGMA data_version")
            # the meta, its digest and the codes' count in one read transaction: an in-place update
            # committing between them would make the codes disagree with the meta (a healthy index
            # said damaged to a long-lived reader; the thirty-ninth session's audit G)
            self.conn.execute("BEGIN")
            try:
                self.meta = read_meta(self.conn)
                self.digest = index_changes.meta_digest(self.conn)
                if self.meta is None or not has_table(self.conn, "chunks_fts"):
                    raise IndexDamagedError(f"{path} is not a memory-core index (or it is damaged)")
                if (newer := newer_writer(self.meta)) is not None:  # its layout may not be what we read
                    raise newer_error(path, newer)
                # codes lost or cut short would make the vector side find less, without an error
                problem = vectors.codes_problem(self.conn, self.meta)
            finally:
                self.conn.execute("COMMIT")
        except apsw.Error as exc:
            self.conn.close()
            raise damaged(path, exc) from None
        except (IndexDamagedError, IndexNewerError):
            self.conn.close()
            raise
        if problem:
            self.conn.close()
            raise damaged(path, problem)
        # schema 3: float32 in chunks.embedding + sign bits (memory_core.storage.vectors); schema 2: the
        # vectors in sqlite-vec's vec0 table (searched by its KNN) or in chunks.embedding
        self.has_bits = has_table(self.conn, vectors.BITS_TABLE)
        # schema 4: transcript chunks' exchange vectors (a chunk's cosine is its best vector's)
        self.has_parts = self.has_bits and vectors.has_parts(self.conn) and self.conn.execute(
            f"SELECT 1 FROM {vectors.PARTS_TABLE} LIMIT 1").fetchone() is not None
        self.has_vec_table = has_table(self.conn, "chunks_vec")
        self.f32_in_chunks = self.has_bits or not self.has_vec_table
        self.vec_loaded = self.has_vec_table and not self.has_bits and load_vec(self.conn)
        record = IndexRecord.from_meta(self.meta) if self.meta else None
        self.dims: int | None = record.dims if record is not None else None
        self._matrix: tuple[np.ndarray, np.ndarray] | None = None
        self._bits: vectors.BitIndex | None = None
        self._part_bits: vectors.BitIndex | None = None
        self._path = path
        self._kw_conn: apsw.Connection | Literal[False] | None = None  # False: could not be opened
        self.df_cache: dict[str, int] = {}  # query term -> chunks containing it
        self.common: dict[str, int] = {}  # query term in half the rows or more -> a count it reaches
        self._fts_totals: tuple[int, int] | None = None
        self._tokenizers: dict[int, Any] = {}  # id(connection) -> FTS5's tokenizer on it (False: none)
        self.own_bm25 = _register_bm25(self.conn)  # bm25() of known rows without its doclist walks
        self._postings: _Postings | None = None
        self._vocab: apsw.Connection | None = None
        self._n_chunks: int | None = None
        self._background: float | None = None
        self._source_rids: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray] | None] = {}  # sources -> (chunk rids, part rids) | None
        self._sources_present: set[str] | None = None
        self._row_masks: dict[tuple[tuple[str, ...], int], np.ndarray] = {}
        self._keep_masks: list[tuple[vectors.BitIndex, np.ndarray, np.ndarray]] = []
        self.where: Settings | None = None  # the index's own workspace and sources (Searcher._where)
        same = prev is not None and prev._path == path and prev.dims == self.dims
        # what the previous state held, or had been handed and not used yet (a state no query
        # asked a side of passes it on: the log links it from further back)
        self._prev_bits: vectors.BitIndex | None = (prev._bits or prev._prev_bits) if same and prev is not None else None
        self._prev_postings: _Postings | None = ((prev._postings or prev._prev_postings) if same and prev is not None
                                                 else None)
        # the phrases the previous state knew in half its rows or more, its half and its digest
        self._prev_common: tuple[dict[str, int], str] | None = None
        if same and prev is not None:
            self._prev_common = (dict(prev.common), prev.digest) if prev.common else prev._prev_common
        self._refresh_lock = threading.Lock()
        self._vocabulary: dict[tuple[int, str], list[tuple[str, int]]] | None = None  # (length, first letter) -> terms
        # (query, a model's vocabulary read) -> the query with near spellings (respelled)
        self._respelled: dict[tuple[str, bool], str] = {}
        self._names: dict[str, bool] = {}  # indexed term -> whether memory writes it as a name
        self._aliases: dict[str, str | None] = {}  # a short name -> the longer name memory writes beside it
        self._spell_lock = threading.Lock()
        self._streamed = False  # the first vector query scanned the stored codes (nearest)
        # how searches read the vectors, as the build measured it (vectors.ScanPlan)
        self.scan_plan = vectors.ScanPlan.from_meta(self.meta)
        self._floats: dict[str, vectors.FloatRows] = {}  # rows table -> its vectors in memory (exact plan)
        self._floats_streamed: set[str] = set()  # rows tables this reader has scanned from the file once

    def df(self, phrase: str, conn: apsw.Connection | None = None) -> int:
        """How many chunks match ``phrase`` (an FTS5 string) alone: FTS5's ``nHit`` for its IDF.
        Counted once per opened file (a new file or a committed update opens a new index)."""
        if self._prev_postings is not None:
            self._carry_postings()
        df = self.df_cache.get(phrase)
        if df is None:
            df = int_of(conn or self.conn, "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (phrase,))
            if len(self.df_cache) < 10_000:
                self.df_cache[phrase] = df
        return df

    def fts_totals(self, conn: apsw.Connection | None = None) -> tuple[int, int]:
        """FTS5's row count and its total tokens, as bm25() reads them: the varints of the
        averages record (id 1), the rows then each column's tokens."""
        if self._fts_totals is None:
            blob = value_of(conn or self.conn, "SELECT block FROM chunks_fts_data WHERE id = 1")
            got = _varints(blob) if isinstance(blob, bytes) else []
            self._fts_totals = (got[0], sum(got[1:])) if got else (0, 0)
        return self._fts_totals

    def fts_rows(self, conn: apsw.Connection | None = None) -> int:
        return self.fts_totals(conn)[0]

    def half_rows(self, conn: apsw.Connection | None = None) -> int:
        """Half of FTS5's rows, rounded up: from this count up, bm25() gives a phrase its IDF floor."""
        return (self.fts_rows(conn) + 1) // 2

    def tokenizer(self, conn: apsw.Connection) -> Any:
        """FTS5's own tokenizer of chunks_fts (apsw's ``fts5_tokenizer``) on ``conn``, or None. One
        per connection: the keyword side tokenizes in its thread while the other uses the index's."""
        tok = self._tokenizers.get(id(conn))
        if tok is None:
            tok = False
            name, *args = textsearch.FTS_TOKENIZER.split()
            with contextlib.suppress(apsw.Error, AttributeError, ValueError):
                tok = conn.fts5_tokenizer(name, args)
            self._tokenizers[id(conn)] = tok
        return tok or None

    def idf_df(self, phrase: str, conn: apsw.Connection | None = None) -> int:
        """A document count of ``phrase`` that gives FTS5's IDF of it: its count (:meth:`df`), or,
        for a phrase in at least half of FTS5's rows, a count it is known to reach. bm25() gives
        every such phrase the same IDF, its floor of 1e-6 (``log((N - n + 0.5) / (n + 0.5)) <= 0``),
        so its count is read only a little past half of the rows (:data:`COMMON_MARGIN`; a third
        of the time of a word in 80% of the rows) and it is kept in :attr:`common`, whose counts
        a later state of the index takes over by the change log (:meth:`_carry_common`)."""
        if self._prev_postings is not None:
            self._carry_postings()
        if self._prev_common is not None:
            self._carry_common(conn or self.conn)
        df = self.df_cache.get(phrase)
        if df is not None:
            return df
        known = self.common.get(phrase)
        if known is not None:
            return known
        limit = self.half_rows(conn) + max(COMMON_MARGIN_MIN, self.fts_rows(conn) // COMMON_MARGIN)
        got = int_of(conn or self.conn, "SELECT count(*) FROM (SELECT 1 FROM chunks_fts WHERE chunks_fts MATCH ?"
                     " LIMIT ?)", (phrase, limit))
        if got < limit:  # its count
            if len(self.df_cache) < 10_000:
                self.df_cache[phrase] = got
            return got
        if len(self.common) < 10_000:
            self.common[phrase] = got
        return got

    def _carry_common(self, conn: apsw.Connection) -> None:
        """Take over the previous state's :attr:`common` phrases by the change log, once, without
        counting them again: a phrase in ``c`` rows or more before is in ``c - deleted`` or more
        now, whatever was added; it stays common while that is at least half of the rows now."""
        with self._refresh_lock:
            prev = self._prev_common
            if prev is None:
                return
            # cleared when done, not before: another thread's df() sees it set, waits on the lock
            # and then finds the phrases carried (cleared first, it counted them again meanwhile)
            try:
                self._carry_common_from(conn, *prev)
            finally:
                self._prev_common = None

    def _carry_common_from(self, conn: apsw.Connection, known: dict[str, int], old_digest: str) -> None:
        try:
            conn.execute("BEGIN")
            try:
                now = index_changes.meta_digest(conn)
                delta = index_changes.since(conn, old_digest, now) if now == self.digest else None
                half = self.half_rows(conn)
            finally:
                conn.execute("COMMIT")
        except apsw.Error:
            delta = None
        if delta is None or half <= 0:
            return
        gone = len(delta.deleted)
        for phrase, count in known.items():
            if count - gone >= half and phrase not in self.df_cache:
                self.common.setdefault(phrase, count - gone)

    def n_chunks(self) -> int:
        if self._n_chunks is None:
            self._n_chunks = int_of(self.conn, "SELECT count(*) FROM chunks")
        return self._n_chunks

    def background_cosine(self) -> float | None:
        """Mean cosine over every pair of up to 512 chunk vectors (the calibration of models
        without a measured table entry, :func:`background_of`), computed once per opened file."""
        if self._background is None:
            try:
                if self.vec_loaded:
                    rows = self.conn.execute("SELECT embedding FROM chunks_vec WHERE rowid % 7 = 0 LIMIT 512").fetchall()
                    if len(rows) < 16:
                        rows = self.conn.execute("SELECT embedding FROM chunks_vec LIMIT 512").fetchall()
                    self._background = mean_pair_cosine([blob_of(r[0]) for r in rows])
                else:
                    self._background = background_of(self.conn)
            except apsw.Error:
                return None
        return self._background

    def keyword_conn(self) -> apsw.Connection | None:
        """A second connection for the keyword side, so it can run beside the vector side."""
        if self._kw_conn is None:
            try:
                self._kw_conn = connect_reader(self._path)
                if self.own_bm25 and not _register_bm25(self._kw_conn):
                    self.own_bm25 = False
            except apsw.Error:
                self._kw_conn = False
        return self._kw_conn or None

    def postings(self) -> _Postings | None:
        """The in-memory postings of common phrases (:class:`_Postings`), made on first use."""
        if not self.own_bm25:
            return None
        if self._prev_postings is not None:
            self._carry_postings()
        if self._postings is None:
            max_rid = value_of(self.conn, "SELECT max(rid) FROM chunks")  # NULL: no chunks
            self._postings = _Postings(max_rid if isinstance(max_rid, int) else 0, self._vocab_conn())
            self._postings.digest = self.digest
        return self._postings

    def _carry_postings(self) -> None:
        """Bring the previous state's postings (and the counts of their phrases) up to this
        state by the change log, once; if the log does not link them, they are dropped."""
        with self._refresh_lock:
            prev = self._prev_postings
            if prev is None:
                return
            try:  # cleared when done, as _carry_common's
                if self.own_bm25 and self._postings is None:
                    self._carry_postings_from(prev)
            finally:
                self._prev_postings = None

    def _carry_postings_from(self, prev: _Postings) -> None:
        conn = self.keyword_conn() or self.conn
        vocab = self._vocab_conn()
        try:
            conn.execute("BEGIN")
            try:
                now = index_changes.meta_digest(conn)
                delta = index_changes.since(conn, prev.digest, now) if prev.digest else None
                got = prev.updated(conn, delta, vocab) if delta is not None else None
            finally:
                conn.execute("COMMIT")
        except apsw.Error:
            got = None
        if got is None:
            if vocab is not None:
                with contextlib.suppress(apsw.Error):
                    vocab.close()
                self._vocab = None
            return
        self._postings, dfs = got
        for phrase, df in dfs.items():
            if len(self.df_cache) < 10_000:
                self.df_cache.setdefault(phrase, df)

    def kept_postings(self) -> _Postings | None:
        """The postings if a keyword query made them (never makes them)."""
        return self._postings

    def _vocab_conn(self) -> apsw.Connection | None:
        """A read-only connection to this same file with an fts5vocab 'instance' table of chunks_fts
        (a temp table: the reader connections are query_only), or None."""
        try:
            conn = connect(self._path, readonly=True)
        except apsw.Error:
            return None
        try:
            st = os.stat(self._path)
            if (st.st_ino, st.st_dev) != self.ident[:2]:  # replaced since this index was opened
                raise apsw.Error("replaced")
            conn.execute("CREATE VIRTUAL TABLE temp.mc_vocab USING fts5vocab(main, 'chunks_fts', 'instance')")
        except (apsw.Error, OSError):
            with contextlib.suppress(apsw.Error):
                conn.close()
            return None
        self._vocab = conn
        return conn

    def vocabulary(self) -> dict[tuple[int, str], list[tuple[str, int]]]:
        """The index's words (FTS5's tokens, porter stems, letters only) and their document counts,
        grouped by (length, first letter); read once per opened index from an fts5vocab 'row' table
        on a connection of its own (the readers are query_only), only when a query holds a word no
        chunk does (:func:`respelled`)."""
        with self._spell_lock:
            if self._vocabulary is not None:
                return self._vocabulary
            groups: dict[tuple[int, str], list[tuple[str, int]]] = {}
            conn = None
            try:
                conn = connect(self._path, readonly=True)
                conn.execute("CREATE VIRTUAL TABLE temp.mc_words USING fts5vocab(main, 'chunks_fts', 'row')")
                for term, doc in conn.execute("SELECT term, doc FROM temp.mc_words"):
                    if isinstance(term, str) and term.isalpha() and term.isascii() and len(term) >= 3:
                        groups.setdefault((len(term), term[0]), []).append((term, int(doc)))
            except apsw.Error as exc:
                log.warning("the index's vocabulary cannot be read (%s); no near spellings", exc)
            finally:
                if conn is not None:
                    with contextlib.suppress(apsw.Error):
                        conn.close()
            self._vocabulary = groups
            return groups

    # -- the words memory writes, as the name rules read them (:class:`Lexicon`, :func:`respelled`)
    def word_df(self, word: str, conn: apsw.Connection | None = None) -> int:
        """The chunks holding ``word`` as the keyword side reads it (:meth:`idf_df` of its FTS5 string)."""
        return self.idf_df(textsearch.fts_string(word), conn)

    def query_tokens(self, word: str, conn: apsw.Connection | None = None) -> list[str] | None:
        """``word`` as FTS5's tokenizer reads a query (porter stems), or None without the tokenizer."""
        tok = self.tokenizer(conn or self.conn)
        if tok is None:
            return None
        try:
            return [t for t in tok(word.encode(), apsw.FTS5_TOKENIZE_QUERY, None, include_offsets=False,
                                   include_colocated=False) if isinstance(t, str)]
        except (apsw.Error, TypeError, ValueError):
            return []

    def texts_holding(self, word: str, limit: int, conn: apsw.Connection | None = None) -> list[str]:
        """The text of the first ``limit`` chunks holding ``word`` (in FTS5's order). Raises apsw.Error."""
        return [text or "" for (text,) in (conn or self.conn).execute(
            "SELECT c.text FROM chunks_fts f JOIN chunks c ON c.rowid = f.rowid WHERE chunks_fts MATCH ? LIMIT ?",
            (textsearch.fts_string(word), limit))]

    def holds_beside(self, word: str, others: Sequence[str], conn: apsw.Connection | None = None) -> bool:
        """Whether some chunk holds ``word`` and one of ``others``. Raises apsw.Error."""
        match = f"{textsearch.fts_string(word)} AND ({' OR '.join(textsearch.fts_string(o) for o in others)})"
        return (conn or self.conn).execute("SELECT 1 FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT 1",
                                           (match,)).fetchone() is not None

    def bit_index(self) -> vectors.BitIndex:
        """Every sign-bit code of this file, loaded once per opened file (a new file or a
        committed update opens a new :class:`_Index`) and shared with the other searchers of
        this process that read the same state."""
        if self._bits is None:
            self._bits = vectors.shared_bit_index(self.conn, os.fspath(self._path), int(self.dims or 0),
                                                  prev=self._prev_bits)
            self._prev_bits = None
        return self._bits

    def part_index(self) -> vectors.BitIndex:
        """The exchange vectors' codes, as :meth:`bit_index`."""
        if self._part_bits is None:
            self._part_bits = vectors.shared_bit_index(self.conn, os.fspath(self._path), int(self.dims or 0),
                                                       vectors.PARTS_BITS_TABLE)
        return self._part_bits

    def needs_filter(self, sources: tuple[str, ...] | None, conn: apsw.Connection | None = None) -> bool:
        """Whether some chunk of this file is of none of ``sources`` (else a filter is a no-op)."""
        return bool(sources) and not self.sources_present(conn) <= set(sources or ())

    def source_rids(self, sources: tuple[str, ...] | None,
                    conn: apsw.Connection | None = None) -> tuple[np.ndarray, np.ndarray] | None:
        """(chunk row ids, exchange vector row ids) of the chunks of ``sources``, sorted; None
        when every chunk is of them (no filter needed). Read once per opened file and sources."""
        if not sources:
            return None
        key = tuple(sorted(set(sources)))
        if key in self._source_rids:
            return self._source_rids[key]
        got: tuple[np.ndarray, np.ndarray] | None
        conn = conn or self.conn
        marks = ",".join("?" * len(key))
        if not self.needs_filter(key, conn):
            got = None
        else:
            rids = np.fromiter((r for (r,) in conn.execute(
                f"SELECT rid FROM chunks WHERE source IN ({marks}) ORDER BY rid", key)), dtype=np.int64)
            parts = np.fromiter((r for (r,) in conn.execute(
                f"SELECT p.rid FROM {vectors.PARTS_TABLE} p JOIN chunks c ON c.rid = p.chunk"
                f" WHERE c.source IN ({marks}) ORDER BY p.rid", key)), dtype=np.int64) if self.has_parts \
                else np.zeros(0, dtype=np.int64)
            got = (rids, parts)
        self._source_rids[key] = got
        return got

    def sources_present(self, conn: apsw.Connection | None = None) -> set[str]:
        """The sources of this file's chunks: one seek each in idx_chunks_source."""
        if self._sources_present is None:
            conn = conn or self.conn
            found: set[str] = set()
            row = conn.execute("SELECT min(source) FROM chunks").fetchone()
            while row and row[0] is not None:
                found.add(row[0])
                row = conn.execute("SELECT min(source) FROM chunks WHERE source > ?", (row[0],)).fetchone()
            self._sources_present = found
        return self._sources_present

    def source_row_mask(self, sources: tuple[str, ...], size: int,
                        conn: apsw.Connection | None = None) -> np.ndarray | None:
        """A boolean array over row ids ``0..size-1``, true for the chunks of ``sources`` (the
        keyword postings' filter); None when no filter is needed."""
        only = self.source_rids(sources, conn)
        if only is None:
            return None
        key = (tuple(sorted(set(sources))), size)
        mask = self._row_masks.get(key)
        if mask is None:
            mask = np.zeros(size, dtype=bool)
            mask[only[0][only[0] < size]] = True
            self._row_masks = {key: mask}  # one at a time: a source filter is rare and repeats
        return mask

    def _keep(self, bits: vectors.BitIndex, rids: np.ndarray) -> np.ndarray:
        """``bits.keep_mask(rids)``, kept for the next query of the same sources."""
        for b, r, mask in self._keep_masks:
            if b is bits and r is rids:
                return mask
        mask = bits.keep_mask(rids)
        self._keep_masks = [*self._keep_masks[-3:], (bits, rids, mask)]
        return mask

    def nearest(self, qvec: np.ndarray, want: int,
                sources: tuple[str, ...] | None = None) -> list[tuple[int, float]]:
        """The ``want`` chunks nearest the query (of ``sources``), best first: [(rid, cosine)], a
        chunk's cosine being the best of its own vector's and its exchanges' (schema 4). A source
        filter scans only its rows' codes: its own ``want`` nearest, however few of the index's
        rows are of it. How the rows are read is the index's :class:`vectors.ScanPlan` (measured
        when it was built or changed): the quick scan, its candidates widened, or every vector."""
        only = self.source_rids(sources)
        plan = self.scan_plan
        top = self._nearest_chunks(qvec, want, plan, only)
        if not self.has_parts:
            return top
        # the part vectors as their own measured plan says (an index measured before parts were:
        # as the chunks' plan says)
        pplan = plan.parts if plan.parts is not None else plan
        if pplan.mode == "exact":  # the quick scan misses the parts' nearest: read every part vector
            return self._with_parts(qvec, want, top, lambda k: self._exact(
                qvec, k, vectors.PARTS_TABLE, None if only is None else only[1]))
        pbits = self.part_index()
        keep = None if only is None else self._keep(pbits, only[1])

        def rescored(k: int) -> list[tuple[int, float]]:
            """Every part the quick scan ranks by its exact cosine for ``k`` (a few times ``k``), best first."""
            cands = pbits.candidates(qvec, k, keep, pplan.widen)
            return vectors.best_by_cosine(self.conn, qvec, cands, len(cands), vectors.PARTS_TABLE)

        return self._with_parts(qvec, want, top, rescored)

    def _nearest_chunks(self, qvec: np.ndarray, want: int, plan: vectors.ScanPlan,
                        only: tuple[np.ndarray, np.ndarray] | None) -> list[tuple[int, float]]:
        """The ``want`` chunks nearest by their own vectors, read as ``plan`` says."""
        if plan.mode == "exact":  # the quick scan misses this index's nearest rows: read every vector
            return self._exact(qvec, want, "chunks", None if only is None else only[0])
        streamed: np.ndarray | None = None
        if self._bits is None and self._prev_bits is None and not self._streamed:
            # this reader's first vector query: one pass over the stored codes (a one-shot CLI
            # search asks no more); the next one loads them (vectors.streamed_candidates)
            self._streamed = True
            self._bits = vectors.loaded_bit_index(self.conn, os.fspath(self._path), int(self.dims or 0))
            if self._bits is None:
                streamed = vectors.streamed_candidates(self.conn, int(self.dims or 0), qvec, want,
                                                       only=None if only is None else only[0], widen=plan.widen)
        if streamed is None:
            bits = self.bit_index()
            return bits.search(self.conn, qvec, want, None if only is None else self._keep(bits, only[0]),
                               plan.widen)
        return vectors.best_by_cosine(self.conn, qvec, streamed, want)

    def _exact(self, qvec: np.ndarray, want: int, rows: str, only: np.ndarray | None) -> list[tuple[int, float]]:
        """The exact ``want`` nearest of ``rows``: this reader's first such query reads every
        vector once from the file (what a one-shot CLI search needs); later ones scan the
        vectors held in memory (:class:`vectors.FloatRows`, shared by this process's readers)."""
        path, dims = os.fspath(self._path), int(self.dims or 0)
        got = self._floats.get(rows) or vectors.shared_float_rows(self.conn, path, dims, rows, loaded_only=True)
        if got is None and rows not in self._floats_streamed:
            self._floats_streamed.add(rows)
            return vectors.exact_nearest(self.conn, qvec, want, rows, only)
        if got is None:
            got = vectors.shared_float_rows(self.conn, path, dims, rows)
            assert got is not None
        self._floats[rows] = got
        return got.search(qvec, want, only)

    def _with_parts(self, qvec: np.ndarray, want: int, top: list[tuple[int, float]],
                    nearest_parts: Callable[[int], list[tuple[int, float]]]) -> list[tuple[int, float]]:
        """The nearest chunks ``top`` joined by the owners of the nearest part vectors (exchanges,
        windows), each chunk at the best cosine of its own vector and its parts'.

        The parts are read best first until ``want`` chunks own them (:data:`PARTS_READ_MAX` times
        ``want`` parts at most): a chunk of many on-topic windows fills the first ``want`` parts on
        its own, and the ``want`` nearest parts alone left out a chunk whose one matching window
        ranks it among the ``want`` nearest (an audit: 4 notes of 7 on-topic windows each took
        all 24 parts a 6-result search read, and the 5th nearest note was not a candidate). Read
        so, every chunk whose best part beats the last part read is a candidate, and ``want``
        chunks score at least that part's cosine, so the ``want`` best by their best cosine are
        exact (up to the quick scan's own misses)."""
        cand = dict(top)
        k = want
        while True:
            ptop = nearest_parts(k)  # best first: at least ``k`` parts, unless the index has fewer
            owners: list[int] = []  # the chunks owning them, in the order of their best part
            if ptop:
                lit = ",".join(str(int(r)) for r, _ in ptop)
                owner_of = dict(self.conn.execute(f"SELECT rid, chunk FROM {vectors.PARTS_TABLE} WHERE rid IN ({lit})"))
                seen: set[int] = set()
                for r, _ in ptop:
                    c = owner_of.get(r)
                    if c is not None and c not in seen:
                        seen.add(c)
                        owners.append(c)
                        if len(owners) >= want:
                            break
            if len(owners) >= want or len(ptop) < k or k >= want * PARTS_READ_MAX:
                break
            k = len(ptop) * 4
        cand.update(vectors.cosines(qvec, vectors.read_vectors(self.conn, [c for c in owners if c not in cand])))
        for rid, cos in vectors.part_cosines(self.conn, qvec, list(cand)).items():
            if cos > cand[rid]:
                cand[rid] = cos
        return sorted(cand.items(), key=lambda kv: (-kv[1], kv[0]))[:want]

    def matrix(self) -> tuple[np.ndarray, np.ndarray]:
        """(rids, unit vectors) for the numpy fallback, loaded once per opened file."""
        if self._matrix is None:
            rids: list[int] = []
            blobs: list[bytes] = []
            for rid, emb in self.conn.execute("SELECT rid, embedding FROM chunks WHERE embedding IS NOT NULL"):
                rids.append(rid)
                blobs.append(emb)
            if blobs:
                m = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), -1)
                norms = np.linalg.norm(m, axis=1, keepdims=True)
                norms[norms == 0] = 1
                m = m / norms
            else:
                m = np.zeros((0, self.dims or 1), dtype=np.float32)
            self._matrix = (np.asarray(rids, dtype=np.int64), m.astype(np.float32))
        return self._matrix

    def close(self) -> None:
        with contextlib.suppress(apsw.Error):
            self.conn.close()
        if self._vocab is not None:
            with contextlib.suppress(apsw.Error):
                self._vocab.close()
        if self._kw_conn:
            with contextlib.suppress(apsw.Error):
                self._kw_conn.close()


NEAR_SPELLING_MIN_CHARS = 4
"""A query word of at least this many letters that no chunk holds is matched to its nearest
spelling in the index's vocabulary (:func:`respelled`)."""
RESPELLED_MAX = 4
"""At most this many words of one query are respelled."""


class Lexicon(Protocol):
    """The words a memory writes, as the rules for names read them (:func:`respelled`,
    :func:`name_in_memory`, :func:`alias_of`, :func:`nickname_in_memory`): the index's
    :class:`_Index`, or a LanceDB export's lexicon (:class:`memory_core.query.lancedb.ExportLexicon`).
    ``conn`` is the SQLite connection of the thread asking (ignored by an export). Reading
    failures raise apsw.Error (an export logs its own and reads nothing)."""

    _spell_lock: threading.Lock
    _respelled: dict[tuple[str, bool], str]
    _names: dict[str, bool]
    _aliases: dict[str, str | None]

    def word_df(self, word: str, conn: apsw.Connection | None = None) -> int: ...

    def query_tokens(self, word: str, conn: apsw.Connection | None = None) -> list[str] | None: ...

    def vocabulary(self) -> dict[tuple[int, str], list[tuple[str, int]]]: ...

    def texts_holding(self, word: str, limit: int, conn: apsw.Connection | None = None) -> list[str]: ...

    def holds_beside(self, word: str, others: Sequence[str], conn: apsw.Connection | None = None) -> bool: ...


def allowed_edits(n: int) -> int:
    """Edits (Damerau-Levenshtein) allowed between a word of ``n`` letters and an indexed spelling
    of the same consonant skeleton: 1 up to 4 letters, 2 up to 6, 3 from 7."""
    return 1 if n <= 4 else 2 if n <= 6 else 3


_SOUND = str.maketrans("cqjzv", "kkgsf")  # letters that spell the same sound in names: Jorje / Jorge
_SOUND_ALIKE = {"c": "ckq", "k": "kcq", "q": "qck", "g": "gj", "j": "jg", "s": "sz", "z": "zs", "f": "fv", "v": "vf",
                "p": "pf"}
"""The first letters an indexed spelling of the same :func:`skeleton` may start with: George / Jorge,
Catherine / Katherine, Philip / Filip (``ph`` reads as ``f``). The skeleton must still be equal."""


def skeleton(word: str) -> str:
    """The first letter, then the consonants without vowels, ``h``, ``w``, ``y`` and doubled letters,
    with c / k / q, g / j, s / z and f / v (and ph) read alike: ``muhammad``, ``muhhamed`` and
    ``mohammed`` are all ``md``; ``jorje`` and ``jorge`` both ``grg``."""
    w = word.replace("ph", "f").translate(_SOUND)
    out = w[:1]
    for ch in w[1:]:
        if ch in "aeiouhwy" or out[-1] == ch:
            continue
        out += ch
    return out


def edit_distance(a: str, b: str, limit: int) -> int:
    """Damerau-Levenshtein (optimal string alignment) distance of ``a`` and ``b``, or ``limit + 1``
    as soon as it must exceed ``limit``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            v = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                v = min(v, prev2[j - 2] + 1)
            cur[j] = v
        if min(cur) > limit:
            return limit + 1
        prev2, prev = prev, cur
    return prev[-1]


def _without_accents(text: str) -> str:
    """``text`` without diacritics, its case kept ("José" -> "Jose"), as unicode61's
    ``remove_diacritics`` indexes it; ASCII text as it is."""
    if text.isascii():
        return text
    import unicodedata

    return "".join(ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch))


def _plain(word: str) -> str:
    """``word`` lower-cased without diacritics (as unicode61's ``remove_diacritics`` reads it)."""
    import unicodedata

    return "".join(ch for ch in unicodedata.normalize("NFKD", word.lower()) if not unicodedata.combining(ch))


def near_spelling(idx: Lexicon, word: str, conn: apsw.Connection | None = None) -> str | None:
    """The indexed spelling nearest ``word`` (a query word no chunk holds), or None.

    Both the word and its porter stem (the form FTS5 indexes) are compared with the index's
    words of the same consonant skeleton (:func:`skeleton`: the first letter, then the consonants
    without doubles), within :func:`allowed_edits`: a name spelled by ear or a typo changes vowels,
    doubles and swaps (``Muhhamed``, ``Mohammed`` for ``Muhammad``; ``restuarant``), while another
    word that happens to be near differs in a consonant (``polish`` / ``policy``, ``dish`` /
    ``disk``, ``author`` / ``autom``). Never a stop word; the nearest wins, then the one in more
    chunks. Returned as a word the keyword side reads as that indexed stem (:func:`query_form`):
    "anneliese" for the stem ``annelies``."""
    plain = _plain(word)
    if not plain.isalpha() or not plain.isascii() or len(plain) < NEAR_SPELLING_MIN_CHARS:
        return None
    forms = {plain}
    forms.update(t for t in idx.query_tokens(plain, conn) or () if len(t) >= 3)
    vocab = idx.vocabulary()
    found: list[tuple[int, int, str]] = []
    for form in forms:
        limit = allowed_edits(len(form))
        sk = skeleton(form)
        firsts = _SOUND_ALIKE.get(form[0], form[0]) + ("p" if form.startswith("f") else "")
        for n in range(len(form) - limit, len(form) + limit + 1):
            for term, doc in (t for first in firsts for t in vocab.get((n, first), ())):
                if skeleton(term) != sk or textsearch.is_stop_word(term):
                    continue
                d = edit_distance(form, term, limit)
                if d == 0 or d > limit:
                    continue
                found.append((d, -doc, term))
    for _, _, term in sorted(found):
        surface = query_form(idx, term, conn)
        if surface is not None:
            return surface
    return None


def query_form(idx: Lexicon, term: str, conn: apsw.Connection | None = None) -> str | None:
    """A word the keyword side's tokenizer reads as the indexed ``term``, or None. The index holds
    porter stems, and a stem is not always its own stem: "anneliese" is indexed as ``annelies``,
    which a query would read as ``anneli`` (in no chunk), so the near spelling of "Annaliese" was
    found and then searched as nothing. Tried: the term itself, then with the endings the stemmer
    takes off (``-e``, ``-s``, ``-es``; ``-i`` as ``-y``)."""
    tries = [term, term + "e", term + "s", term + "es"] + ([term[:-1] + "y"] if term.endswith("i") else [])
    for word in tries:
        got = idx.query_tokens(word, conn)
        if got is None:  # no tokenizer: the term as it is
            return term
        if got == [term]:
            return word
    return None


def how_written(query: str, word: str) -> tuple[bool, bool]:
    """How ``query`` writes ``word`` (lower-case), in one scan: (as a name, capitalised).

    As a name: capitalised somewhere other than at the start of a sentence (``Muhhamed``,
    ``Kovacevic``), not one of the everyday words a small memory happens not to hold (``power``,
    ``plane``, ``expire``), whose near spellings are other words (``paper``, ``plan``,
    ``expiry``). Capitalised: anywhere, a sentence's first word too."""
    named = capitalised = False
    for m in re.finditer(rf"(?<![^\W_]){re.escape(word)}(?![^\W_])", query, flags=re.IGNORECASE):
        w = m.group(0)
        if not w[:1].isupper() or (len(w) > 1 and w.isupper()):
            continue  # lower case, or an acronym written in capitals ("the MO of the thief")
        capitalised = True
        j = m.start() - 1  # the character before it, past spaces and opening quotes
        while j >= 0 and query[j] in _OPENERS:
            j -= 1
        if j >= 0 and query[j] not in ".!?:\n":
            named = True
            break
    return named, capitalised


_OPENERS = frozenset(" \t\"'(«“‘")
"""What may stand between a sentence's end and its first word (:func:`how_written`)."""


NAME_SHARE = 0.8
"""The share of a word's occurrences in memory (of the first :data:`NAME_SAMPLE_ROWS` chunks holding
it) written capitalised for :func:`name_in_memory` to read it as a name."""
NAME_SAMPLE_ROWS = 20


def name_in_memory(idx: Lexicon, term: str, conn: apsw.Connection | None = None) -> bool:
    """Whether the indexed ``term`` is a name as memory writes it: at least :data:`NAME_SHARE` of its
    occurrences in the first chunks holding it capitalised (``Muhammad``), not an everyday word
    (``paper``, ``plan``) nor a constant or an acronym written in capitals (``re.DOTALL``, ``NASA``),
    however a question writes it. Kept per index."""
    with idx._spell_lock:
        got = idx._names.get(term)
    if got is not None:
        return got
    # the stem as memory writes the word: porter's "harri" is "Harry", "mari" "Mary"; "jose" is "José"
    head = re.escape(term[:-1]) + "[iy]" if term.endswith("i") else re.escape(term)
    word = re.compile(rf"(?<![^\W_]){head}[^\W\d_]*", re.IGNORECASE)
    caps = total = 0
    try:
        for text in idx.texts_holding(term, NAME_SAMPLE_ROWS, conn):
            for m in word.finditer(_without_accents(text)):
                total += 1
                caps += m.group(0)[:1].isupper() and not m.group(0).isupper()  # DOTALL is a constant
    except apsw.Error as exc:
        log.warning("reading how memory writes %r failed (%s)", term, exc)
    name = total > 0 and caps >= NAME_SHARE * total
    with idx._spell_lock:
        if len(idx._names) < 10000:
            idx._names[term] = name
    return name


ALIAS_MAX_CHARS = 5
"""A name of at most this many letters (Mo, Kat, Shiv, Liese) may stand for a longer one (:func:`alias_of`)."""
ALIAS_SHARE = 0.8
"""The share of the chunks holding a short name that must hold the longer one too (:func:`alias_of`)."""
ALIAS_MIN_ROWS = 3
ALIAS_CAPS_SHARE = 0.5
"""A short name's occurrences written capitalised (chats lower-case whole messages: "mo when r u back")."""


def alias_of(idx: Lexicon, word: str, conn: apsw.Connection | None = None) -> str | None:
    """The longer name memory writes beside the short name ``word`` wherever it writes ``word``:
    "Mo" in a chat whose messages are labelled "Muhammad:", "Kat" in Kate's. Read from the first
    :data:`NAME_SAMPLE_ROWS` chunks holding ``word``: at least :data:`ALIAS_MIN_ROWS` of them, ``word``
    written capitalised in :data:`ALIAS_CAPS_SHARE` of its occurrences and at least once where no
    sentence starts (a name, not "Hi" or "Five"), and exactly one Titlecase word (a transcript's
    role labels left out) longer than ``word`` in :data:`ALIAS_SHARE` of those chunks whose consonant
    skeleton begins
    with ``word``'s (:func:`skeleton`: Mo / Muhammad ``m`` / ``md``, Kat / Katherine, Tom / Thomas,
    Sam / Samantha), so the other person of a two-person chat is not taken for it (John / James,
    Ben / Bella, Jon / Jolene). Kept per index; lower-case (the form the keyword side searches)."""
    key = word.lower()
    with idx._spell_lock:
        if key in idx._aliases:
            return idx._aliases[key]
    sk = skeleton(key)
    exact = re.compile(rf"(?<![^\W_]){re.escape(key)}(?![^\W_])", re.IGNORECASE)
    title = re.compile(r"(?<![^\W_])[A-Z][a-z]+(?![^\W_])")
    rows = caps = total = named = 0
    beside: Counter[str] = Counter()
    try:
        for raw in idx.texts_holding(key, NAME_SAMPLE_ROWS, conn):
            # a transcript's role labels ("User: ", "Assistant: ") are the index's, no one's name
            text = "\n".join(ln[len(p):] if (p := next((p for p in SPEAKERS if ln.startswith(p)), "")) else ln
                             for ln in raw.split("\n"))
            found = list(exact.finditer(text))
            if not found:
                continue  # the stem matched another word
            rows += 1
            total += len(found)
            for f in found:
                if f.group(0)[:1].isupper() and not f.group(0).isupper():
                    caps += 1
                    before = text[:f.start()].rstrip(" \t\"'(*_")  # "**Assistant:** Hi": a sentence's start
                    named += bool(before) and before[-1] not in ".!?:\n"  # mid-sentence: "thanks Mo"
            beside.update({m.lower() for m in title.findall(text)
                           if len(m) > len(key) and skeleton(m.lower()).startswith(sk)})
    except apsw.Error as exc:
        log.warning("reading which names memory writes beside %r failed (%s)", word, exc)
    found_alias: str | None = None
    # a name as memory writes it: capitalised, and once at least where no sentence starts (not "Hi Henry")
    if rows >= ALIAS_MIN_ROWS and caps >= ALIAS_CAPS_SHARE * total and named:
        common = [m for m, n in beside.items() if n >= ALIAS_SHARE * rows]
        if len(common) == 1:
            found_alias = common[0]
    with idx._spell_lock:
        if len(idx._aliases) < 10000:
            idx._aliases[key] = found_alias
    return found_alias


@functools.cache
def _nickname_table() -> dict[str, frozenset[str]]:
    """Each English given name or nickname of the ``nicknames`` package's hand-curated table
    (Apache-2.0, about 2,700 pairs) -> the names it pairs with either way: ``bob`` -> robert,
    bobby, bert; ``robert`` -> bob, rob, bill...; empty when the package is missing."""
    try:
        from nicknames import NickNamer
    except ImportError:  # pragma: no cover - a dependency of the package
        log.warning("the nicknames package is missing: no name is searched with its other forms")
        return {}
    pairs: dict[str, set[str]] = {}
    for name, nicks in NickNamer().nickname_lookup.items():
        for nick in nicks:
            if name.isalpha() and nick.isalpha() and name != nick:
                pairs.setdefault(name, set()).add(nick)
                pairs.setdefault(nick, set()).add(name)
    return {k: frozenset(v) for k, v in pairs.items()}


def nickname_in_memory(idx: Lexicon, word: str, terms: Sequence[str], conn: apsw.Connection | None = None) -> str | None:
    """The one other form of the given name ``word`` that memory writes as a name (Bob / Robert,
    Liz / Elizabeth, Bill / William, Peggy / Margaret, Katherine / Kate: :func:`_nickname_table`),
    or None: none of its forms is a name as memory writes it (:func:`name_in_memory`: "bill" and
    "rob" in lower case are words, not Bill and Rob), or several are (Al for an Albert and an
    Alfred), or ``word`` or the form is a month's or a weekday's name (May, August / Gus), or the
    query writes the form already (``terms``). Lower-case, the form the keyword side searches."""
    key = word.lower()
    if calendar_word(key):
        return None
    found = [p for p in sorted(_nickname_table().get(key, ())) if p not in terms and not calendar_word(p)
             and idx.word_df(p, conn) > 0 and name_in_memory(idx, p, conn)]
    return found[0] if len(found) == 1 else None


_TALK_WORDS = frozenset(("say", "says", "said", "saying", "tell", "tells", "told", "telling", "talk", "talks",
                         "talked", "talking", "mention", "mentions", "mentioned", "ask", "asks", "asked", "write",
                         "writes", "wrote", "written", "message", "messaged", "text", "texted", "reply", "replied"))
"""Words a question uses of the talk itself ("Muhhamed said what?"), not of what was said: no
evidence of which person it asks about (:func:`_said_beside`)."""


_AUXILIARIES = ("did", "does", "do", "has", "will", "would", "can", "could", "should")
"""Auxiliaries a question puts before its subject ("did bob fix ..."); not "is", "was", "had",
which come before adjectives as often ("was rich enough", "had frank talks")."""


_VERB_LIST = """
accept add adopt afford agree allow answer apply arrive ask attend bake be become begin believe bet bike
bleed book borrow bother break bring build burn buy call cancel care carry catch celebrate change cheat
check choose claim clean clear climb close collect come compare complain consider continue convince cook
cost count cover create cry cut dance dare date decide deliver describe design die discover discuss
divorce do download dream dress drink drive drop earn eat edit email end enjoy enter escape expect
explain face fail fall fear feed feel fetch fight fill film find finish fit fix fly follow forget
forgive forward gain get give go grow guess handle hang happen hate have head hear help hide hike hire
hit hold hope hug hunt hurt improve include insist install introduce invite jog join jump keep kick kill
kiss knit know land laugh lead learn leave lend let lie lift like listen live load lock look lose love
mail make manage mark marry matter mean measure meet mention mind miss mix move mow need note notice
obtain offer open order organise organize own pack paddle paint park pass pause pay phone pick pitch
plan plant play post pour practice practise pray predict prefer prepare present press pretend prevent
print promise propose prove publish pull push put quit race rain raise rate reach read realise realize
receive recommend record reduce refuse relax release remember remind remove rent repair replace reply
report request rescue reserve rest retire return review ride ring risk rob row run rush sail sand save
say score search see seem sell send serve set settle share shave shop shout show sign sing sink sit ski
skip sleep smell smile smoke snow solve sort sound speak spell spend split spot sprain stand start stay
steal steer stick stop store study submit succeed suffer suggest supply support suppose surf survive
swim switch tackle take talk taste teach tear tell test text thank think throw tie touch tour trade
train travel treat trust try turn twist type understand unpack update upload use visit vote wait wake
walk want warn wash waste watch water wear weigh win wish wonder work worry wrap write yell
"""
_COMMON_VERBS = frozenset(_VERB_LIST.split())
"""Verbs a question often puts after its subject ("did bob buy new shoes"): the word after a name
asked about by an auxiliary is its verb; one not listed counts when a word of :data:`_OBJECT_STARTS`
or nothing follows it ("did bob refinance the flat", "did sue call?") (:func:`_asked_as_person`)."""

_OBJECT_LIST = """
a an the this that these those my your his her its our their me you him us them it some any all
to with on in at for from by about into onto over up out off down back again there here
"""
_OBJECT_STARTS = frozenset(_OBJECT_LIST.split())
"""Words that start what follows a verb (its object, or where and how): after the word that
follows a subject, they mark that word as its verb ("did bob refinance the flat")."""


def _asked_as_person(query: str, word: str) -> bool:
    """Whether ``query`` writes the lower-case ``word`` as a person's name: followed by a word of the
    talk itself ("what did bob say", "sue said what"), in the possessive ("bob's boat"), or as the
    subject of a question: after an auxiliary and before "and" ("did katherine and i") or before its
    verb, a word that is not a stop word and is a common verb (:data:`_COMMON_VERBS`) or is followed
    by an object's first word (:data:`_OBJECT_STARTS`) or by nothing ("how did kathryn twist her
    ankle", "did bob fix the boat", "did sue call?"). An everyday word the nickname table lists is not ("rich in iron", "to be frank",
    "should we sue the landlord", "was rich enough", "the art quiz": the twenty-eighth session's
    audit), nor is one that modifies the subject ("does ginger tea help?": "tea" is no verb, and a
    word that starts no object follows it)."""
    w = re.escape(word)
    talk = "|".join(sorted(_TALK_WORDS))
    if re.search(rf"(?<![^\W_]){w}(?:['’]s(?![^\W_])|\s+(?:{talk})(?![^\W_]))", query, flags=re.IGNORECASE):
        return True
    aux = "|".join(_AUXILIARIES)
    for m in re.finditer(rf"(?<![^\W_])(?:{aux})\s+{w}\s+([^\W\d_]+)(?:\W+([^\W\d_]+))?", query,
                         flags=re.IGNORECASE):
        nxt, after = m.group(1).lower(), (m.group(2) or "").lower()
        if nxt == "and":
            return True
        if textsearch.is_stop_word(nxt):
            continue
        if nxt in _COMMON_VERBS or not after or after in _OBJECT_STARTS:
            return True
    return False


def _said_beside(idx: Lexicon, near: str, terms: list[str], word: str, conn: apsw.Connection | None) -> bool:
    """Whether some chunk holds ``near`` and one of the query's other words (``terms`` but ``word``,
    stop words and :data:`_TALK_WORDS`); true for a query of that word alone (nothing else to
    read it by)."""
    others = [w for w in terms if w != word and not textsearch.is_stop_word(w) and w not in _TALK_WORDS]
    if not others:
        return True
    try:
        return idx.holds_beside(near, others, conn)
    except apsw.Error:
        return False


_HYPHENATED_NAME = re.compile(r"(?<![^\W_])([A-Z][^\W\d_]+)-([A-Za-z][^\W\d_]+)(?![^\W_-])")


def _joined_names(idx: Lexicon, query: str, conn: apsw.Connection | None = None) -> str:
    """``query`` with each capitalised hyphenated name whose parts memory does not both write
    joined into the one word memory writes ("Anna-Lise" -> "annalise", or its near spelling as a
    name, "anneliese"), so its parts are not respelled apart ("ann" and "lise"). A pair memory
    writes both halves of ("Jean-Luc", "Smith-Jones") is left alone, as is one whose joined form
    memory holds no name near."""
    if "-" not in query:
        return query

    def joined(m: re.Match[str]) -> str:
        a, b = m.group(1).lower(), m.group(2).lower()
        if all(idx.word_df(w, conn) > 0 for w in (a, b)):
            return m.group(0)
        word = a + b
        if idx.word_df(word, conn) > 0:
            return word
        near = near_spelling(idx, word, conn)
        if near is not None and name_in_memory(idx, near, conn) and idx.word_df(near, conn) > 0:
            return near
        return m.group(0)

    return _HYPHENATED_NAME.sub(joined, query)


def respelled(idx: Lexicon, query: str, conn: apsw.Connection | None = None,
              knows: Callable[[Sequence[str]], bool | None] | None = None) -> str:
    """``query`` with each name that no chunk holds replaced by its nearest indexed spelling
    (:func:`near_spelling`) for the keyword side, so a name spelled otherwise than the memory
    spells it (Muhhamed, Mohammed for Muhammad) is matched, and the IDF and the corpus coverage
    are those of the spelling found: the word no longer scales both sides down to nothing. A
    word with no near spelling is left alone (the negative probes: "zzqx wvbn", "guitar").

    Which words are names (:func:`how_written`): one written capitalised other than at a
    sentence's start is respelled to its near spelling; one capitalised only where a sentence
    starts ("Mohammed?") only to a name as memory writes it (:func:`name_in_memory`) and, when the
    query has other words, one memory writes beside one of them (:func:`_said_beside`). A lower-case
    word the model reads whole (``knows``: :meth:`~memory_core.embeddings.base.EmbeddingProvider.knows_words`)
    is an everyday word and left as written: "garage bill" is not the "Bell" memory holds, and in a
    query typed all in lower case "summary", "mission" and "cheese" are not the Summer, Mason and
    Chase a memory names (the twenty-first session's audit: respelling them answered questions
    memory cannot). One the model reads only as pieces ("muhhamed", "jorje", "annelise": no word of
    its vocabulary) is respelled as a sentence's capitalised first word is: only to a name as
    memory writes it, beside the query's other words. Without ``knows`` (no local model) a
    lower-case word is never respelled. A given name's other form (:func:`nickname_in_memory`) is
    found for a lower-case word too, whatever the model reads, when memory never writes the word,
    the question asks about a person by it (:func:`_asked_as_person`: "bob said", "did bob say",
    "bob's") and memory writes the form beside the query's other words: "what did bob say about
    the boat?" is searched as "robert" where memory writes Robert beside "boat" and no "bob" (a
    word memory writes at all, "the garage bill", and an everyday word, "rich in iron", "to be
    frank", stay as typed). A word written in capitals ("MO", "KATE") is an acronym or shouting,
    never read as a name.

    A capitalised name of at most :data:`ALIAS_MAX_CHARS` letters is followed by the longer name
    memory writes beside it (:func:`alias_of`: "What did Mo say?" -> "What did Mo muhammad say?",
    the chat labelling his messages "Muhammad:"), so both are searched."""
    key = (query, knows is not None)
    with idx._spell_lock:
        got = idx._respelled.get(key)
    if got is not None:
        return got
    out = query
    try:
        done = 0
        out = _joined_names(idx, out, conn)  # "Anna-Lise" for the "Annalise" / "Anneliese" memory writes
        terms = textsearch.query_terms(out)
        if not all(textsearch.is_stop_word(w) for w in terms):
            for t in terms:
                if done >= RESPELLED_MAX or textsearch.is_stop_word(t) or not t.isalpha():
                    continue
                named, capitalised = how_written(query, t)
                if idx.word_df(t, conn) > 0:
                    continue
                if not capitalised:
                    # a nickname typed in lower case that memory never writes ("what did bob say?"),
                    # for the one form memory writes as a name beside the question's other words
                    nick = nickname_in_memory(idx, t, terms, conn) if _asked_as_person(query, t) else None
                    if nick is not None and _said_beside(idx, nick, terms, t, conn):
                        out = re.sub(rf"(?<![^\W_]){re.escape(t)}(?![^\W_])", nick, out, flags=re.IGNORECASE)
                        done += 1
                        continue
                    if knows is None:
                        continue  # a lower-case word: "bill" is not the "Bell" memory holds
                    if knows([t]) is not False:
                        continue  # a word of the model's vocabulary: "summary" is not the "Summer" memory names
                nick = nickname_in_memory(idx, t, terms, conn) if capitalised else None
                if nick is not None and (named or _said_beside(idx, nick, terms, t, conn)):
                    # a nickname memory never writes, for the name it does: "Bob" searched as "robert"
                    out = re.sub(rf"(?<![^\W_]){re.escape(t)}(?![^\W_])", nick, out, flags=re.IGNORECASE)
                    done += 1
                    continue
                near = near_spelling(idx, t, conn)
                # capitalised where a sentence starts ("Mohammed?", "Muhhamed said what?"): respelled
                # only to a name as memory writes it, and in a question of other words only to one
                # that memory writes beside one of them ("Summary of the meeting?" is no Summer's)
                if near is not None and not named and (
                        not name_in_memory(idx, near, conn) or not _said_beside(idx, near, terms, t, conn)):
                    continue
                if near is not None and idx.word_df(near, conn) > 0:
                    out = re.sub(rf"(?<![^\W_]){re.escape(t)}(?![^\W_])", near, out, flags=re.IGNORECASE)
                    done += 1
            for t in dict.fromkeys(terms):  # a short name memory writes beside a longer one: "Mo", "Muhammad"
                if not t.isalpha() or textsearch.is_stop_word(t) or not re.search(
                        rf"(?<![^\W_]){re.escape(t)}(?![^\W_])", out, flags=re.IGNORECASE):
                    continue  # respelled above
                named, capitalised = how_written(query, t)
                if not capitalised:
                    continue
                alias = alias_of(idx, t, conn) if 2 <= len(t) <= ALIAS_MAX_CHARS else None
                if (alias is None and idx.word_df(t, conn) > 0
                        and name_in_memory(idx, t, conn)):
                    # a name memory writes in two forms: "Liz" searched with the "Elizabeth" of other
                    # messages (a word memory writes in lower case too, "See also", is no Seymour)
                    nick = nickname_in_memory(idx, t, terms, conn)
                    if nick is not None and (named or _said_beside(idx, nick, terms, t, conn)):
                        alias = nick
                if alias is not None and alias not in terms:
                    out = re.sub(rf"(?<![^\W_])({re.escape(t)})(?![^\W_])", rf"\1 {alias}", out, count=1,
                                 flags=re.IGNORECASE)
    except apsw.SQLError as exc:  # never let query text break search
        log.warning("near spellings failed (%s)", exc)
    with idx._spell_lock:
        if len(idx._respelled) < 1000:
            idx._respelled[key] = out
    return out


def hits_from_rows(rows: Any, side: str, to_score: Any) -> list[ranking.Hit]:
    """Hits of chunk rows (``rid, raw, id, path, source, start_line, end_line, text, mtime``), ``raw``
    a side's score (``side``: "text", FTS5's bm25 rank; else a cosine) turned by ``to_score``."""
    out = []
    for rid, raw, cid, path, source, start, end, text, mtime in rows:
        h = ranking.Hit(id=cid, path=path, source=source, start_line=start, end_line=end, text=text,
                        mtime_ms=mtime, rid=rid)
        if side == "text":
            h.text_score = to_score(raw)
            h.bm25 = max(0.0, -float(raw)) if math.isfinite(raw) else 0.0
        else:
            h.vector_score = to_score(raw)
        out.append(h)
    return out


def keyword_hits(idx: _Index, query: str, k: int, sources: tuple[str, ...] | None,
                 conn: apsw.Connection | None = None, *, beside_vectors: bool = False,
                 knows: Callable[[Sequence[str]], bool | None] | None = None) -> list[ranking.Hit]:
    """The keyword side: FTS5's BM25 top ``k`` of ``query`` (of ``sources``), best first.

    ``beside_vectors`` (a hybrid query whose vector side runs): the phrases in at least half of
    the rows (:meth:`_Index.idf_df`) do not choose the candidates. bm25() gives each of them the
    IDF floor, 1e-6, so together they add less than 2.2e-6 a phrase to any row's score, yet
    ranking by them alone means reading their whole doclists (~1 s for a few words in most of a
    million chunks). The top ``k`` is then taken by the other phrases, and those rows are scored
    by the whole query, exactly (:func:`bm25_of_rows`): only a row within that 2.2e-6 of the
    k-th, or one matching common phrases alone, can be missed. A query of common phrases alone
    has no keyword candidates; its vector candidates still get their exact BM25
    (:func:`complete`). A keyword-only query gets FTS5's exact top ``k`` by every phrase: from
    the rarer phrases' top rows when that provably is it (:func:`_exact_top_by_rarer`), else by
    ranking every row that holds any phrase."""
    conn = conn or idx.conn
    query = respelled(idx, query, conn, knows)  # ``knows``: which lower-case words are the model's (respelled)
    match = textsearch.build_match_query(query)
    if not match:
        return []
    if sources and not idx.needs_filter(sources, conn):
        sources = None  # every chunk is of them: FTS5 without a per-row source lookup
    phrases = [textsearch.fts_string(t) for t in textsearch.query_terms(query)]
    simple = bool(phrases) and " OR ".join(phrases) == match
    full_match = match
    rescore = False
    try:
        half = idx.half_rows(conn) if simple and idx.own_bm25 else 0
        if half > 0:
            # beside the vector side a common phrase is counted only to half the rows and a bit; a
            # keyword-only query counts each phrase (what ranking by every phrase needs anyway)
            count = idx.idf_df if beside_vectors else idx.df
            kept = [p for p in phrases if count(p, conn) < half]
            if beside_vectors and not kept:
                return []
            if beside_vectors and len(kept) < len(phrases):
                phrases, match, rescore = kept, " OR ".join(kept), True
            elif kept and len(kept) < len(phrases) and not _all_kept(idx, phrases):
                # keyword-only: exact from the rarer phrases' best rows, when they prove it
                rows = _exact_top_by_rarer(idx, query, match, kept, len(phrases) - len(kept), k, sources, conn)
                if rows is not None:
                    return hits_from_rows(rows, "text", ranking.bm25_rank_to_score)
        rows = _top_rows(idx, query, match, phrases, k, sources, conn)
        if rescore and rows:  # the whole query's bm25() of the rows the rarer phrases chose
            exact = dict(bm25_of_rows(idx, query, full_match, [r[0] for r in rows], conn,
                                      texts={r[0]: r[7] for r in rows}))
            rows = [(r[0], exact.get(r[0], r[1]), *r[2:]) for r in rows]
        rows.sort(key=lambda r: (r[1], r[0]) if rescore else r[1])
        return hits_from_rows(rows, "text", ranking.bm25_rank_to_score)
    except apsw.SQLError as exc:  # never let query text break search
        log.warning("keyword query failed (%s); no keyword results", exc)
        return []


def _top_rows(idx: _Index, query: str, match: str, phrases: list[str], k: int,
              sources: tuple[str, ...] | None, conn: apsw.Connection,
              min_rows: int | None = None) -> list[tuple[Any, ...]]:
    """FTS5's ``ORDER BY bm25() LIMIT k`` for ``match`` (of ``sources``) as :func:`keyword_hits`'
    rows ``(rid, bm25, id, path, source, start, end, text, mtime)``, best first (from the
    phrases' postings when they match ``min_rows`` rows or more, :func:`keyword_top`)."""
    # chunks_fts holds no columns but the text (contentless, schema 5): a row's source is its chunk's
    src = "" if not sources else (" AND (SELECT source FROM chunks WHERE rid = chunks_fts.rowid)"
                                  f" IN ({','.join('?' * len(sources))})")
    # A subquery with LIMIT is never flattened into the join: FTS5 finds and sorts the top k
    # first, then only those k chunk rows are read (measured cheaper than a MATERIALIZED CTE).
    sql = (
        "SELECT f.rid, f.r, c.id, c.path, c.source, c.start_line, c.end_line, c.text, fl.mtime FROM"
        " (SELECT rowid AS rid, bm25(chunks_fts) AS r FROM chunks_fts"
        f" WHERE chunks_fts MATCH ?{src} ORDER BY r LIMIT ?) AS f"
        " JOIN chunks c ON c.rid = f.rid LEFT JOIN files fl ON fl.path = c.path"
    )
    top = keyword_top(idx, query, match, k, conn, phrases=phrases, min_rows=min_rows, sources=sources)
    if top is not None:
        return rows_of(conn, top)
    return list(conn.execute(sql, (match, *(sources or ()), k)))


def _exact_top_by_rarer(idx: _Index, query: str, match: str, kept: list[str], n_common: int, k: int,
                        sources: tuple[str, ...] | None, conn: apsw.Connection) -> list[tuple[Any, ...]] | None:
    """FTS5's exact top ``k`` of ``match`` (every phrase), found from the rows that rank best by
    the ``kept`` phrases alone, or None when they cannot be shown to hold it.

    bm25() is a sum over the phrases, and each of the ``n_common`` others, in half the rows or
    more, adds less than ``1e-6 * (k1 + 1)`` to any row. The ``2k`` best rows by the kept phrases
    are scored by the whole query (:func:`bm25_of_rows`, exactly). A row not among them scores by
    the kept phrases no better than the last of them (or 0, when fewer matched), so by the whole
    query less than that plus ``n_common * 2.2e-6``: if the ``k``-th scored row is better than
    that bound, no other row can enter the top ``k`` or tie with it. Otherwise (fewer than ``k``
    rows hold a kept phrase, or the bound is too close) every phrase ranks every row, as before.
    A keyword-only query of a few rare and a few common words at 1M chunks no longer reads the
    common words' doclists."""
    if sum(idx.df(p, conn) for p in kept) < k:  # fewer than k rows hold a kept phrase (counted already)
        return None
    want = 2 * k
    rows = _top_rows(idx, query, " OR ".join(kept), kept, want, sources, conn, min_rows=RARER_POSTINGS_MIN)
    if len(rows) < k:
        return None
    exact = dict(bm25_of_rows(idx, query, match, [r[0] for r in rows], conn, texts={r[0]: r[7] for r in rows}))
    if len(exact) != len(rows):
        return None
    outside = rows[-1][1] if len(rows) == want else 0.0  # bm25() ranks: lower is better
    scored = sorted(((exact[r[0]], *r[2:], r[0]) for r in rows), key=lambda x: (x[0], x[-1]))[:k]
    bound = outside - n_common * _COMMON_MAX - 1e-9 * (abs(outside) + 1e-3)
    if not scored[-1][0] < bound:
        return None
    return [(x[-1], x[0], *x[1:-1]) for x in scored]


def _all_kept(idx: _Index, phrases: list[str]) -> bool:
    """Whether this reader keeps every phrase's postings (an earlier query read them): then ranking
    by every phrase is an array operation, cheaper than rescoring the rarer phrases' best rows."""
    post = idx.kept_postings()
    return post is not None and post.has(phrases)


RARER_POSTINGS_MIN = 2_000
"""The rarer phrases of a keyword-only query with common ones are ranked from their postings
(:func:`keyword_top`) from this many matched rows up, not :data:`KEYWORD_POSTINGS_MIN`, so that a
long-lived reader's repeated queries stay cheap: at 200k chunks a CJK phrase in 15k rows went
through FTS5 at every query (warm p50 12.5 ms), and from its postings once kept 5.8 ms (ranking
by every phrase from kept postings: 3.0 ms)."""

_COMMON_MAX = 1e-6 * (_BM25_K1 + 1.0)
"""The most a phrase in half of FTS5's rows or more adds to any row's bm25(): its IDF floor times
``k1 + 1`` (the limit of bm25()'s term frequency part)."""


def count_phrases_beside(idx: _Index, query: str, done: Callable[[], bool]) -> None:
    """Count ``query``'s phrases (:meth:`_Index.idf_df`, on the index's own connection) from the
    last one back, while the keyword side, in its thread, counts them from the first until
    ``done()``: the first use of several common words costs about half on two cores. Not while
    a carry is due (it would run on the keyword side's connection)."""
    if idx._prev_postings is not None or idx._prev_common is not None or not idx.own_bm25:
        return
    try:
        for t in reversed(textsearch.query_terms(query)):
            if done():
                return
            idx.idf_df(textsearch.fts_string(t))
    except apsw.SQLError:  # only a head start: the keyword side and complete() count what is left
        return


def keyword_top(idx: _Index, query: str, match: str, k: int,
                conn: apsw.Connection, *, phrases: list[str] | None = None,
                min_rows: int | None = None, sources: tuple[str, ...] | None = None) -> list[tuple[int, float]] | None:
    """FTS5's ``ORDER BY bm25(chunks_fts) LIMIT k`` for ``match`` as ``(rid, bm25)``, best first
    (ties by row id, as SQLite's sorter keeps them), from the phrases' postings in memory; None
    when they are not (yet) kept or the query is cheap for FTS5 itself (its phrases match fewer
    than ``min_rows`` rows in all, at most and by default :data:`KEYWORD_POSTINGS_MIN`).
    ``phrases``: those of ``match`` (default: every phrase of ``query``). ``sources``: only the
    chunks of these (:meth:`_Index.source_row_mask`), as FTS5 with the source filter."""
    if phrases is None:
        phrases = [textsearch.fts_string(t) for t in textsearch.query_terms(query)]
    if not phrases or " OR ".join(phrases) != match:
        return None
    if not idx.own_bm25:
        return None
    dfs = [idx.df(p, conn) for p in phrases]
    if sum(dfs) < (KEYWORD_POSTINGS_MIN if min_rows is None else min(min_rows, KEYWORD_POSTINGS_MIN)):
        return None
    post = idx.postings()
    if post is None or not post.ready(phrases):
        return None
    for p, df in zip(phrases, dfs, strict=True):
        if p not in post.tf and not post.read(conn, p, df):
            return None
    score = post.scores(phrases, dfs)
    if score is None:
        return None
    mask = idx.source_row_mask(sources, len(score), conn) if sources else None
    hit = np.flatnonzero((score > 0.0) & mask if mask is not None else score > 0.0)
    if len(hit) > k:  # the k best, and every row tied with the k-th
        kth = np.partition(score[hit], len(hit) - k)[len(hit) - k]
        hit = hit[score[hit] >= kth]
    order = np.lexsort((hit, -score[hit]))[:k]  # best first, then the lower row id
    return [(int(r), -1.0 * float(score[r])) for r in hit[order]]


def rows_of(conn: apsw.Connection, top: list[tuple[int, float]]) -> list[tuple[Any, ...]]:
    """The chunk rows of ``top`` (``(rid, bm25)``), in its order, as :func:`keyword_hits` selects them."""
    if not top:
        return []
    sql = ("SELECT c.rid, c.id, c.path, c.source, c.start_line, c.end_line, c.text, fl.mtime FROM chunks c"
           f" LEFT JOIN files fl ON fl.path = c.path WHERE c.rid IN ({','.join(str(r) for r, _ in top)})")
    got = {r[0]: r for r in conn.execute(sql)}
    return [(rid, rank, *got[rid][1:]) for rid, rank in top if rid in got]


def vector_hits(idx: _Index, qvec: np.ndarray, k: int,
                sources: tuple[str, ...] | None) -> tuple[list[ranking.Hit], str]:
    """The vector side: the ``k`` chunks nearest ``qvec`` (of ``sources``), best first, and a note
    when the index's vectors cannot be read here (else "")."""
    if idx.dims and qvec.shape[0] != idx.dims:
        raise ProviderError(f"the provider now returns {qvec.shape[0]}-d vectors, the index holds {idx.dims}-d;"
                            " `memory-core index --full` rebuilds it at the new size")
    src = "" if not sources else f" WHERE c.source IN ({','.join('?' * len(sources))})"
    if idx.has_bits and idx.dims:  # the bits scanned (of the sources' rows), the nearest ranked by exact cosines
        top = idx.nearest(qvec, k, sources)
        return rows_by_rank(idx, [r for r, _ in top], [c for _, c in top], src, sources, k), ""
    if idx.vec_loaded:  # an index of schema 2 (vec0): 4x the nearest of every source, then the wanted ones
        want = min(4096, k * 4 if sources else k)
        sql = (
            "WITH v AS MATERIALIZED (SELECT rowid AS rid, distance AS d FROM chunks_vec"
            " WHERE embedding MATCH ? AND k = ?) " + _ROW_SELECT.format(alias="v", raw="v.d") + src
            + " ORDER BY v.d LIMIT ?"
        )
        rows = idx.conn.execute(sql, (qvec.astype("<f4").tobytes(), want, *(sources or ()), k))
        return hits_from_rows(rows, "vector", _cosine_from_distance), ""
    rids, m = idx.matrix()
    if len(rids) == 0:
        if idx.has_vec_table:
            return [], ("sqlite-vec cannot be loaded here and this index keeps its vectors in its vec0"
                        " table; keyword-only results")
        return [], ""
    qn = qvec / (np.linalg.norm(qvec) or 1.0)
    sims = np.nan_to_num(m @ qn, nan=0.0)  # a damaged stored row scores 0
    only = idx.source_rids(sources)
    if only is not None:  # exact: every row of the sources
        sims = np.where(np.isin(rids, only[0]), sims, -np.inf)
    order = np.argsort(-sims, kind="stable")[:k]
    order = order[np.isfinite(sims[order])]
    return rows_by_rank(idx, [int(rids[i]) for i in order], [float(sims[i]) for i in order], src, sources, k), ""


def rows_by_rank(idx: _Index, rids: list[int], sims: list[float], src: str,
                 sources: tuple[str, ...] | None, k: int) -> list[ranking.Hit]:
    """The chunk rows of ``rids`` (best first, cosines ``sims``), the first ``k`` of ``sources``."""
    sql = (
        "WITH v AS MATERIALIZED (SELECT key AS pos, value AS rid FROM json_each(?)) "
        + _ROW_SELECT.format(alias="v", raw="v.pos") + src + " ORDER BY v.pos LIMIT ?"
    )
    rows = idx.conn.execute(sql, (json.dumps(rids), *(sources or ()), k))
    return hits_from_rows(rows, "vector", lambda pos: sims[pos])


def dated_hits(idx: _Index, dates: DateRange, sources: tuple[str, ...] | None, seen: set[int],
               dater: Dater) -> list[ranking.Hit]:
    """Chunks written in ``dates`` that neither side found (:func:`memory_core.query.dates.dated_chunk_rows`),
    as vector candidates of cosine 0 until :func:`complete` scores them."""
    return hits_from_rows(dated_chunk_rows(idx.conn, dates, sources, seen, dater), "vector", lambda _: 0.0)


def model_reads_absent_words(provider: EmbeddingProvider | None, absent: Sequence[str], corpus_coverage: float,
                              query: str) -> bool:
    """Whether a query memory's words do not support (corpus coverage under
    ``SUPPORT_MIN_COVERAGE``) is one the model reads all the same: two or more words no chunk
    contains, each one piece of the model's vocabulary
    (:meth:`~memory_core.embeddings.base.EmbeddingProvider.knows_words`), and no identifier named.
    One such word alone is a lookup that found nothing ("bicycle"), and an identifier is matched
    verbatim ("DS-82" is two words the model knows). :func:`memory_core.query.ranking.query_supported`
    then asks only that the nearest chunk be above the unrelated level."""
    if provider is None or len(absent) < 2 or corpus_coverage >= SUPPORT_MIN_COVERAGE:
        return False
    return not ranking.names_identifier(query) and provider.knows_words(absent) is True


def complete(idx: _Index, query: str, qvec: np.ndarray | None, kw_hits: list[ranking.Hit],
              vec_hits: list[ranking.Hit], *, keyword: bool = True,
              extra: list[ranking.Hit] | None = None,
              knows: Callable[[Sequence[str]], bool | None] | None = None,
              ) -> tuple[list[ranking.Hit], float, float, list[str]]:
    """Give every candidate both raw scores; returns (the union, the query terms' IDF sum, the
    IDF share of the query terms found anywhere in the index, the query's words other than stop
    words that no chunk contains).
    ``extra``: candidates found by neither side (chunks of a day the query names)."""
    for h in kw_hits:
        h.in_keyword = True
    for h in vec_hits:
        h.in_vector = True
    by_rid: dict[int, ranking.Hit] = {}
    for h in vec_hits:
        by_rid.setdefault(h.rid, h)
    for h in kw_hits:
        other = by_rid.get(h.rid)
        if other is None:
            by_rid[h.rid] = h
        else:  # found by both sides: one hit with both scores
            other.bm25, other.text_score, other.in_keyword = h.bm25, h.text_score, True
            h.vector_score, h.in_vector = other.vector_score, True
    for h in extra or ():
        by_rid.setdefault(h.rid, h)
    union = list(by_rid.values())
    conn = idx.conn
    if keyword:
        query = respelled(idx, query, knows=knows)  # as the keyword side searched it
    words = textsearch.query_terms(query) if keyword else []
    # a query of stop words only ("what did I do") is not matched by its words: relevance 0
    terms = [] if all(textsearch.is_stop_word(w) for w in words) else [textsearch.fts_string(w) for w in words]
    idf_total = 0.0
    corpus_coverage = 1.0
    absent: list[str] = []
    n = idx.n_chunks()
    try:
        if qvec is not None:  # the cosine of keyword-only candidates
            missing = [h for h in union if not h.in_vector]
            if missing:
                cos = cosines(idx, qvec, [h.rid for h in missing])
                for h in missing:
                    h.vector_score = cos.get(h.rid, 0.0)
        match = textsearch.build_match_query(query) if keyword else None
        need = [h.rid for h in union if not h.in_keyword]
        if match and need:  # the BM25 of vector candidates
            for rid, rank in bm25_of_rows(idx, query, match, need, texts={h.rid: h.text for h in union}):
                h = by_rid[rid]
                h.bm25 = max(0.0, -float(rank))
                h.text_score = ranking.bm25_rank_to_score(rank)
        idents = ranking.identifiers(query) if keyword and union else []
        if idents:  # which candidates contain an identifier of the query verbatim (a phrase)
            sql = ("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?"
                   f" AND rowid IN ({','.join(str(int(h.rid)) for h in union)})")
            post = idx.kept_postings()
            for ident in idents:
                phrase = textsearch.fts_string(ident.lower())
                if post is not None and post.has([phrase]):  # kept by the keyword side: its frequencies
                    tf = post.tf.get(phrase)
                    if tf is not None and all(0 <= h.rid < len(tf) for h in union):
                        for h in union:
                            if tf[h.rid]:
                                h.has_identifier = True
                        continue
                for (rid,) in conn.execute(sql, (phrase,)):
                    by_rid[rid].has_identifier = True
        idfs: list[float] = []
        present = 0.0
        for w, t in zip(words, terms, strict=False):  # FTS5's own IDF: log((N - n + 0.5) / (n + 0.5)), at least 1e-6
            df = idx.idf_df(t)
            idf = max(1e-6, math.log((n - df + 0.5) / (df + 0.5))) if n else 1e-6
            idfs.append(idf)
            present += idf if df > 0 else 0.0
            if df == 0 and not textsearch.is_stop_word(w):
                absent.append(w)
        idf_total = sum(idfs)
        # CJK terms are single characters and bigrams: a bigram no note contains says nothing
        # about whether the memory holds the answer
        if idf_total > 0 and not ranking.mostly_cjk(query):
            corpus_coverage = present / idf_total
    except apsw.SQLError as exc:  # never let query text break search
        log.warning("scoring the candidates failed (%s); partial scores", exc)
    for h in (*kw_hits, *vec_hits):  # the side lists share the union's scores
        u = by_rid[h.rid]
        if u is not h:
            h.vector_score, h.bm25, h.has_identifier = u.vector_score, u.bm25, u.has_identifier
    return union, idf_total, corpus_coverage, absent


def bm25_of_rows(idx: _Index, query: str, match: str, rids: list[int], conn: apsw.Connection | None = None,
                 texts: dict[int, str] | None = None) -> list[tuple[int, float]]:
    """``(rid, bm25(chunks_fts))`` of the rows of ``rids`` that ``match`` (the MATCH expression of
    ``query``) matches, as ``SELECT rowid, bm25(chunks_fts) ... MATCH ? AND rowid IN (...)``
    returns them, without bm25()'s walk of every phrase's doclist per row id.

    From the phrases' postings when the keyword side keeps them all; else, for phrases that
    match many rows (:data:`KEYWORD_POSTINGS_MIN`, where FTS5's seek into each doclist for each
    row id costs ~0.7 ms a row at 200k chunks) and ``texts`` (the rows' chunk texts), from the
    texts through FTS5's own tokenizer (:func:`_bm25_of_texts`); else FTS5 finds each row by its
    doclist indexes and :func:`_bm25_given_df` scores it. Every way gives bm25()'s score, with
    the counts of :meth:`_Index.idf_df` (the same IDF as bm25()'s)."""
    conn = conn or idx.conn
    lit = ",".join(str(int(r)) for r in rids)  # row ids are ints: a literal list
    phrases = [textsearch.fts_string(t) for t in textsearch.query_terms(query)]
    if idx.own_bm25 and phrases and " OR ".join(phrases) == match:
        dfs = [idx.idf_df(p, conn) for p in phrases]
        post = idx.kept_postings()
        if post is not None and post.has(phrases) and min(rids) >= 0 and max(rids) < post.size:
            wanted = np.asarray(sorted(set(rids)), dtype=np.int64)
            score = post.scores(phrases, dfs, wanted)
            if score is not None:  # the keyword side kept these phrases: no statement at all
                return [(int(r), -1.0 * float(x)) for r, x in zip(wanted, score, strict=True) if x > 0.0]
        if texts is not None and sum(dfs) >= KEYWORD_POSTINGS_MIN and all(r in texts for r in rids):
            got = _bm25_of_texts(idx, phrases, dfs, {int(r): texts[r] for r in rids}, conn)
            if got is not None:
                return got
        sql = (f"SELECT rowid, {_BM25_FUNCTION}(chunks_fts, {','.join(str(d) for d in dfs)}) FROM chunks_fts"
               f" WHERE chunks_fts MATCH ? AND rowid IN ({lit})")
    else:  # an apsw without FTS5 auxiliary functions, or a MATCH this does not know the phrases of
        sql = f"SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid IN ({lit})"
    return [(int(rid), float(rank)) for rid, rank in conn.execute(sql, (match,))]


def _bm25_of_texts(idx: _Index, phrases: list[str], dfs: list[int], texts: dict[int, str],
                   conn: apsw.Connection) -> list[tuple[int, float]] | None:
    """bm25() of the rows of ``texts`` (rid -> chunk text) for ``phrases`` (FTS5 strings), from
    the texts as the index holds them (:func:`memory_core.storage.textsearch.segment_for_index`) tokenized
    by FTS5's own tokenizer: a phrase's instances are the places its tokens follow each other.
    Each row's token count must be what FTS5 stored for it (its docsize row), else None (the
    caller asks FTS5). Rows no phrase is in are left out, as MATCH leaves them out."""
    tok = idx.tokenizer(conn)
    n_row, total = idx.fts_totals(conn)
    if tok is None or n_row <= 0 or not texts:
        return None
    flags = dict(include_offsets=False, include_colocated=False)
    try:
        want = [tuple(tok(p[1:-1].replace('""', '"').encode(), apsw.FTS5_TOKENIZE_QUERY, None, **flags))
                for p in phrases]
        sizes = {int(r): _varints(sz) for r, sz in conn.execute(
            f"SELECT id, sz FROM chunks_fts_docsize WHERE id IN ({','.join(str(r) for r in texts)})")
            if isinstance(sz, bytes)}
    except (apsw.Error, TypeError, ValueError):
        return None
    if not all(want) or len(sizes) != len(texts):
        return None
    avgdl = total / n_row
    out = []
    for rid, text in texts.items():
        try:
            toks = tok(textsearch.segment_for_index(text).encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None, **flags)
        except (apsw.Error, TypeError, ValueError):
            return None
        if len(toks) != sum(sizes[rid]):
            return None  # not the text FTS5 indexed for this row
        tfs = [float(toks.count(w[0]) if len(w) == 1 else _instances(toks, w)) for w in want]
        if any(tfs):
            out.append((rid, _bm25(n_row, avgdl, float(sum(sizes[rid])), tfs, dfs)))
    return out


def _instances(toks: list[Any], phrase: tuple[Any, ...]) -> int:
    """How many times the tokens of ``phrase`` follow each other in ``toks`` (overlaps counted, as
    FTS5 counts a phrase's instances): each place of its first token (found in C) is checked."""
    first, rest, n = phrase[0], list(phrase[1:]), len(phrase)
    count, i = 0, -1
    while True:
        try:
            i = toks.index(first, i + 1)
        except ValueError:
            return count
        if toks[i + 1:i + n] == rest:
            count += 1


FILE_SUPPORT_CHUNKS = 3
"""How many of a file's best chunks make its relevance as a whole (:func:`file_cosines`)."""
FILE_SUPPORT_FILES = 20
"""The candidate files (by their best cosine) whose every chunk is read for it."""
FILE_SUPPORT_MAX_READS = 600
"""The most chunk vectors one search reads for it (float32 vectors in the chunks table: a B-tree
lookup each, a few milliseconds in all)."""
FILE_SUPPORT_VEC0_READS = 64
"""The same for an index whose vectors live only in sqlite-vec's vec0 table (schema 2)."""


def file_cosines(idx: _Index, qvec: np.ndarray, union: Sequence[ranking.Hit], k: int = FILE_SUPPORT_CHUNKS,
                 max_files: int = FILE_SUPPORT_FILES, max_reads: int = FILE_SUPPORT_MAX_READS) -> dict[str, list[float]]:
    """Each candidate file's ``k`` best cosines with the query, best first: over all the file's
    chunks for the ``max_files`` files of the nearest candidates (one statement for their row
    ids, then :func:`cosines`), as long as at most ``max_reads`` vectors are read in all; over its
    retrieved chunks for the others (a file's nearest chunks are mostly among the candidates
    already: what the read adds is the rest of a file the candidates hold one chunk of).

    A note's chunk counts by its **whole** vector, not its best window's: windows find a line inside
    a chunk (``chunking.note_windows``), while a note's relevance as a whole is what its chunks say
    as wholes. The best of a chunk's windows is a maximum over more vectors the longer the chunk
    is, and the support re-added that one passage: on one-document files the lift was the best
    window's cosine again, a second vote for the vector side. A transcript's chunk keeps its best
    exchange's cosine: an exchange (a message and its answer) is a unit the conversation itself
    makes, and counted as a whole a chunk of twenty unrelated chat lines says little (measured
    both ways: docs/search.md, "A session's relevance as a whole")."""
    own: dict[str, list[ranking.Hit]] = {}
    for h in union:
        own.setdefault(h.path, []).append(h)
    order = sorted(own, key=lambda p: max(h.vector_score for h in own[p]), reverse=True)[:max_files]
    rids_of: dict[str, list[int]] = {}
    try:
        if order:
            for path, rid in idx.conn.execute(
                    "SELECT c.path, c.rid FROM json_each(?) j JOIN chunks c ON c.path = j.value", (json.dumps(order),)):
                rids_of.setdefault(str(path), []).append(int(rid))
    except apsw.Error as exc:  # a placement signal never fails a search: the candidates' cosines
        log.warning("reading the candidate files' chunks failed (%s); their retrieved chunks count", exc)
        rids_of = {}
    if idx.vec_loaded and not idx.f32_in_chunks:  # vectors in vec0 only: a point read costs ~0.7 ms at 200k x 1536
        max_reads = min(max_reads, FILE_SUPPORT_VEC0_READS)
    wholes = {p for p, hs in own.items() if hs[0].source != "sessions"}  # notes: their chunks as wholes
    whole_rids: list[int] = []  # read as their own vectors (notes)
    best_rids: list[int] = []  # read at their best vector, own or a part's (transcripts)
    read: set[str] = set()
    for path in order:
        rids = rids_of.get(path, [])
        if not rids or len(whole_rids) + len(best_rids) + len(rids) > max_reads:
            continue  # a very long file: its candidates' cosines
        (whole_rids if path in wholes else best_rids).extend(rids)
        read.add(path)
    if idx.has_parts:  # the other notes' candidates came with their best window's cosine: read as wholes
        whole_rids += [h.rid for p, hs in own.items() if p not in read and p in wholes for h in hs]
    cos: dict[int, float] = {}
    try:
        for rids, parts in ((whole_rids, False), (best_rids, True)):
            if rids:
                cos.update(cosines(idx, qvec, rids, parts=parts))
    except apsw.Error as exc:
        log.warning("reading the candidate files' vectors failed (%s); their retrieved chunks count", exc)
        cos = {}
    out: dict[str, list[float]] = {}
    for path in own:
        got = [cos[r] for r in rids_of.get(path, []) if r in cos] if path in read else []
        if not got:  # its retrieved chunks: their whole vectors' cosines where read, else the cosine they came with
            got = [cos.get(h.rid, float(h.vector_score)) for h in own[path]]
        if got:
            out[path] = sorted(got, reverse=True)[:k]
    return out


def multi_chunk_share(idx: _Index, paths: Sequence[str]) -> float:
    """The share of ``paths`` (the candidate files) that hold more than one chunk, counted in the
    index (one statement on ``idx_chunks_path``); 1.0 for no paths or when the count fails.

    A one-chunk file's relevance as a whole is its chunk's: its support (``query.file_support``)
    is that chunk's vector relevance counted a second time, a shift toward the vector side and
    nothing else. Where the candidates are mostly such files (a collection of documents: code
    snippets, abstracts, docstrings), the support is weighed down by this share for every file of
    the query alike, so no file gains on another by its length (docs/search.md, "A session's
    relevance as a whole")."""
    unique = sorted(set(paths))
    if not unique:
        return 1.0
    try:
        multi = sum(1 for (n,) in idx.conn.execute(
            "SELECT count(*) FROM json_each(?) j JOIN chunks c ON c.path = j.value GROUP BY j.value",
            (json.dumps(unique),)) if int(n) > 1)
    except apsw.Error as exc:  # a placement signal never fails a search: the support as it is
        log.warning("counting the candidate files' chunks failed (%s); file support unweighed", exc)
        return 1.0
    return multi / len(unique)


def cosines(idx: _Index, qvec: np.ndarray, rids: list[int], *, parts: bool = True) -> dict[int, float]:
    """Cosine of the query with these chunks' stored vectors, read directly by row id; with
    ``parts`` (the default) a chunk's cosine is its best vector's, its own or a part's, as the
    vector side ranks it; ``parts=False``: its own vector's.

    A vec0 KNN restricted by ``rowid IN (...)`` scans the whole table (129 ms at 200k x 1536,
    483 ms at 1M), and so does ``SELECT ... FROM chunks_vec WHERE rowid IN (...)``; one point
    statement per row reads only its vector chunk's pages (~0.6-0.8 ms a row at 200k x 1536),
    so that is used up to :data:`POINT_READS_PER_SCAN` rows per million chunks scanned."""
    if not rids:
        return {}
    if idx.vec_loaded and not idx.f32_in_chunks:
        if len(rids) * 1_000_000 > POINT_READS_PER_SCAN * max(1, idx.n_chunks()):
            lit = ",".join(str(int(r)) for r in rids)
            sql = f"SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ? AND rowid IN ({lit})"
            try:
                return {int(r): _cosine_from_distance(d)
                        for r, d in idx.conn.execute(sql, (qvec.astype("<f4").tobytes(), len(rids)))}
            except apsw.SQLError:  # an older sqlite-vec without rowid filters: point reads
                pass
        get = "SELECT embedding FROM chunks_vec WHERE rowid = ?"
        rows = [(rid, r[0]) for rid in rids for r in idx.conn.execute(get, (int(rid),))]
    elif idx.has_vec_table and not idx.f32_in_chunks:
        return {}
    else:
        cos = vectors.cosines(qvec, vectors.read_vectors(idx.conn, rids))
        if parts and idx.has_parts:  # a chunk's cosine is its best vector's (_Index.nearest)
            for rid, c in vectors.part_cosines(idx.conn, qvec, rids).items():
                if c > cos.get(rid, -2.0):
                    cos[rid] = c
        return cos
    return vectors.cosines(qvec, rows)
