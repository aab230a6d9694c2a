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
from typing import Any

import apsw
import numpy as np

from memory_core import ranking, textsearch, vectors
from memory_core.config import Settings
from memory_core.dates import DateRange, chunk_date, indexed_transcript_dates, query_date_range
from memory_core.discovery import parse_citation, resolve_indexed_path
from memory_core.errors import IndexDamagedError, IndexMissingError, PathError, ProviderError
from memory_core.store import connect_reader, has_table, load_vec, probe_index, read_meta

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
        self.has_vec_table = has_table(self.conn, "chunks_vec")
        self.f32_in_chunks = self.has_bits or not self.has_vec_table
        self.vec_loaded = self.has_vec_table and not self.has_bits and load_vec(self.conn)
        self.dims = self.meta.get("dims")
        self._matrix: tuple[np.ndarray, np.ndarray] | None = None
        self._bits: vectors.BitIndex | None = None
        self._path = path
        self._kw_conn: apsw.Connection | None | bool = None  # False: could not be opened
        self.df_cache: dict[str, int] = {}  # query term -> chunks containing it
        self._n_chunks: int | None = None
        self._background: float | None = None
        self.where: Settings | None = None  # the index's own workspace and sources (Searcher._where)

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
            except apsw.Error:
                self._kw_conn = False
        return self._kw_conn or None

    def bit_index(self) -> vectors.BitIndex:
        """Every sign-bit code of this file, loaded once per opened file (a new file or a
        committed update opens a new :class:`_Index`) and shared with the other searchers of
        this process that read the same state."""
        if self._bits is None:
            self._bits = vectors.shared_bit_index(self.conn, os.fspath(self._path), int(self.dims or 0))
        return self._bits

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
        if self._kw_conn:
            with contextlib.suppress(apsw.Error):
                self._kw_conn.close()


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
                        chat_type: str | None = None) -> dict[str, Any]:
        """``{"results": [...], "provider", "model", "backend", "mode", "fallback", "citations",
        "note"?}``: what ``search --json`` prints and MCP returns (memory_core/answers.py).
        ``chat_type`` (direct, group, channel): where the answer goes, for ``citations = "auto"``."""
        from memory_core.answers import citations_mode, clamp_results, response_meta, shape_results

        max_results, clamp_note = clamp_results(max_results)
        mode = self.settings.query.search_mode() if mode is None else mode
        self.last_search = {}
        results = self.search(query, max_results=max_results, min_score=min_score, sources=sources, mode=mode)
        shaped = shape_results([r.to_agent() for r in results], self.settings, chat_type)  # citations, budget
        out: dict[str, Any] = {"results": shaped.results}
        meta = {}
        with contextlib.suppress(Exception):  # an empty query never opened the index
            meta = self.index_meta()
        out.update(response_meta(meta, self.last_search, self.provider_note, mode))
        out["citations"] = citations_mode(self.settings, chat_type)
        notes = [n for n in (clamp_note, self.provider_note, shaped.note) if n]
        if not results:
            floor = self.settings.query.min_score if min_score is None else min_score
            notes.append(f"nothing scored at least {floor:g} (min_score): the memory holds nothing that matches"
                         " this well; try other words, or a lower min_score to see weaker matches")
        if notes:
            out["note"] = "; ".join(notes)
        return out

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
            if match and need:  # the BM25 of vector candidates (row ids are ints: a literal list)
                sql = ("SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?"
                       f" AND rowid IN ({','.join(str(int(r)) for r in need)})")
                for rid, rank in conn.execute(sql, (match,)):
                    h = by_rid[rid]
                    h.bm25 = max(0.0, -float(rank))
                    h.text_score = ranking.bm25_rank_to_score(rank)
            idents = ranking.identifiers(query) if keyword and union else []
            if idents:  # which candidates contain an identifier of the query verbatim (a phrase)
                sql = ("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?"
                       f" AND rowid IN ({','.join(str(int(h.rid)) for h in union)})")
                for ident in idents:
                    for (rid,) in conn.execute(sql, (textsearch.fts_string(ident.lower()),)):
                        by_rid[rid].has_identifier = True
            idfs: list[float] = []
            present = 0.0
            for t in terms:  # FTS5's own IDF: log((N - n + 0.5) / (n + 0.5)), at least 1e-6
                df = idx.df_cache.get(t)
                if df is None:
                    df = int(conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (t,)).fetchone()[0])
                    if len(idx.df_cache) < 10_000:
                        idx.df_cache[t] = df
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
            rows = vectors.read_vectors(idx.conn, rids)
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
        src = "" if not sources else f" AND source IN ({','.join('?' * len(sources))})"
        # A subquery with LIMIT is never flattened into the join: FTS5 finds and sorts the top k
        # first, then only those k chunk rows are read (measured cheaper than a MATERIALIZED CTE).
        sql = (
            "SELECT f.rid, f.r, c.id, c.path, c.source, c.start_line, c.end_line, c.text, fl.mtime FROM"
            " (SELECT rowid AS rid, bm25(chunks_fts) AS r FROM chunks_fts"
            f" WHERE chunks_fts MATCH ?{src} ORDER BY r LIMIT ?) AS f"
            " JOIN chunks c ON c.rid = f.rid LEFT JOIN files fl ON fl.path = c.path"
        )
        try:
            rows = sorted((conn or idx.conn).execute(sql, (match, *(sources or ()), k)), key=lambda r: r[1])
            return self._hits(rows, "text", ranking.bm25_rank_to_score)
        except apsw.SQLError as exc:  # never let query text break search
            log.warning("keyword query failed (%s); no keyword results", exc)
            return []

    def _vector_hits(self, idx: _Index, qvec: np.ndarray, k: int,
                     sources: tuple[str, ...] | None) -> list[ranking.Hit]:
        if idx.dims and qvec.shape[0] != idx.dims:
            raise ProviderError(f"query vector has {qvec.shape[0]} dims, index has {idx.dims}")
        want = min(4096, k * 4 if sources else k)
        src = "" if not sources else f" WHERE c.source IN ({','.join('?' * len(sources))})"
        if idx.has_bits and idx.dims:  # the bits scanned, the nearest ranked by exact cosines
            top = idx.bit_index().search(idx.conn, qvec, want)
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
            got = []
            for q in queries:
                qv = np.asarray(provider.embed_query(q[:8000]), dtype=np.float32)
                exact = set(rids[np.argsort(-(m @ (qv / (np.linalg.norm(qv) or 1.0))), kind="stable")[:top]].tolist())
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
    def status(self) -> dict[str, Any]:
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
