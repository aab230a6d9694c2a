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
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import apsw
import numpy as np

from memory_core import ranking, textsearch
from memory_core.config import Settings
from memory_core.discovery import resolve_indexed_path
from memory_core.errors import IndexDamagedError, IndexMissingError, PathError, ProviderError
from memory_core.store import connect, has_table, load_vec, probe_index, read_meta

log = logging.getLogger("memory_core.search")

SNIPPET_MAX_CHARS = 700
MAX_CANDIDATES = 200
MAX_GET_LINES = 2000


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
        self.conn = connect(path, readonly=True, immutable=True)
        try:
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
            if self._idx is None or self._idx.ident != ident:
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

    # -- query embedding ------------------------------------------------------------------
    def _query_provider(self, idx: _Index) -> Any:
        meta = idx.meta or {}
        if meta.get("provider") in (None, "none") or not meta.get("dims"):
            return None
        if not self._provider_checked:
            self._provider_checked = True
            try:
                from memory_core.embeddings.registry import create_provider

                s = self.settings.model_copy(update={"provider": meta["provider"], "model": meta.get("model"),
                                                     "fallback": None})
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
               sources: list[str] | None = None) -> list[SearchResult]:
        q = self.settings.query
        max_results = q.max_results if max_results is None else max(1, int(max_results))
        min_score = q.min_score if min_score is None else float(min_score)
        query = (query or "").replace("\x00", " ")
        if not query.strip():
            return []
        idx = self._current()
        n_cand = min(MAX_CANDIDATES, max(1, int(max_results * q.candidate_multiplier)))
        sources = list(sources) if sources else None

        provider = self._query_provider(idx) if q.hybrid else None
        keyword_only = provider is None
        kw_hits = self._keyword_hits(idx, query, n_cand, sources, expand=keyword_only)
        vec_hits: list[ranking.Hit] = []
        if provider is not None:
            try:
                qvec = np.asarray(provider.embed_query(query[:8000]), dtype=np.float32)
                vec_hits = self._vector_hits(idx, qvec, n_cand, sources)
            except ProviderError as exc:
                self.provider_note = f"query embedding failed ({exc}); keyword-only results"
                log.warning("%s", self.provider_note)
                keyword_only = True
        if keyword_only:
            hits = ranking.fuse([], kw_hits, method=q.fusion, vector_weight=0.0, text_weight=1.0)
        else:
            vw, tw = q.normalised_weights()
            hits = ranking.fuse(vec_hits, kw_hits, method=q.fusion, vector_weight=vw, text_weight=tw)
        if q.temporal_decay.enabled:
            hits = ranking.apply_temporal_decay(hits, q.temporal_decay.half_life_days, now=time.time())
            hits.sort(key=lambda h: h.score, reverse=True)
        hits = [h for h in hits if h.score >= min_score]
        hits = ranking.dedupe_overlapping(hits)
        if q.mmr.enabled:
            hits = ranking.mmr_rerank(hits, q.mmr.lambda_)
        terms = textsearch.query_terms(query) or query.split()
        out = []
        for h in hits[:max_results]:
            snippet = ranking.make_snippet(h.text, terms, SNIPPET_MAX_CHARS)
            out.append(SearchResult(
                path=h.path, start_line=h.start_line, end_line=h.end_line, score=round(float(h.score), 6),
                snippet=snippet, source=h.source, citation=f"{h.path}#L{h.start_line}-L{h.end_line}",
                vector_score=round(float(h.vector_score), 6), text_score=round(float(h.text_score), 6),
            ))
        return out

    def _rows(self, idx: _Index, rids: list[int]) -> dict[int, tuple[Any, ...]]:
        if not rids:
            return {}
        marks = ",".join("?" * len(rids))
        return {
            r[0]: r
            for r in idx.conn.execute(
                f"SELECT rid, id, path, source, start_line, end_line, text FROM chunks WHERE rid IN ({marks})", rids
            )
        }

    def _mtimes(self, idx: _Index, paths: set[str]) -> dict[str, int]:
        if not paths:
            return {}
        marks = ",".join("?" * len(paths))
        return dict(idx.conn.execute(f"SELECT path, mtime FROM files WHERE path IN ({marks})", list(paths)))

    def _to_hits(self, idx: _Index, scored: list[tuple[int, float]], field: str) -> list[ranking.Hit]:
        rows = self._rows(idx, [rid for rid, _ in scored])
        mtimes = self._mtimes(idx, {rows[rid][2] for rid, _ in scored if rid in rows})
        hits = []
        for rid, score in scored:
            r = rows.get(rid)
            if r is None:
                continue
            h = ranking.Hit(id=r[1], path=r[2], source=r[3], start_line=r[4], end_line=r[5], text=r[6],
                            mtime_ms=mtimes.get(r[2]))
            setattr(h, field, score)
            hits.append(h)
        return hits

    def _keyword_hits(self, idx: _Index, query: str, k: int, sources: list[str] | None,
                      *, expand: bool) -> list[ranking.Hit]:
        match = textsearch.build_match_query(query)
        if not match:
            return []
        sql = "SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?"
        args: list[Any] = [match]
        if sources:
            sql += f" AND source IN ({','.join('?' * len(sources))})"
            args.extend(sources)
        sql += " ORDER BY bm25(chunks_fts) LIMIT ?"
        args.append(k)
        try:
            scored = [(rid, ranking.bm25_rank_to_score(rank)) for rid, rank in idx.conn.execute(sql, args)]
        except apsw.SQLError as exc:  # never let query text break search
            log.warning("keyword query failed (%s); no keyword results", exc)
            return []
        return self._to_hits(idx, scored, "text_score")

    def _vector_hits(self, idx: _Index, qvec: np.ndarray, k: int, sources: list[str] | None) -> list[ranking.Hit]:
        if idx.dims and qvec.shape[0] != idx.dims:
            raise ProviderError(f"query vector has {qvec.shape[0]} dims, index has {idx.dims}")
        want = k * 4 if sources else k
        if idx.vec_loaded:
            rows = idx.conn.execute(
                "SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ?",
                (qvec.astype("<f4").tobytes(), min(4096, want)),
            ).fetchall()
            scored = [(rid, 1.0 - float(dist)) for rid, dist in rows]
        else:
            rids, m = idx.matrix()
            if len(rids) == 0:
                return []
            qn = qvec / (np.linalg.norm(qvec) or 1.0)
            sims = m @ qn
            top = np.argsort(-sims)[:want]
            scored = [(int(rids[i]), float(sims[i])) for i in top]
        hits = self._to_hits(idx, scored, "vector_score")
        if sources:
            hits = [h for h in hits if h.source in sources][:k]
        return hits

    # -- read_file ----------------------------------------------------------------------------
    def read_file(self, path: str, from_line: int | None = None, lines: int | None = None) -> dict[str, Any]:
        """Lines of an indexed source file. Paths outside the indexed sources are refused."""
        if not isinstance(path, str) or not path.strip():
            raise PathError("path is empty")
        path = path.strip()
        idx = self._current()
        row = idx.conn.execute("SELECT path, source FROM files WHERE path = ?", (path,)).fetchone()
        if row is None:
            raise PathError(f"not an indexed file: {path}")
        source = row[1]
        real = resolve_indexed_path(self.settings, path)
        start = max(1, int(from_line or 1))
        count = MAX_GET_LINES if lines is None else max(0, min(int(lines), MAX_GET_LINES))
        end = start + count - 1
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
        if source != "sessions" and self.settings.redact == "all":  # transcripts come back redacted
            from memory_core.redact import redact

            out = [redact(x) for x in out]
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
            vector_search=("vec0 KNN" if idx.vec_loaded else "numpy cosine (sqlite-vec not loadable)")
            if m.get("dims") else "off (keyword-only index)",
            index_bytes=self.path.stat().st_size,
            cache_entries=cache_entry_count(self.settings.cache_file),
            cache_path=str(self.settings.cache_file),
        )
        if self.provider_note:
            st["note"] = self.provider_note
        return st
