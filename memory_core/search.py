"""The query module: read-only hybrid search over a memory-core index.

It never imports the indexing code. A :class:`Searcher` keeps one read-only connection
(and SQLite's statement cache) between queries and reopens the file when a reindex swapped
a new one in, so a long-lived searcher (CLI, MCP server, agent tool) always answers from the
live index and no query fails during a swap: the old file stays readable until closed.

Retrieval: keyword candidates from FTS5 (BM25) and vector candidates from sqlite-vec KNN
(``embedding MATCH ? AND k = ?``), or an in-process numpy cosine when sqlite-vec cannot be
loaded; each side returns ``max_results x candidate_multiplier`` candidates (capped at 200),
fused by :func:`memory_core.ranking.fuse`, then optional temporal decay and MMR,
overlap-aware dedupe, snippets and citations.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import apsw
import numpy as np

from memory_core import ranking, textsearch
from memory_core.config import Settings
from memory_core.discovery import resolve_indexed_path
from memory_core.errors import IndexDamagedError, IndexMissingError, PathError, ProviderError
from memory_core.store import connect_reader, has_table, load_vec, probe_index, read_meta

log = logging.getLogger("memory_core.search")

SNIPPET_MAX_CHARS = 700
MAX_CANDIDATES = 200
MAX_GET_LINES = 2000
MODES = ("hybrid", "vector", "keyword")

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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
        self.has_vec_table = has_table(self.conn, "chunks_vec")
        self.vec_loaded = self.has_vec_table and load_vec(self.conn)
        self.dims = self.meta.get("dims")
        self._matrix: tuple[np.ndarray, np.ndarray] | None = None
        self._path = path
        self._kw_conn: apsw.Connection | None | bool = None  # False: could not be opened

    def keyword_conn(self) -> apsw.Connection | None:
        """A second connection for the keyword side, so it can run beside the vector side."""
        if self._kw_conn is None:
            try:
                self._kw_conn = connect_reader(self._path)
            except apsw.Error:
                self._kw_conn = False
        return self._kw_conn or None

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
               sources: list[str] | None = None, *, mode: str = "hybrid") -> list[SearchResult]:
        """Ranked results for ``query``.

        ``mode``: ``"hybrid"`` (default: both sides when the index has vectors and the query can be
        embedded, else keyword-only), ``"vector"`` or ``"keyword"`` (one side alone, for
        evaluation and debugging; the rest of the pipeline is the same).
        """
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        q = self.settings.query
        max_results = q.max_results if max_results is None else max(1, int(max_results))
        cands = self.retrieve(query, self.candidate_count(max_results), sources,
                              vector=mode != "keyword", keyword=mode != "vector")
        return self.rank(cands, max_results=max_results, min_score=min_score, mode=mode)

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
        """
        query = (query or "").replace("\x00", " ")
        if not query.strip():
            return Candidates(query, [], [], False)
        srcs = tuple(dict.fromkeys(sources)) if sources else None
        with self._lock:
            idx = self._current()
            provider = self._query_provider(idx) if (vector and self.settings.query.hybrid) else None
            pending: Future[list[ranking.Hit]] | None = None
            kw_hits: list[ranking.Hit] = []
            if keyword:
                kw_conn = idx.keyword_conn() if (provider is not None and self.parallel) else None
                if kw_conn is not None:
                    pending = self._worker().submit(self._keyword_hits, idx, query, n_candidates, srcs, kw_conn)
                else:
                    kw_hits = self._keyword_hits(idx, query, n_candidates, srcs)
            vec_hits: list[ranking.Hit] = []
            embedded = False
            try:
                if provider is not None:
                    try:
                        qvec = np.asarray(provider.embed_query(query[:8000]), dtype=np.float32)
                        vec_hits = self._vector_hits(idx, qvec, n_candidates, srcs)
                        embedded = True
                    except ProviderError as exc:
                        self.provider_note = f"query embedding failed ({exc}); keyword-only results"
                        log.warning("%s", self.provider_note)
            finally:
                if pending is not None:
                    kw_hits = pending.result()
        return Candidates(query, kw_hits, vec_hits, embedded)

    parallel = True
    """Run the keyword side beside the vector side (set False to run them one after the other)."""

    def _worker(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memory-core-fts")
        return self._pool

    def rank(self, cands: Candidates, *, max_results: int | None = None, min_score: float | None = None,
             mode: str = "hybrid") -> list[SearchResult]:
        """Fuse, decay, threshold, dedupe, diversify and cut ``cands``; make snippets and citations.

        ``mode="vector"`` / ``"keyword"`` rank one side alone (its score is that side's fused
        score with weight 1). Pure given the candidates: evaluation replays it per setting.
        """
        q = self.settings.query
        max_results = q.max_results if max_results is None else max(1, int(max_results))
        min_score = q.min_score if min_score is None else float(min_score)
        vec = cands.vector if mode != "keyword" else []
        kw = cands.keyword if mode != "vector" else []
        if not vec or not kw:
            hits = ranking.fuse(vec, kw, method=q.fusion, vector_weight=1.0 if vec else 0.0,
                                text_weight=1.0 if kw else 0.0)
        else:
            vw, tw = q.normalised_weights()
            hits = ranking.fuse(vec, kw, method=q.fusion, vector_weight=vw, text_weight=tw)
        if q.temporal_decay.enabled:
            hits = ranking.apply_temporal_decay(hits, q.temporal_decay.half_life_days, now=time.time())
        hits = [h for h in hits if h.score >= min_score]
        hits = ranking.dedupe_overlapping(hits)
        if q.mmr.enabled:
            hits = ranking.mmr_rerank(hits, q.mmr.lambda_)
        hits = hits[:max_results]
        terms = textsearch.query_terms(cands.query) or cands.query.split() if hits else []
        return [
            SearchResult(
                path=h.path, start_line=h.start_line, end_line=h.end_line, score=round(float(h.score), 6),
                snippet=ranking.make_snippet(h.text, terms, SNIPPET_MAX_CHARS), source=h.source,
                citation=f"{h.path}#L{h.start_line}-L{h.end_line}",
                vector_score=round(float(h.vector_score), 6), text_score=round(float(h.text_score), 6),
            )
            for h in hits
        ]

    @staticmethod
    def _hits(rows: Any, side: str, to_score: Any) -> list[ranking.Hit]:
        out = []
        for _rid, raw, cid, path, source, start, end, text, mtime in rows:
            h = ranking.Hit(id=cid, path=path, source=source, start_line=start, end_line=end, text=text,
                            mtime_ms=mtime)
            if side == "text":
                h.text_score = to_score(raw)
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
        sql = (
            "WITH v AS MATERIALIZED (SELECT key AS pos, value AS rid FROM json_each(?)) "
            + _ROW_SELECT.format(alias="v", raw="v.pos") + src + " ORDER BY v.pos LIMIT ?"
        )
        top_sims = [float(sims[i]) for i in top]
        rows = idx.conn.execute(sql, (json.dumps([int(rids[i]) for i in top]), *(sources or ()), k))
        return self._hits(rows, "vector", lambda pos: top_sims[pos])

    # -- read_file ----------------------------------------------------------------------------
    def read_file(self, path: str, from_line: int | None = None, lines: int | None = None) -> dict[str, Any]:
        """Lines of an indexed source file. Paths outside the indexed sources are refused."""
        if not isinstance(path, str) or not path.strip():
            raise PathError("path is empty")
        path = path.strip()
        with self._lock:
            idx = self._current()
            row = idx.conn.execute("SELECT path, source FROM files WHERE path = ?", (path,)).fetchone()
        if row is None:
            raise PathError(f"not an indexed file: {path}")
        source = row[1]
        from memory_core.indexmeta import IndexRecord

        record = IndexRecord.from_meta(idx.meta) if idx.meta else None
        where = record.reader_settings(self.settings) if record else self.settings  # the index's own workspace
        resolve_indexed_path(where, path)
        start = max(1, int(from_line or 1))
        count = MAX_GET_LINES if lines is None else max(0, min(int(lines), MAX_GET_LINES))
        end = start + count - 1
        from memory_core.safeio import open_indexed

        real = open_indexed(where, path)  # an fd: no symlink in any component, regular files only
        out: list[str] = []
        try:
            if source == "sessions":
                from memory_core.sessions import session_lines_for_range

                out = session_lines_for_range(real, start, end)
            else:
                with open(real, encoding="utf-8", errors="replace", newline="") as fh:
                    for n, line in enumerate(fh, 1):
                        if n > end:
                            break
                        if n >= start:
                            out.append(line.rstrip("\n"))
        except FileNotFoundError:
            raise PathError(f"{path} is indexed but no longer exists") from None
        except OSError as exc:
            raise PathError(f"cannot read {path}: {exc.strerror}") from None
        if source != "sessions" and (idx.meta or {}).get("redact", self.settings.redact) == "all":  # transcripts come back redacted
            from memory_core.redact import redact_lines

            out = redact_lines("\n".join(out)).split("\n") if out else out  # PEM blocks across lines too
        return {"path": path, "source": source, "from": start, "lines": len(out), "text": "\n".join(out)}

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
                vector_search=("vec0 KNN" if idx.vec_loaded else
                               "off (sqlite-vec not loadable; the vectors are in vec0)" if idx.has_vec_table else
                               "numpy cosine (sqlite-vec not loadable)")
                if m.get("dims") else "off (keyword-only index)",
                index_bytes=self.path.stat().st_size,
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
        return st
