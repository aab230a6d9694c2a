"""Compare ranking settings on labelled queries through the real query pipeline.

    python eval/tune.py --index IDX --queries Q.jsonl --qrels QRELS.tsv [--max-results 100] [--json OUT]

Each query is embedded and retrieved once (``Searcher.retrieve``, 200 candidates per side), then
ranked by ``Searcher.rank`` under every configuration below (fusion, weights, min_score, and
the candidate pool a given ``candidate_multiplier`` would fetch), so the rows differ only in
ranking. Metrics are those of ``memory-core eval`` (see memory_core/apps/evaluation.py). This is the
script behind the table in docs/search.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memory_core import ranking  # noqa: E402
from memory_core.apps.evaluation import (  # noqa: E402
    METRICS,
    file_ranking,
    load_qrels,
    load_queries,
    query_metrics,
    resolve_corpus_ids,
)
from memory_core.config import load_settings  # noqa: E402
from memory_core.query.search import MAX_CANDIDATES, Candidates, Searcher  # noqa: E402

D = {"fusion": "minmax", "vector_weight": ranking.DEFAULT_VECTOR_WEIGHT, "text_weight": ranking.DEFAULT_TEXT_WEIGHT,
     "min_score": ranking.DEFAULT_MIN_SCORE, "candidate_multiplier": 4}

CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("keyword side alone (BM25)", "keyword", {}),
    ("vector side alone (dense)", "vector", {}),
    ("hybrid, defaults", "hybrid", {}),
    ("hybrid, min_score 0", "hybrid", {"min_score": 0.0}),
    ("hybrid, min_score 0.25", "hybrid", {"min_score": 0.25}),
    ("hybrid, min_score 0.35", "hybrid", {"min_score": 0.35}),
    ("hybrid, weights 0.7 / 0.3", "hybrid", {"vector_weight": 0.7, "text_weight": 0.3}),
    ("hybrid, weights 0.6 / 0.4", "hybrid", {"vector_weight": 0.6, "text_weight": 0.4}),
    ("hybrid, weights 0.4 / 0.6", "hybrid", {"vector_weight": 0.4, "text_weight": 0.6}),
    ("hybrid, weights 0.3 / 0.7", "hybrid", {"vector_weight": 0.3, "text_weight": 0.7}),
    ("hybrid, RRF (k=60)", "hybrid", {"fusion": "rrf"}),
    ("hybrid, RRF, min_score 0", "hybrid", {"fusion": "rrf", "min_score": 0.0}),
    ("hybrid, candidate multiplier 1", "hybrid", {"candidate_multiplier": 1}),
    ("hybrid, candidate multiplier 2", "hybrid", {"candidate_multiplier": 2}),
    ("hybrid, candidate multiplier 8", "hybrid", {"candidate_multiplier": 8}),
]


def run(index: str, queries_path: str, qrels_path: str, *, max_results: int, provider: Any = None,
        configs: list[tuple[str, str, dict[str, Any]]] = CONFIGS) -> dict[str, Any]:
    base = load_settings(None, {"workspace": str(Path(index).parent), "index_path": index})
    queries, qrels = load_queries(queries_path), load_qrels(qrels_path)
    judged = {q: r for q, r in qrels.items() if any(v > 0 for v in r.values()) and q in queries}
    with Searcher(base, provider=provider) as s:
        mapping, unresolved = resolve_corpus_ids([c for r in judged.values() for c in r], s.indexed_paths())
        rels = {q: {mapping.get(c, "?" + c): v for c, v in r.items()} for q, r in judged.items()}
        t0 = time.perf_counter()
        cands = {q: s.retrieve(queries[q], MAX_CANDIDATES) for q in judged}
        retrieve_s = time.perf_counter() - t0
        rows = []
        for label, mode, over in configs:
            q = base.query.model_copy(update={**D, **over})
            s.settings = base.model_copy(update={"query": q})
            pool = s.candidate_count(max_results)
            totals = dict.fromkeys(METRICS, 0.0)
            for qid, c in cands.items():
                cut = Candidates(c.query, c.keyword[:pool], c.vector[:pool], c.embedded)
                ranked = file_ranking(r.path for r in s.rank(cut, max_results=max_results, mode=mode))
                for name, value in query_metrics(ranked, rels[qid]).items():
                    totals[name] += value
            rows.append({"config": label, "pool": pool, **{m: totals[m] / len(cands) for m in METRICS}})
        meta = s.index_meta()
    return {"index": index, "model": meta.get("model"), "chunk_tokens": meta.get("chunk_tokens"),
            "queries": len(cands), "unresolved": unresolved, "max_results": max_results,
            "retrieve_seconds": round(retrieve_s, 1), "rows": rows}


def table(report: dict[str, Any]) -> str:
    head = "| configuration | pool | " + " | ".join(METRICS) + " |\n|---|---:|" + "---:|" * len(METRICS) + "\n"
    return head + "\n".join(
        f"| {r['config']} | {r['pool']} | " + " | ".join(f"{r[m]:.4f}" for m in METRICS) + " |" for r in report["rows"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True)
    ap.add_argument("--queries", required=True)
    ap.add_argument("--qrels", required=True)
    ap.add_argument("--max-results", type=int, default=100)
    ap.add_argument("--json", help="also write the report as JSON to this file")
    a = ap.parse_args(argv)
    report = run(a.index, a.queries, a.qrels, max_results=a.max_results)
    print(f"{report['queries']} queries, index {report['index']} ({report['model']}, chunks {report['chunk_tokens']}"
          f" tokens), max_results {report['max_results']}")
    print(table(report))
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
