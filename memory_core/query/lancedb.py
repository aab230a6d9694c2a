"""Search a LanceDB export of the index (:mod:`memory_core.export.lancedb`) with the same ranking.

``memory-core search --lancedb URI`` (:class:`LanceSearcher`) retrieves candidates from the
export's table (exact cosine KNN over every vector, BM25 over the text) and ranks them with
:meth:`memory_core.query.search.Searcher.rank`, the embedded index's own ranking: calibrated fusion,
``min_score``, temporal decay, dedupe, MMR, snippets and ``path#Lstart-Lend`` citations. Differences
from the embedded index (docs/lancedb-index.md): BM25 from LanceDB (same k1/b, its IDF); a query
naming a day adds the chunks the export dates on it, by their one ``date``; a transcript chunk is
dated by its earliest message (an export of an index before schema 6: by its file's mtime); CJK
text is not segmented.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import date
from typing import TYPE_CHECKING, Any

import numpy as np

from memory_core.config import Settings
from memory_core.errors import IndexMissingError, ProviderError, UsageError
from memory_core.query import ranking
from memory_core.query.rank import wants_file_support
from memory_core.query.results import SearchRun
from memory_core.sources.redact import query_for_provider
from memory_core.storage import textsearch
from memory_core.storage.indexmeta import IndexRecord, QueryProviderOwner
from memory_core.storage.textsearch import well_formed

if TYPE_CHECKING:
    from memory_core.embeddings.base import EmbeddingProvider
    from memory_core.query.dates import DateRange
    from memory_core.query.results import SearchAnswer
    from memory_core.query.retrieval import Candidates
    from memory_core.query.search import ResultSource

from memory_core.storage.lancedb import (
    _COLS,
    EXPORT_ID,
    TABLE,
    TERMS,
    WORDS,
    _lancedb,
    _tables,
    doc_tokens,
    is_export_table,
    query_words,
)

log = logging.getLogger(__name__)

OPEN_ATTEMPTS = 20
"""How often a searcher opens the export's tables before it calls the export incomplete."""
OPEN_PAUSE_S = 0.05
SEARCH_ATTEMPTS = 5
"""How often a search runs on freshly opened tables when the export is replaced under it (exports
back to back can replace it again while it runs on the tables it reopened)."""


class LanceSearcher(QueryProviderOwner):
    """Search an exported LanceDB table (:func:`export_lancedb`) with the embedded index's ranking.

    ``provider`` embeds queries (default: created from the export's recorded provider, as
    :class:`memory_core.query.search.Searcher` does for an index).
    """

    def __init__(self, settings: Settings, uri: str, *, provider: Any = None) -> None:
        from memory_core.query.search import Searcher

        self.settings = settings
        self.uri = uri if "://" in uri else os.path.abspath(os.path.expanduser(uri))
        lancedb = _lancedb()
        missing = IndexMissingError(f"no memory-core export at {self.uri}; run `memory-core export --format lancedb"
                                    f" {uri}` first")
        if "://" not in self.uri and not os.path.isdir(self.uri):  # a read-only search creates no folder
            if os.path.exists(self.uri):
                raise UsageError(f"{self.uri} is not a LanceDB export folder (it is a file; `memory-core export"
                                 " --format lancedb DIR` writes a folder)")
            raise missing
        self._db = lancedb.connect(self.uri)
        self._missing = missing
        self._days: tuple[int, list[date]] | None = None  # (table version, conversation days)
        self._open()
        self._provider = provider
        self._provider_checked = provider is not None
        self.provider_note = ""
        self.last_search = SearchRun()  # what the last search did, for the answer's metadata
        self._ranker = Searcher(settings)  # rank() only: it opens no index

    def _open(self) -> None:
        """Open both tables of one whole export. An export to a local folder renames its two
        tables into place one after the other: a reader in between sees two export ids (or a
        table missing for an instant) and opens them again; still so after a while, the export
        is incomplete (one stopped on object storage, or by a version before the staging folder)."""
        self.previous_export = False
        for attempt in range(OPEN_ATTEMPTS):
            if attempt:
                time.sleep(OPEN_PAUSE_S)
            names = _tables(self._db)
            if TABLE not in names and TERMS not in names:
                raise self._missing
            try:
                table, terms = self._db.open_table(TABLE), self._db.open_table(TERMS)
            except (ValueError, OSError, RuntimeError):  # a table not there (yet, or any more)
                continue
            if not (is_export_table(table, TABLE) and is_export_table(terms, TERMS)
                    and set(_COLS) <= set(table.schema.names) and {"term", "df"} <= set(terms.schema.names)):
                raise UsageError(f"the LanceDB tables {TABLE!r} and {TERMS!r} at {self.uri} are not a memory-core"
                                 " export (`memory-core export --format lancedb` writes them)")
            if not _whole(table, terms):
                try:
                    pair = _previous_whole(self._db)
                except (ValueError, OSError, RuntimeError):  # versions removed as we read them
                    pair = None
                if pair is None:
                    continue
                table, terms = pair
                # an export writing in place (object storage) or stopped there: the last whole one
                self.previous_export = True
                log.warning("the LanceDB export at %s is being replaced or an export there stopped before it"
                            " finished: answering from the previous whole export (chunks version %s)",
                            self.uri, table.version)
            md, tmd = table.schema.metadata or {}, terms.schema.metadata or {}
            n_chunks = int(tmd.get(b"memory_core.n_chunks", b"0"))
            self.table, self.terms, self.n_chunks = table, terms, n_chunks
            self.has_vectors = "vector" in table.schema.names
            # the index's FTS5 tokens (Porter stems); an export before it: LanceDB's words of the text
            self.stemmed = WORDS in table.schema.names
            # names respelled, short names' and nicknames' other forms, as the index's keyword side reads them
            self.lexicon = ExportLexicon(table, terms, self.stemmed)
            # what the exported index recorded (provider, model, key, dims)
            self.record = IndexRecord.from_meta(json.loads(md.get(b"memory_core.meta", b"{}"))) or IndexRecord()
            self.background = json.loads(tmd.get(b"memory_core.background_cosine", b"null"))
            return
        raise IndexMissingError(f"the LanceDB export at {self.uri} is incomplete (an export stopped before it"
                                f" finished, or one is writing it now); run `memory-core export --format lancedb"
                                f" {self.uri}` again")

    def close(self) -> None:
        self._ranker.close()

    def _conversation_days(self) -> list[date]:
        """The export's conversation days (the index's :func:`memory_core.query.dates.conversation_days`):
        each daily note's day and each day a transcript chunk is dated by its messages; an undated
        file's date (its modification day) is no conversation's. Read once per opened export."""
        from memory_core.query.dates import date_from_path

        version = self.table.version
        if self._days is None or self._days[0] != version:
            days: set[date] = set()
            for r in self.table.search().select(["path", "source", "date"]).limit(None).to_arrow().to_pylist():
                d = date_from_path(r["path"] or "")
                stamp = r["date"] or ""
                if d is None and r["source"] == "sessions" and "T" in stamp:
                    with contextlib.suppress(ValueError):
                        d = date.fromisoformat(stamp[:10])
                if d is not None:
                    days.add(d)
            self._days = (version, sorted(days))
        return self._days[1]


    def __enter__(self) -> LanceSearcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _query_provider(self) -> EmbeddingProvider | None:
        if not self.has_vectors:  # exported with --no-vectors (or a keyword-only index): keyword-only
            return None
        return self._provider_for(self.record, "export", "exported again")

    def search(self, query: str, max_results: int | None = None, min_score: float | None = None,
               sources: list[str] | None = None, *, mode: str | None = None) -> list[Any]:
        from memory_core.query.search import MODES

        q = self.settings.query
        mode = q.search_mode() if mode is None else mode
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        max_results = q.max_results if max_results is None else max(1, int(max_results))
        n = self._ranker.candidate_count(max_results)
        for attempt in range(SEARCH_ATTEMPTS):
            try:
                cands = self.retrieve(query, n, sources, vector=mode != "keyword", keyword=mode != "vector")
                break
            except (OSError, RuntimeError, ValueError):  # the export was replaced under the search: again
                if attempt == SEARCH_ATTEMPTS - 1:
                    raise
                self._open()
        # the builtin ranking
        self.last_search = SearchRun(embedded=cands.embedded, words_absent=cands.words_absent)
        return self._ranker.rank(cands, max_results=max_results, min_score=min_score, mode=mode)

    def index_record(self) -> IndexRecord:
        """What the exported index recorded (provider, model, dims)."""
        return self.record

    def search_response(self, query: str, max_results: int | None = None, min_score: float | None = None,
                        sources: list[str] | None = None, *, mode: str | None = None,
                        chat_type: str | None = None, extra: ResultSource | None = None) -> SearchAnswer:
        """The answer ``search --json`` prints for the index itself, metadata and all
        (:func:`memory_core.query.search.search_answer`)."""
        from memory_core.query.search import search_answer

        return search_answer(self, query, max_results, min_score, sources, mode=mode, chat_type=chat_type,
                             extra=extra)

    def retrieve(self, query: str, n_candidates: int, sources: list[str] | None = None, *,
                 vector: bool = True, keyword: bool = True, read_days: bool = True) -> Candidates:
        """The candidates of both sides with both raw scores, as :meth:`Searcher.retrieve` gives them
        (a query naming days the export holds nothing of searched again with every word)."""
        from memory_core.query.dates import latest_day, query_date_range
        from memory_core.query.search import Candidates, day_words_taken_out

        query = well_formed(query or "")
        if not query.strip() or not self.n_chunks:  # the export of an empty index: no results
            return Candidates(query, [], [], False)
        days = self._conversation_days
        # year-less and relative days against the export's own timeline, as the index's Searcher does
        dates = query_date_range(query, anchor=lambda: latest_day(days()),
                                 date_order=self.settings.query.date_order,
                                 tolerance=self.settings.query.day_tolerance_hours, timeline=days) if read_days else None
        sides = (vector, keyword)
        # a month named whole stays a word where the export has it (as the index's Searcher does)
        kept = (self._tokens([dates.kept]) or [""])[0] if dates and dates.kept else ""
        keep = bool(kept) and bool(
            self.terms.search().where("term = '" + kept.replace("'", "''") + "'").limit(1).to_list())
        text = dates.strip(query, keep=keep) if dates else query
        if not text.strip():
            vector = keyword = False
        srcs = list(dict.fromkeys(sources)) if sources else None
        where = " OR ".join(f"source = '{s}'" for s in srcs if s in ("memory", "sessions")) if srcs else None
        if srcs and not where:
            return Candidates(query, [], [], False)
        provider = self._query_provider() if vector else None
        qvec = None
        by_id: dict[str, ranking.Hit] = {}
        vec_hits: list[ranking.Hit] = []
        if provider is not None:
            try:
                qvec = np.asarray(provider.embed_query(query_for_provider(text[:8000], self.settings.redact)),
                                  dtype=np.float32)
                qvec = qvec / max(float(np.linalg.norm(qvec)), 1e-12)
            except ProviderError as exc:
                self.provider_note = f"query embedding failed ({exc}); keyword-only results"
                qvec = None
        if qvec is not None:
            vq = self.table.search(qvec.tolist()).distance_type("cosine").select([*_COLS, "_distance"]).limit(
                n_candidates)
            if where:
                vq = vq.where(where, prefilter=True)
            for r in vq.to_list():
                h = self._hit(r, len(by_id))
                h.vector_score, h.in_vector = 1.0 - float(r["_distance"]), True
                by_id[h.id] = h
                vec_hits.append(h)
        if dates is not None:  # the chunks of the days named that neither side found, as the index adds them
            for r in self._of_dates(dates, where):
                if str(r["id"]) not in by_id:
                    by_id[str(r["id"])] = self._hit(r, len(by_id))
        # a name as the export writes it (a misspelling respelled, a short name's or a nickname's
        # other form beside it), for the keyword side only, as the index's keyword side searches it
        from memory_core.query.retrieval import respelled

        kw_text = respelled(self.lexicon, text, knows=provider.knows_words if provider is not None else None) \
            if keyword else text
        words = textsearch.query_terms(kw_text) if keyword else []
        terms = [] if all(textsearch.is_stop_word(w) for w in words) else words
        tokens = self._tokens(terms)
        kw_hits: list[ranking.Hit] = []
        idf_total, coverage = 0.0, 1.0
        absent: list[str] = []  # the query's words (not stop words) no chunk contains
        if tokens:
            fts = " ".join(tokens)
            for r in self._fts(fts, n_candidates, where, _COLS):
                kh = by_id.get(str(r["id"]))
                if kh is None:
                    kh = by_id[str(r["id"])] = self._hit(r, len(by_id))
                kh.bm25, kh.in_keyword = float(r["_score"]), True
                kh.text_score = kh.bm25 / (1 + kh.bm25)
                kw_hits.append(kh)
            need = [h.id for h in by_id.values() if not h.in_keyword]
            if need:  # the BM25 of vector (and dated) candidates
                for r in self._fts(fts, len(need), _id_in(need), ["id"]):
                    h = by_id[str(r["id"])]
                    h.bm25 = float(r["_score"])
                    h.text_score = h.bm25 / (1 + h.bm25)
            df = self.lexicon.term_dfs(tokens)
            n = self.n_chunks
            present = 0.0
            for t in tokens:  # LanceDB's BM25 IDF
                d = df.get(t, 0)
                idf = math.log(1 + (n - d + 0.5) / (d + 0.5))
                idf_total += idf
                present += idf if d else 0.0
            if idf_total > 0 and not ranking.mostly_cjk(query):
                coverage = present / idf_total
            by_word = {w: self._tokens([w]) for w in terms if not textsearch.is_stop_word(w)}
            absent = [w for w, ts in by_word.items() if ts and not any(df.get(t, 0) for t in ts)]
        if qvec is not None:  # the cosine of keyword-only candidates, from their stored vectors
            missing = [h for h in by_id.values() if not h.in_vector]
            if missing:
                rows = self.table.search().where(_id_in([h.id for h in missing])).select(["id", "vector"]).limit(
                    len(missing)).to_list()
                for r in rows:
                    v = np.asarray(r["vector"], dtype=np.float32)
                    by_id[str(r["id"])].vector_score = float(v @ qvec / max(float(np.linalg.norm(v)), 1e-12))
        idents = [i.lower() for i in ranking.identifiers(text)] if keyword else []
        for h in by_id.values():
            h.has_identifier = bool(idents) and any(i in h.text.lower() for i in idents)
        cal = ranking.Calibration.for_model(self.record.model, self.background if qvec is not None else None,
                                            self.settings.query.vector_calibration)
        from memory_core.query.retrieval import model_reads_absent_words

        cands = Candidates(query, kw_hits, vec_hits, qvec is not None, list(by_id.values()), cal, idf_total, dates,
                           coverage, knows_absent_words=qvec is not None
                           and model_reads_absent_words(provider, absent, coverage, text))
        if dates is not None and not _of_days(cands.union, dates):
            # nothing of those days among the candidates: ranked as a query naming no day (the index's
            # rule, here by each candidate's one exported date), and searched as one: with every word
            if text != query and self._writes_any(day_words_taken_out(query, text)):  # words the export writes
                return self.retrieve(query, n_candidates, sources, vector=sides[0], keyword=sides[1], read_days=False)
            cands = replace(cands, dates=None)
        if qvec is not None and cands.union and wants_file_support(self.settings.query, cands):
            # each file's relevance as a whole, as the index's Searcher.retrieve places results by it
            cosines, share = self._file_support(qvec, cands.union)
            cands = replace(cands, file_cosines=cosines, multi_chunk_share=share)
        return cands

    def _writes_any(self, words: list[str]) -> bool:
        """Whether the export's vocabulary holds any of ``words`` (as its tokens)."""
        return any(self.lexicon.term_dfs(self._tokens(words)).values())

    def _of_dates(self, dates: DateRange, where: str | None) -> list[dict[str, Any]]:
        """The export's chunks dated within the days a query names (their ``date``: a dated note's
        day, a transcript chunk's earliest message), the hours of the range's tolerance past its end
        too; an open range's days next to its bound, at most ``MAX_DATED_CANDIDATES`` (the index's
        :func:`memory_core.query.dates.dated_chunk_rows`, by each chunk's one exported date)."""
        from datetime import timedelta

        from memory_core.query.dates import MAX_DATED_CANDIDATES, _fetched

        days = _fetched(dates)
        if days.is_open():  # (the edge of time on one side: nothing to fetch by date)
            return []
        hours = min(23, max(0, math.ceil(dates.tolerance)))
        # a next day's chunk within the tolerance too (past midnight)
        end = f"{(days.end + timedelta(days=1)).isoformat()}T{hours:02d}:00"
        cond = f"date >= '{days.start.isoformat()}' AND date < '{end}'" + (f" AND ({where})" if where else "")
        rows: list[dict[str, Any]] = self.table.search().where(cond).select(_COLS).limit(
            MAX_DATED_CANDIDATES).to_list()
        return rows

    def _file_support(self, qvec: np.ndarray, union: list[ranking.Hit]) -> tuple[dict[str, list[float]], float]:
        """:func:`memory_core.query.retrieval.file_cosines` and :func:`~memory_core.query.retrieval.multi_chunk_share`
        from the table: each candidate file's best ``FILE_SUPPORT_CHUNKS`` cosines over all its chunks
        (for the ``FILE_SUPPORT_FILES`` files of the nearest candidates, at most ``FILE_SUPPORT_MAX_READS``
        vectors read; the others: their candidates' cosines), and the share of the candidate files
        that hold more than one chunk. A chunk counts by its one exported vector (a transcript's
        chunk in the index: its best exchange's, not exported)."""
        from memory_core.query.retrieval import (
            FILE_SUPPORT_CHUNKS,
            FILE_SUPPORT_FILES,
            FILE_SUPPORT_MAX_READS,
        )

        own: dict[str, list[ranking.Hit]] = {}
        for h in union:
            own.setdefault(h.path, []).append(h)
        counts: dict[str, int] = {}
        for r in self.table.search().where(_in("path", list(own))).select(["path"]).limit(None).to_list():
            counts[str(r["path"])] = counts.get(str(r["path"]), 0) + 1
        share = sum(1 for p in own if counts.get(p, 0) > 1) / len(own)
        order = sorted(own, key=lambda p: max(h.vector_score for h in own[p]), reverse=True)[:FILE_SUPPORT_FILES]
        read: list[str] = []
        total = 0
        for p in order:
            if counts.get(p, 0) and total + counts[p] <= FILE_SUPPORT_MAX_READS:
                read.append(p)
                total += counts[p]
        got: dict[str, list[float]] = {}
        if read:
            for r in self.table.search().where(_in("path", read)).select(["path", "vector"]).limit(None).to_list():
                if r["vector"] is not None:
                    v = np.asarray(r["vector"], dtype=np.float32)
                    got.setdefault(str(r["path"]), []).append(
                        float(v @ qvec / max(float(np.linalg.norm(v)), 1e-12)))
        out: dict[str, list[float]] = {}
        for p, hs in own.items():
            cos = got.get(p) or [float(h.vector_score) for h in hs]
            out[p] = sorted(cos, reverse=True)[:FILE_SUPPORT_CHUNKS]
        return out, share

    def _tokens(self, terms: list[str]) -> list[str]:
        """The export's tokens of these query terms (unique, in order: :meth:`ExportLexicon.tokens`)."""
        return list(dict.fromkeys(t for w in terms for t in self.lexicon.tokens(w)))

    @staticmethod
    def _hit(r: dict[str, Any], rid: int) -> ranking.Hit:
        return ranking.Hit(id=str(r["id"]), path=str(r["path"]), source=str(r["source"]),
                           start_line=int(r["start_line"]), end_line=int(r["end_line"]), text=str(r["text"]),
                           mtime_ms=r.get("mtime"), date=r.get("date"), rid=rid)

    def _fts(self, text: str, k: int, where: str | None, cols: list[str]) -> list[dict[str, Any]]:
        fq = self.table.search(text, query_type="fts", fts_columns=WORDS if self.stemmed else "text").select(
            [*cols, "_score"]).limit(max(1, k))
        if where:
            fq = fq.where(where, prefilter=True)
        rows: list[dict[str, Any]] = fq.to_list()  # lancedb's query builder is untyped
        return rows

    def status(self) -> dict[str, object]:
        return {"uri": self.uri, "chunks": self.n_chunks, "provider": self.record.provider,
                "model": self.record.model, "dims": self.record.dims, "version": int(self.table.version),
                "export_id": (self.table.schema.metadata or {}).get(EXPORT_ID.encode(), b"").decode(),
                "previous_export": self.previous_export}


class ExportLexicon:
    """The export's words as the rules for names read them (:class:`memory_core.query.retrieval.Lexicon`):
    document counts from its terms table, the vocabulary from the same, chunk texts from its
    full-text index. Kept with the tables it read (a new export opens a new one); a read that fails
    is logged and reads nothing (the name is then searched as written)."""

    SAMPLE = 200
    """Chunks holding a name read to find whether one holds another word too (:meth:`holds_beside`)."""

    def __init__(self, table: Any, terms: Any, stemmed: bool) -> None:
        self._table, self._terms, self._stemmed = table, terms, stemmed
        self._spell_lock = threading.Lock()
        self._respelled: dict[tuple[str, bool], str] = {}
        self._names: dict[str, bool] = {}
        self._aliases: dict[str, str | None] = {}
        self._dfs: dict[str, int] = {}
        self._vocabulary: dict[tuple[int, str], list[tuple[str, int]]] | None = None

    def tokens(self, word: str) -> list[str]:
        """The export's tokens of one query term: FTS5's, Porter stems, as the index's MATCH makes
        them (an export before the ``words`` column: LanceDB's words)."""
        return [t for t in (query_words(word) if self._stemmed else doc_tokens(word)) if t]

    def query_tokens(self, word: str, conn: object = None) -> list[str] | None:
        return self.tokens(word)

    def term_dfs(self, tokens: list[str]) -> dict[str, int]:
        """The export's document frequency of each of ``tokens`` it holds (its terms table)."""
        if not tokens:
            return {}
        quoted = ",".join("'" + t.replace("'", "''") + "'" for t in tokens)
        return {str(r["term"]): int(r["df"]) for r in self._terms.search().where(f"term IN ({quoted})")
                .select(["term", "df"]).limit(len(tokens)).to_list()}

    def word_df(self, word: str, conn: object = None) -> int:
        """The chunks holding ``word``'s token (of a word of several tokens, its rarest one's: at least
        as many as hold them all)."""
        toks = self.tokens(word)
        missing = [t for t in toks if t not in self._dfs]
        if missing:
            try:
                got = self.term_dfs(missing)
            except (ValueError, OSError, RuntimeError) as exc:
                log.warning("reading the export's words failed (%s)", exc)
                return 0
            if len(self._dfs) < 10_000:
                self._dfs.update({t: got.get(t, 0) for t in missing})
            return min((got.get(t, self._dfs.get(t, 0)) for t in toks), default=0)
        return min((self._dfs[t] for t in toks), default=0)

    def vocabulary(self) -> dict[tuple[int, str], list[tuple[str, int]]]:
        """The export's terms (letters only, 3 or more) and their document counts by (length, first letter)."""
        with self._spell_lock:
            if self._vocabulary is not None:
                return self._vocabulary
            groups: dict[tuple[int, str], list[tuple[str, int]]] = {}
            try:
                for r in self._terms.search().select(["term", "df"]).limit(None).to_arrow().to_pylist():
                    term = r["term"]
                    if isinstance(term, str) and term.isalpha() and term.isascii() and len(term) >= 3:
                        groups.setdefault((len(term), term[0]), []).append((term, int(r["df"])))
            except (ValueError, OSError, RuntimeError) as exc:
                log.warning("the export's vocabulary cannot be read (%s); no near spellings", exc)
            self._vocabulary = groups
            return groups

    def _holding(self, word: str, limit: int, cols: list[str]) -> list[dict[str, Any]]:
        toks = self.tokens(word)
        if not toks:
            return []
        try:
            rows: list[dict[str, Any]] = self._table.search(" ".join(toks), query_type="fts", fts_columns=(
                WORDS if self._stemmed else "text")).select(cols).limit(max(1, limit)).to_list()
        except (ValueError, OSError, RuntimeError) as exc:
            log.warning("reading the export's chunks holding %r failed (%s)", word, exc)
            return []
        return rows

    def texts_holding(self, word: str, limit: int, conn: object = None) -> list[str]:
        """The text of the first ``limit`` chunks holding ``word`` (best BM25 first)."""
        return [str(r["text"] or "") for r in self._holding(word, limit, ["text"])]

    def holds_beside(self, word: str, others: Sequence[str], conn: object = None) -> bool:
        """Whether one of the first :data:`SAMPLE` chunks holding ``word`` holds one of ``others`` too."""
        want = {t for o in others for t in self.tokens(o)}
        col = WORDS if self._stemmed else "text"
        for r in self._holding(word, self.SAMPLE, [col]):
            have = str(r[col] or "").split() if self._stemmed else doc_tokens(str(r[col] or ""))
            if want.intersection(have):
                return True
        return False


def _of_days(hits: list[ranking.Hit], dates: DateRange) -> bool:
    """Whether any of ``hits`` is dated within ``dates`` (its ``date``'s day)."""
    for h in hits:
        try:
            if h.date and dates.start <= date.fromisoformat(str(h.date)[:10]) <= dates.end:
                return True
        except ValueError:
            continue
    return False


def _id_in(ids: list[str]) -> str:
    return _in("id", ids)


def _in(col: str, values: list[str]) -> str:
    return f"{col} IN (" + ",".join("'" + v.replace("'", "''") + "'" for v in values) + ")"


def _whole(table: Any, terms: Any) -> bool:
    """Whether these versions of ``chunks`` and ``terms`` are one whole export: the same export id,
    and the chunks' full-text index built (an export with chunks)."""
    md, tmd = table.schema.metadata or {}, terms.schema.metadata or {}
    if md.get(EXPORT_ID.encode()) != tmd.get(EXPORT_ID.encode()):
        return False
    n_chunks = int(tmd.get(b"memory_core.n_chunks", b"0"))
    return not n_chunks or any(i.index_type in ("FTS", "INVERTED") for i in table.list_indices())


def _previous_whole(db: Any) -> tuple[Any, Any] | None:
    """The newest versions of ``chunks`` and ``terms`` that hold one whole export, each checked out
    (pinned), or None. On object storage an export replaces both tables in place, one version after
    another, and removes the earlier versions only once it is whole: until then (and after an export
    stopped there) the previous export is still there as older versions. A local folder's tables
    keep one export's versions each, so there this finds nothing the latest versions do not give."""
    def versions(name: str) -> list[Any]:
        out = []
        for v in sorted((int(x["version"]) for x in db.open_table(name).list_versions()), reverse=True):
            t = db.open_table(name)
            t.checkout(v)
            out.append(t)
        return out

    chunk_versions = versions(TABLE)
    for terms in versions(TERMS):
        for table in chunk_versions:
            if _whole(table, terms):
                return table, terms
    return None
