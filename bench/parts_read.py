"""What reading part vectors until ``want`` chunks own them costs (``retrieval.PARTS_READ_MAX``,
twelfth session), against reading the ``want`` nearest parts alone (the code before), in one run.

    PYTHONPATH=. python bench/parts_read.py [--copies 4] [--rounds 7]

The example workspace's notes copied ``--copies`` times (bench/note_windows.py's workspace: each
copy's lines suffixed with its number), indexed once with note windows on and the real local
model. Each copy's windows are near-twins of the others', so a query's nearest parts crowd onto
few chunks: the case the change is for. Each round times the example queries
(eval/examples-queries.jsonl) as hybrid searches (10 results: 40 candidates a side) with
the code before (the ``want`` nearest parts, whatever chunks own them: :func:`_before`, patched in)
and the code now, alternating which goes first; and counts, per query, how many of the exact 40
nearest chunks by their best cosine (own vector or a part's) the vector side's 40 candidates miss."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from note_windows import _workspace  # noqa: E402  (bench/note_windows.py)

from memory_core.config import load_settings  # noqa: E402
from memory_core.embeddings.registry import create_provider  # noqa: E402
from memory_core.index.pipeline import run_index  # noqa: E402
from memory_core.query import retrieval  # noqa: E402
from memory_core.query.search import Searcher  # noqa: E402
from memory_core.storage import vectors  # noqa: E402


def _before(self: retrieval._Index, qvec: np.ndarray, want: int, top: list[tuple[int, float]],
            nearest_parts: object) -> list[tuple[int, float]]:
    """``_Index._with_parts`` as it was: the owners of the ``want`` nearest parts alone."""
    ptop = nearest_parts(want)[:want]  # type: ignore[operator]
    cand = dict(top)
    if ptop:
        lit = ",".join(str(int(r)) for r, _ in ptop)
        owners = {c for (c,) in self.conn.execute(f"SELECT DISTINCT chunk FROM {vectors.PARTS_TABLE} WHERE rid IN ({lit})")}
        cand.update(vectors.cosines(qvec, vectors.read_vectors(self.conn, [c for c in owners if c not in cand])))
    for rid, cos in vectors.part_cosines(self.conn, qvec, list(cand)).items():
        if cos > cand[rid]:
            cand[rid] = cos
    return sorted(cand.items(), key=lambda kv: (-kv[1], kv[0]))[:want]


def _exact_best(conn: object, q: np.ndarray, want: int) -> list[int]:
    """The ``want`` chunks of the highest best cosine (own vector or a part's), exactly."""
    best: dict[int, float] = {}
    for rid, emb in conn.execute("SELECT rid, embedding FROM chunks"):  # type: ignore[attr-defined]
        v = np.frombuffer(emb, "<f4")
        best[rid] = float(v @ q / (np.linalg.norm(v) or 1.0))
    for c, emb in conn.execute(f"SELECT chunk, embedding FROM {vectors.PARTS_TABLE}"):  # type: ignore[attr-defined]
        v = np.frombuffer(emb, "<f4")
        best[c] = max(best[c], float(v @ q / (np.linalg.norm(v) or 1.0)))
    return sorted(best, key=lambda r: (-best[r], r))[:want]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    queries = [json.loads(ln)["text"] for ln in (ROOT / "eval" / "examples-queries.jsonl").read_text().splitlines()
               if ln.strip()]
    after = retrieval._Index._with_parts
    with tempfile.TemporaryDirectory() as tmp:
        ws = _workspace(Path(tmp) / "ws", a.copies)
        s = load_settings(None, {"workspace": str(ws), "provider": "local", "sources": ["memory"],
                                 "chunking": {"note_windows": True}})
        run_index(s)
        provider, _ = create_provider(s)
        times: dict[str, list[float]] = {"before": [], "after": []}
        missed: dict[str, list[int]] = {"before": [], "after": []}
        with Searcher(s) as se:
            want = se.candidate_count(10)
            idx = retrieval._Index(s.index_file)
            try:
                for q in queries:
                    qv = np.asarray(provider.embed_query(q), dtype=np.float32)
                    qv = qv / (np.linalg.norm(qv) or 1.0)
                    exact = set(_exact_best(idx.conn, qv, want))
                    for which, fn in (("before", _before), ("after", after)):
                        retrieval._Index._with_parts = fn  # type: ignore[method-assign]
                        missed[which].append(len(exact - {r for r, _ in idx.nearest(qv, want)}))
            finally:
                retrieval._Index._with_parts = after  # type: ignore[method-assign]
                idx.close()
            se.search(queries[0])
            for r in range(a.rounds):
                for which in (("before", "after") if r % 2 else ("after", "before")):
                    retrieval._Index._with_parts = _before if which == "before" else after  # type: ignore[method-assign]
                    t0 = time.perf_counter()
                    for q in queries:
                        se.search(q, max_results=10)
                    times[which].append((time.perf_counter() - t0) / len(queries))
            retrieval._Index._with_parts = after  # type: ignore[method-assign]
        med = {k: statistics.median(v) * 1000 for k, v in times.items()}
        print(f"{a.copies} copies of the example notes, note windows on; {len(queries)} hybrid queries x {a.rounds}"
              f" rounds, 10 results a search ({want} candidates a side), local model")
        print("| | before (the 40 nearest parts) | after (parts until 40 chunks own them) | ratio |")
        print("|---|---:|---:|---:|")
        print(f"| search (ms, median) | {med['before']:.1f} | {med['after']:.1f} | {med['after'] / med['before']:.2f}x |")
        for which in ("before", "after"):
            m = missed[which]
            print(f"| vector candidates missing from the exact {want} ({which}): mean / queries with any |"
                  f" {statistics.fmean(m):.2f} / {sum(1 for x in m if x)} of {len(m)} | | |")


if __name__ == "__main__":
    main()
