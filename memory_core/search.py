"""The query module: read-only hybrid search over a memory-core index.

It never imports the indexing code. A :class:`Searcher` keeps one read-only connection
(and SQLite's statement cache) between queries and reopens the file when a reindex swapped
a new one in, so a long-lived searcher (CLI, MCP server, agent tool) always answers from the
live index and no query fails during a swap: the old file stays readable until closed.

Retrieval: keyword candidates from FTS5 (BM25) and vector candidates from sqlite-vec KNN
(``embedding MATCH ? AND k = ?``), or an in-process numpy cosine when sqlite-vec cannot be
loaded; each side returns ``max_results x candidate_multiplier`` candidates (capped at 200).
Every candidate then gets both raw scores, and :func:`memory_core.ranking.fuse_calibrated` turns
them into an absolute relevance in [0, 1] (docs/search.md, "Calibrated scores"); a query naming a
day adds that day's chunks and prefers them (:mod:`memory_core.dates`); ``min_score`` tests the
relevance; temporal decay and MMR reorder; overlap-aware dedupe, snippets and citations.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import apsw
import numpy as np

from memory_core import ranking, textsearch, vectors
from memory_core.config import Settings
from memory_core.dates import DateRange, chunk_date, indexed_transcript_dates, query_date_range
from memory_core.discovery import parse_citation, resolve_indexed_path
from memory_core.errors import IndexDamagedError, IndexMissingError, PathError, ProviderError
from memory_core.store import connect, connect_reader, has_table, load_vec, probe_index, read_meta

log = logging.getLogger("memory_core.search")

SNIPPET_MAX_CHARS = 700
MAX_CANDIDATES = 200
MAX_GET_LINES = 2000
MODES = ("hybrid", "vector", "keyword")
DATE_MATCH_BONUS = 0.5
"""A chunk written on the day a query names gets ``relevance + (1 - relevance) * 0.5`` (at least
0.5); any other chunk is capped at 0.5, so the day's own notes rank first and another day's note
on the topic keeps its place after them (the cap lowers no relevance below ``min_score``)."""
MAX_DATED_CANDIDATES = 200
POINT_READS_PER_SCAN = 1000
"""An index of schema 2 (vectors in sqlite-vec's vec0): the cosines of up to this many keyword
candidates per million chunks are read by one point statement each, more by one restricted KNN
(which scans the table). Measured at 200k x 1536: 0.6-0.8 ms a point read, 280 ms a scan."""

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
    k1, b = _BM25_K1, _BM25_B
    score = 0.0
    for i, df in enumerate(dfs):
        idf = math.log((n_row - df + 0.5) / (df + 0.5))
        if idf <= 0.0:
            idf = 1e-6
        f = float(sum(len(offsets) for offsets in api.phrase_locations(i)))  # bm25(): 1.0 per instance
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
        register(_TOTALS_FUNCTION, _totals)
    except (apsw.Error, AttributeError):
        return False
    return True


def _tf_and_size(api: Any) -> int:
    """The current row's instances of phrase 0 (what bm25() counts) and its length in tokens, packed."""
    return (sum(len(offsets) for offsets in api.phrase_locations(0)) << 32) | api.column_size(-1)


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

    def _read_lengths(self, conn: apsw.Connection) -> bool:
        """Every row's length in tokens from FTS5's docsize table (the first varint of each row's
        sizes: the text column; in schema 4 and older the others are UNINDEXED, 0), as
        xColumnSize(-1) reads it. A contentless table of one column (schema 5) stores that one
        varint alone (1-3 bytes): zeros pad it to three, never read as part of it."""
        try:
            ids, sizes = conn.execute("SELECT group_concat(id), group_concat(substr(hex(sz) || '0000', 1, 6), '')"
                                      " FROM (SELECT id, sz FROM chunks_fts_docsize ORDER BY id)").fetchone()
        except apsw.Error:
            return False
        if not ids:
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
            docs = self.vocab.execute("SELECT group_concat(doc) FROM temp.mc_vocab WHERE term = ? AND col = 'text'",
                                      (tokens[0],)).fetchone()[0]
            rids = np.fromstring(docs, dtype=np.int64, sep=",") if docs else np.zeros(0, dtype=np.int64)
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

    def has(self, phrases: list[str]) -> bool:
        with self.lock:
            return self.n_row > 0 and all(p in self.tf for p in phrases)

    def scores(self, phrases: list[str], dfs: list[int], rids: np.ndarray | None = None) -> np.ndarray | None:
        """bm25() of every row, or of the rows ``rids`` (0 where no phrase matches), as
        :func:`_bm25_given_df` computes it."""
        with self.lock:
            got = [self.tf.get(p) for p in phrases]
            if any(g is None for g in got) or self.n_row <= 0:
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
                f = (tf if rids is None else tf[rids]).astype(np.float64)  # type: ignore[index]
                score += idf * ((f * (k1 + 1.0)) / (f + norm))  # + 0.0 where the phrase is not, as in bm25()
        return score


_TF_FUNCTION = "memory_core_tf"
_TOTALS_FUNCTION = "memory_core_totals"


def _totals(api: Any) -> str:
    """FTS5's row count and total tokens (its averages record), as bm25() reads them, and the
    tokens of phrase 0 as FTS5 tokenized it (JSON)."""
    return json.dumps([api.row_count, api.column_total_size(-1), list(api.phrases[0])])


def _cosine_from_distance(distance: float | None) -> float:
    # a stored vector without a direction (all zeros) has no distance: it scores 0, never crashes
    return 1.0 - float(distance) if distance is not None and math.isfinite(distance) else 0.0


@dataclass(frozen=True)
class SourceHits:
    """What a :class:`ResultSource` found for one query: results in the ``to_agent`` shape on the
    index's 0-1 score scale, a note, and whether the query was embedded (None: not tried)."""

    results: list[dict[str, Any]]
    note: str = ""
    embedded: bool | None = None


class ResultSource(Protocol):
    """A source searched beside the index when ``sources`` names it, its results merged with the
    index's by score (the LanceDB memory store, memory_core/lancedb_store.py)."""

    source: str

    def meta(self) -> dict[str, Any]:
        """What its vectors were made with (``provider``, ``model``, ``dims``), as the index's meta."""
        ...

    def source_hits(self, query: str, *, max_results: int, min_score: float, mode: str) -> SourceHits: ...


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
    dates: DateRange | None = None  # the day(s) the query names (memory_core.dates)
    corpus_coverage: float = 1.0  # IDF share of the query terms that occur anywhere in the index


@dataclass(frozen=True)
class SearchResult:
    path: str
    start_line: int
    end_line: int
    score: float
    snippet: str
    source: str
    citation: str
    vector_score: float = 0.0
    text_score: float = 0.0
    match: str = "vector"  # how it matched: "keyword", "vector" or "both"
    date: str | None = None  # ISO date the chunk was written, when known

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_agent(self) -> dict[str, Any]:
        """OpenClaw's ``memory_search`` result fields (``path, startLine, endLine, score, snippet,
        source, citation``), then snake_case aliases of the line numbers and what memory-core adds
        (``match``, ``date``, the raw side scores)."""
        return {
            "path": self.path, "startLine": self.start_line, "endLine": self.end_line, "score": self.score,
            "snippet": self.snippet, "source": self.source, "citation": self.citation,
            "start_line": self.start_line, "end_line": self.end_line, "match": self.match, "date": self.date,
            "vector_score": self.vector_score, "text_score": self.text_score,
        }


AGENT_RESULT_KEYS = ("path", "startLine", "endLine", "score", "snippet", "source", "citation", "start_line",
                     "end_line", "match", "date", "vector_score", "text_score")
_DAILY_RE = re.compile(r"^memory/\d{4}-\d{2}-\d{2}\.md$")


def _dated_snippet(h: ranking.Hit, terms: list[str]) -> str:
    """The snippet; a transcript's starts with when it was said (``[2026-11-02 15:20 UTC] ``)."""
    if h.source != "sessions" or not h.date:
        return ranking.make_snippet(h.text, terms, SNIPPET_MAX_CHARS)
    stamp = f"[{h.date.replace('T', ' ')}{' UTC' if 'T' in h.date else ''}] "
    return stamp + ranking.make_snippet(h.text, terms, SNIPPET_MAX_CHARS - len(stamp))


class _Index:
    """One opened index file (one inode)."""

    def __init__(self, path: Path) -> None:
        st = os.stat(path)
        self.ident = (st.st_ino, st.st_dev, st.st_mtime_ns, st.st_size)
        self.conn = connect_reader(path)
        try:
            # changes when another connection commits to the file (an in-place update), even one
            # that leaves its size and mtime as they were (mtime ticks are coarse on some
            # filesystems); read before the meta, so a commit in between is seen next time
            self.data_version = self.conn.execute("PRAGMA data_version").fetchone()[0]
            self.meta = read_meta(self.conn)
            if self.meta is None or not has_table(self.conn, "chunks_fts"):
                raise IndexDamagedError(f"{path} is not a memory-core index (or it is damaged)")
        except apsw.Error as exc:
            self.conn.close()
            raise IndexDamagedError(f"the index at {path} is damaged ({exc}); rebuild it with `memory-core index --full`") from None
        # schema 3: float32 in chunks.embedding + sign bits (memory_core.vectors); schema 2: the
        # vectors in sqlite-vec's vec0 table (searched by its KNN) or in chunks.embedding
        self.has_bits = has_table(self.conn, vectors.BITS_TABLE)
        # schema 4: transcript chunks' exchange vectors (a chunk's cosine is its best vector's)
        self.has_parts = self.has_bits and vectors.has_parts(self.conn) and self.conn.execute(
            f"SELECT 1 FROM {vectors.PARTS_TABLE} LIMIT 1").fetchone() is not None
        self.has_vec_table = has_table(self.conn, "chunks_vec")
        self.f32_in_chunks = self.has_bits or not self.has_vec_table
        self.vec_loaded = self.has_vec_table and not self.has_bits and load_vec(self.conn)
        self.dims = self.meta.get("dims")
        self._matrix: tuple[np.ndarray, np.ndarray] | None = None
        self._bits: vectors.BitIndex | None = None
        self._part_bits: vectors.BitIndex | None = None
        self._path = path
        self._kw_conn: apsw.Connection | None | bool = None  # False: could not be opened
        self.df_cache: dict[str, int] = {}  # query term -> chunks containing it
        self.own_bm25 = _register_bm25(self.conn)  # bm25() of known rows without its doclist walks
        self._postings: _Postings | None = None
        self._vocab: apsw.Connection | None = None
        self._n_chunks: int | None = None
        self._background: float | None = None
        self.where: Settings | None = None  # the index's own workspace and sources (Searcher._where)

    def df(self, phrase: str, conn: apsw.Connection | None = None) -> int:
        """How many chunks match ``phrase`` (an FTS5 string) alone: FTS5's ``nHit`` for its IDF.
        Counted once per opened file (a new file or a committed update opens a new index)."""
        df = self.df_cache.get(phrase)
        if df is None:
            df = int((conn or self.conn).execute(
                "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (phrase,)).fetchone()[0])
            if len(self.df_cache) < 10_000:
                self.df_cache[phrase] = df
        return df

    def n_chunks(self) -> int:
        if self._n_chunks is None:
            self._n_chunks = int(self.conn.execute("SELECT count(*) FROM chunks").fetchone()[0])
        return self._n_chunks

    def background_cosine(self) -> float | None:
        """Mean cosine of up to 256 spread-out pairs of chunk vectors (the calibration of models
        without a measured table entry), computed once per opened file."""
        if self._background is None:
            try:
                if self.vec_loaded:
                    rows = self.conn.execute("SELECT embedding FROM chunks_vec WHERE rowid % 7 = 0 LIMIT 512").fetchall()
                    if len(rows) < 16:
                        rows = self.conn.execute("SELECT embedding FROM chunks_vec LIMIT 512").fetchall()
                else:
                    rows = self.conn.execute(
                        "SELECT embedding FROM chunks WHERE embedding IS NOT NULL LIMIT 512").fetchall()
            except apsw.Error:
                rows = []
            if len(rows) < 2:
                return None
            m = np.frombuffer(b"".join(r[0] for r in rows), dtype="<f4").reshape(len(rows), -1).copy()
            m /= np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
            g = m @ m.T
            n = len(m)
            self._background = float((g.sum() - np.trace(g)) / (n * (n - 1)))
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
        if self._postings is None:
            max_rid = self.conn.execute("SELECT max(rid) FROM chunks").fetchone()[0]
            self._postings = _Postings(int(max_rid or 0), self._vocab_conn())
        return self._postings

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

    def bit_index(self) -> vectors.BitIndex:
        """Every sign-bit code of this file, loaded once per opened file (a new file or a
        committed update opens a new :class:`_Index`) and shared with the other searchers of
        this process that read the same state."""
        if self._bits is None:
            self._bits = vectors.shared_bit_index(self.conn, os.fspath(self._path), int(self.dims or 0))
        return self._bits

    def part_index(self) -> vectors.BitIndex:
        """The exchange vectors' codes, as :meth:`bit_index`."""
        if self._part_bits is None:
            self._part_bits = vectors.shared_bit_index(self.conn, os.fspath(self._path), int(self.dims or 0),
                                                       vectors.PARTS_BITS_TABLE)
        return self._part_bits

    def nearest(self, qvec: np.ndarray, want: int) -> list[tuple[int, float]]:
        """The ``want`` chunks nearest the query, best first: [(rid, cosine)], a chunk's cosine
        being the best of its own vector's and its exchanges' (schema 4)."""
        top = self.bit_index().search(self.conn, qvec, want)
        if not self.has_parts:
            return top
        cand = dict(top)
        ptop = self.part_index().search(self.conn, qvec, want)
        if ptop:
            lit = ",".join(str(int(r)) for r, _ in ptop)
            owners = {c for (c,) in self.conn.execute(f"SELECT DISTINCT chunk FROM {vectors.PARTS_TABLE}"
                                                      f" WHERE rid IN ({lit})")}
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


class Answering(Protocol):
    """What :func:`search_answer` needs of a searcher: :class:`Searcher`, and the LanceDB export's
    :class:`memory_core.lancedb_index.LanceSearcher`."""

    settings: Settings
    provider_note: str
    last_search: dict[str, Any]  # backend, embedded (qmd: qmd_mode, qmd_fallback)

    def search(self, query: str, max_results: int | None = None, min_score: float | None = None,
               sources: list[str] | None = None, *, mode: str | None = None) -> list[Any]: ...

    def index_meta(self) -> dict[str, Any]: ...


def search_answer(searcher: Answering, query: str, max_results: int | None = None, min_score: float | None = None,
                  sources: list[str] | None = None, *, mode: str | None = None, chat_type: str | None = None,
                  extra: ResultSource | None = None) -> dict[str, Any]:
    """``{"results": [...], "provider", "model", "backend", "mode", "fallback", "citations",
    "note"?}``: what ``search --json`` prints and MCP returns (memory_core/answers.py).
    ``chat_type`` (direct, group, channel): where the answer goes, for ``citations = "auto"``.

    ``extra``: a source searched too when ``sources`` names it (the memory store), its results
    merged with the index's by score; when ``sources`` names nothing else the index is not
    read and the metadata describe ``extra``'s vectors."""
    from memory_core.answers import citations_mode, clamp_results, response_meta, shape_results

    max_results, clamp_note = clamp_results(max_results)
    mode = searcher.settings.query.search_mode() if mode is None else mode
    floor = searcher.settings.query.min_score if min_score is None else min_score
    searcher.last_search = {}
    srcs = list(dict.fromkeys(sources)) if sources else None
    if extra is not None and (srcs is None or extra.source not in srcs):
        extra = None  # a source beside the index is searched only when asked for by name
    file_srcs = [s for s in srcs if extra is None or s != extra.source] if srcs else None
    read_index = file_srcs is None or bool(file_srcs)
    results: list[dict[str, Any]] = []
    meta: dict[str, Any] = {}
    if read_index:
        results = [r.to_agent() for r in searcher.search(query, max_results=max_results, min_score=min_score,
                                                         sources=file_srcs, mode=mode)]
        with contextlib.suppress(Exception):  # an empty query never opened the index
            meta = searcher.index_meta()
    last, note = searcher.last_search, searcher.provider_note if read_index else ""
    notes = [clamp_note, note]
    if extra is not None:
        n = searcher.settings.query.max_results if max_results is None else max_results
        got = extra.source_hits(query, max_results=n, min_score=floor, mode=mode)
        # one score scale on both sides; stable: the index's hits first on ties
        results = sorted(results + got.results, key=lambda r: r["score"], reverse=True)[:n]
        notes.append(got.note)
        if not read_index:  # the answer's provider is the one of the source's vectors
            meta, last, note = extra.meta(), {"backend": "builtin", "embedded": got.embedded}, got.note
    shaped = shape_results(results, searcher.settings, chat_type)  # citations, budget
    out: dict[str, Any] = {"results": shaped.results}
    out.update(response_meta(meta, last, note, mode))
    out["citations"] = citations_mode(searcher.settings, chat_type)
    notes = [n for n in (*notes, shaped.note) if n]
    if not results:
        notes.append(f"nothing scored at least {floor:g} (min_score): the memory holds nothing that matches"
                     " this well; try other words, or a lower min_score to see weaker matches")
    if notes:
        out["note"] = "; ".join(notes)
    return out


class Searcher:
    """Hybrid search over the index at ``settings.index_file``.

    ``provider`` embeds queries; by default it is created from settings on first use and
    must produce the vectors the index was built with (same provider key), otherwise the
    searcher answers keyword-only and says so in :meth:`status`.
    """

    def __init__(self, settings: Settings, *, provider: Any = None) -> None:
        self.settings = settings
        self.path = settings.index_file
        self._idx: _Index | None = None
        self._lock = threading.RLock()
        self._provider = provider
        self._provider_checked = provider is not None
        self._injected = provider is not None
        self.provider_note = ""
        self._pool: ThreadPoolExecutor | None = None
        self.last_search: dict[str, Any] = {}  # what the last search did, for the answer's metadata

    # -- lifecycle -----------------------------------------------------------------------
    def _current(self) -> _Index:
        with self._lock:
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                if self._idx is not None:
                    return self._idx  # the file is being replaced: keep answering from the old one
                raise IndexMissingError(f"no index at {self.path}; run `memory-core index` first") from None
            ident = (st.st_ino, st.st_dev, st.st_mtime_ns, st.st_size)
            if (self._idx is None or self._idx.ident != ident
                    or self._idx.conn.execute("PRAGMA data_version").fetchone()[0] != self._idx.data_version):
                new = _Index(self.path)
                old, self._idx = self._idx, new
                if old is not None:
                    old.close()
                    if (not self._injected and old.meta and new.meta
                            and old.meta.get("provider_key") != new.meta.get("provider_key")):
                        self._provider, self._provider_checked = None, False
            return self._idx

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
            if self._idx is not None:
                self._idx.close()
                self._idx = None
            if self._provider is not None:
                with contextlib.suppress(Exception):
                    self._provider.close()

    def __enter__(self) -> Searcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def indexed_paths(self) -> list[str]:
        """Every indexed file path (the ``files`` table)."""
        with self._lock:
            idx = self._current()
            return [r[0] for r in idx.conn.execute("SELECT path FROM files")]

    def index_meta(self) -> dict[str, Any]:
        """The meta record of the index being searched."""
        with self._lock:
            return dict(self._current().meta or {})

    # -- query embedding ------------------------------------------------------------------
    def _query_provider(self, idx: _Index) -> Any:
        meta = idx.meta or {}
        if meta.get("provider") in (None, "none") or not meta.get("dims"):
            return None
        if not self._provider_checked:
            self._provider_checked = True
            try:
                from memory_core.embeddings.registry import create_provider
                from memory_core.indexmeta import IndexRecord

                s = IndexRecord.from_meta(meta).query_settings(self.settings)  # type: ignore[union-attr]
                self._provider, _ = create_provider(s)
                # a reader never waits out a run's retries (60 s x 6 attempts): a short total deadline
                self._provider.deadline_s = self.settings.query.embed_timeout_s
            except Exception as exc:  # no key, no model package: answer keyword-only
                self._provider = None
                self.provider_note = f"query embeddings unavailable ({exc}); keyword-only results"
                log.warning("%s", self.provider_note)
        p = self._provider
        if p is not None and p.provider_key != meta.get("provider_key"):
            self.provider_note = (f"the index was built with a different {meta.get('provider')} configuration;"
                                  " keyword-only results until it is rebuilt")
            return None
        return p

    # -- search -----------------------------------------------------------------------------
    def search(self, query: str, max_results: int | None = None, min_score: float | None = None,
               sources: list[str] | None = None, *, mode: str | None = None) -> list[SearchResult]:
        """Ranked results for ``query``.

        ``mode``: ``"hybrid"`` (both sides when the index has vectors and the query can be
        embedded, else keyword-only), ``"vector"`` or ``"keyword"`` (one side alone; the rest of the
        pipeline is the same). Default: the configured ``query.mode`` (see
        :meth:`QuerySettings.search_mode`).
        """
        q = self.settings.query
        mode = q.search_mode() if mode is None else mode
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        max_results = q.max_results if max_results is None else max(1, int(max_results))
        cands = self.retrieve(query, self.candidate_count(max_results), sources,
                              vector=mode != "keyword", keyword=mode != "vector")
        self.last_search = {"backend": "builtin", "embedded": cands.embedded}
        return self.rank(cands, max_results=max_results, min_score=min_score, mode=mode)

    def search_response(self, query: str, max_results: int | None = None, min_score: float | None = None,
                        sources: list[str] | None = None, *, mode: str | None = None,
                        chat_type: str | None = None, extra: ResultSource | None = None) -> dict[str, Any]:
        """What ``search --json`` prints and MCP returns: :func:`search_answer`."""
        return search_answer(self, query, max_results, min_score, sources, mode=mode, chat_type=chat_type,
                             extra=extra)

    def candidate_count(self, max_results: int) -> int:
        """Candidates per side: ``max_results x candidate_multiplier``, at least 1, capped at 200."""
        return min(MAX_CANDIDATES, max(1, int(max_results * self.settings.query.candidate_multiplier)))

    def retrieve(self, query: str, n_candidates: int, sources: list[str] | None = None, *,
                 vector: bool = True, keyword: bool = True) -> Candidates:
        """The raw candidates of both retrieval sides (each best-first), before any fusion.

        One statement per side, each joined to its chunk rows: the FTS5 top ``n_candidates``
        (bm25) and the vec0 KNN top ``n_candidates``. When both sides run, the keyword side runs
        on a second connection in a worker thread while this thread embeds the query and runs
        the KNN (SQLite and the model release the GIL), so a hybrid query costs about the slower
        side, not the sum. Calls are serialised per searcher (one apsw connection must not run
        two statements at once).

        Then every candidate gets both raw scores, so its calibrated score is absolute: the
        cosine of keyword candidates (their stored vectors), the BM25 of vector candidates (FTS5
        restricted to their row ids), whether it contains an identifier the query names, the query
        terms' IDF sum and the share of it found anywhere in the index
        (:func:`memory_core.ranking.fuse_calibrated`).
        """
        query = (query or "").replace("\x00", " ")
        if not query.strip():
            return Candidates(query, [], [], False)
        srcs = tuple(dict.fromkeys(sources)) if sources else None
        dates = query_date_range(query)
        text = dates.strip(query) if dates else query  # the words naming the day match by date
        if not text.strip():
            vector = keyword = False
        with self._lock:
            idx = self._current()
            provider = self._query_provider(idx) if vector else None
            pending: Future[list[ranking.Hit]] | None = None
            kw_hits: list[ranking.Hit] = []
            if keyword:
                kw_conn = idx.keyword_conn() if (provider is not None and self.parallel) else None
                if kw_conn is not None:
                    pending = self._worker().submit(self._keyword_hits, idx, text, n_candidates, srcs, kw_conn)
                else:
                    kw_hits = self._keyword_hits(idx, text, n_candidates, srcs)
            vec_hits: list[ranking.Hit] = []
            embedded = False
            qvec: np.ndarray | None = None
            try:
                if provider is not None:
                    try:
                        qvec = np.asarray(provider.embed_query(text[:8000]), dtype=np.float32)
                        vec_hits = self._vector_hits(idx, qvec, n_candidates, srcs)
                        embedded = True
                    except ProviderError as exc:
                        self.provider_note = f"query embedding failed ({exc}); keyword-only results"
                        log.warning("%s", self.provider_note)
                        qvec = None
            finally:
                if pending is not None:
                    kw_hits = pending.result()
            extra = self._dated_hits(idx, dates, srcs, {h.rid for h in (*kw_hits, *vec_hits)}) if dates else []
            union, idf_total, corpus_cov = self._complete(idx, text, qvec if embedded else None, kw_hits,
                                                          vec_hits, keyword=keyword, extra=extra)
            where = self._where(idx)
            for h in (*union, *kw_hits, *vec_hits):
                if h.date is None:
                    h.date = self._date_of(h, where)
            q = self.settings.query
            cal = ranking.Calibration.for_model(
                (idx.meta or {}).get("model"), idx.background_cosine() if embedded else None,
                q.vector_calibration)
        return Candidates(query, kw_hits, vec_hits, embedded, union, cal, idf_total, dates, corpus_cov)

    def _where(self, idx: _Index) -> Settings:
        """Where the index's files are: its recorded workspace, sources and sessions folder (a reader
        given only the index, or settings without ``sessions``, still finds the transcripts)."""
        if idx.where is None:
            from memory_core.indexmeta import IndexRecord

            record = IndexRecord.from_meta(idx.meta) if idx.meta else None
            idx.where = record.reader_settings(self.settings) if record else self.settings
        return idx.where

    def _date_of(self, h: ranking.Hit, where: Settings | None = None) -> str | None:
        stamps = None
        if h.source == "sessions":
            try:
                stamps = indexed_transcript_dates(where or self.settings, h.path)  # opened as `get` opens it
            except PathError:
                stamps = None
        return chunk_date(h.path, h.source, h.start_line, h.end_line, h.mtime_ms, dates=stamps)

    def _dated_hits(self, idx: _Index, dates: DateRange, sources: tuple[str, ...] | None,
                    seen: set[int]) -> list[ranking.Hit]:
        """Chunks written in ``dates`` that neither side found: the day's daily notes, transcript
        chunks with a message of that day, other files modified that day (at most 200)."""
        days = min(62, (dates.end - dates.start).days + 1)
        daily = [f"memory/{(dates.start + timedelta(days=i)).isoformat()}.md" for i in range(days)]
        start_ms = int(datetime.combine(dates.start, datetime.min.time()).astimezone().timestamp() * 1000)
        end_ms = int(datetime.combine(dates.end + timedelta(days=1), datetime.min.time()).astimezone().timestamp() * 1000)
        sql = ("SELECT c.rid, 0, c.id, c.path, c.source, c.start_line, c.end_line, c.text, fl.mtime FROM chunks c"
               " JOIN files fl ON fl.path = c.path WHERE")
        rows = list(idx.conn.execute(sql + f" c.path IN ({','.join('?' * len(daily))})", daily))
        rows += idx.conn.execute(sql + " c.source != 'sessions' AND fl.mtime >= ? AND fl.mtime < ?"
                                 " AND c.path NOT LIKE 'memory/____-__-__.md' LIMIT ?",
                                 (start_ms, end_ms, MAX_DATED_CANDIDATES)).fetchall()
        # a transcript written on that day was last modified on or after it
        sessions = [p for (p,) in idx.conn.execute(
            "SELECT path FROM files WHERE source = 'sessions' AND mtime >= ? ORDER BY mtime DESC LIMIT 64", (start_ms,))]
        for p in sessions:
            try:
                header, stamps = indexed_transcript_dates(self._where(idx), p)
            except PathError:
                continue
            lines = [n for n, ts in stamps if ts[:10] in dates] or ([] if not (header and header[:10] in dates) else [0])
            if not lines:
                continue
            for r in idx.conn.execute(sql + " c.path = ?", (p,)):
                if lines == [0] or any(r[5] <= n <= r[6] for n in lines):
                    rows.append(r)
        out = []
        for r in rows:
            if r[0] in seen or (sources and r[4] not in sources):
                continue
            seen.add(r[0])
            out.append(r)
            if len(out) >= MAX_DATED_CANDIDATES:
                break
        return self._hits(out, "vector", lambda _: 0.0)

    def _complete(self, idx: _Index, query: str, qvec: np.ndarray | None, kw_hits: list[ranking.Hit],
                  vec_hits: list[ranking.Hit], *, keyword: bool = True,
                  extra: list[ranking.Hit] | None = None) -> tuple[list[ranking.Hit], float, float]:
        """Give every candidate both raw scores; returns (the union, the query terms' IDF sum, the
        IDF share of the query terms found anywhere in the index).
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
        words = textsearch.query_terms(query) if keyword else []
        # a query of stop words only ("what did I do") is not matched by its words: relevance 0
        terms = [] if all(textsearch.is_stop_word(w) for w in words) else [textsearch.fts_string(w) for w in words]
        idf_total = 0.0
        corpus_coverage = 1.0
        n = idx.n_chunks()
        try:
            if qvec is not None:  # the cosine of keyword-only candidates
                missing = [h for h in union if not h.in_vector]
                if missing:
                    cos = self._cosines(idx, qvec, [h.rid for h in missing])
                    for h in missing:
                        h.vector_score = cos.get(h.rid, 0.0)
            match = textsearch.build_match_query(query) if keyword else None
            need = [h.rid for h in union if not h.in_keyword]
            if match and need:  # the BM25 of vector candidates
                for rid, rank in self._bm25_of_rows(idx, query, match, need):
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
            for t in terms:  # FTS5's own IDF: log((N - n + 0.5) / (n + 0.5)), at least 1e-6
                df = idx.df(t)
                idf = max(1e-6, math.log((n - df + 0.5) / (df + 0.5))) if n else 1e-6
                idfs.append(idf)
                present += idf if df > 0 else 0.0
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
        return union, idf_total, corpus_coverage

    @staticmethod
    def _bm25_of_rows(idx: _Index, query: str, match: str, rids: list[int]) -> list[tuple[int, float]]:
        """``(rid, bm25(chunks_fts))`` of the rows of ``rids`` that ``match`` (the MATCH expression of
        ``query``) matches, as ``SELECT rowid, bm25(chunks_fts) ... MATCH ? AND rowid IN (...)``
        returns them, without bm25()'s walk of every phrase's doclist per row id: FTS5 finds each
        row by its doclist indexes and :func:`_bm25_given_df` scores it with the cached counts."""
        lit = ",".join(str(int(r)) for r in rids)  # row ids are ints: a literal list
        phrases = [textsearch.fts_string(t) for t in textsearch.query_terms(query)]
        if idx.own_bm25 and phrases and " OR ".join(phrases) == match:
            dfs = [idx.df(p) for p in phrases]
            post = idx.kept_postings()
            if post is not None and post.has(phrases) and min(rids) >= 0 and max(rids) < post.size:
                wanted = np.asarray(sorted(set(rids)), dtype=np.int64)
                score = post.scores(phrases, dfs, wanted)
                if score is not None:  # the keyword side kept these phrases: no statement at all
                    return [(int(r), -1.0 * float(x)) for r, x in zip(wanted, score, strict=True) if x > 0.0]
            sql = (f"SELECT rowid, {_BM25_FUNCTION}(chunks_fts, {','.join(str(d) for d in dfs)}) FROM chunks_fts"
                   f" WHERE chunks_fts MATCH ? AND rowid IN ({lit})")
        else:  # an apsw without FTS5 auxiliary functions, or a MATCH this does not know the phrases of
            sql = f"SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid IN ({lit})"
        return [(int(rid), float(rank)) for rid, rank in idx.conn.execute(sql, (match,))]

    @staticmethod
    def _cosines(idx: _Index, qvec: np.ndarray, rids: list[int]) -> dict[int, float]:
        """Cosine of the query with these chunks' stored vectors, read directly by row id.

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
            if idx.has_parts:  # a chunk's cosine is its best vector's (_Index.nearest)
                for rid, c in vectors.part_cosines(idx.conn, qvec, rids).items():
                    if c > cos.get(rid, -2.0):
                        cos[rid] = c
            return cos
        return vectors.cosines(qvec, rows)

    parallel = True
    """Run the keyword side beside the vector side (set False to run them one after the other)."""

    def _worker(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memory-core-fts")
        return self._pool

    def rank(self, cands: Candidates, *, max_results: int | None = None, min_score: float | None = None,
             mode: str = "hybrid") -> list[SearchResult]:
        """Score, threshold, decay, dedupe, diversify and cut ``cands``; make snippets and citations.

        ``min_score`` applies to the relevance (the fused score) before temporal decay; decay and
        MMR only reorder what passed it. ``mode="vector"`` / ``"keyword"`` rank one side alone.
        Pure given the candidates: evaluation replays it per setting.
        """
        q = self.settings.query
        max_results = q.max_results if max_results is None else max(1, int(max_results))
        min_score = q.min_score if min_score is None else float(min_score)
        vec = cands.vector if mode != "keyword" else []
        kw = cands.keyword if mode != "vector" else []
        if q.fusion == "calibrated":
            # the union holds both sides and the chunks of a day the query names (neither side's)
            union = cands.union or [*cands.vector, *(h for h in cands.keyword if not h.in_vector)]
            if mode == "hybrid":
                pool = union
                vw, tw = q.normalised_weights() if cands.embedded else (0.0, 1.0)
                if cands.calibration.english_only and ranking.mostly_cjk(cands.query):
                    vw, tw = 0.0, 1.0  # the model cannot read the query: its cosines are noise
                elif vw > 0 and tw > 0 and ranking.names_identifier(cands.query):
                    vw, tw = vw * (1 - ranking.IDENTIFIER_SHIFT), tw + vw * ranking.IDENTIFIER_SHIFT
            elif mode == "vector":
                pool, vw, tw = [h for h in union if h.in_vector or not h.in_keyword], 1.0, 0.0
            else:
                pool, vw, tw = [h for h in union if h.in_keyword or not h.in_vector], 0.0, 1.0
            hits = ranking.fuse_calibrated(pool, cands.calibration, cands.idf_total,
                                           vector_weight=vw, text_weight=tw, corpus_coverage=cands.corpus_coverage)
            if cands.dates is not None:  # the query names a day: what was written that day comes first
                for h in hits:
                    if h.date is not None and h.date in cands.dates:
                        h.date_lifted = h.score < min_score  # found for its day, not its words
                        h.score = h.relevance = h.score + (1 - h.score) * DATE_MATCH_BONUS
                    else:  # another day's note on the topic stays, below the named day's own
                        h.score = h.relevance = min(h.score, DATE_MATCH_BONUS)
                hits.sort(key=lambda h: (h.score, h.bm25), reverse=True)
        elif not vec or not kw:
            hits = ranking.fuse(vec, kw, method=q.fusion, vector_weight=1.0 if vec else 0.0,
                                text_weight=1.0 if kw else 0.0)
        else:
            vw, tw = q.normalised_weights()
            hits = ranking.fuse(vec, kw, method=q.fusion, vector_weight=vw, text_weight=tw)
        hits = [h for h in hits if h.score >= min_score]  # relevance, before decay
        for h in hits:
            h.relevance = h.score
        if q.temporal_decay.enabled:
            hits = ranking.apply_temporal_decay(hits, q.temporal_decay.half_life_days, now=time.time(),
                                                floor=q.temporal_decay.floor)
        hits = ranking.dedupe_overlapping(hits)
        if q.mmr.enabled:
            hits = ranking.mmr_rerank(hits, q.mmr.lambda_)
        hits = hits[:max_results]
        terms = textsearch.query_terms(cands.query) or cands.query.split() if hits else []
        return [
            SearchResult(
                path=h.path, start_line=h.start_line, end_line=h.end_line, score=round(float(h.relevance), 6),
                snippet=_dated_snippet(h, terms), source=h.source,
                citation=f"{h.path}#L{h.start_line}-L{h.end_line}",
                vector_score=round(float(h.vector_score), 6), text_score=round(float(h.text_score), 6),
                match=ranking.match_kind(h) if mode == "hybrid" or h.date_lifted else mode,
                date=h.date,
            )
            for h in hits
        ]

    @staticmethod
    def _hits(rows: Any, side: str, to_score: Any) -> list[ranking.Hit]:
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

    def _keyword_hits(self, idx: _Index, query: str, k: int, sources: tuple[str, ...] | None,
                      conn: apsw.Connection | None = None) -> list[ranking.Hit]:
        match = textsearch.build_match_query(query)
        if not match:
            return []
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
        try:
            top = None if sources else self._keyword_top(idx, query, match, k, conn or idx.conn)
            if top is not None:
                rows = self._rows_of(conn or idx.conn, top)
            else:
                rows = sorted((conn or idx.conn).execute(sql, (match, *(sources or ()), k)), key=lambda r: r[1])
            return self._hits(rows, "text", ranking.bm25_rank_to_score)
        except apsw.SQLError as exc:  # never let query text break search
            log.warning("keyword query failed (%s); no keyword results", exc)
            return []

    @staticmethod
    def _keyword_top(idx: _Index, query: str, match: str, k: int,
                     conn: apsw.Connection) -> list[tuple[int, float]] | None:
        """FTS5's ``ORDER BY bm25(chunks_fts) LIMIT k`` for ``match`` as ``(rid, bm25)``, best first
        (ties by row id, as SQLite's sorter keeps them), from the phrases' postings in memory; None
        when they are not (yet) kept or the query is cheap for FTS5 itself."""
        phrases = [textsearch.fts_string(t) for t in textsearch.query_terms(query)]
        if not phrases or " OR ".join(phrases) != match:
            return None
        if not idx.own_bm25:
            return None
        dfs = [idx.df(p, conn) for p in phrases]
        if sum(dfs) < KEYWORD_POSTINGS_MIN:
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
        hit = np.flatnonzero(score > 0.0)
        if len(hit) > k:  # the k best, and every row tied with the k-th
            kth = np.partition(score[hit], len(hit) - k)[len(hit) - k]
            hit = hit[score[hit] >= kth]
        order = np.lexsort((hit, -score[hit]))[:k]  # best first, then the lower row id
        return [(int(r), -1.0 * float(score[r])) for r in hit[order]]

    @staticmethod
    def _rows_of(conn: apsw.Connection, top: list[tuple[int, float]]) -> list[tuple[Any, ...]]:
        """The chunk rows of ``top`` (``(rid, bm25)``), in its order, as ``_keyword_hits`` selects them."""
        if not top:
            return []
        sql = ("SELECT c.rid, c.id, c.path, c.source, c.start_line, c.end_line, c.text, fl.mtime FROM chunks c"
               f" LEFT JOIN files fl ON fl.path = c.path WHERE c.rid IN ({','.join(str(r) for r, _ in top)})")
        got = {r[0]: r for r in conn.execute(sql)}
        return [(rid, rank, *got[rid][1:]) for rid, rank in top if rid in got]

    def _vector_hits(self, idx: _Index, qvec: np.ndarray, k: int,
                     sources: tuple[str, ...] | None) -> list[ranking.Hit]:
        if idx.dims and qvec.shape[0] != idx.dims:
            raise ProviderError(f"query vector has {qvec.shape[0]} dims, index has {idx.dims}")
        want = min(4096, k * 4 if sources else k)
        src = "" if not sources else f" WHERE c.source IN ({','.join('?' * len(sources))})"
        if idx.has_bits and idx.dims:  # the bits scanned, the nearest ranked by exact cosines
            top = idx.nearest(qvec, want)
            return self._rows_by_rank(idx, [r for r, _ in top], [c for _, c in top], src, sources, k)
        if idx.vec_loaded:
            sql = (
                "WITH v AS MATERIALIZED (SELECT rowid AS rid, distance AS d FROM chunks_vec"
                " WHERE embedding MATCH ? AND k = ?) " + _ROW_SELECT.format(alias="v", raw="v.d") + src
                + " ORDER BY v.d LIMIT ?"
            )
            rows = idx.conn.execute(sql, (qvec.astype("<f4").tobytes(), want, *(sources or ()), k))
            return self._hits(rows, "vector", _cosine_from_distance)
        rids, m = idx.matrix()
        if len(rids) == 0:
            if idx.has_vec_table and not self.provider_note:
                self.provider_note = ("sqlite-vec cannot be loaded here and this index keeps its vectors in its vec0"
                                      " table; keyword-only results")
            return []
        qn = qvec / (np.linalg.norm(qvec) or 1.0)
        sims = np.nan_to_num(m @ qn, nan=0.0)  # a damaged stored row scores 0
        top = np.argsort(-sims, kind="stable")[:want]
        return self._rows_by_rank(idx, [int(rids[i]) for i in top], [float(sims[i]) for i in top], src, sources, k)

    def _rows_by_rank(self, idx: _Index, rids: list[int], sims: list[float], src: str,
                      sources: tuple[str, ...] | None, k: int) -> list[ranking.Hit]:
        """The chunk rows of ``rids`` (best first, cosines ``sims``), the first ``k`` of ``sources``."""
        sql = (
            "WITH v AS MATERIALIZED (SELECT key AS pos, value AS rid FROM json_each(?)) "
            + _ROW_SELECT.format(alias="v", raw="v.pos") + src + " ORDER BY v.pos LIMIT ?"
        )
        rows = idx.conn.execute(sql, (json.dumps(rids), *(sources or ()), k))
        return self._hits(rows, "vector", lambda pos: sims[pos])

    def vector_recall(self, queries: list[str], k: int = 10) -> float | None:
        """Mean recall@k of the vector side (as :meth:`search` runs it) against an exact search:
        every stored vector's cosine, in memory (for evaluation sets, not for large indexes).
        None when the index has no vectors or queries cannot be embedded."""
        with self._lock:
            idx = self._current()
            provider = self._query_provider(idx)
            if provider is None or not idx.dims or not queries:
                return None
            if idx.f32_in_chunks:
                rids, m = idx.matrix()
            elif idx.vec_loaded:
                rows = idx.conn.execute("SELECT rowid, embedding FROM chunks_vec").fetchall()
                m = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), -1)
                m = m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
                rids = np.asarray([r[0] for r in rows], dtype=np.int64)
            else:
                return None
            if not len(rids):
                return None
            want, top = self.candidate_count(k), min(k, len(rids))
            owner = pm = None
            if idx.has_parts:  # a chunk's cosine is its best vector's: its own or an exchange's
                prow = idx.conn.execute(f"SELECT chunk, embedding FROM {vectors.PARTS_TABLE}").fetchall()
                pos = {int(r): i for i, r in enumerate(rids.tolist())}
                keep = [(pos[c], e) for c, e in prow if c in pos]
                owner = np.asarray([i for i, _ in keep], dtype=np.int64)
                pm = np.frombuffer(b"".join(e for _, e in keep), dtype="<f4").reshape(len(keep), -1)
                pm = pm / np.maximum(np.linalg.norm(pm, axis=1, keepdims=True), 1e-12)
            got = []
            for q in queries:
                qv = np.asarray(provider.embed_query(q[:8000]), dtype=np.float32)
                qn = qv / (np.linalg.norm(qv) or 1.0)
                sims = m @ qn
                if pm is not None and owner is not None and len(owner):
                    np.maximum.at(sims, owner, pm @ qn)
                exact = set(rids[np.argsort(-sims, kind="stable")[:top]].tolist())
                found = [h.rid for h in self._vector_hits(idx, qv, want, None)][:top]
                got.append(len(exact & set(found)) / top)
            return float(np.mean(got))

    # -- read_file ----------------------------------------------------------------------------
    def read_file(self, path: str, from_line: int | None = None, lines: int | None = None) -> dict[str, Any]:
        """Lines of an indexed source file: ``{"path", "text", "source", "from", "lines"}``.

        ``path`` may be a citation (``path#L10-L20``: those lines unless ``from_line`` / ``lines``
        are given) or start with ``./``. Transcripts come back as readable, redacted
        ``User: ...`` / ``Assistant: ...`` lines for the cited JSONL lines. A daily note
        (``memory/YYYY-MM-DD.md``) that does not exist yet reads as empty text, as in OpenClaw.
        Any other path outside the index is refused.
        """
        if not isinstance(path, str) or not path.strip():
            raise PathError("path is empty")
        cite = parse_citation(path)
        path = cite.path
        from_line = cite.start_line if from_line is None else from_line
        lines = cite.lines if lines is None and from_line == cite.start_line else lines
        with self._lock:
            idx = self._current()
            row = idx.conn.execute("SELECT path, source FROM files WHERE path = ?", (path,)).fetchone()
        start = max(1, int(from_line or 1))
        from memory_core.indexmeta import IndexRecord

        record = IndexRecord.from_meta(idx.meta) if idx.meta else None
        where = record.reader_settings(self.settings) if record else self.settings  # the index's own workspace
        if row is None:
            if _DAILY_RE.match(path) and not (where.workspace_dir / path).exists():
                return {"path": path, "text": "", "source": "memory", "from": start, "lines": 0}
            raise PathError(f"not an indexed file: {path}")
        source = row[1]
        resolve_indexed_path(where, path)
        count = MAX_GET_LINES if lines is None else max(0, min(int(lines), MAX_GET_LINES))
        end = start + count - 1
        from memory_core.safeio import open_indexed

        real = open_indexed(where, path)  # an fd: no symlink in any component, regular files only
        out: list[str] = []
        try:
            if source == "sessions":
                from memory_core.sessions import session_text_for_range

                out = session_text_for_range(real, start, end)
            else:
                from memory_core.safeio import read_lines

                out = read_lines(real, start, end)  # split on "\n" only, as the chunker numbers lines
        except FileNotFoundError:
            raise PathError(f"{path} is indexed but no longer exists") from None
        except OSError as exc:
            raise PathError(f"cannot read {path}: {exc.strerror}") from None
        if source != "sessions" and (idx.meta or {}).get("redact", self.settings.redact) == "all":  # transcripts come back redacted
            from memory_core.redact import redact_lines

            out = redact_lines("\n".join(out)).split("\n") if out else out  # PEM blocks across lines too
        return {"path": path, "text": "\n".join(out), "source": source, "from": start, "lines": len(out)}

    # -- status ---------------------------------------------------------------------------------
    def status(self, *, measure: bool = False) -> dict[str, Any]:
        """What the index holds; ``measure``: also split the rest of its bytes (text, FTS5, other
        B-trees) by reading every page (SQLite's ``dbstat``: the whole file)."""
        from memory_core.cache import cache_entry_count

        st: dict[str, Any] = {"index_path": str(self.path), "exists": self.path.exists()}
        if not st["exists"]:
            st["state"] = "missing"
            return st
        meta, problem = probe_index(self.path)
        if problem:
            st.update(state="damaged", problem=problem)
            return st
        with self._lock:
            idx = self._current()
            c = idx.conn
            m = idx.meta or {}
            st.update(
                state="ok",
                provider=m.get("provider"), model=m.get("model"), provider_reason=m.get("provider_reason"),
                dims=m.get("dims"), chunk_tokens=m.get("chunk_tokens"), chunk_overlap=m.get("chunk_overlap"),
                sources=m.get("sources"), built_at=m.get("built_at"),
                files=c.execute("SELECT count(*) FROM files").fetchone()[0],
                chunks=c.execute("SELECT count(*) FROM chunks").fetchone()[0],
                chunks_by_source=dict(c.execute("SELECT source, count(*) FROM chunks GROUP BY source").fetchall()),
                fts=True,
                vector_search=("sign bits scanned, the nearest ranked by float32 cosines" if idx.has_bits else
                               "vec0 KNN (an index of schema 2: `memory-core index --full` rebuilds it for faster"
                               " search)" if idx.vec_loaded else
                               "off (sqlite-vec not loadable; the vectors are in vec0)" if idx.has_vec_table else
                               "numpy cosine (sqlite-vec not loadable)")
                if m.get("dims") else "off (keyword-only index)",
                index_bytes=self.path.stat().st_size,
                vector_bytes=vectors.sizes(c, m.get("dims")),
                cache_entries=cache_entry_count(self.settings.cache_file),
                cache_path=str(self.settings.cache_file),
            )
            st["sizes"] = index_sizes(c, m.get("dims"), st["index_bytes"], self.settings.cache_file, measure=measure)
        if m.get("chunks_over_window") is not None:
            # chunks longer than the embedding model's input window (embedded from their head only)
            st["chunks_over_window"] = m["chunks_over_window"]
        if self.provider_note:
            st["note"] = self.provider_note
        from memory_core.freshness import dirty_state

        dirty = dirty_state(self.settings)  # the sources changed since the index was built
        st.update(dirty=dirty.dirty, dirty_reason=dirty.reason, extra_paths=list(self.settings.extra_paths),
                  cache_max_entries=self.settings.cache.max_entries)
        if m.get("batch"):  # the Batch API jobs of the run that built this index: failures, limit, last error
            st["batch"] = m["batch"]
        return st


# What each byte of the index and its cache is for (``status``; ``status --sizes`` splits "rest").
SIZE_LINES = {
    "vectors_float32": "chunks.embedding: each chunk's vector once, for exact cosines; the record of the vectors"
                       " the index holds (the cache does not keep a second copy)",
    "exchange_parts_float32": "chunk_parts: transcript chunks' exchange vectors (chunking.exchange_vectors)",
    "sign_bits": "chunks_bits, chunk_parts_bits: one bit a dimension, scanned by every vector query",
    "text": "chunks' text and row fields (id, path, lines) and their pages' free space",
    "fts": "chunks_fts: the FTS5 keyword index and each row's length (contentless: no copy of the text)",
    "keys": "B-tree indexes (chunk id, path, source, hash) and the files table",
    "rest": "text, FTS5 and B-tree indexes (`status --sizes` splits it; reads the whole file)",
    "free": "free pages (reused by later runs)",
    "cache": "the embedding cache: vectors the live index does not hold (received by an unfinished run, or of"
             " chunks that left the index), so re-adding them embeds nothing",
}


def index_sizes(conn: apsw.Connection, dims: int | None, index_bytes: int, cache_file: Path, *,
                measure: bool = False) -> dict[str, int]:
    """Bytes per purpose (:data:`SIZE_LINES`). Without ``measure`` only what costs no scan: the
    vectors' bytes (rows x dims x 4), the bits' blobs, free pages, the cache file."""
    vb = vectors.sizes(conn, dims)
    parts = vb["part_vectors"] * int(dims or 0) * 4
    out = {"vectors_float32": vb["float32_bytes"] - parts, "exchange_parts_float32": parts,
           "sign_bits": vb["bits_bytes"]}
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0] * page_size
    if measure:
        by_name = dict(conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall())
        fts = sum(v for k, v in by_name.items() if k.startswith("chunks_fts"))
        out["text"] = max(0, by_name.get("chunks", 0) - out["vectors_float32"])
        out["fts"] = fts
        out["keys"] = max(0, index_bytes - sum(out.values()) - free)
    else:
        out["rest"] = max(0, index_bytes - sum(out.values()) - free)
    out["free"] = free
    out["cache"] = sum(os.path.getsize(str(cache_file) + x) for x in ("", "-wal")
                       if os.path.exists(str(cache_file) + x))
    return out
