"""Rank one retrieval of a labelled set under ranking variants: which part of the ranking a gap comes from.

    PYTHONPATH=. python eval/ablate.py --set docstrings [--results 10] [--variants a,b] [--no-parts] [--show VARIANT]

Each labelled query of the set is retrieved once (``Searcher.retrieve``, the candidates a search
asking for ``--results`` gets), then ranked (``Searcher.rank``) under every variant below, so rows
differ only in ranking; nDCG@10 and R@10 per variant, and its mean difference from the default
(files ranked by their best chunk, as ``memory-core eval``). Uses run_sets' cached indexes (built
first if missing). The variants patch module attributes of ``memory_core.query.ranking`` for the
duration of one ranking pass: they are experiments, not settings.

``--no-parts`` retrieves as if the index had no part vectors (note windows, exchange vectors): a
chunk's cosine is its own vector's. ``--show VARIANT`` lists the queries whose nDCG@10 it changes.
Figures from this script are in docs/search.md ("Note windows": the docstring set's gap to plain
convex) and eval/results/after-session9-2026-11-29.md.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run_sets  # noqa: E402  (eval/run_sets.py)

from memory_core.apps.evaluation import file_ranking, min_max, query_metrics, resolve_corpus_ids  # noqa: E402
from memory_core.query import ranking  # noqa: E402
from memory_core.query.dates import date_from_path  # noqa: E402
from memory_core.query.search import Searcher  # noqa: E402

_FUSE = ranking.fuse_calibrated
_SUPPORT = ranking.file_support
_KEYWORD = ranking.keyword_relevance


def _convex_order(hits: Any, cal: Any, idf_total: float, *, vector_weight: float, text_weight: float,
                  corpus_coverage: float = 1.0, keyword_steepness: float = 1.0) -> list[ranking.Hit]:
    """The calibrated fusion's candidates re-scored by a plain convex fusion over them: 0.5 / 0.5,
    each side min-max normalised over this query's pool (one-side modes as they are)."""
    out = _FUSE(hits, cal, idf_total, vector_weight=vector_weight, text_weight=text_weight,
                corpus_coverage=corpus_coverage, keyword_steepness=keyword_steepness)
    if vector_weight <= 0 or text_weight <= 0 or not out:
        return out
    # the plain baseline's normalisation (memory_core.apps.evaluation.convex_fusion), with its scores
    kw = min_max({i: h.bm25 for i, h in enumerate(out)})
    vec = min_max({i: h.vector_score for i, h in enumerate(out)})
    res = []
    for i, h in enumerate(out):
        s = 0.5 * vec[i] + 0.5 * kw[i]
        res.append(replace(h, score=s, relevance=s))
    res.sort(key=lambda h: (h.score, h.bm25), reverse=True)
    return res


def _is_document(path: str) -> bool:
    """A file that is neither a transcript nor a daily note (nor MEMORY.md): a document."""
    return not path.endswith(".jsonl") and date_from_path(path) is None and path.lower() != "memory.md"


def _convex_for_documents(share: float) -> Callable[..., list[ranking.Hit]]:
    """The convex order in the pool (:func:`_convex_order`) for a query whose candidates are at
    least ``share`` documents (:func:`_is_document`); else the default."""
    def fuse(hits: Any, cal: Any, idf_total: float, **kw: Any) -> list[ranking.Hit]:
        out = _FUSE(hits, cal, idf_total, **kw)
        if not out or sum(_is_document(h.path) for h in out) < share * len(out):
            return out
        return _convex_order(hits, cal, idf_total, **kw)
    return fuse


def _convex_for_long_document_queries(min_steepness: float) -> Callable[..., list[ranking.Hit]]:
    """The convex order in the pool for a query of many content words (its keyword curve's
    steepness at least ``min_steepness``: 1.5 is 6 content words, 2 is 7 or more) whose candidates
    are all documents; else the default."""
    def fuse(hits: Any, cal: Any, idf_total: float, **kw: Any) -> list[ranking.Hit]:
        out = _FUSE(hits, cal, idf_total, **kw)
        if not out or kw.get("keyword_steepness", 1.0) < min_steepness or not all(_is_document(h.path) for h in out):
            return out
        return _convex_order(hits, cal, idf_total, **kw)
    return fuse


def _hill(n: float, half: float) -> Callable[..., float]:
    """A steeper keyword curve: ``x^n / (x^n + half^n)`` (the default is n = 1, half = 0.5)."""
    def relevance(bm25: float, idf_total: float, corpus_coverage: float = 1.0, steepness: float = 1.0) -> float:
        if bm25 <= 0 or idf_total <= 0 or not math.isfinite(bm25):
            return 0.0
        x = bm25 / idf_total
        return max(0.0, min(1.0, x ** n / (x ** n + half ** n) * max(0.0, min(1.0, corpus_coverage))))
    return relevance


def _half_ramp(top: float) -> Callable[..., float]:
    """The built keyword curve whose half-point rises with its steepness: ``h = 0.5 + (s - 1) x
    (top - 0.5)``, so a long query's (s = 2) curve is ``x^2 / (x^2 + top^2)``: a chunk matching its
    words more than once (``x`` over 1, a short document repeating them) is still told apart from one
    matching them once, where the built curve is near 1 for both."""
    def relevance(bm25: float, idf_total: float, corpus_coverage: float = 1.0, steepness: float = 1.0) -> float:
        if bm25 <= 0 or idf_total <= 0 or not math.isfinite(bm25):
            return 0.0
        s = steepness if math.isfinite(steepness) and steepness > 0 else 1.0
        half = 0.5 + (s - 1.0) * (top - 0.5)
        xs = (bm25 / idf_total) ** s
        return max(0.0, min(1.0, xs / (xs + half ** s) * max(0.0, min(1.0, corpus_coverage))))
    return relevance


def _support_of_containers(file_cosines: Any, cal: Any) -> dict[str, float]:
    """File support for transcripts and daily notes only."""
    return {p: v for p, v in _SUPPORT(file_cosines, cal).items()
            if p.endswith(".jsonl") or date_from_path(p) is not None}


# name -> (query settings to change, ranking module attributes to replace, mode)
VARIANTS: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "default": ({}, {}, "hybrid"),
    "keyword": ({}, {}, "keyword"),
    "vector": ({}, {}, "vector"),
    "file_support=0": ({"file_support": 0.0}, {}, "hybrid"),
    "file_support=0.25": ({"file_support": 0.25}, {}, "hybrid"),
    "support: containers only": ({}, {"file_support": _support_of_containers}, "hybrid"),
    "max share 0": ({}, {"FUSION_MAX_SHARE": 0.0}, "hybrid"),
    "keyword curve x^2 (0.7)": ({}, {"keyword_relevance": _hill(2, 0.7)}, "hybrid"),
    "convex order in pool": ({}, {"fuse_calibrated": _convex_order}, "hybrid"),
    "convex order: documents": ({}, {"fuse_calibrated": _convex_for_documents(1.0)}, "hybrid"),
    "convex order: 90% documents": ({}, {"fuse_calibrated": _convex_for_documents(0.9)}, "hybrid"),
    "convex order: 50% documents": ({}, {"fuse_calibrated": _convex_for_documents(0.5)}, "hybrid"),
    "convex order: long document queries": ({}, {"fuse_calibrated": _convex_for_long_document_queries(1.5)},
                                            "hybrid"),
    "convex order: 7+ word document queries": ({}, {"fuse_calibrated": _convex_for_long_document_queries(2.0)},
                                               "hybrid"),
    "long half 0.6": ({}, {"keyword_relevance": _half_ramp(0.6)}, "hybrid"),
    "long half 0.7": ({}, {"keyword_relevance": _half_ramp(0.7)}, "hybrid"),
    "long half 0.85": ({}, {"keyword_relevance": _half_ramp(0.85)}, "hybrid"),
    "long half 1.0": ({}, {"keyword_relevance": _half_ramp(1.0)}, "hybrid"),
    "weights 0.6 / 0.4": ({"vector_weight": 0.6, "text_weight": 0.4}, {}, "hybrid"),
    "weights 0.4 / 0.6": ({"vector_weight": 0.4, "text_weight": 0.6}, {}, "hybrid"),
}


@contextmanager
def _patched(attrs: dict[str, Any]) -> Iterator[None]:
    old = {k: getattr(ranking, k) for k in attrs}
    try:
        for k, v in attrs.items():
            setattr(ranking, k, v)
        yield
    finally:
        for k, v in old.items():
            setattr(ranking, k, v)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", required=True, help="a set of eval/run_sets.py")
    ap.add_argument("--results", type=int, default=10, help="results ranked (and so candidates a side)")
    ap.add_argument("--variants", default="", help="comma-separated names (default: all): " + ", ".join(VARIANTS))
    ap.add_argument("--no-parts", action="store_true", help="retrieve without the index's part vectors")
    ap.add_argument("--show", default="", help="list the queries whose nDCG@10 this variant changes")
    ap.add_argument("--cache", type=Path, default=run_sets.DEFAULT_CACHE)
    a = ap.parse_args(argv)
    names = ["default", *(n.strip() for n in a.variants.split(",") if n.strip() and n.strip() != "default")] \
        if a.variants else list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown} (variants: {', '.join(VARIANTS)})")
    s = run_sets.make_set("docstrings" if a.set == "docstrings-dev" else a.set, False, a.cache)
    if a.set == "docstrings-dev":  # the dev half, for choosing (the same index; run_sets reports the test half)
        src = next((a.cache / "docstrings-src").iterdir())
        s.queries, _ = run_sets._read_queries(src / "queries-dev.jsonl")
        s.qrels = run_sets._read_qrels(src / "qrels-dev.tsv")
    code = run_sets.indexer_version()
    scores: dict[str, dict[str, dict[str, float]]] = {n: {} for n in names}
    for group in s.groups:
        qids = [q for q, rels in s.qrels.items() if q in s.queries and s.group_of.get(q, group) == group
                and any(r > 0 for r in rels.values())]
        if not qids:
            continue
        settings = run_sets.ensure_index(s, group, a.cache, code, None, False, lambda m: print(m, file=sys.stderr))
        with Searcher(settings) as se:
            if a.no_parts:
                se._current().has_parts = False  # a chunk's cosine is its own vector's
            mapping, _ = resolve_corpus_ids([c for q in qids for c in s.qrels[q]], se.indexed_paths())
            n = se.candidate_count(a.results)
            cands = {q: se.retrieve(s.queries[q], n) for q in qids}
            for name in names:
                qset, attrs, mode = VARIANTS[name]
                base = se.settings
                se.settings = base.model_copy(update={"query": base.query.model_copy(update=qset)})
                try:
                    with _patched(attrs):
                        for q in qids:
                            res = se.rank(cands[q], max_results=a.results, mode=mode)
                            rels = {mapping.get(c, "\x00" + c): r for c, r in s.qrels[q].items()}
                            scores[name][q] = query_metrics(file_ranking(r.path for r in res), rels)
                finally:
                    se.settings = base
    base_scores = scores["default"]
    for name in names:
        sc = scores[name]
        nd = statistics.fmean(v["ndcg@10"] for v in sc.values())
        r10 = statistics.fmean(v["recall@10"] for v in sc.values())
        d = statistics.fmean(sc[q]["ndcg@10"] - base_scores[q]["ndcg@10"] for q in sc)
        print(f"{a.set:18s} {name:26s} nDCG@10 {nd:.3f} ({d:+.3f})  R@10 {r10:.3f}")
    if a.show:
        for q, v in scores[a.show].items():
            was = base_scores[q]["ndcg@10"]
            if abs(v["ndcg@10"] - was) > 1e-9:
                print(f"   {q} {was:.3f} -> {v['ndcg@10']:.3f}  {s.queries[q][:80]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
