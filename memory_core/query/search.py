"""The query module: read-only hybrid search over a memory-core index, :class:`Searcher`.

It never imports the indexing code. A :class:`Searcher` keeps one read-only connection
(and SQLite's statement cache) between queries and reopens the file when a reindex swapped
a new one in, so a long-lived searcher (CLI, MCP server, agent tool) always answers from the
live index and no query fails during a swap: the old file stays readable until closed.

The searcher composes the query modules; where each step is decided:

* :mod:`memory_core.query.retrieval`: the opened index file, the keyword side (FTS5, BM25), the vector
  side (sign bits and exact cosines, sqlite-vec KNN, or numpy), both raw scores of every candidate
  (``complete``); each side returns ``max_results x candidate_multiplier`` candidates (capped at 200);
* :mod:`memory_core.query.rank`: ``rank_candidates``, what :meth:`Searcher.rank` does: fusion into an
  absolute relevance in [0, 1] (:func:`memory_core.query.ranking.fuse_calibrated`, docs/search.md,
  "Calibrated scores"), ``min_score``, temporal decay, dedupe, MMR, snippets and citations;
* :mod:`memory_core.query.dates`: the day a query names, the chunks written that day, their lift;
* :mod:`memory_core.query.reading`: ``read_file`` (``get``); :mod:`memory_core.query.status`: ``status``;
* here: the lifecycle (reopening a swapped file), the query embedding, running both sides at once
  (:meth:`Searcher.retrieve`) and the answer's shape (:func:`search_answer`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import apsw
import numpy as np

from memory_core.config import SNIPPET_MAX_CHARS, Settings, should_redact
from memory_core.errors import IndexMissingError, ProviderError
from memory_core.query import ranking, retrieval
from memory_core.query.dates import (
    DATE_MATCH_BONUS,
    MAX_DATED_CANDIDATES,
    Dater,
    conversation_days,
    memory_has_days,
    note_nearness,
    once_per_file,
    query_date_range,
    timeline_end,
)
from memory_core.query.edges import index_neighbours
from memory_core.query.rank import AGENT_RESULT_KEYS, SearchResult, rank_candidates, wants_file_support
from memory_core.query.reading import (
    MAX_GET_LINES,
    indexed_transcript_dates,
    read_file,
    transcript_messages,
)
from memory_core.query.results import FileText, MemoryStatus, SearchAnswer, SearchRun
from memory_core.query.retrieval import Candidates, _Index
from memory_core.query.status import SIZE_LINES, index_sizes, index_status
from memory_core.storage import textsearch, vectors
from memory_core.storage.indexmeta import IndexRecord, QueryProviderOwner
from memory_core.storage.store import blob_of, int_of

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

    from memory_core.embeddings.base import EmbeddingProvider

__all__ = [  # what other modules import from here (some defined in the query modules it composes)
    "AGENT_RESULT_KEYS", "DATE_MATCH_BONUS", "MAX_CANDIDATES", "MAX_DATED_CANDIDATES", "MAX_GET_LINES", "MODES",
    "SIZE_LINES", "SNIPPET_MAX_CHARS", "Answering", "Candidates", "FileText", "MemoryStatus", "ResultSource",
    "SearchResult", "Searcher", "SourceHits", "index_sizes", "search_answer",
]

log = logging.getLogger("memory_core.query.search")

MAX_CANDIDATES = 200
MODES = ("hybrid", "vector", "keyword")


@dataclass(frozen=True)
class SourceHits:
    """What a :class:`ResultSource` found for one query: results in the ``to_agent`` shape on the
    index's 0-1 score scale, a note, and whether the query was embedded (None: not tried)."""

    results: list[dict[str, Any]]
    note: str = ""
    embedded: bool | None = None


class ResultSource(Protocol):
    """A source searched beside the index when ``sources`` names it, its results merged with the
    index's by score (the LanceDB memory store, memory_core/notes/memory_store.py)."""

    source: str

    def record(self) -> IndexRecord | None:
        """What its vectors were made with (``provider``, ``model``, ``dims``), as an index records it."""
        ...

    def source_hits(self, query: str, *, max_results: int, min_score: float, mode: str) -> SourceHits: ...


class Answering(Protocol):
    """What :func:`search_answer` needs of a searcher: :class:`Searcher`, and the LanceDB export's
    :class:`memory_core.query.lancedb.LanceSearcher`."""

    settings: Settings
    provider_note: str
    last_search: SearchRun  # what the last search did, for the answer's metadata

    def search(self, query: str, max_results: int | None = None, min_score: float | None = None,
               sources: list[str] | None = None, *, mode: str | None = None) -> list[Any]: ...

    def index_record(self) -> IndexRecord | None: ...


def search_answer(searcher: Answering, query: str, max_results: int | None = None, min_score: float | None = None,
                  sources: list[str] | None = None, *, mode: str | None = None, chat_type: str | None = None,
                  extra: ResultSource | None = None) -> SearchAnswer:
    """The answer ``search --json`` prints and MCP returns (results, provider, model, backend,
    mode, fallback, citations, note; memory_core/query/answers.py); whether the index was stale
    is for the caller to say (:meth:`memory_core.runtime.sync.Freshness.apply`).
    ``chat_type`` (direct, group, channel): where the answer goes, for ``citations = "auto"``.

    ``extra``: a source searched too when ``sources`` names it (the memory store), its results
    merged with the index's by score; when ``sources`` names nothing else the index is not
    read and the metadata describe ``extra``'s vectors."""
    from memory_core.query.answers import citations_mode, clamp_results, response_meta, shape_results

    max_results, clamp_note = clamp_results(max_results)
    mode = searcher.settings.query.search_mode() if mode is None else mode
    floor = searcher.settings.query.threshold(min_score)
    searcher.last_search = SearchRun()
    srcs = list(dict.fromkeys(sources)) if sources else None
    if extra is not None and (srcs is None or extra.source not in srcs):
        extra = None  # a source beside the index is searched only when asked for by name
    file_srcs = [s for s in srcs if extra is None or s != extra.source] if srcs else None
    read_index = file_srcs is None or bool(file_srcs)
    results: list[dict[str, Any]] = []
    record: IndexRecord | None = None
    if read_index:
        results = [r.to_agent() for r in searcher.search(query, max_results=max_results, min_score=min_score,
                                                         sources=file_srcs, mode=mode)]
        with contextlib.suppress(Exception):  # an empty query never opened the index
            record = searcher.index_record()
    last, note = searcher.last_search, searcher.provider_note if read_index else ""
    notes = [clamp_note, note]
    if extra is not None:
        n = searcher.settings.query.max_results if max_results is None else max_results
        got = extra.source_hits(query, max_results=n, min_score=floor, mode=mode)
        # one score scale on both sides; stable: the index's hits first on ties
        results = sorted(results + got.results, key=lambda r: r["score"], reverse=True)[:n]
        notes.append(got.note)
        if not read_index:  # the answer's provider is the one of the source's vectors
            record, last, note = extra.record(), SearchRun(embedded=got.embedded), got.note
    shaped = shape_results(results, searcher.settings, chat_type)  # citations, budget
    meta = response_meta(record, last, note, mode)
    notes = [n for n in (*notes, shaped.note) if n]
    best = max((float(r.get("score") or 0.0) for r in results), default=None)
    if best is not None and best < floor and searcher.settings.query.by_support(min_score):
        # min_score unset: the threshold did not apply (the memory supports the query, ranking.query_supported)
        why = ("few or none of the question's words are in memory: these are the nearest in meaning and may not"
               " hold its answer" if last.words_absent else
               "the memory shares words and meaning with the question but may not hold its answer")
        notes.append(f"weak matches only: the best scores {best:.4g}, under {floor:g} (min_score); {why}")
    if not results:
        from memory_core.query.answers import nothing_found_note

        indexed = getattr(searcher, "indexed_chunks", None)
        counts = None
        if read_index and callable(indexed):
            with contextlib.suppress(Exception):
                counts = indexed()
        # a query only of the days it names (nothing left to embed or to match as words)
        days_only = read_index and last.embedded is None and bool(query.strip())
        notes.append(nothing_found_note(floor, counts, record, file_srcs, query=query, days_only=days_only))
    return SearchAnswer(results=shaped.results, provider=meta.provider, model=meta.model, backend=meta.backend,
                        mode=meta.mode, fallback=meta.fallback, citations=citations_mode(searcher.settings, chat_type),
                        note="; ".join(notes))



def _for_provider(text: str, mode: str) -> str:
    """The query as the embedding provider is sent it (:func:`memory_core.sources.redact.query_for_provider`);
    when nothing of memory is redacted (a local model: ``redact = "sessions"``, or ``"off"``) the
    redaction rules are not even loaded."""
    if not should_redact("memory", mode):
        return text
    from memory_core.sources.redact import query_for_provider

    return query_for_provider(text, mode)


def day_words_taken_out(query: str, text: str) -> list[str]:
    """The words of ``query`` (not stop words) that naming its day took out of ``text``."""
    kept = set(textsearch.query_terms(text))
    return [w for w in textsearch.query_terms(query) if w not in kept and not textsearch.is_stop_word(w)]


class Searcher(QueryProviderOwner):
    """Hybrid search over the index at ``settings.index_file``.

    ``provider`` embeds queries; by default it is created from settings on first use and
    must produce the vectors the index was built with (same provider key), otherwise the
    searcher answers keyword-only and says so in :meth:`status`.
    """

    def __init__(self, settings: Settings, *, provider: EmbeddingProvider | None = None) -> None:
        self.settings = settings
        self.path = settings.index_file
        self._idx: _Index | None = None
        self._lock = threading.RLock()
        self._provider: EmbeddingProvider | None = provider
        self._provider_checked = provider is not None
        self._injected = provider is not None
        self.provider_note = ""
        self._pool: ThreadPoolExecutor | None = None
        self.last_search = SearchRun()  # what the last search did, for the answer's metadata

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
                    or int_of(self._idx.conn, "PRAGMA data_version") != self._idx.data_version):
                new = _Index(self.path, prev=self._idx)  # what it keeps, carried over by the change log
                old, self._idx = self._idx, new
                if old is not None:
                    old.close()
                    was, now = IndexRecord.from_meta(old.meta), IndexRecord.from_meta(new.meta)
                    # another configuration's vectors: its provider is opened anew (not when a run
                    # only gave an index of this one the key without credentials: it is this provider's)
                    if not self._injected and was and now and was.provider_key != now.provider_key \
                            and not (self._provider is not None and self._provider.owns_key(now.provider_key)):
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

    def index_meta(self) -> dict[str, object]:  # JSON: the raw meta row, for the evaluation report
        """The meta record of the index being searched, as stored (read it typed: :meth:`index_record`)."""
        with self._lock:
            return dict(self._current().meta or {})

    def index_record(self) -> IndexRecord | None:
        """What the index being searched records (None: no meta)."""
        with self._lock:
            return IndexRecord.from_meta(self._current().meta)

    def indexed_chunks(self) -> dict[str, int]:
        """Chunks in the index by source (``{"memory": 120, "sessions": 0}``): what an answer
        with no results says is the case (an empty index, no transcripts indexed)."""
        with self._lock:
            rows = self._current().conn.execute("SELECT source, count(*) FROM chunks GROUP BY source").fetchall()
        return {str(src): n if isinstance(n, int) else 0 for src, n in rows}

    # -- query embedding ------------------------------------------------------------------
    def _query_provider(self, idx: _Index) -> EmbeddingProvider | None:
        return self._provider_for(IndexRecord.from_meta(idx.meta), "index", "rebuilt")

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
        # (None: nothing to embed, the query only a day's words: not a provider's failure)
        self.last_search = SearchRun(embedded=cands.embedded if cands.words_left else None,
                                     words_absent=cands.words_absent)
        return self.rank(cands, max_results=max_results, min_score=min_score, mode=mode)

    def search_response(self, query: str, max_results: int | None = None, min_score: float | None = None,
                        sources: list[str] | None = None, *, mode: str | None = None,
                        chat_type: str | None = None, extra: ResultSource | None = None) -> SearchAnswer:
        """What ``search --json`` prints and MCP returns: :func:`search_answer`."""
        return search_answer(self, query, max_results, min_score, sources, mode=mode, chat_type=chat_type,
                             extra=extra)

    def candidate_count(self, max_results: int) -> int:
        """Candidates per side: ``max_results x candidate_multiplier``, at least 1, capped at 200."""
        return min(MAX_CANDIDATES, max(1, int(max_results * self.settings.query.candidate_multiplier)))

    def retrieve(self, query: str, n_candidates: int, sources: list[str] | None = None, *,
                 vector: bool = True, keyword: bool = True, read_days: bool = True) -> Candidates:
        """The raw candidates of both retrieval sides (each best-first), before any fusion.

        A query naming a day is searched without the words that name it (they match by date),
        unless memory holds nothing of those days but does write one of those words: then it is
        searched again with every word, as a query naming no day (``read_days=False``), so "what
        are we doing at Christmas?" before Christmas matches the message that says "Christmas"
        (while "in February", a word memory never writes, still costs the query nothing).

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
        (:func:`memory_core.query.ranking.fuse_calibrated`).
        """
        try:
            return self._retrieve(query, n_candidates, sources, vector=vector, keyword=keyword, read_days=read_days)
        except (apsw.CorruptError, apsw.NotADBError, vectors.CodesDamaged) as exc:
            # a page of the index read now and found damaged (the opening probe reads a few)
            raise retrieval.damaged(self.path, f"{exc.__class__.__name__}: {exc}") from None

    def _retrieve(self, query: str, n_candidates: int, sources: list[str] | None, *,
                  vector: bool, keyword: bool, read_days: bool) -> Candidates:
        query = textsearch.well_formed(query or "")
        if not query.strip():
            return Candidates(query, [], [], False, words_left=False)
        srcs = tuple(dict.fromkeys(sources)) if sources else None
        with self._lock:
            idx = self._current()
            dater = Dater(idx.conn, once_per_file(functools.partial(indexed_transcript_dates, self._where(idx))))
            # year-less and relative days resolve against the memory's newest day, not today's clock
            dates = query_date_range(query, anchor=lambda: timeline_end(idx.conn),
                                     date_order=self.settings.query.date_order,
                                     tolerance=self.settings.query.day_tolerance_hours,
                                     timeline=lambda: conversation_days(idx.conn),
                                     days_in=lambda lo, hi: memory_has_days(idx.conn, lo, hi)) if read_days else None
            sides = (vector, keyword)
            # the words naming the day match by date; a month named whole stays a word where memory has it
            text = dates.strip(query, keep=bool(dates.kept) and idx.df(f'"{dates.kept}"') > 0) if dates else query
            if not text.strip():
                vector = keyword = False
            provider = self._query_provider(idx) if vector else None
            pending: Future[list[ranking.Hit]] | None = None
            kw_hits: list[ranking.Hit] = []
            beside = provider is not None  # the vector side chooses candidates too (keyword_hits)
            # a lower-case word the model reads only as pieces may be a name misspelt (respelled)
            knows = provider.knows_words if provider is not None else None
            if keyword:
                kw_conn = idx.keyword_conn() if (provider is not None and self.parallel) else None
                if kw_conn is not None:
                    pending = self._worker().submit(retrieval.keyword_hits, idx, text, n_candidates, srcs, kw_conn,
                                                    beside_vectors=beside, knows=knows)
                else:
                    kw_hits = retrieval.keyword_hits(idx, text, n_candidates, srcs, beside_vectors=beside,
                                                     knows=knows)
            vec_hits: list[ranking.Hit] = []
            embedded = False
            qvec: np.ndarray | None = None
            try:
                if provider is not None:
                    try:
                        qvec = np.asarray(provider.embed_query(_for_provider(text[:8000], self.settings.redact)),
                                          dtype=np.float32)
                        vec_hits = self._vector_hits(idx, qvec, n_candidates, srcs)
                        embedded = True
                    except ProviderError as exc:
                        self.provider_note = f"query embedding failed ({exc}); keyword-only results"
                        log.warning("%s", self.provider_note)
                        qvec = None
            finally:
                if pending is not None:
                    if embedded:  # while the keyword side counts its words, count them from the other end
                        retrieval.count_phrases_beside(idx, text, pending.done)
                    kw_hits = pending.result()
            if keyword and beside and not vec_hits:  # no vector candidates after all: every phrase ranks
                kw_hits = retrieval.keyword_hits(idx, text, n_candidates, srcs, knows=knows)
            extra = (retrieval.dated_hits(idx, dates, srcs, {h.rid for h in (*kw_hits, *vec_hits)}, dater)
                     if dates else [])
            union, idf_total, corpus_cov, absent = retrieval.complete(idx, text, qvec if embedded else None,
                                                                      kw_hits, vec_hits, keyword=keyword, extra=extra,
                                                                      knows=knows)
            # a question none of whose words memory holds: does the model know each of them?
            knows_absent = embedded and retrieval.model_reads_absent_words(provider, absent, corpus_cov, text)
            dater.load((*union, *kw_hits, *vec_hits))
            for h in (*union, *kw_hits, *vec_hits):
                if h.date is None:
                    h.date = dater.date(h)
            for h in union:  # (the hits ranked: their snippets)
                if h.source == "sessions":
                    h.day_starts = dater.day_starts(h)
            if dates is not None:  # how near each candidate's days are to the named ones
                note_nearness(dates, (*union, *kw_hits, *vec_hits), dater)
                if not any(v > 0 for v in dates.near.values()):
                    # nothing of those days in memory, but memory writes their words: words again
                    taken_out = day_words_taken_out(query, text) if text != query else []
                    if any(idx.df(textsearch.fts_string(w)) > 0 for w in taken_out):
                        return self._retrieve(query, n_candidates, sources, vector=sides[0], keyword=sides[1],
                                              read_days=False)
                    dates = None  # nothing of those days in memory: ranked as a query naming no day
                else:
                    for h in (*union, *kw_hits, *vec_hits):
                        h.day_start = dater.day_start(h, dates)
            q = self.settings.query
            cal = ranking.Calibration.for_model(
                (IndexRecord.from_meta(idx.meta) or IndexRecord()).model,
                idx.background_cosine() if embedded else None,
                q.vector_calibration)
            cands = Candidates(query, kw_hits, vec_hits, embedded, union, cal, idf_total, dates, corpus_cov,
                               knows_absent_words=knows_absent, words_left=bool(text.strip()))
            if qvec is not None and union and wants_file_support(q, cands):  # each file's relevance as a whole
                cands = replace(cands, file_cosines=retrieval.file_cosines(idx, qvec, union),
                                multi_chunk_share=retrieval.multi_chunk_share(idx, [h.path for h in union]))
        return cands

    def _where(self, idx: _Index) -> Settings:
        """Where the index's files are: its recorded workspace, sources and sessions folder (a reader
        given only the index, or settings without ``sessions``, still finds the transcripts)."""
        if idx.where is None:
            record = IndexRecord.from_meta(idx.meta)
            idx.where = record.reader_settings(self.settings) if record else self.settings
        return idx.where

    parallel = True
    """Run the keyword side beside the vector side (set False to run them one after the other)."""

    def _worker(self) -> ThreadPoolExecutor:
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor  # a keyword-only search starts no thread

            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memory-core-fts")
        return self._pool

    # -- ranking -------------------------------------------------------------------------------
    def rank(self, cands: Candidates, *, max_results: int | None = None, min_score: float | None = None,
             mode: str = "hybrid") -> list[SearchResult]:
        """Score, threshold, decay, dedupe, diversify and cut ``cands``; make snippets and citations
        (:func:`memory_core.query.rank.rank_candidates` with this searcher's query settings).

        ``min_score`` applies to the relevance (the fused score) before temporal decay; decay and
        MMR only reorder what passed it. ``mode="vector"`` / ``"keyword"`` rank one side alone.
        Pure given the candidates and the index (``query.edge_lines`` reads a result's neighbouring
        message or line from it): evaluation replays it per setting (without an open index, e.g.
        ``self`` with only ``settings``, snippets are the chunk's alone).
        """
        lock = getattr(self, "_lock", None)
        if lock is None:
            return rank_candidates(self.settings.query, cands, max_results=max_results, min_score=min_score,
                                   mode=mode)
        with lock:  # the neighbouring message or line beside a result's edge, read from the index
            try:
                idx: _Index | None = self._current()
            except IndexMissingError:
                idx = None
            neighbours = index_neighbours(idx.conn) if idx is not None and self.settings.query.edge_lines > 0 else None
            # a transcript's snippet shows its messages with their own line breaks (read as `get` reads them)
            messages = transcript_messages(self._where(idx)) if idx is not None else None
            return rank_candidates(self.settings.query, cands, max_results=max_results, min_score=min_score,
                                   mode=mode, neighbours=neighbours, messages=messages)

    def _vector_hits(self, idx: _Index, qvec: np.ndarray, k: int,
                     sources: tuple[str, ...] | None) -> list[ranking.Hit]:
        """:func:`memory_core.query.retrieval.vector_hits`; its note (vectors unreadable here) kept as the provider note."""
        hits, note = retrieval.vector_hits(idx, qvec, k, sources)
        if note and not self.provider_note:
            self.provider_note = note
        return hits

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
                m = np.frombuffer(b"".join(blob_of(r[1]) for r in rows), dtype="<f4").reshape(len(rows), -1)
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
                keep = [(pos[c], e) for c, e in prow if isinstance(c, int) and c in pos]  # chunk: an integer rid
                owner = np.asarray([i for i, _ in keep], dtype=np.int64)
                pm = np.frombuffer(b"".join(blob_of(e) for _, e in keep), dtype="<f4").reshape(len(keep), -1)
                pm = pm / np.maximum(np.linalg.norm(pm, axis=1, keepdims=True), 1e-12)
            got = []
            for q in queries:
                qv = np.asarray(provider.embed_query(_for_provider(q[:8000], self.settings.redact)), dtype=np.float32)
                qn = qv / (np.linalg.norm(qv) or 1.0)
                sims = m @ qn
                if pm is not None and owner is not None and len(owner):
                    np.maximum.at(sims, owner, pm @ qn)
                exact = set(rids[np.argsort(-sims, kind="stable")[:top]].tolist())
                found = [h.rid for h in self._vector_hits(idx, qv, want, None)][:top]
                got.append(len(exact & set(found)) / top)
            return float(np.mean(got))

    # -- read_file ----------------------------------------------------------------------------
    def read_file(self, path: str, from_line: int | None = None, lines: int | None = None) -> FileText:
        """Lines of an indexed source file: :func:`memory_core.query.reading.read_file`."""
        def lookup(p: str) -> tuple[Any, IndexRecord | None]:
            with self._lock:
                idx = self._current()
                row = idx.conn.execute("SELECT path, source, size, mtime FROM files WHERE path = ?", (p,)).fetchone()
                return row, IndexRecord.from_meta(idx.meta)

        return read_file(self.settings, lookup, path, from_line, lines)

    # -- status ---------------------------------------------------------------------------------
    def status(self, *, measure: bool = False) -> MemoryStatus:
        """What the index holds: :func:`memory_core.query.status.index_status`. With a hosted
        provider (whose client costs nothing to make: no model to load) the query provider is
        checked first, so ``note`` says when searches would answer keyword-only (a base URL,
        dimensions or headers that are not the ones the vectors were made with) before one does."""
        self._check_hosted_query_provider()
        return index_status(self.path, self.settings, self._lock, self._current, lambda: self.provider_note,
                            measure=measure)

    def _check_hosted_query_provider(self) -> None:
        from memory_core.embeddings.catalog import provider_class
        from memory_core.errors import MemoryCoreError

        with contextlib.suppress(MemoryCoreError, OSError):
            with self._lock:
                idx = self._current()
            record = IndexRecord.from_meta(idx.meta)
            cls = provider_class(str(record.provider)) if record is not None and record.provider else None
            if cls is not None and not cls.on_machine and not self._provider_checked:
                self._query_provider(idx)  # once: a search's own note (its query's failure) stays as it is
