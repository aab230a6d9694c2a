"""Screen pseudo-relevance feedback on the vector side (Rocchio): does moving the query vector toward
its own best results find evidence the first pass ranks too low (aggregating questions whose
evidence never uses the question's words)?

    PYTHONPATH=. python eval/screen_prf.py --sets chats,chats-dense,convo,docstrings [--top 3] [--beta 0.3,0.6]

Each labelled query is searched as the default does (``Searcher.retrieve`` + ``rank``); its top
``--top`` chunks' stored vectors are averaged, and the query vector becomes
``normalise(q + beta * mean)``; the search runs again with that vector (both sides, the
calibrated fusion, the threshold: everything the default does, only the query vector differs).
Rows: nDCG@10 and R@10 (files ranked by their best chunk, as ``memory-core eval``) at the default
threshold and at ``min_score`` 0, the default beside it, and the paired difference. Uses
run_sets' cached indexes (built first if missing). A screening, not a setting (docs/search.md).
"""

from __future__ import annotations

import argparse
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


class Feedback(EmbeddingProvider):
    """The local model, except that ``embed_query`` returns ``override`` while it is set."""

    def __init__(self, inner: EmbeddingProvider) -> None:
        self.inner = inner
        self.override: np.ndarray | None = None
        for k in ("name", "model", "dims", "max_inputs_per_request", "max_tokens_per_request",
                  "max_tokens_per_input", "default_chunk_tokens", "default_chunk_overlap", "on_machine"):
            setattr(self, k, getattr(inner, k))

    @property
    def provider_key(self) -> str:
        return self.inner.provider_key

    def embed_documents(self, texts: Sequence[str]) -> Any:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> Any:
        if self.override is not None:
            return self.override
        return self.inner.embed_query(text)

    def estimate_tokens(self, text: str) -> int:
        return self.inner.estimate_tokens(text)


def _vector_of(conn: Any, rid: int) -> np.ndarray | None:
    for sql in ("SELECT embedding FROM chunks WHERE rid = ? AND embedding IS NOT NULL",
                "SELECT embedding FROM chunks_vec WHERE rowid = ?"):
        try:
            row = next(iter(conn.execute(sql, (int(rid),))), None)
        except Exception:  # noqa: BLE001  (a table this index does not have)
            row = None
        if row is not None and row[0]:
            v = np.frombuffer(row[0], dtype="<f4").astype(np.float32)
            n = float(np.linalg.norm(v))
            return v / n if n else None
    return None


def _top_rids(cands: Any, results: Sequence[Any], k: int) -> list[int]:
    """The row ids of the first ``k`` results (a result may be extended past its chunk's lines)."""
    out: list[int] = []
    for r in results:
        best, overlap = None, 0
        for h in cands.union:
            if h.path != r.path:
                continue
            o = min(h.end_line, r.end_line) - max(h.start_line, r.start_line) + 1
            if o > overlap:
                best, overlap = h.rid, o
        if best is not None and best not in out:
            out.append(best)
        if len(out) == k:
            break
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="chats,chats-dense,convo,docstrings")
    ap.add_argument("--top", type=int, default=3)
    ap.add_argument("--beta", default="0.3,0.6")
    args = ap.parse_args(argv)
    from memory_core.embeddings.local import LocalProvider

    betas = [float(b) for b in args.beta.split(",")]
    code = run_sets.indexer_version()
    for name in args.sets.split(","):
        s = run_sets.make_set(name, False)
        rows: dict[str, dict[str, list[dict[str, float]]]] = {}
        for group in s.groups:
            qids = [q for q, rels in s.qrels.items() if q in s.queries and s.group_of.get(q, group) == group
                    and any(r > 0 for r in rels.values())]
            settings = run_sets.ensure_index(s, group, run_sets.DEFAULT_CACHE, code, None, False,
                                             lambda m: print(m, file=sys.stderr))
            prov = Feedback(LocalProvider(settings))
            with Searcher(settings, provider=prov) as se:
                mapping, _ = resolve_corpus_ids([c for q in qids for c in s.qrels[q]], se.indexed_paths())
                n = se.candidate_count(10)
                conn = se._current().conn
                for q in qids:
                    rels = {mapping.get(k, "\x00" + k): r for k, r in s.qrels[q].items()}
                    prov.override = None
                    qvec = np.asarray(prov.inner.embed_query(s.queries[q]), dtype=np.float32)
                    cands = se.retrieve(s.queries[q], n)
                    answered = True
                    for ms, tag in ((None, "auto"), (0.0, "@0")):
                        res = se.rank(cands, max_results=10, min_score=ms)
                        if tag == "auto":
                            answered = bool(res)
                        rows.setdefault(f"default {tag}", {}).setdefault(q, []).append(
                            query_metrics(file_ranking(r.path for r in res), rels))
                    first = se.rank(cands, max_results=10, min_score=0.0)
                    vecs = [v for v in (_vector_of(conn, rid) for rid in _top_rids(cands, first, args.top))
                            if v is not None]
                    for beta in betas:
                        if vecs and cands.embedded:
                            v = qvec / (np.linalg.norm(qvec) or 1.0) + beta * np.mean(vecs, axis=0)
                            prov.override = (v / (np.linalg.norm(v) or 1.0)).astype(np.float32)
                            again = se.retrieve(s.queries[q], n)
                        else:
                            again = cands
                        prov.override = None
                        for ms, tag in ((None, "auto"), (0.0, "@0"), (None, "kept")):
                            # kept: the first pass decides whether to answer (memory's support of the
                            # question, the threshold), the second only how to rank
                            res = se.rank(again, max_results=10, min_score=ms)
                            if tag == "kept" and not answered:
                                res = []
                            rows.setdefault(f"prf b={beta} {tag}", {}).setdefault(q, []).append(
                                query_metrics(file_ranking(r.path for r in res), rels))
        base = {tag: rows[f"default {tag}"] for tag in ("auto", "@0")}
        base["kept"] = base["auto"]
        for label, by_q in rows.items():
            tag = label.split()[-1]
            nd = statistics.fmean(m["ndcg@10"] for ms in by_q.values() for m in ms)
            r10 = statistics.fmean(m["recall@10"] for ms in by_q.values() for m in ms)
            d = statistics.fmean(m["ndcg@10"] - b["ndcg@10"] for q, ms in by_q.items()
                                 for m, b in zip(ms, base[tag][q], strict=True))
            print(f"{name:18s} {label:16s} nDCG@10 {nd:.3f} R@10 {r10:.3f}  vs default {d:+.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
