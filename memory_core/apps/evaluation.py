"""Retrieval evaluation on labelled queries (BEIR format): ``memory-core eval``.

    memory-core eval -w WORKSPACE --queries queries.jsonl --qrels qrels.tsv [--sides] [--json]

Inputs
    ``--queries``: JSON lines ``{"_id": "q1", "text": "..."}`` (BEIR ``queries.jsonl``; other
    keys are ignored). ``--qrels``: tab-separated ``query-id  corpus-id  score`` (BEIR
    ``qrels/test.tsv``; an optional header line, blank lines and ``#`` comments are skipped; the
    score is the graded relevance, 0 means judged not relevant). Only queries with at least one
    relevant document are evaluated (as BEIR does).

Corpus ids are files of the index
    A corpus id names an indexed file. It is resolved, in order, by: the ``--corpus-map`` TSV
    (``corpus-id  indexed-path``, optional header); the indexed path itself
    (``memory/2026-09-04.md``); the path without ``.md`` (``memory/2026-09-04``); the file name
    without ``.md`` when exactly one indexed file has it (``2026-09-04``). Ids that resolve to no
    indexed file still count as relevant (they can never be found) and are reported, so a
    mapping mistake shows up as a warning instead of a silently inflated score.

From chunks to files
    Search ranks chunks. A chunk hit counts for its file, and a file's rank is the rank of its
    best chunk (later chunks of the same file are skipped, so the file ranking has no repeats).
    Each query asks the searcher for ``max_results`` (default 100) chunks with the current
    settings (weights, fusion, min_score, candidate multiplier, MMR, decay), so the candidate
    pool per side is ``min(200, max_results x candidate_multiplier)``.

Metrics (the BEIR / trec_eval definitions), averaged over the evaluated queries
    * nDCG@k: ``DCG = sum_i rel_i / log2(i + 1)`` over the top k files (linear gains, as
      pytrec_eval), divided by the DCG of the ideal ordering of the judged relevant files;
    * Recall@k: relevant files in the top k / relevant files (relevance > 0);
    * MRR@10: 1 / rank of the first relevant file in the top 10 (0 if none).

``--sides`` also ranks with each retrieval side alone (``vector``: the embedding KNN only, from
the hybrid's candidates; ``keyword``: FTS5 BM25 only, as a keyword-only search retrieves and ranks
them), through the same pipeline and settings; when ``min_score`` is not 0, each side again at 0
(``hybrid@0``, ``keyword@0``, ``vector@0``); and two plain baselines over the same chunks,
computed apart from the ranking code, with no threshold (:class:`PlainBaselines`): ``bm25``
(FTS5 ``bm25()`` of the OR of the query's terms) and ``convex`` (0.5/0.5 fusion of that BM25 and
the exact cosine, each min-max normalised per query over the union of both sides' candidates).
What the default must not fall below (issue 37).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import stat
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from memory_core.errors import UsageError
from memory_core.index.run_stops import is_stop
from memory_core.sources.redact import query_for_provider

if TYPE_CHECKING:
    from memory_core.config import Settings
    from memory_core.query.retrieval import Candidates
    from memory_core.query.search import Searcher

__all__ = [
    "METRICS",
    "BASELINES",
    "PlainBaselines",
    "add_eval_parser",
    "cmd_eval",
    "convex_fusion",
    "evaluate_run",
    "file_ranking",
    "format_report",
    "load_corpus_map",
    "load_qrels",
    "load_queries",
    "main",
    "mrr_at_k",
    "ndcg_at_k",
    "recall_at_k",
    "resolve_corpus_ids",
    "run_eval",
]

METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")
SIDES = ("hybrid", "vector", "keyword")


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------
def ndcg_at_k(ranked: Sequence[str], rels: Mapping[str, int], k: int = 10) -> float:
    """nDCG@k with linear gains (trec_eval / pytrec_eval / BEIR): 0 when nothing is relevant."""
    ideal = sorted((r for r in rels.values() if r > 0), reverse=True)[:k]
    if not ideal:
        return 0.0
    dcg = sum(rels.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranked[:k]) if rels.get(doc, 0) > 0)
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg


def recall_at_k(ranked: Sequence[str], rels: Mapping[str, int], k: int) -> float:
    """Relevant documents in the top k / all relevant documents (relevance > 0)."""
    relevant = {d for d, r in rels.items() if r > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranked[:k])) / len(relevant)


def mrr_at_k(ranked: Sequence[str], rels: Mapping[str, int], k: int = 10) -> float:
    """1 / rank of the first relevant document within the top k, else 0."""
    for i, doc in enumerate(ranked[:k]):
        if rels.get(doc, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def query_metrics(ranked: Sequence[str], rels: Mapping[str, int]) -> dict[str, float]:
    return {
        "ndcg@10": ndcg_at_k(ranked, rels, 10),
        "recall@10": recall_at_k(ranked, rels, 10),
        "recall@100": recall_at_k(ranked, rels, 100),
        "mrr@10": mrr_at_k(ranked, rels, 10),
    }


def evaluate_run(run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]) -> dict[str, float]:
    """Mean of each metric over the queries of ``qrels`` that have a relevant document.

    ``run`` maps a query id to its ranked document ids; a query missing from ``run`` scores 0.
    """
    judged = [qid for qid, rels in qrels.items() if any(r > 0 for r in rels.values())]
    if not judged:
        return dict.fromkeys(METRICS, 0.0)
    totals = dict.fromkeys(METRICS, 0.0)
    for qid in judged:
        for name, value in query_metrics(run.get(qid, []), qrels[qid]).items():
            totals[name] += value
    return {name: totals[name] / len(judged) for name in METRICS}


def file_ranking(paths: Iterable[str]) -> list[str]:
    """Ranked chunk paths -> ranked files: each file at the rank of its best (first) chunk."""
    return list(dict.fromkeys(paths))


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------
def _read_lines(path: str | Path, what: str) -> list[str]:
    try:
        with open(path, encoding="utf-8-sig") as fh:
            return fh.read().splitlines()
    except FileNotFoundError:
        raise UsageError(f"{what} file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {what} file {path}: {exc}") from None


def load_queries(path: str | Path) -> dict[str, str]:
    """BEIR ``queries.jsonl`` -> {query id: text}. Bad lines are errors naming the line."""
    out: dict[str, str] = {}
    for n, line in enumerate(_read_lines(path, "queries"), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            qid, text = rec["_id"], rec["text"]
        except (ValueError, KeyError, TypeError):
            raise UsageError(f"{path}:{n}: expected a JSON object with \"_id\" and \"text\"") from None
        if not isinstance(text, str):
            raise UsageError(f"{path}:{n}: \"text\" must be a string")
        out[str(qid)] = text
    return out


def _tsv_rows(path: str | Path, what: str, width: int) -> Iterable[tuple[int, list[str]]]:
    for n, line in enumerate(_read_lines(path, what), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cols = [c.strip() for c in line.split("\t")]
        if len(cols) < width:
            cols = line.split()
        if len(cols) < width:
            raise UsageError(f"{path}:{n}: expected {width} tab-separated columns")
        yield n, cols


def load_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """BEIR qrels TSV (``query-id  corpus-id  score``) -> {query id: {corpus id: relevance}}."""
    out: dict[str, dict[str, int]] = {}
    for n, cols in _tsv_rows(path, "qrels", 3):
        try:
            score = int(float(cols[2]))
        except ValueError:
            if n == 1 or not out:  # the header line
                continue
            raise UsageError(f"{path}:{n}: the score {cols[2]!r} is not a number") from None
        out.setdefault(cols[0], {})[cols[1]] = score
    return out


def load_corpus_map(path: str | Path) -> dict[str, str]:
    """``corpus-id  indexed-path`` TSV -> {corpus id: indexed path}; a header line is allowed."""
    out: dict[str, str] = {}
    for n, cols in _tsv_rows(path, "corpus map", 2):
        if n == 1 and cols[0].lower().replace("_", "-") in ("corpus-id", "id", "doc-id"):
            continue
        out[cols[0]] = cols[1]
    return out


def resolve_corpus_ids(ids: Iterable[str], indexed_paths: Iterable[str],
                       corpus_map: Mapping[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """Map corpus ids to indexed paths (see the module docstring). Returns (mapping, unresolved)."""
    paths = set(indexed_paths)
    no_ext: dict[str, str] = {}
    stems: dict[str, list[str]] = {}
    for p in paths:
        base = p[:-3] if p.endswith(".md") else p
        no_ext.setdefault(base, p)
        stems.setdefault(base.rsplit("/", 1)[-1], []).append(p)
    mapping: dict[str, str] = {}
    unresolved: list[str] = []
    for cid in dict.fromkeys(ids):
        target = None
        if corpus_map and cid in corpus_map:
            target = corpus_map[cid] if corpus_map[cid] in paths else None
        elif cid in paths:
            target = cid
        elif cid in no_ext:
            target = no_ext[cid]
        else:
            stem = cid[:-3] if cid.endswith(".md") else cid
            cands = stems.get(stem, [])
            if len(cands) == 1:
                target = cands[0]
        if target is None:
            unresolved.append(cid)
        else:
            mapping[cid] = target
    return mapping, unresolved


# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------
def keyword_only_candidates(searcher: Searcher, query: str, n_candidates: int, hybrid: Candidates) -> Candidates:
    """The candidates a keyword-only search ranks, for the keyword column beside the hybrid's
    ``hybrid`` candidates: retrieved again without the vector side when it ran (beside it, the
    keyword side leaves the phrases in half the rows out of its choice: retrieval.keyword_hits)."""
    return searcher.retrieve(query, n_candidates, vector=False) if hybrid.embedded else hybrid


# ---------------------------------------------------------------------------------------------
# Plain baselines over the same chunks (issue 37)
# ---------------------------------------------------------------------------------------------
BASELINES = ("bm25", "convex")


class PlainBaselines:
    """Two reference rankings of an index's own chunks, computed apart from the ranking code
    (:mod:`memory_core.query`), so they stay put while it changes and say what a plain method
    makes of the same chunks:

    * ``bm25``: FTS5's ``bm25()`` over ``chunks_fts`` for the OR of the query's terms
      (:func:`memory_core.storage.textsearch.build_match_query`: the words as the keyword side
      reads them, stop words dropped unless nothing else is left), every matching chunk, best
      first (ties by row id);
    * ``convex``: ``0.5 * kw + 0.5 * vec`` over the union of the ``n_candidates`` best chunks of
      each side (the BM25 above; the exact cosine of the query's embedding with every chunk's
      stored vector), each side min-max normalised per query over that union (a chunk matching
      no term has BM25 0), no threshold. None when the index holds no vectors or no provider
      can embed the query.

    No date parsing, no coverage scaling, no threshold, no MMR, no decay: a file ranks at its
    best chunk (:func:`file_ranking`), as the searcher's results do.
    """

    def __init__(self, settings: Settings, provider: Any = None) -> None:
        import numpy as np

        from memory_core.storage.indexmeta import open_query_provider, vector_record
        from memory_core.storage.store import connect_reader, read_meta

        self.conn = connect_reader(settings.index_file)
        self.redact = settings.redact  # queries leave the machine redacted as notes do
        meta = read_meta(self.conn) or {}
        self.paths: dict[int, str] = {}
        self.lines: dict[int, tuple[int, int]] = {}  # row id -> (start line, end line) of its file
        rids: list[int] = []
        blobs: list[bytes] = []
        for rid, path, start, end, emb in self.conn.execute(
                "SELECT rid, path, start_line, end_line, embedding FROM chunks ORDER BY rid"):
            self.paths[rid] = path
            self.lines[rid] = (int(start), int(end))
            if emb:
                rids.append(rid)
                blobs.append(bytes(emb))
        self.rids = np.asarray(rids, dtype=np.int64)
        self.matrix = None
        self.provider = None
        self.note = ""
        if blobs and vector_record(meta) is not None:
            m = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), -1)
            norms = np.linalg.norm(m, axis=1, keepdims=True)
            norms[norms == 0] = 1.0
            self.matrix = (m / norms).astype(np.float32)
            if provider is not None:
                self.provider = provider
            else:
                record = vector_record(meta)
                self.provider, self.note = open_query_provider(record, settings) if record else (None, "")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> PlainBaselines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def bm25_scores(self, query: str) -> list[tuple[int, float]]:
        """(row id, -bm25()) of every chunk matching any of the query's terms, best first."""
        import apsw

        from memory_core.storage.textsearch import build_match_query

        match = build_match_query(query.replace("\x00", " "))
        if not match:
            return []
        try:
            rows = self.conn.execute("SELECT rowid, bm25(chunks_fts) AS r FROM chunks_fts WHERE chunks_fts MATCH ?"
                                     " ORDER BY r, rowid", (match,)).fetchall()
        except apsw.SQLError:
            return []
        return [(int(rid), -float(r)) for rid, r in rows if rid in self.paths and isinstance(r, (int, float))]

    def cosines(self, query: str) -> dict[int, float] | None:
        """The cosine of the query's embedding with every chunk's vector; None without vectors."""
        import numpy as np

        if self.matrix is None or self.provider is None or not query.strip():
            return None
        q = np.asarray(self.provider.embed_query(query_for_provider(query[:8000], self.redact)), dtype=np.float32)
        n = float(np.linalg.norm(q))
        if n == 0.0:
            return None
        sims = self.matrix @ (q / n)
        return dict(zip(self.rids.tolist(), sims.tolist(), strict=True))

    def rank(self, query: str, n_candidates: int = 200, max_results: int = 100) -> dict[str, list[str] | None]:
        """Each baseline's ranked chunk paths (at most ``max_results``; ``convex`` None without vectors)."""
        return {name: None if rids is None else [self.paths[r] for r in rids]
                for name, rids in self.rank_rows(query, n_candidates, max_results).items()}

    def rank_rows(self, query: str, n_candidates: int = 200, max_results: int = 100) -> dict[str, list[int] | None]:
        """Each baseline's ranked chunk row ids (see :attr:`paths`, :attr:`lines`)."""
        kw = self.bm25_scores(query)
        out: dict[str, list[int] | None] = {"bm25": [r for r, _ in kw[:max_results]]}
        cos = self.cosines(query)
        if cos is None:
            out["convex"] = None
            return out
        kw_top = dict(kw[:n_candidates])
        vec_top = sorted(cos, key=lambda r: (-cos[r], r))[:n_candidates]
        union = list(dict.fromkeys([*kw_top, *vec_top]))
        kw_all = dict(kw)
        kw_s = {r: kw_all.get(r, 0.0) for r in union}
        vec_s = {r: cos.get(r, 0.0) for r in union}
        out["convex"] = convex_fusion(kw_s, vec_s)[:max_results]
        return out


def min_max(scores: Mapping[int, float]) -> dict[int, float]:
    """Each score min-max normalised to [0, 1] over ``scores`` (all equal: 1, or 0 when none is
    positive): one side of :func:`convex_fusion`."""
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    if hi - lo <= 0.0:
        return dict.fromkeys(scores, 1.0 if hi > 0 else 0.0)
    return {r: (v - lo) / (hi - lo) for r, v in scores.items()}


def convex_fusion(keyword: Mapping[int, float], vector: Mapping[int, float], weight: float = 0.5) -> list[int]:
    """Row ids of ``keyword`` and ``vector`` (raw scores, higher better, over the same union) by
    ``weight * vector' + (1 - weight) * keyword'``, each side min-max normalised; ties by row id."""
    kw, vec = min_max(keyword), min_max(vector)
    fused = {r: weight * vec.get(r, 0.0) + (1.0 - weight) * kw.get(r, 0.0) for r in {*kw, *vec}}
    return sorted(fused, key=lambda r: (-fused[r], r))


def run_eval(settings: Settings, queries_path: str | Path, qrels_path: str | Path, *, sides: bool = False,
             max_results: int = 100, corpus_map: str | Path | None = None, min_score: float | None = None,
             provider: Any = None, searcher: Any = None,
             progress: Callable[[int, int], None] | None = None) -> dict[str, object]:
    """Evaluate the index of ``settings`` on BEIR-format queries and qrels.

    Returns ``{"metrics": {side: {metric: value}}, "queries": n, ...}`` with the side
    ``"hybrid"`` (the configured search) and, with ``sides=True``, ``"vector"`` and
    ``"keyword"`` (``None`` when the index has no vectors). ``provider`` overrides the query
    embedding provider (tests); ``searcher`` reuses an open :class:`~memory_core.query.search.Searcher`.
    """
    from memory_core.query.search import Searcher

    if min_score is not None and not 0 <= min_score <= 1:  # nan, 5, -3 ran (every metric 0 at 5), as search refuses
        raise UsageError(f"--min-score must be between 0 and 1, not {min_score:g}")
    queries = load_queries(queries_path)
    qrels = load_qrels(qrels_path)
    cmap = load_corpus_map(corpus_map) if corpus_map else None
    judged = {qid: rels for qid, rels in qrels.items() if any(r > 0 for r in rels.values())}
    missing_text = sorted(qid for qid in judged if qid not in queries)
    own = searcher is None
    s = Searcher(settings, provider=provider) if own else searcher
    try:
        paths = s.indexed_paths()
        all_ids = [cid for rels in judged.values() for cid in rels]
        mapping, unresolved = resolve_corpus_ids(all_ids, paths, cmap)
        # qrels in terms of indexed paths; unresolved ids keep their own (unfindable) name
        path_qrels: dict[str, dict[str, int]] = {}
        for qid, rels in judged.items():
            pq: dict[str, int] = {}
            for cid, r in rels.items():
                key = mapping.get(cid, "\x00unresolved:" + cid)
                pq[key] = max(pq.get(key, 0), r)
            path_qrels[qid] = pq
        max_results = max(1, int(max_results))
        n_cand = s.candidate_count(max_results)
        configured = settings.query.threshold(min_score)
        # (label, mode, min_score): the sides at the min_score in force and, when it is not 0, at 0
        ranked_rows: list[tuple[str, str, float | None]] = [(m, m, min_score) for m in (SIDES if sides else ["hybrid"])]
        if sides and configured != 0:
            ranked_rows += [(f"{m}@0", m, 0.0) for m in SIDES]
        modes = [label for label, _, _ in ranked_rows] + (list(BASELINES) if sides else [])
        runs: dict[str, dict[str, list[str]]] = {m: {} for m in modes}
        per_query: dict[str, dict[str, dict[str, float]]] = {m: {} for m in modes}
        latencies: list[float] = []
        embedded_any = False
        convex_any = False
        scored: list[tuple[float, bool]] = []  # (score, its file is relevant) of every hybrid result
        todo = [qid for qid in judged if qid in queries]
        plain = PlainBaselines(settings, provider) if sides else None
        try:
            for i, qid in enumerate(todo, 1):
                t0 = time.perf_counter()
                cands = s.retrieve(queries[qid], n_cand)
                results = {label: s.rank(cands, max_results=max_results, min_score=ms, mode=m)
                           for label, m, ms in ranked_rows if m != "keyword"}
                latencies.append(time.perf_counter() - t0)
                if sides:
                    kw = keyword_only_candidates(s, queries[qid], n_cand, cands)
                    for label, m, ms in ranked_rows:
                        if m == "keyword":
                            results[label] = s.rank(kw, max_results=max_results, min_score=ms, mode="keyword")
                embedded_any = embedded_any or cands.embedded
                scored.extend((r.score, path_qrels[qid].get(r.path, 0) > 0) for r in results["hybrid"])
                ranked_paths: dict[str, list[str]] = {label: [r.path for r in res] for label, res in results.items()}
                if plain is not None:
                    for name, paths_ in plain.rank(queries[qid], n_cand, max_results).items():
                        if paths_ is not None:
                            ranked_paths[name] = paths_
                            convex_any = convex_any or name == "convex"
                for m, chunk_paths in ranked_paths.items():
                    ranked = file_ranking(chunk_paths)
                    runs[m][qid] = ranked
                    per_query[m][qid] = query_metrics(ranked, path_qrels[qid])
                if progress:
                    progress(i, len(todo))
        finally:
            if plain is not None:
                plain.close()
        meta = s.index_meta()
        record = s.index_record()
        from memory_core.query.status import vector_scan_status

        metrics: dict[str, dict[str, float] | None] = {m: evaluate_run(runs[m], path_qrels) for m in modes}
        # the vector side's recall@10 against an exact search of every vector (memory_core.storage.vectors)
        vector_recall = s.vector_recall([queries[qid] for qid in todo]) if embedded_any else None
        if sides and not embedded_any:
            for label in ("vector", "vector@0"):
                if label in metrics:
                    metrics[label] = None
        if sides and not convex_any:
            metrics["convex"] = None
            per_query.pop("convex", None)
        q = settings.query
        vw, tw = q.normalised_weights()
        return {
            "index": str(settings.index_file),
            "provider": record.provider if record is not None else None,
            "model": record.model if record is not None else None,
            "queries": len(judged),
            "queries_without_text": missing_text,
            "judged_documents": len(set(all_ids)),
            "unresolved_documents": unresolved,
            "max_results": max_results,
            "candidates_per_side": n_cand,
            "settings": {
                "fusion": q.fusion, "vector_weight": round(vw, 4), "text_weight": round(tw, 4),
                "min_score": configured,
                # min_score unset: `configured` empties only unsupported queries' answers (docs/search.md)
                "min_score_by_support": settings.query.by_support(min_score),
                "candidate_multiplier": q.candidate_multiplier, "mmr": q.mmr.lambda_ if q.mmr.enabled else None,
                "temporal_decay_days": q.temporal_decay.half_life_days if q.temporal_decay.enabled else None,
                "hybrid": q.hybrid, "mode": q.search_mode(),
            },
            "hybrid_used_vectors": embedded_any,
            "calibration": calibration_table(scored),
            "metrics": metrics,
            "per_query": per_query,
            "query_ms_p50": round(statistics.median(latencies) * 1000, 2) if latencies else None,
            "vector_recall_at_10": None if vector_recall is None else round(vector_recall, 4),
            # how the index's own vectors were found to scan (measured at build; issue 39)
            "vector_scan": vector_scan_status(meta),
            "note": s.provider_note or None,
        }
    finally:
        if own:
            s.close()


def calibration_table(scored: Iterable[tuple[float, bool]], width: float = 0.1) -> list[dict[str, Any]]:
    """Results by score band: how many, and the share whose file is relevant.

    The check of the calibrated scores on your own labels: with absolute scores the share should
    rise with the score, and the band below ``min_score`` should hold few relevant results (the
    ones it would cost). Only judged queries count; an unjudged relevant file counts as not relevant.
    """
    n_bins = max(1, round(1 / width))
    counts = [0] * n_bins
    hits = [0] * n_bins
    for score, rel in scored:
        b = min(n_bins - 1, max(0, int(score * n_bins)))
        counts[b] += 1
        hits[b] += bool(rel)
    return [{"from": round(i / n_bins, 4), "to": round((i + 1) / n_bins, 4), "results": counts[i],
             "relevant": round(hits[i] / counts[i], 4) if counts[i] else None} for i in range(n_bins)]


def format_report(report: Mapping[str, Any]) -> list[str]:
    """Human-readable lines for a :func:`run_eval` report."""
    st = report["settings"]
    lines = [
        f"index: {report['index']} ({report['provider']} / {report['model']})",
        f"queries: {report['queries']} with relevant documents; judged documents: {report['judged_documents']}",
        f"settings: fusion {st['fusion']}, weights vector {st['vector_weight']:g} / text {st['text_weight']:g},"
        f" min_score {st['min_score']:g}{' (unsupported queries only)' if st.get('min_score_by_support') else ''},"
        f" max_results {report['max_results']},"
        f" {report['candidates_per_side']} candidates per side"
        + (f", MMR {st['mmr']:g}" if st["mmr"] is not None else "")
        + (f", decay {st['temporal_decay_days']:g} d" if st["temporal_decay_days"] is not None else ""),
        "",
        f"{'':10}" + "".join(f"{m:>12}" for m in METRICS),
    ]
    metrics = report["metrics"]
    for side, values in metrics.items():
        if side in BASELINES and side == next(b for b in BASELINES if b in metrics):
            lines.append("plain baselines over the same chunks (no threshold):")
        label = side if not side.startswith("hybrid") or report["hybrid_used_vectors"] else side + "*"
        if values is None:
            why = "no vectors in this index" if side != "convex" else "no vectors or no query provider"
            lines.append(f"{side:10}" + f"{'n/a (' + why + ')':>48}")
        else:
            lines.append(f"{label:10}" + "".join(f"{values[m]:12.4f}" for m in METRICS))
    if not report["hybrid_used_vectors"]:
        lines.append("* keyword-only: the index has no vectors or the query provider is unavailable")
    if "hybrid@0" in metrics:
        lines.append(f"@0: the same side at min_score 0 (above: at min_score {st['min_score']:g})")
    if report["query_ms_p50"] is not None:
        lines.append(f"query time p50: {report['query_ms_p50']:.1f} ms (embedding + both sides + ranking)")
    if report.get("vector_recall_at_10") is not None:
        lines.append(f"vector side recall@10 against an exact search: {report['vector_recall_at_10']:.4f}")
    scan = report.get("vector_scan")
    if scan:
        lines.append(f"vector scan (recorded at build): {scan['summary']}")
    bands = [b for b in report.get("calibration", []) if b["results"]]
    if bands:
        lines += ["", "calibration check (hybrid results by score: how many, share in a relevant file):"]
        lines += [f"  {b['from']:.1f}-{b['to']:.1f} {b['results']:>7} {b['relevant']:>8.3f}" for b in bands]
    return lines


def _warnings(report: Mapping[str, Any]) -> list[str]:
    out = []
    unresolved = report["unresolved_documents"]
    if unresolved:
        shown = ", ".join(unresolved[:5]) + (", ..." if len(unresolved) > 5 else "")
        out.append(f"{len(unresolved)} of {report['judged_documents']} judged documents are not files of the"
                   f" index ({shown}); they count as relevant but cannot be found (see --corpus-map)")
    missing = report["queries_without_text"]
    if missing:
        out.append(f"{len(missing)} judged queries are not in the queries file and score 0"
                   f" ({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''})")
    if report.get("note"):
        out.append(report["note"])
    return out


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------
def add_eval_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``eval`` command to ``memory-core``'s subparsers; returns its parser."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "eval", help="measure search quality on labelled queries (BEIR format)",
        description="Print nDCG@10, Recall@10, Recall@100 and MRR@10 of the current index and settings"
                    " on BEIR-format queries and qrels. Corpus ids are indexed paths, paths without .md,"
                    " unique file names without .md, or mapped with --corpus-map.",
    )
    p.add_argument("--config", "-c", help="TOML config file (default: $MEMORY_CORE_CONFIG)")
    p.add_argument("--workspace", "-w", help="workspace folder (default: current directory)")
    p.add_argument("--index", dest="index_path", help="index file (default: <workspace>/.memory-core/index.sqlite)")
    p.add_argument("--queries", required=True, help="BEIR queries.jsonl ({\"_id\", \"text\"} per line)")
    p.add_argument("--qrels", required=True, help="BEIR qrels TSV: query-id, corpus-id, score (header allowed)")
    p.add_argument("--corpus-map", help="TSV: corpus-id, indexed path (when ids are not paths)")
    p.add_argument("--sides", action="store_true",
                   help="also rank with the vector side and the keyword side alone, every side at min_score 0 too,"
                        " and two plain baselines over the same chunks: bm25 and a 0.5/0.5 convex fusion")
    p.add_argument("--max-results", type=int, default=100, help="chunks asked per query (default 100)")
    p.add_argument("--min-score", type=float, help="override query.min_score")
    p.add_argument("--vector-weight", type=float, help="override query.vector_weight")
    p.add_argument("--text-weight", type=float, help="override query.text_weight")
    from typing import get_args

    from memory_core.config import QuerySettings

    fusions = list(get_args(QuerySettings.model_fields["fusion"].annotation))  # the default one too
    p.add_argument("--fusion", choices=fusions, help=f"override query.fusion (default: {QuerySettings().fusion})")
    p.add_argument("--candidate-multiplier", type=float, help="override query.candidate_multiplier")
    p.add_argument("--per-query", metavar="FILE", help="write per-query metrics (TSV) to FILE")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_eval)
    return p


def cmd_eval(args: argparse.Namespace) -> int:
    """Run ``memory-core eval``; returns the exit code (errors raise MemoryCoreError). Its settings
    are resolved as every command's (:func:`memory_core.runtime.resolve.resolve_settings`: the
    workspace's ``memory-core.toml``, the agent, what the index recorded), so it measures the
    ranking ``search`` uses; the ranking flags are told over them."""
    from memory_core.runtime.resolve import FLAG_NAMES, resolve_settings

    query: dict[str, Any] = {}
    for key in ("vector_weight", "text_weight", "fusion", "candidate_multiplier"):
        if getattr(args, key, None) is not None:
            query[key] = getattr(args, key)
    told: dict[str, Any] = {"workspace": args.workspace, "index_path": args.index_path}
    if query:
        told["query"] = query
    settings = resolve_settings(told, config_file=args.config, told_by={**FLAG_NAMES, "query": "an eval flag"},
                                agent=getattr(args, "agent", None)).settings
    if args.max_results is not None and args.max_results < 1:
        raise UsageError("--max-results must be at least 1")
    report = run_eval(settings, args.queries, args.qrels, sides=args.sides, max_results=args.max_results,
                      corpus_map=args.corpus_map, min_score=args.min_score)
    if args.per_query:
        _write_per_query(report, args.per_query)
    try:
        if args.json:
            out = {k: v for k, v in report.items() if k != "per_query"}
            print(json.dumps(out, indent=2, sort_keys=True))
        else:
            for line in format_report(report):
                print(line)
        for w in _warnings(report):
            print(f"warning: {w}", file=sys.stderr)
    except BaseException as exc:  # a stop once the per-query file is in place says it is (the CLI's last line)
        if args.per_query and is_stop(exc) and getattr(exc, "command_done", None) is None:
            done = f"writing the per-query metrics to {args.per_query} (the file is written)"
            exc.command_done = done  # type: ignore[attr-defined]
        raise
    return 0


def _write_per_query(report: Mapping[str, Any], path: str) -> None:
    """The per-query metrics, a TSV file at ``path``: written whole or not at all. The rows go to a
    temp file beside it, which then replaces it (``os.replace``), so a stop (Ctrl-C, SIGTERM) or an
    error as it is written leaves the file as it was and no temp file (before: opened with "w" in
    place, a stop left a truncated file where a complete one had been). A symbolic link is written
    through (its target is replaced, keeping its mode); a path that is not a regular file
    (``/dev/stdout``, a named pipe) is written to in place, as before."""
    try:
        try:
            st: os.stat_result | None = os.stat(path)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            with open(path, "w", encoding="utf-8") as fh:
                _per_query_rows(report, fh)
            return
        target = os.path.realpath(path)
        tmp = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.{uuid.uuid4().hex[:8]}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)  # the umask's mode
        try:
            with open(fd, "w", encoding="utf-8") as fh:
                _per_query_rows(report, fh)
                fh.flush()
                os.fsync(fh.fileno())
            if st is not None:
                os.chmod(tmp, stat.S_IMODE(st.st_mode))
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def _per_query_rows(report: Mapping[str, Any], fh: TextIO) -> None:
    fh.write("side\tquery-id\t" + "\t".join(METRICS) + "\n")
    for side, rows in report["per_query"].items():
        for qid, values in rows.items():
            fh.write(f"{side}\t{qid}\t" + "\t".join(f"{values[m]:.4f}" for m in METRICS) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m memory_core.apps.evaluation --queries Q --qrels R ...``: the eval command on its own."""
    from memory_core.errors import MemoryCoreError

    parser = argparse.ArgumentParser(prog="memory-core")
    sub = parser.add_subparsers(dest="command")
    add_eval_parser(sub)
    args = parser.parse_args(["eval", *(sys.argv[1:] if argv is None else argv)])
    try:
        return cmd_eval(args)
    except MemoryCoreError as exc:
        print(f"memory-core: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
